"""Grading: is a model's final answer equivalent to the gold answer?

Design, in three layers, cheapest first:

1. **Fast path, in process, no sympy.** Both answers are cleaned (``$``, ``\\$``, ``\\text{}``,
   ``\\left``/``\\right``, spacing commands, ``^\\circ``, a leading ``x=``, ``\\dfrac``) and then
   decided without a symbolic checker when their shape allows it: equal strings or canonical forms
   (:func:`prmsearch.answers.canonical_answer`); two plain numbers (thousands commas, scientific
   notation, simple fractions, a trailing unit word such as ``5 km`` or ``1,000 dollars``, a
   percent sign); two multiple-choice letters (``(C)`` and ``C``); two plain words
   (``\\text{Evelyn}`` and ``Evelyn``). Most GSM8K/AIME/AMC comparisons and most votes end here
   and never start a process.
2. **math-verify, in a worker process, with a time limit.** Everything else (intervals, tuples,
   sets, radicals, pi forms, matrices, expressions) goes to ``math_verify.parse``/``verify``.
   Their own timeouts use ``signal.alarm``, which works only in the main thread, so they are
   switched off (``parsing_timeout=None``, ``timeout_seconds=None``) and the limit is enforced
   from outside: a small reusable pool of worker processes (:class:`VerifierPool`) answers over
   pipes, the caller waits at most ``timeout_s`` seconds, and a worker that overruns is killed
   and replaced. The workers are plain ``python -c`` subprocesses rather than ``multiprocessing``
   children, so they never re-import the caller's ``__main__`` and can be started from threads
   and from daemonic pool workers alike. Adversarial LaTeX (``2^{2^{2^{\\dots}}}``) therefore
   costs at most ``timeout_s`` seconds and a worker restart, and :func:`is_equivalent` is safe to
   call from threads and worker processes. Workers start lazily, so a run whose answers all take
   the fast path never starts one; verdicts are cached per (pred, gold).
3. **Fallback, in process.** Where no worker can start (no subprocesses allowed, no ``select``
   on pipes), math-verify runs inline: with its own ``signal.alarm`` limit in the main thread,
   without a limit (and a logged warning) elsewhere.

Decisions on equivalence (each has a row in ``tests/test_grading.py``):

- Numbers compare exactly as rationals, or within a relative 1e-6 (so ``0.3333333`` matches
  ``1/3`` like math-verify's 6-digit rounding does, but ``0.333`` does not).
- A percentage matches both its fraction and its bare number: ``50\\%`` equals ``0.5`` and ``50``.
  Gold answers and models write percentages both ways ("what percent ...?" answered ``50``),
  and the two readings never collide for a wrong answer that is not off by exactly 100x.
- Unit words after a number are dropped when separated from it (``5 km``, ``10\\text{ cm}^2``)
  or when a known unit (``5cm``): ``5x`` is an expression, not ``5`` with a unit; math words
  (``pi``, ``sqrt``, ``i``...) are never units.
- Intervals keep their ends (``(1,2]`` differs from ``(1,2)``); ordered pairs keep their order,
  sets do not; ``3.14`` is not ``\\pi`` (an approximation of an irrational is not accepted).
- Text answers compare case-insensitively (``\\text{East}`` equals ``east``), single letters
  case-sensitively (variables), multiple-choice letters with or without parentheses.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from prmsearch.answers import AnswerMatcher, canonical_answer, extract_answer

__all__ = [
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

log = logging.getLogger(__name__)

#: Folder holding the ``prmsearch`` package, put on the workers' PYTHONPATH.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Seconds one math-verify comparison may take before it counts as "not equivalent".
DEFAULT_TIMEOUT_S = 5.0
#: Relative tolerance for two numbers that are not exactly equal.
NUMERIC_REL_TOL = 1e-6

# ---------------------------------------------------------------------------------------------
# GSM8K gold
# ---------------------------------------------------------------------------------------------


def gsm8k_gold(answer_field: str) -> str:
    """The gold number of a GSM8K ``answer`` field: the text after ``####``, commas removed."""
    if not isinstance(answer_field, str) or "####" not in answer_field:
        raise ValueError(f"a GSM8K answer must contain '#### <number>', got {answer_field!r:.80}")
    gold = answer_field.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold:
        raise ValueError(f"a GSM8K answer has nothing after '####': {answer_field!r:.80}")
    return gold


# ---------------------------------------------------------------------------------------------
# Cleaning and the fast path
# ---------------------------------------------------------------------------------------------

