"""PRM evaluation: how well a process reward model finds the first wrong step (ProcessBench's
first-error accuracy and F1, CHAMP's annotations in that format) and how its scores lean on
solution length and position (:mod:`.prm_bias`). Search accuracy under a PRM is the sweeps' job."""
