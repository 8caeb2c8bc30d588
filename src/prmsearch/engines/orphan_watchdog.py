"""A small helper process that stops this process's engine processes if this process dies first.

Python's exit code does not run when a process is killed by a signal it does not handle (SIGTERM
by default, SIGKILL, the kernel's out-of-memory killer) or leaves through ``os._exit``. A vLLM
engine's ``VLLM::EngineCore`` is then adopted by init and keeps its ``VLLM::Worker``, and the
worker its gigabytes. The watchdog is started with the first engine: every second it notes the
descendants of this process whose name starts with ``VLLM::``, and once this process is gone (its
own parent changes) it stops those still running: SIGTERM, then SIGKILL after a grace period.

It reads ``/proc`` only (Linux); elsewhere nothing is started. Its command line names it
(``prmsearch-engine-watchdog``) and not the engines, so ``pgrep -f VLLM::`` finds engines only.
It ignores SIGINT, SIGTERM and SIGHUP and runs in its own session, so the signal that ends its
parent does not end it too. It is a bare
interpreter (``python -I -S``, no imports but the standard library's ``os``, ``signal``, ``sys``
and ``time``): a few megabytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

#: Process names (``/proc/PID/stat``'s comm) of engine processes: vLLM titles its own.
ENGINE_PROCESS_PREFIXES = ("VLLM::",)

#: Seconds between the watchdog's looks at the process tree.
WATCH_INTERVAL_S = 1.0

#: Seconds the engine processes get after SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0

_SCRIPT = r"""
import os, signal, sys, time
parent, interval, grace = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
prefixes = tuple(os.environ["PRMSEARCH_WATCHED_NAMES"].split("\x1f"))
for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(number, signal.SIG_IGN)

def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[19], name  # parent pid, start time, name

def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = stat(int(entry))
            if info is not None:
                children.setdefault(info[0], []).append((int(entry), info))
    found, todo = {}, [root]
    while todo:
        for pid, info in children.get(todo.pop(), ()):
            found[pid] = info
            todo.append(pid)
    return found

def alive(watched):
    return [pid for pid, start in watched.items() if (info := stat(pid)) is not None and info[1] == start]

watched = {}
while os.getppid() == parent:
    for pid, (_, start, name) in descendants(parent).items():
        if name.startswith(prefixes):
            watched[pid] = start
    time.sleep(interval)
for number in (signal.SIGTERM, signal.SIGKILL):
    for pid in alive(watched):
        try:
            os.kill(pid, number)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while alive(watched) and time.monotonic() < deadline:
        time.sleep(0.1)
"""

_lock = threading.Lock()
_watchdog: subprocess.Popen | None = None
_owner = 0  # the pid that started it (a forked child starts its own)


def ensure_watchdog() -> subprocess.Popen | None:
    """Start this process's watchdog unless it runs already (None where ``/proc`` is missing)."""
    global _watchdog, _owner
    if not os.path.isdir("/proc/self"):
        return None
    with _lock:
        if _watchdog is None or _owner != os.getpid() or _watchdog.poll() is not None:
            _owner = os.getpid()
            _watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _SCRIPT, "prmsearch-engine-watchdog", str(os.getpid()),
                 str(WATCH_INTERVAL_S), str(STOP_GRACE_S)],
                env={**os.environ, "PRMSEARCH_WATCHED_NAMES": "\x1f".join(ENGINE_PROCESS_PREFIXES)},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        return _watchdog
