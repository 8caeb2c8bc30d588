"""The driver's GC setting: thresholds raised while a search runs and restored after, and a
search leaves no cyclic garbage, so collecting less often while it runs keeps no memory longer."""

from __future__ import annotations

import gc

import pytest

from benchmarks.overhead import InstantPolicy, InstantScorer
from prmsearch.api import Searcher
from prmsearch.search.gc_pauses import GC_THRESHOLD, fewer_gc_pauses


def test_thresholds_are_raised_inside_and_restored_after_nested_use():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        with fewer_gc_pauses():
            assert gc.get_threshold() == (GC_THRESHOLD, 10, 10)
            with fewer_gc_pauses():
                assert gc.get_threshold()[0] == GC_THRESHOLD
            assert gc.get_threshold()[0] == GC_THRESHOLD  # still one user
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*saved)


def test_a_disabled_collector_is_left_as_it_was():
    saved = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with fewer_gc_pauses():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*saved)


@pytest.mark.parametrize(
    "strategy, options",
    [
        ("beam", {"n": 16, "width": 4}),
        ("particle_filter", {"n": 16}),
        ("best_of_n", {"n": 16}),
        ("mcts", {"n": 16, "expansion_width": 4, "leaves_per_round": 4}),
        ("dvts", {"n": 16, "width": 4}),
    ],
)
def test_a_search_leaves_no_cyclic_garbage(strategy, options):
    searcher = Searcher(InstantPolicy(depth=6), InstantScorer(), strategy, max_depth=6, **options)
    searcher.run(["problem 0"])  # warm: first-use caches and imports
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        results = searcher.run([f"problem {i}" for i in range(20)])
        assert len(results) == 20
        del results
        # keep what the collector finds instead of freeing it, and look only at the search's own
        # objects: a thread left by another test may make cycles of its own meanwhile
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [obj for obj in gc.garbage if _made_by_prmsearch(obj)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert ours == []  # everything the run made was freed by reference counting


def _made_by_prmsearch(obj: object) -> bool:
    """An object of a prmsearch class, or a function, generator or frame of prmsearch code."""
    if type(obj).__module__.startswith("prmsearch"):
        return True
    code = getattr(obj, "gi_code", None) or getattr(obj, "f_code", None) or getattr(obj, "__code__", None)
    return code is not None and "prmsearch" in getattr(code, "co_filename", "")
