"""What a command prints: the search, its progress and prmsearch's own lines, and the engines'
chatter only when asked for.

A ``solve`` on vLLM's CPU engine printed some twenty lines of engine warnings around its answer
(Triton, libtcmalloc, OMP threads, deprecations, the engine's shutdown), some of them on stdout,
between the answer's lines. By default the commands now set, for this process and the engine
processes it starts, every engine's own quiet switch: vLLM's log level (and its stream: stderr,
never stdout), torch's C++ log level, transformers' verbosity and Python's warnings. A variable
the user has set is left as it is, and ``--verbose`` shows everything. Errors are not lost: an
engine that fails says so in one line that names the fix (:mod:`prmsearch.engines.errors`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

#: Each engine's own quiet switch, as set by default: (variable, quiet value, verbose value).
ENGINE_SWITCHES = (
    ("VLLM_LOGGING_LEVEL", "CRITICAL", "INFO"),
    ("VLLM_LOGGING_STREAM", "ext://sys.stderr", "ext://sys.stderr"),  # stdout is the answer's
    ("TORCH_CPP_LOG_LEVEL", "ERROR", None),
    ("TORCH_LOGS", "-torch", None),  # torch's Python-side warnings (e.g. "Triton not available")
    ("TRANSFORMERS_VERBOSITY", "error", None),
    ("PYTHONWARNINGS", "ignore", None),  # the engine processes' (this one's: see below)
)

#: prmsearch's own log lines (the KV cache size an engine got, a server's errors) go to stderr
#: with this prefix.
LOG_FORMAT = "prmsearch: %(message)s"


def set_engine_output(verbose: bool) -> None:
    """Quiet the engines (or, with ``verbose``, let them talk), before any of them is imported,
    and show prmsearch's own INFO lines on stderr."""
    user_warnings = "PYTHONWARNINGS" in os.environ
    for variable, quiet, loud in ENGINE_SWITCHES:
        value = loud if verbose else quiet
        if value is not None and variable not in os.environ:
            os.environ[variable] = value
    if not verbose and not user_warnings:
        warnings.filterwarnings("ignore")  # other packages' warnings...
        warnings.filterwarnings("default", module=r"prmsearch(\.|$)")  # ...but not prmsearch's
    logger = logging.getLogger("prmsearch")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a line is logged."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

