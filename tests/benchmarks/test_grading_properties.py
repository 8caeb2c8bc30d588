"""Properties of the grader: no string makes it raise or run past its time limit.

Hypothesis draws arbitrary text and adversarial maths (huge numbers, deep braces, unclosed
``\\boxed``, unicode, very long input); every call must return a bool, from the main thread and
from worker threads, within the limit plus a margin for one worker restart.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prmsearch.answers import AnswerMatcher, canonical_answer, extract_answer
from prmsearch.benchmarks.grading import grader as grading
from prmsearch.benchmarks.grading import is_equivalent, search_matcher

LIMIT_S = 1.0
#: The limit, plus room for starting a fresh worker after one was killed for overrunning.
BOUND_S = LIMIT_S + 6.0
POWER_TOWER = "2^{2^{2^{2^{2^{2^{2^{2}}}}}}}"

MATH_TOKENS = [
    "\\boxed{", "\\boxed", "\\fbox{", "{", "}", "\\{", "\\}", "(", ")", "[", "]", ",", ", ", ".", "-",
    "+", "^", "_", "\\frac", "\\sqrt", "\\pi", "\\infty", "\\cup", "\\approx", "\\text{", "\\left(",
    "\\right)", "$", "%", "\\%", "=", "x", "e", "1", "0", "9", "999999999", "1,000", "thousand",
    "million", " ", "\n", "é", "∞", "²", "½", "\\\\", "&", "\\begin{pmatrix}", "\\end{pmatrix}",
    "1e400", "1e-99999", "\\times10^{", "/", "0/0", "answer is ", "\\dots", "and", "or",
]  # fmt: skip


def _huge_number(n: int) -> str:
    return "9" * n


def _nested(depth: int) -> str:
    return "{" * depth + "1" + "}" * depth


def _unclosed_boxes(n: int) -> str:
    return "\\boxed{" * n + "1"


adversarial = st.one_of(
    st.integers(1, 20_000).map(_huge_number),
    st.integers(1, 20_000).map(_nested),
    st.integers(1, 5_000).map(_unclosed_boxes),
    st.integers(1, 200_000).map(lambda n: "a" * n),
    st.integers(1, 50_000).map(lambda n: "1," * n),
    st.integers(1, 50_000).map(lambda n: "\\text{" * n),
    st.lists(st.sampled_from(MATH_TOKENS), max_size=60).map("".join),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
)


def _timed(pred: str, gold: str) -> tuple[bool, float]:
    start = time.monotonic()
    verdict = is_equivalent(pred, gold, timeout_s=LIMIT_S)
    return verdict, time.monotonic() - start


@pytest.fixture(scope="module", autouse=True)
def _warm_worker() -> None:
    assert is_equivalent("\\sqrt{8}", "2\\sqrt{2}")  # a started worker: timings below are the check


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300), st.text(max_size=300))
def test_arbitrary_text_never_raises(pred: str, gold: str) -> None:
    verdict, elapsed = _timed(pred, gold)
    assert isinstance(verdict, bool)
    assert elapsed < BOUND_S
    answer = extract_answer(pred)
    assert answer is None or isinstance(answer, str)
    assert isinstance(canonical_answer(pred), str)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(adversarial, st.one_of(adversarial, st.sampled_from(["1", "1000", "\\frac{1}{2}", "(1, 2)"])))
def test_adversarial_maths_never_raises_or_overruns(pred: str, gold: str) -> None:
    verdict, elapsed = _timed(pred, gold)
    assert isinstance(verdict, bool)
    assert elapsed < BOUND_S, (pred[:80], gold[:80], elapsed)
    start = time.monotonic()
    for text in (pred, "\\boxed{" + pred + "}", "The answer is " + pred):
        answer = extract_answer(text)
        assert answer is None or isinstance(answer, str)
        assert isinstance(canonical_answer(text), str)
    assert time.monotonic() - start < BOUND_S


@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        ("9" * 5000, "9" * 5000),
        ("9" * 5000, "9" * 4999 + "8"),
        ("1" * 100_000, "1" * 100_000 + "0"),
        ("1e999999999", "1"),
        ("\\frac{" + "9" * 5000 + "}{7}", "1"),
        ("{" * 50_000, "1"),
        ("\\boxed{" * 10_000, "1"),
        ("\\text{" * 20_000 + "a", "a"),
        ("1,000" * 10_000, "1"),
        ("0." + "3" * 9000, "\\frac{1}{3}"),
        ("\ud800\x00\u202e", "1"),
        (POWER_TOWER, "1"),
    ],
)
def test_known_hard_inputs(pred: str, gold: str) -> None:
    for a, b in ((pred, gold), (gold, pred)):
        verdict, elapsed = _timed(a, b)
        assert isinstance(verdict, bool)
        assert elapsed < BOUND_S, (a[:60], b[:60], elapsed)
    start = time.monotonic()
    extract_answer(pred)
    extract_answer("\\boxed{" + pred + "}, \\boxed{" + pred + "}")
    canonical_answer(pred)
    assert time.monotonic() - start < BOUND_S


def test_time_limit_holds_in_worker_threads() -> None:
    grading._symbolic_equal.cache_clear()
    pairs = [(POWER_TOWER, "1"), ("\\sqrt{12}", "2\\sqrt{3}"), ("3^{3^{3^{3^{3^{3}}}}}", "2")]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:
        verdicts = list(pool.map(lambda pair: is_equivalent(*pair, timeout_s=LIMIT_S), pairs))
    assert verdicts == [False, True, False]
    assert time.monotonic() - start < BOUND_S + LIMIT_S


def test_inline_fallback_time_limit_holds_in_worker_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no worker process can start, math-verify runs inline; a thread still gets its limit."""

    class NoPool:
        def equal(self, *args: object) -> bool:
            raise OSError("no subprocesses here")

    monkeypatch.setattr(grading, "_default_pool", NoPool)
    grading._symbolic_equal.cache_clear()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            start = time.monotonic()
            verdict = pool.submit(is_equivalent, POWER_TOWER, "1", timeout_s=LIMIT_S).result(timeout=60)
            elapsed = time.monotonic() - start
            assert verdict is False
            assert elapsed < LIMIT_S + 2.0
            assert pool.submit(is_equivalent, "\\sqrt{12}", "2\\sqrt{3}").result(timeout=60) is True
    finally:
        grading._symbolic_equal.cache_clear()


