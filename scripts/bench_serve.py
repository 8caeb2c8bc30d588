"""Requests per second of ``prmsearch serve`` with 1, 4 and 16 concurrent clients, side by side.

    python scripts/bench_serve.py [--model beam-16] [--requests 16] [--repeats 2] [-- SERVE FLAGS]

Starts one real server (embedded models unless serve flags after ``--`` say otherwise) on a free
loopback port, then sends the same ``--requests`` chat requests (the first arithmetic test
questions) with the official ``openai`` client: one after another (each search alone, as servers
that search each request by itself do), then from 4 and from 16 client threads at once. Modes
alternate within each repeat, so machine noise hits all of them alike. Prints one markdown table:
requests/s and the speed-up over sequential, and checks that every mode returned the same answers
(same questions, same seeds: concurrency must not change a search).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

from prmsearch.arith.problems import load_split

MODES = (("sequential", 1), ("4 clients", 4), ("16 clients", 16))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, serve_flags: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "prmsearch", "serve", "--port", str(port), "--log-level", "warning",
           *serve_flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = proc.stderr.read().decode()[-2000:]
            raise SystemExit(f"prmsearch serve exited {proc.returncode}: {tail}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("prmsearch serve did not start in 180 s")


def stop_server(server: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM (the server drains), then SIGKILL if it is still up after ``grace_s`` seconds."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(grace_s)
    except subprocess.TimeoutExpired:
        server.kill()


def run_mode(
    client: openai.OpenAI, model: str, questions: list[str], clients: int
) -> tuple[float, list[str]]:
    """Wall seconds to answer every question with ``clients`` threads, and the answers in order."""

    def ask(question: str) -> str:
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}])
        return reply.choices[0].message.content

    start = time.perf_counter()
    if clients == 1:
        answers = [ask(q) for q in questions]
    else:
        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(ask, questions))
    return time.perf_counter() - start, answers


def batched_reference(model: str, questions: list[str], threads: int | None) -> tuple[float, list[str]]:
    """The same questions as ONE batched ``Searcher.run`` in this process (the embedded models):
    what 16 concurrent requests would cost at best."""
    import torch

    from prmsearch.api import Searcher, resolve_policy, resolve_scorer

    if threads:
        torch.set_num_threads(threads)
    strategy, _, budget = model.rpartition("-")
    searcher = Searcher(resolve_policy(None), resolve_scorer(None), strategy, n=int(budget))
    searcher.run(questions[:2])
    start = time.perf_counter()
    results = searcher.run(questions)
    return time.perf_counter() - start, [r.text for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="beam-16", help="model id to ask (default: beam-16)")
    parser.add_argument("--requests", type=int, default=16, help="requests per mode (default: 16)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of all modes (default: 2)")
    parser.add_argument("serve_flags", nargs="*", help="flags for prmsearch serve, after --")
    args = parser.parse_args()
    questions = [p.question for p in load_split("test", args.requests)]
    port = free_port()
    server = start_server(port, args.serve_flags)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=os.environ.get(
            "PRMSEARCH_API_KEY", "none"), max_retries=0, timeout=600, http_client=httpx.Client(
            limits=httpx.Limits(max_connections=64), timeout=600))
        run_mode(client, args.model, questions[:2], 2)  # warm-up: models loaded, caches primed
        walls: dict[str, list[float]] = {name: [] for name, _ in MODES}
        answers: dict[str, list[str]] = {}
        for _ in range(args.repeats):
            for name, clients in MODES:
                wall, got = run_mode(client, args.model, questions, clients)
                walls[name].append(wall)
                answers.setdefault(name, got)
                if got != answers[name]:
                    raise SystemExit(f"{name}: answers changed between repeats")
        same = all(a == answers["sequential"] for a in answers.values())
        base = statistics.median(walls["sequential"])
        print(f"{args.requests} requests to {args.model}, median of {args.repeats} "
              f"(same answers in every mode: {'yes' if same else 'NO'})\n")
        print("| clients | wall s | requests/s | vs sequential |")
        print("|---|---:|---:|---:|")
        for name, _ in MODES:
            wall = statistics.median(walls[name])
            print(f"| {name} | {wall:.2f} | {args.requests / wall:.2f} | {base / wall:.2f}x |")
        if not {"--policy", "--prm"} & set(args.serve_flags):
            threads = args.serve_flags[args.serve_flags.index("--threads") + 1] \
                if "--threads" in args.serve_flags else None
            wall, texts = batched_reference(args.model, questions, int(threads) if threads else None)
            print(f"| one batched Searcher.run, in-process (reference) | {wall:.2f} | "
                  f"{args.requests / wall:.2f} | {base / wall:.2f}x |")
            if texts != answers["sequential"]:
                print("note: the in-process answers differ from the server's")
        if not same:
            raise SystemExit("concurrent requests changed an answer")
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
