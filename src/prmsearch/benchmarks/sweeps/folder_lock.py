"""One writer per run folder: a lock file that a second process is refused by, naming the holder.

Two ``bench`` (or ``label``) processes on one ``--out`` would interleave their rows, and a later
resume would credit one run's rows to the other's configuration. The lock is a POSIX record lock
(``fcntl.lockf``) on ``FOLDER/.lock``, which holds the owner's PID for the refusal message. The
kernel drops such a lock when its process dies, however it dies (SIGKILL included), so a stale
lock file never blocks a resume, and a process forked by the holder (vLLM's engine, say) does
not inherit it. Within one process the lock is counted, not taken twice: POSIX record locks
belong to the process, and closing any second handle on the file would release them.
Where ``fcntl`` does not exist (Windows) the lock is a no-op.
"""

from __future__ import annotations

import os
from pathlib import Path

LOCK_FILE = ".lock"

#: The folders this process holds: resolved path -> (open lock file, how many holders).
_HELD: dict[Path, tuple[object, int]] = {}


class FolderInUseError(RuntimeError):
    """Another process is writing into the folder."""


def acquire(folder: Path) -> Path:
    """Lock ``folder`` for this process (again, if it holds it already) and return its key;
    raises :class:`FolderInUseError` naming the holder's PID when another process holds it."""
    key = Path(folder).resolve()
    if key in _HELD:
        handle, count = _HELD[key]
        _HELD[key] = (handle, count + 1)
        return key
    try:
        import fcntl
    except ImportError:  # no POSIX locks here: one writer is the user's to ensure
        _HELD[key] = (None, 1)
        return key
    path = key / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _read_holder(fd)
        os.close(fd)
        who = f"process {holder}" if holder else "another process"
        raise FolderInUseError(
            f"{folder} is in use by {who} (lock file {path}): two runs writing into one folder would "
            "mix their rows. Wait for that run to finish (or stop it), or give another --out folder"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = (fd, 1)
    return key


def release(key: Path) -> None:
    """Undo one :func:`acquire` of ``key``; the last one unlocks and closes the lock file."""
    if key not in _HELD:
        return
    handle, count = _HELD[key]
    if count > 1:
        _HELD[key] = (handle, count - 1)
        return
    del _HELD[key]
    if isinstance(handle, int):
        os.close(handle)  # closing the only handle drops the record lock


def _read_holder(fd: int) -> str:
    """The PID the holder wrote into the lock file ('' when it cannot be read)."""
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