def test_matcher_never_raises_on_hard_input() -> None:
    matcher = search_matcher(LIMIT_S)
    answers = ["9" * 5000, "0" + "9" * 5000, "{" * 1000, "1", "1.0", "\\frac{1}{2}", "0.5"]
    labels = matcher.group(answers)
    assert labels[0] == labels[1] and labels[3] == labels[4] and labels[5] == labels[6]
    assert isinstance(AnswerMatcher().group(answers), list)


def test_workers_outlive_the_thread_that_started_them() -> None:
    """A worker started from a short-lived thread must still serve later calls.

    Linux's parent-death signal fires when the *thread* that started a child exits, so workers
    started from a thread pool's thread used to die with it; later calls then found dead workers,
    counted them as timeouts and fell back to running math-verify inline, without a limit.
    """
    grading.shutdown_verifier()
    grading._symbolic_equal.cache_clear()
    starter = threading.Thread(target=is_equivalent, args=("\\sqrt{8}", "2\\sqrt{2}"))
    starter.start()
    starter.join()
    time.sleep(0.5)
    pool = grading._default_pool()
    assert pool._idle and all(worker.process.poll() is None for worker in pool._idle)
    timeouts = pool.timeouts
    assert is_equivalent("\\sqrt{12}", "2\\sqrt{3}")
    assert pool.timeouts == timeouts
