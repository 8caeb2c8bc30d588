"""How problems move through the backends besides lock-step rounds (`Driver.round`): the
asynchronous flow (`flow`). Both run the driver's same steps, so a problem's search is the same
for its seed under either, when the backends' samples do not depend on batch composition."""