_TEXT_COMMANDS = (
    "\\text", "\\textbf", "\\textit", "\\textrm", "\\textnormal", "\\mathrm", "\\mbox", "\\mathbf",
)  # fmt: skip
_DROP_TOKENS = (
    "\\displaystyle", "\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "~",
    "^{\\circ}", "^\\circ", "°", "\\$", "$",
)  # fmt: skip
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?P<rhs>[^=]+)$")
_NUMBER = (
    r"(?P<sign>[+-]?)\s*"
    r"(?:(?P<frac>\\frac\{(?P<fn>\d+)\}\{(?P<fd>\d+)\}|\\frac(?P<sn>\d)(?P<sd>\d))"
    r"|(?P<ratio>(?P<rn>\d+)/(?P<rd>\d+))"
    r"|(?P<dec>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.?\d*|\.\d+)"
    r"(?:(?:[eE](?P<exp>[+-]?\d+))|\s*(?:\\times|\\cdot)\s*10\^\{?(?P<texexp>[+-]?\d+)\}?)?)"
)
_PERCENT = r"(?P<percent>\s*(?:\\?%|\s+percent))?"
_UNIT = r"(?:(?P<gap>\s*)(?P<unit>[A-Za-z]+(?:\s+[A-Za-z]+)*)(?:\^\{?\d\}?)?)?"
_NUMERIC = re.compile(rf"^{_NUMBER}{_PERCENT}{_UNIT}$")
#: Words that are mathematics, never a unit: "2 pi" is not 2.
_MATH_WORDS = frozenset({
    "pi", "e", "i", "sqrt", "inf", "infty", "infinity", "ln", "log", "exp", "sin", "cos", "tan", "sec",
    "csc", "cot", "arcsin", "arccos", "arctan", "mod", "and", "or", "x", "y", "z", "n", "k",
})  # fmt: skip
#: Single-letter unit symbols accepted after a number (other single letters are variables).
#: Units recognised when written without a space ("5cm", as canonical forms and votes spell it).
_ATTACHED_UNITS = frozenset({
    "mm", "cm", "km", "m", "in", "ft", "yd", "mi", "mg", "g", "kg", "lb", "lbs", "oz", "ml", "mL", "L",
    "s", "sec", "min", "h", "hr", "hrs", "mph", "cents", "dollars", "degrees",
})  # fmt: skip
_SINGLE_LETTER_UNITS = frozenset({"m", "g", "s", "h", "L", "K", "J", "W", "V", "N"})
_CHOICE = re.compile(r"^\(?(?P<letter>[A-E])\)?$")
_WORDS = re.compile(r"^[A-Za-z][A-Za-z' -]*$")


def _unwrap_text(s: str) -> str:
    """Replace ``\\text{...}``-style wrappers by their content, padded with spaces."""
    for command in _TEXT_COMMANDS:
        start = s.find(command + "{")
        while start != -1:
            open_index = start + len(command)
            depth, end = 0, -1
            for i in range(open_index, len(s)):
                if s[i] == "{":
                    depth += 1
                elif s[i] == "}":
                    depth -= 1
                    if depth == 0:
                        end = i
                        break
            if end == -1:
                break
            s = s[:start] + " " + s[open_index + 1 : end] + " " + s[end + 1 :]
            start = s.find(command + "{")
    return s


def clean_answer(answer: str) -> str:
    """Strip presentation that never changes an answer's value (see the module docstring)."""
    s = _unwrap_text(answer.strip())
    for token in _DROP_TOKENS:
        s = s.replace(token, " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\s+(?=[\^}])", "", s)
    s = s.rstrip(".").strip()
    assignment = _ASSIGNMENT.match(s)
    if assignment:
        s = assignment.group("rhs").strip()
    return s


@dataclass(frozen=True)
class _Number:
    """A parsed plain number: its value and whether it was written as a percentage."""

    value: Fraction
    percent: bool

    def readings(self) -> tuple[Fraction, ...]:
        """The values the answer may mean: ``50%`` means 0.5 or 50 (see the module docstring)."""
        return (self.value / 100, self.value) if self.percent else (self.value,)


def _parse_number(s: str) -> _Number | None:
    """A plain number (with optional percent and unit word), or None for anything else."""
    m = _NUMERIC.match(s)
    if m is None:
        parenthesised = re.fullmatch(r"\((.+)\)", s)  # "(073)", AIME solutions' \textbf{(073)}
        if parenthesised is None or "," in parenthesised.group(1):
            return None
        m = _NUMERIC.match(parenthesised.group(1).strip())
        if m is None:
            return None
    unit = m.group("unit")
    if unit is not None:
        words = unit.split()
        if any(w.lower() in _MATH_WORDS for w in words):
            return None
        if len(words) == 1 and len(unit) == 1 and unit not in _SINGLE_LETTER_UNITS:
            return None
        if not m.group("gap") and unit not in _ATTACHED_UNITS:
            return None
    if m.group("frac") is not None:
        num, den = m.group("fn") or m.group("sn"), m.group("fd") or m.group("sd")
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
    elif m.group("ratio") is not None:
        if int(m.group("rd")) == 0:
            return None
        value = Fraction(int(m.group("rn")), int(m.group("rd")))
    else:
        value = Fraction(m.group("dec").replace(",", ""))
        exponent = m.group("exp") or m.group("texexp")
        if exponent is not None:
            if abs(int(exponent)) > 400:
                return None
            value *= Fraction(10) ** int(exponent)
    if m.group("sign") == "-":
        value = -value
    return _Number(value, m.group("percent") is not None)


