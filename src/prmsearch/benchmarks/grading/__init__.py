"""Grading: is a model's final answer equivalent to the gold answer? A room of three layers, cheapest
first: :mod:`~prmsearch.benchmarks.grading.answer_forms` (string and number forms, in process),
:mod:`~prmsearch.benchmarks.grading.verifier_pool` (math-verify in worker processes, with a time
limit) and :mod:`~prmsearch.benchmarks.grading.grader` (the public API and the glue between them).
The public names are re-exported here, so ``from prmsearch.benchmarks.grading import is_equivalent``
works as before the room had parts."""

from prmsearch.benchmarks.grading.grader import (
    APPROX_MIN_DIGITS,
    DEFAULT_TIMEOUT_S,
    VerifierPool,
    clean_answer,
    extract_answer,
    grade,
    gsm8k_gold,
    is_equivalent,
    math_verify_equal,
    search_matcher,
    shutdown_verifier,
)

__all__ = [
    "APPROX_MIN_DIGITS",
    "DEFAULT_TIMEOUT_S",
    "VerifierPool",
    "clean_answer",
    "extract_answer",
    "grade",
    "gsm8k_gold",
    "is_equivalent",
    "math_verify_equal",
    "search_matcher",
    "shutdown_verifier",
]
