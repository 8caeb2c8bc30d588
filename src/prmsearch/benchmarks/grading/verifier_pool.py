"""Verifier pool: math-verify with a time limit, in worker processes or, as a fallback, inline.

Layers 2 and 3 of :mod:`prmsearch.benchmarks.grading` (whose module docstring, the "grading
docstring" below, states the design and the rules). Answers the fast path
(:mod:`prmsearch.benchmarks.grading.answer_forms`) cannot decide go to ``math_verify.parse``/``verify``.
Their own timeouts use ``signal.alarm``, which works only in the main thread, so they are
switched off and the limit is enforced from outside: :class:`VerifierPool` keeps a few plain
``python -c`` worker processes (:func:`serve_stdio`) that answer over pipes, waits at most
``timeout_s`` seconds for each answer, and kills and replaces a worker that overruns. Where no
worker can start, :func:`_inline_equal` runs math-verify in this process instead.

A decimal against an exact real expression (``3.14159265`` against ``\\pi``) follows the
grader's approximation rule, read with the fast path's number reader; everything else is
math-verify's own verdict.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import queue
import re
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

from prmsearch.benchmarks.grading.answer_forms import _number_against_value, _parse_number, clean_answer

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FLOAT_PLACES",
    "VerifierPool",
    "math_verify_equal",
    "serve_stdio",
    "shutdown_verifier",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Folder holding the ``prmsearch`` package, put on the workers' PYTHONPATH.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Seconds one math-verify comparison may take before it counts as "not equivalent".
DEFAULT_TIMEOUT_S = 5.0
#: Decimal places math-verify rounds floats to inside expressions (its own default is 6).
FLOAT_PLACES = 12

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
    """math-verify's verdict under the grader's rules, in this process.

    ``timeout_s`` uses math-verify's ``signal.alarm`` limit: pass None (no limit) anywhere but the
    main thread.
    """
    return _symbolic_verdict(pred, gold, timeout_s, strict=False)


def _symbolic_verdict(pred: str, gold: str, timeout_s: int | None, strict: bool) -> bool:
    """Parse both answers with math-verify; a decimal against a real number follows our
    approximation rule (not ``strict``), everything else math-verify's ``verify`` with floats
    rounded to :data:`FLOAT_PLACES` places."""
    from math_verify import parse, verify

    _quiet_math_verify()
    gold_parsed = parse(_as_latex(gold), parsing_timeout=timeout_s)
    pred_parsed = parse(_as_latex(pred), parsing_timeout=timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    if not strict:
        verdict = _decimal_against_expression(pred, gold, pred_parsed[0], gold_parsed[0])
        if verdict is not None:
            return verdict
    return bool(verify(gold_parsed, pred_parsed, float_rounding=FLOAT_PLACES, timeout_seconds=timeout_s))


def _real_value(expr: object) -> tuple[Fraction, bool] | None:
    """(value, exact) of a sympy expression that is a real number written without floats.

    Rationals are exact; other reals (``\\sqrt{2}``, ``\\pi``) come as 60-digit approximations
    with ``exact`` False. None for anything else (symbols, complex numbers, sets, floats).
    """
    import sympy

    if not isinstance(expr, sympy.Expr) or expr.free_symbols or not expr.is_number:
        return None
    if expr.atoms(sympy.Float):
        return None
    if expr.is_rational:
        evaluated = expr.doit()  # math-verify parses unevaluated: sqrt(4)/6 is not yet 1/3
        if not evaluated.is_Rational:
            return None
        return Fraction(int(evaluated.p), int(evaluated.q)), True
    if expr.is_rational is not False or expr.is_real is not True or expr.is_finite is not True:
        return None
    approximation = sympy.N(expr, 60)
    if not approximation.is_Float:
        return None
    return Fraction(str(approximation)), False


def _decimal_against_expression(pred: str, gold: str, pred_expr: object, gold_expr: object) -> bool | None:
    """The verdict when one answer is a plain number and the other an exact real expression."""
    for text, other, is_gold in ((pred, gold_expr, False), (gold, pred_expr, True)):
        number = _parse_number(clean_answer(text))
        if number is None or number.ulp is None:
            continue
        try:
            value = _real_value(other)
        except Exception:  # sympy cannot say: leave it to verify
            return None
        if value is not None:
            return _number_against_value(number, value[0], exact=value[1], gold=is_gold)
    return None


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
    """Worker loop: read ``[pred, gold, strict]`` JSON lines on stdin, answer ``true``/``false``.

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
            pred, gold, *rest = json.loads(line)
            result = _symbolic_verdict(str(pred), str(gold), None, strict=bool(rest and rest[0]))
        except Exception:
            result = False
        out.write("true\n" if result else "false\n")


