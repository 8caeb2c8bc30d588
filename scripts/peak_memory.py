"""Run a command and report the peak resident memory of its whole process tree.

A real-model bench is several processes (the bench, vLLM's engine worker, tokenizer threads), so
the peak RSS of the parent alone understates what the machine needs. This samples the command and
all its descendants every `--every` seconds and prints two peaks at the end: the sum of their RSS
(which counts the pages they share, such as torch's libraries, once per process) and the sum of
their PSS (each shared page split among its sharers: what the tree takes from the machine).

    python scripts/peak_memory.py --every 1 -- prmsearch bench --dataset gsm8k --limit 5 ...
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time

import psutil


def tree_memory(root: psutil.Process) -> tuple[int, int]:
    """(RSS, PSS) bytes summed over `root` and every process below it (gone processes count
    zero; PSS falls back to RSS where the kernel does not report it)."""
    rss = pss = 0
    try:
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    for proc in members:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return rss, pss


def watch(pid: int, every: float, stop: threading.Event, peak: list[int]) -> None:
    """Keep `peak` at the largest tree RSS and PSS seen until `stop` is set."""
    root = psutil.Process(pid)
    while not stop.is_set():
        rss, pss = tree_memory(root)
        peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
        stop.wait(every)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if args.every <= 0:
        parser.error("--every must be positive")
    started = time.monotonic()
    child = subprocess.Popen(command)
    stop, peak = threading.Event(), [0, 0]
    sampler = threading.Thread(target=watch, args=(child.pid, args.every, stop, peak), daemon=True)
    sampler.start()
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.terminate()
        code = child.wait()
    stop.set()
    sampler.join()
    wall = time.monotonic() - started
    print(f"peak memory of the process tree: PSS {peak[1] / 2**30:.2f} GiB, "
          f"RSS sum {peak[0] / 2**30:.2f} GiB (sampled every {args.every:g} s); wall {wall:.0f} s; "
          f"exit {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
