"""How problems move through the backends: lock-step rounds (`lockstep`) or the asynchronous
flow (`flow`). Both make the same tree writes (`prmsearch.search.tree_writes`), so a problem's
search is the same for its seed under either, when the backends' samples do not depend on batch
composition."""
