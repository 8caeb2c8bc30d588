"""Offline analysis of finished sweeps: summaries and reports (:mod:`.report`), comparisons at
equal compute (:mod:`.equal_compute`) and re-aggregation of saved responses (:mod:`.aggregate`).
Nothing here runs a model."""
