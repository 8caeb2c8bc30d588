"""Grading: is a model's final answer equivalent to the gold answer? A room of three layers, cheapest
first: :mod:`~prmsearch.benchmarks.grading.answer_forms` (string and number forms, in process),
:mod:`~prmsearch.benchmarks.grading.verifier_pool` (math-verify in worker processes, with a time
limit) and :mod:`~prmsearch.benchmarks.grading.grader` (the public API and the glue between them).
The public names are re-exported here, so ``from prmsearch.benchmarks.grading import is_equivalent``
works as before the room had parts."""

from prmsearch.benchmarks.grading.grader import *  # noqa: F403 (the grader's __all__ is the API)
from prmsearch.benchmarks.grading.grader import __all__ as __all__
