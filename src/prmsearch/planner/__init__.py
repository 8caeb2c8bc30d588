"""The compute-optimal planner in one place: the plan a run follows (:mod:`.plan`), the ``planner``
strategy that follows it (:mod:`.strategy`, pure like every strategy), fitting a plan on a
validation sweep (:mod:`.fit`) and choosing its probe by cross-validation (:mod:`.cv`). The strategy
is registered through the ``prmsearch.plugins`` entry point (:mod:`.plugin`), so that the search
core never names this room."""
