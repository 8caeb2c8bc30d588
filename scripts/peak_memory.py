"""Run a command and report the peak resident memory of its whole process tree.

A real-model bench is several processes (the bench, vLLM's engine worker, tokenizer threads), so
the peak RSS of the parent alone understates what the machine needs. This samples the sum of RSS
over the command and all its descendants every `--every` seconds and prints the peak at the end.

    python scripts/peak_memory.py --every 1 -- prmsearch bench --dataset gsm8k --limit 5 ...
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time

import psutil


def tree_rss(root: psutil.Process) -> int:
    """Bytes resident in `root` and every process below it (gone processes count zero)."""
    total = 0
    try:
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for proc in members:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def watch(pid: int, every: float, stop: threading.Event, peak: list[int]) -> None:
    """Keep `peak[0]` at the largest tree RSS seen until `stop` is set."""
    root = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], tree_rss(root))
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
    stop, peak = threading.Event(), [0]
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
    print(f"peak memory of the process tree: {peak[0] / 2**30:.2f} GiB "
          f"(sampled every {args.every:g} s); wall {wall:.0f} s; exit {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