class _Spawner:
    """A long-lived thread that starts every worker process of this process.

    Workers ask Linux to kill them when their parent dies (``PR_SET_PDEATHSIG``), and Linux takes
    "parent" to mean the *thread* that started the child: a worker started straight from a
    thread pool's thread would die when that thread ends. Starting them all from this thread,
    which lives as long as the process, keeps them alive as long as the process.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], object], queue.Queue[tuple[bool, object]]]]
        self._requests = queue.Queue()
        threading.Thread(target=self._serve, name="prmsearch-verifier-spawner", daemon=True).start()

    def _serve(self) -> None:
        while True:
            make, reply = self._requests.get()
            try:
                reply.put((True, make()))
            except BaseException as exc:
                reply.put((False, exc))

    def call(self, make: Callable[[], _T]) -> _T:
        """``make()``, run on the spawner thread; its exception is raised here."""
        reply: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=1)
        self._requests.put((make, reply))
        ok, value = reply.get()
        if not ok:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]


_spawners: dict[int, _Spawner] = {}
_spawners_lock = threading.Lock()


def _spawner() -> _Spawner:
    """This process's spawner (a forked child gets its own: threads do not survive a fork)."""
    with _spawners_lock:
        spawner = _spawners.get(os.getpid())
        if spawner is None:
            spawner = _spawners[os.getpid()] = _Spawner()
        return spawner


def _start_worker_process() -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", f"from {__name__} import serve_stdio; serve_stdio()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


class _Worker:
    """One child Python process answering comparisons over its stdin/stdout pipes."""

    def __init__(self, startup_timeout_s: float) -> None:
        self.process = _spawner().call(_start_worker_process)
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

    def ask(self, pred: str, gold: str, timeout_s: float, strict: bool = False) -> bool | None:
        """The verdict, or None when the worker overran ``timeout_s`` or died."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps([pred, gold, strict]) + "\n").encode())
            stdin.flush()
        except OSError:
            return None
        line = self._read_line(timeout_s)
        return None if line is None else line == "true"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # unflushed bytes to a dead worker: no one to read them
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

    def equal(
        self, pred: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, strict: bool = False
    ) -> bool | None:
        """math-verify's verdict on ``pred`` vs ``gold``; None when it overran ``timeout_s``.

        ``strict`` drops the approximation rule (votes; see the grading docstring).

        Raises RuntimeError or OSError when no worker can start.
        """
        if os.getpid() != self._pid:  # forked: the parent's workers are not ours to talk to
            self._reset()
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is not None and not worker.alive():  # killed from outside: not a timeout
                log.debug("math-verify worker %d had exited; starting another", worker.process.pid)
                worker.kill()
                worker = None
            if worker is None:
                worker = _Worker(self.startup_timeout_s)
            verdict = worker.ask(pred, gold, timeout_s, strict)
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


#: Signs of a comparison that may take unbounded time (towers, factorials, sums, huge numbers).
_COSTLY = re.compile(r"\^\s*\{[^{}]*\^|\^[^{}]*\^\s*\{|!|\\(?:sum|prod|int|lim)|\d{30}")


def _cheap_enough_inline(pred: str, gold: str) -> bool:
    """Whether a comparison looks safe to run inline without a time limit."""
    return all(len(s) <= 300 and _COSTLY.search(s) is None for s in (pred, gold))


def _inline_equal(pred: str, gold: str, timeout_s: float, strict: bool = False) -> bool:
    """Fallback where no child process can start (see layer 3 in the grading docstring).

    In the main thread math-verify's ``signal.alarm`` limit applies. Elsewhere nothing can stop
    a computation (a thread cannot be killed, and sympy holds the GIL through long integer
    operations), so only comparisons that look cheap are run; the others count as not equivalent.
    """
    global _inline_warned
    if threading.current_thread() is threading.main_thread() and hasattr(os, "fork"):
        limit: int | None = max(1, math.ceil(timeout_s))
    else:
        limit = None
        if not _inline_warned:
            _inline_warned = True
            log.warning(
                "no worker process can start here: math-verify runs inline without a time limit, "
                "and answers that look costly count as not equivalent"
            )
        if not _cheap_enough_inline(pred, gold):
            return False
    try:
        return _symbolic_verdict(pred, gold, limit, strict)
    except Exception:
        return False
