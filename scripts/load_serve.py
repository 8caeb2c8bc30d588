"""Load on ``prmsearch serve``: latency under many concurrent clients, and a small request behind a
large one (head-of-line), on one real server over loopback.

    python scripts/load_serve.py [--clients 200] [--requests 200] [--model beam-4]
        [--large-budget 20000] [--json OUT] [-- SERVE FLAGS]

1. **Load.** ``--clients`` client coroutines send ``--requests`` chat requests (the arithmetic
   test questions, round-robin) in a bounded loop; a 429 is honoured (its ``Retry-After``, then
   again, at most 20 times). Prints p50/p90/p99/max latency (first send to last byte), the 429s
   met, errors and ``/health`` after.
2. **Head-of-line.** With one ``best_of_n`` request of ``--large-budget`` samples in flight, a
   ``beam-16`` request is sent; its latency is printed beside the same request alone. Run it
   with ``-- --max-batch 0`` for the unbounded server.

The serve flags ``--max-budget`` is raised to ``--large-budget`` unless given. Exits 1 when a
request failed (anything but a 200 after the retries).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import free_port, start_server, stop_server

from prmsearch.arith.problems import load_split

MOST_RETRIES = 20


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q / 100 * len(ranked) + 0.5) - 1))]


def chat(model: str, question: str, **extra: object) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": question}], **extra}).encode()


async def ask(client: httpx.AsyncClient, body: bytes) -> tuple[float, int, int]:
    """(latency s, final status, 429s met) of one request, honouring ``Retry-After``."""
    start, limited = time.perf_counter(), 0
    for _ in range(MOST_RETRIES + 1):
        reply = await client.post("/chat/completions", content=body,
                                  headers={"Content-Type": "application/json"})
        if reply.status_code != 429:
            return time.perf_counter() - start, reply.status_code, limited
        limited += 1
        await asyncio.sleep(float(reply.headers.get("Retry-After", "1")))
    return time.perf_counter() - start, 429, limited


async def load(base: str, model: str, questions: list[str], clients: int, requests: int) -> dict:
    """Send ``requests`` requests from ``clients`` coroutines; latency figures and errors."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for k in range(requests):
        queue.put_nowait(chat(model, questions[k % len(questions)]))
    outcomes: list[tuple[float, int, int]] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        async def worker() -> None:
            while not queue.empty():
                outcomes.append(await ask(client, queue.get_nowait()))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - start
        health = (await client.get(base.removesuffix("/v1") + "/health")).json()
    latencies = [o[0] for o in outcomes]
    return {
        "requests": requests, "clients": clients, "model": model, "wall_s": wall,
        "ok": sum(o[1] == 200 for o in outcomes), "errors": sum(o[1] != 200 for o in outcomes),
        "rate_limited": sum(o[2] for o in outcomes),
        "p50_s": percentile(latencies, 50), "p90_s": percentile(latencies, 90),
        "p99_s": percentile(latencies, 99), "max_s": max(latencies), "health_after": health,
    }


async def head_of_line(base: str, question: str, large_budget: int) -> dict:
    """A ``beam-16`` request alone, then behind a ``best_of_n`` request of ``large_budget``."""
    async with httpx.AsyncClient(base_url=base, timeout=900) as client:
        small = chat("beam-16", question)
        await ask(client, small)  # warm-up
        alone, _, _ = await ask(client, small)
        large = asyncio.create_task(ask(client, chat("best_of_n-4", question, budget=large_budget)))
        await asyncio.sleep(1.0)  # the large request's first round is under way
        behind, status, _ = await ask(client, small)
        large_s, large_status, _ = await large
    return {"small_alone_s": alone, "small_behind_large_s": behind, "small_status": status,
            "large_budget": large_budget, "large_s": large_s, "large_status": large_status}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients (default: 200)")
    parser.add_argument("--requests", type=int, default=200, help="requests in all (default: 200)")
    parser.add_argument("--model", default="beam-4", help="model id of the load (default: beam-4)")
    parser.add_argument("--large-budget", type=int, default=20000,
                        help="budget of the large request in the head-of-line case (default: 20000; 0: skip)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("serve_flags", nargs="*", help="flags for prmsearch serve, after --")
    args = parser.parse_args()
    flags = list(args.serve_flags)
    if args.large_budget and "--max-budget" not in flags:
        flags += ["--max-budget", str(max(args.large_budget, 256))]
    questions = [p.question for p in load_split("test", 64)]
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    server = start_server(port, flags)
    try:
        figures = {"serve_flags": flags,
                   "load": asyncio.run(load(base, args.model, questions, args.clients, args.requests))}
        if args.large_budget:
            figures["head_of_line"] = asyncio.run(head_of_line(base, questions[0], args.large_budget))
    finally:
        stop_server(server)
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    failed = figures["load"]["errors"] or figures.get("head_of_line", {}).get("small_status", 200) != 200
    return 1 if failed else 0


def report(figures: dict) -> None:
    got = figures["load"]
    print(f"serve flags: {' '.join(figures['serve_flags']) or '(defaults)'}\n")
    print(f"{got['requests']} requests to {got['model']} from {got['clients']} concurrent clients, "
          f"{got['wall_s']:.1f} s in all\n")
    print("| ok | errors | 429s honoured | p50 s | p90 s | p99 s | max s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {got['ok']} | {got['errors']} | {got['rate_limited']} | {got['p50_s']:.2f} | "
          f"{got['p90_s']:.2f} | {got['p99_s']:.2f} | {got['max_s']:.2f} |")
    health = got["health_after"]
    print(f"\n/health after: status {health.get('status')}, in flight {health.get('in_flight')}, "
          f"pending {health.get('pending')}, served {health.get('served')}, failed {health.get('failed')}")
    hol = figures.get("head_of_line")
    if hol:
        print(f"\nhead-of-line: beam-16 alone {hol['small_alone_s']:.2f} s; behind a best_of_n request "
              f"of budget {hol['large_budget']} {hol['small_behind_large_s']:.2f} s "
              f"(x{hol['small_behind_large_s'] / max(hol['small_alone_s'], 1e-9):.1f}); the large "
              f"request took {hol['large_s']:.1f} s (HTTP {hol['large_status']})")


if __name__ == "__main__":
    sys.exit(main())