def _close(a: Fraction, b: Fraction) -> bool:
    """Exactly equal, or equal within :data:`NUMERIC_REL_TOL` relative to the larger magnitude."""
    if a == b:
        return True
    return abs(a - b) <= NUMERIC_REL_TOL * max(abs(a), abs(b))


def _numbers_match(pred: _Number, gold: _Number) -> bool:
    return any(_close(p, g) for p in pred.readings() for g in gold.readings())


def _choice(s: str) -> str | None:
    """The letter of a multiple-choice answer ``C``, ``(C)`` or ``(C) 12``, else None."""
    m = _CHOICE.match(s) or re.match(r"^\((?P<letter>[A-E])\)\s", s)
    return m.group("letter") if m else None


def _balanced(s: str) -> bool:
    """Whether every ``{`` is closed in order (escaped ``\\{``/``\\}`` excluded)."""
    depth = 0
    for ch in s.replace("\\{", "").replace("\\}", ""):
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


def _quick_verdict(pred: str, gold: str) -> bool | None:
    """Decide cheaply when the answers' shapes allow it; None means "ask math-verify"."""
    if pred == gold:
        return True
    cp, cg = clean_answer(pred), clean_answer(gold)
    if not cp:
        return False
    if cp == cg or canonical_answer(pred) == canonical_answer(gold):
        return True
    if not _balanced(pred):
        return False  # malformed LaTeX; math-verify would silently close it (inside our \\boxed{})
    np_, ng = _parse_number(cp), _parse_number(cg)
    if np_ is not None and ng is not None:
        return _numbers_match(np_, ng)
    lp, lg = _choice(cp), _choice(cg)
    if lp is not None and lg is not None:
        return lp == lg
    if _WORDS.match(cp) and _WORDS.match(cg):
        if len(cp) == 1 or len(cg) == 1:
            return cp == cg
        return " ".join(cp.lower().split()) == " ".join(cg.lower().split())
    return None


# ---------------------------------------------------------------------------------------------
# math-verify (runs in a worker process or, as a fallback, inline)
# ---------------------------------------------------------------------------------------------


def _quiet_math_verify() -> None:
    """Silence math-verify's "timeout is disabled" warning: we enforce the limit ourselves."""
    for name in ("math_verify", "math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _as_latex(answer: str) -> str:
    return "\\boxed{" + answer + "}"


def math_verify_equal(pred: str, gold: str, *, timeout_s: int | None = None) -> bool:
    """math-verify's verdict, in this process; ``timeout_s`` uses its ``signal.alarm`` limit.

    Pass ``timeout_s=None`` (no limit) anywhere but the main thread.
    """
    from math_verify import parse, verify

    _quiet_math_verify()
    gold_parsed = parse(_as_latex(gold), parsing_timeout=timeout_s)
    pred_parsed = parse(_as_latex(pred), parsing_timeout=timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))


def _die_with_parent() -> None:  # pragma: no cover - runs in the worker process
    """Ask Linux to kill this worker when its parent dies, even mid-computation (best effort).

    An idle worker exits anyway at EOF on stdin; this covers a parent killed while a worker is
    stuck in a long comparison that nobody will wait for.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


def serve_stdio() -> None:  # pragma: no cover - runs in the worker process
    """Worker loop: read ``[pred, gold]`` JSON lines on stdin, answer ``true``/``false`` lines.

    The protocol's stdout is a private copy of fd 1; fd 1 itself is pointed at stderr so that a
    library printing to stdout cannot corrupt it.
    """
    _die_with_parent()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _quiet_math_verify()
    math_verify_equal("1", "1")  # import and warm the parser before the first timed request
    out.write("ready\n")
    for line in sys.stdin:
        try:
            pred, gold = json.loads(line)
            result = math_verify_equal(str(pred), str(gold))
        except Exception:
            result = False
        out.write("true\n" if result else "false\n")


class _Worker:
    """One child Python process answering comparisons over its stdin/stdout pipes."""

    def __init__(self, startup_timeout_s: float) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from prmsearch.benchmarks.grading import serve_stdio; serve_stdio()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            ready = self._read_line(startup_timeout_s) == "ready"
        except BaseException:
            self.kill()
            raise
        if not ready:
            self.kill()
            raise RuntimeError(f"math-verify worker did not start within {startup_timeout_s} s")

    def _read_line(self, timeout_s: float) -> str | None:
        """The next line from the worker, or None after ``timeout_s`` or if it died."""
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        if not ready:
            return None
        line = stdout.readline()
        return line.decode().strip() if line else None

    def ask(self, pred: str, gold: str, timeout_s: float) -> bool | None:
        """The verdict, or None when the worker overran ``timeout_s`` or died."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps([pred, gold]) + "\n").encode())
            stdin.flush()
        except OSError:
            return None
        line = self._read_line(timeout_s)
        return None if line is None else line == "true"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def stop(self) -> None:
        """Close the worker's stdin (it exits at EOF), then make sure it is gone."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class VerifierPool:
    """A small, thread-safe pool of math-verify worker processes with a per-call time limit.

    At most ``max_workers`` comparisons run at once (further callers wait for a free worker);
    workers are started on first need and reused; one that overruns its limit is killed and a
    fresh one is started on the next call. Workers are plain ``python -c`` subprocesses, not
    ``multiprocessing`` children, so they never re-import the caller's ``__main__`` (no
    ``if __name__ == "__main__":`` guard needed), are safe to start from any thread, and can be
    started from daemonic ``multiprocessing`` workers too.
    """

    def __init__(self, max_workers: int = 2, startup_timeout_s: float = 120.0) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.max_workers = max_workers
        self.startup_timeout_s = startup_timeout_s
        self.timeouts = 0
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_workers)
        self._idle: list[_Worker] = []
        self._pid = os.getpid()

    def equal(self, pred: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool | None:
        """math-verify's verdict on ``pred`` vs ``gold``; None when it overran ``timeout_s``.

        Raises RuntimeError or OSError when no worker can start.
        """
        if os.getpid() != self._pid:  # forked: the parent's workers are not ours to talk to
            self._reset()
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None:
                worker = _Worker(self.startup_timeout_s)
            verdict = worker.ask(pred, gold, timeout_s)
            if verdict is None:
                with self._lock:
                    self.timeouts += 1
                log.warning(
                    "math-verify overran %.1f s on %.60r vs %.60r; worker restarted", timeout_s, pred, gold
                )
                worker.kill()
            else:
                with self._lock:
                    self._idle.append(worker)
            return verdict

    def close(self) -> None:
        """Stop every idle worker (a busy one is stopped or reused when its caller returns it)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()


_pool: VerifierPool | None = None
_pool_lock = threading.Lock()
_inline_warned = False


def _default_pool() -> VerifierPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = VerifierPool()
            atexit.register(shutdown_verifier)
        return _pool


def shutdown_verifier() -> None:
    """Stop the shared math-verify workers (they also stop at interpreter exit)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def _inline_equal(pred: str, gold: str, timeout_s: float) -> bool:
    """Fallback where no child process can start: signal-based limit in the main thread only."""
    global _inline_warned
    if threading.current_thread() is threading.main_thread() and hasattr(os, "fork"):
        limit: int | None = max(1, math.ceil(timeout_s))
    else:
        limit = None
        if not _inline_warned:
            _inline_warned = True
            log.warning("no worker process can start here: math-verify runs inline without a time limit")
    try:
        return math_verify_equal(pred, gold, timeout_s=limit)
    except Exception:
        return False


@lru_cache(maxsize=8192)
def _symbolic_equal(pred: str, gold: str, timeout_s: float) -> bool:
    try:
        verdict = _default_pool().equal(pred, gold, timeout_s)
    except (RuntimeError, OSError) as exc:
        log.debug("math-verify worker unavailable (%s); running inline", exc)
        return _inline_equal(pred, gold, timeout_s)
    return bool(verdict)


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def is_equivalent(pred: str | None, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether answer ``pred`` means the same as ``gold`` (see the module docstring for the rules).

    Never raises on odd input and never takes much more than ``timeout_s`` seconds (plus a
    one-off worker start); a comparison that overruns counts as not equivalent.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if pred is None or not isinstance(pred, str) or not isinstance(gold, str):
        return False
    pred, gold = pred.strip(), gold.strip()
    if not pred or not gold:
        return False
    verdict = _quick_verdict(pred, gold)
    if verdict is not None:
        return verdict
    return _symbolic_equal(pred, gold, float(timeout_s))


def grade(response_text: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether a full response's final answer (last ``\\boxed{}``, else "the answer is") is ``gold``."""
    return is_equivalent(extract_answer(response_text or ""), gold, timeout_s=timeout_s)


def search_matcher(timeout_s: float = DEFAULT_TIMEOUT_S) -> AnswerMatcher:
    """An :class:`AnswerMatcher` whose votes use the grader's equivalence, so search and grading agree."""

    def equivalent(a: str, b: str) -> bool:
        return is_equivalent(a, b, timeout_s=timeout_s)

    return AnswerMatcher(equivalent=equivalent)
