"""The ``serve`` command: the search behind an OpenAI-compatible HTTP API (``prmsearch.serve``)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from prmsearch.cli.backends import (
    add_backend_arguments,
    add_strategy_arguments,
    build_searcher,
    check_budget,
    set_threads,
)
from prmsearch.cli.errors import FlagError, csv_of, flag_context, int_at_least

EPILOG = """\
examples:
  prmsearch serve --port 8000
  curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "beam-16", "messages": [{"role": "user", "content": "Start with 7. Add 5. Add 2."}]}'

Model ids: '<strategy>-<budget>' (beam-16, best_of_n-4, ...; GET /v1/models lists them) and the
policy's own id for plain decoding. Search options go in the body (`extra_body` in the openai client):
"strategy", "budget", any strategy option ("width": 4), or a "prmsearch" object holding them."""


def policy_id(args: argparse.Namespace) -> str:
    """The model id of plain decoding: ``--policy-id``, else the policy's name or folder name."""
    if args.policy_id:
        return args.policy_id
    if not args.policy:
        return "arith"
    return Path(args.policy.rstrip("/")).name or args.policy


#: ``serve``'s default cap on one request's budget: a shared server must not let one request's
#: search (every path held in memory) starve the others or exhaust the machine.
SERVE_MAX_BUDGET = 256

#: ``serve``'s default bound on one backend call (samples or paths): requests take turns in
#: calls of this size instead of queueing behind a large request's whole round.
SERVE_MAX_BATCH = 256


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from prmsearch.serve import ServeConfig, serve
    except ImportError as exc:
        raise FlagError("serve", "", f"needs the serve extra ({exc.name} is missing): "
                        "pip install 'prmsearch[serve]'") from exc
    for budget in args.budgets:
        check_budget("--budgets", budget, args.max_budget)
    with flag_context("--port", args.port):
        config = ServeConfig(
            host=args.host,
            port=args.port,
            budgets=tuple(args.budgets),
            policy_id=policy_id(args),
            api_key_env=args.api_key_env,
            max_prompt_chars=args.max_prompt_chars,
            max_prompt_tokens=args.max_prompt_tokens,
            progress_every_s=args.progress_every,
            max_budget=args.max_budget,
            max_choices=args.max_n,
            max_in_flight=args.max_in_flight,
            max_queued=args.max_queued,
            request_timeout_s=args.request_timeout or None,
            drain_timeout_s=args.drain_timeout,
        )
    set_threads(args.threads)
    searcher = build_searcher(args)
    searcher.config = dataclasses.replace(searcher.config, schedule=args.schedule,
                                          max_batch=args.max_batch or None)
    keyed = "with a bearer key" if os.environ.get(config.api_key_env) else "without a key"
    budget = getattr(searcher.strategy.config, "n", "")
    print(f"prmsearch serve: http://{config.host}:{config.port}/v1 ({keyed}; strategy "
          f"{searcher.strategy.name}-{budget})", file=sys.stderr, flush=True)
    serve(searcher, config, log_level=args.log_level)  # until SIGTERM or Ctrl-C: drains, then closes
    print("prmsearch serve: stopped", file=sys.stderr, flush=True)
    return 0


def _add_serve(sub) -> None:
    serve = sub.add_parser(
        "serve", help="serve search behind an OpenAI-compatible API",
        description="Serve PRM-guided search behind OpenAI's /v1/chat/completions and /v1/completions; "
        "concurrent requests share the backends' batches.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_strategy_arguments(serve, max_budget=SERVE_MAX_BUDGET)
    add_backend_arguments(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    serve.add_argument(
        "--budgets", type=csv_of(int_at_least(1), "budgets", "4,16,64"), default=(4, 16, 64),
        metavar="N,N,...",
        help="budgets listed as model ids for every strategy (default: 4,16,64)",
    )
    serve.add_argument("--policy-id", default=None,
                       help="model id of plain decoding (default: the policy's name)")
    serve.add_argument(
        "--api-key-env", default="PRMSEARCH_API_KEY", metavar="VAR",
        help="environment variable with the bearer key clients must send (default: PRMSEARCH_API_KEY; "
        "unset: no key)",
    )
    serve.add_argument("--max-prompt-chars", type=int_at_least(1), default=32_000,
                       help="longest question accepted, in characters (default: 32000)")
    serve.add_argument("--max-prompt-tokens", type=int_at_least(1), default=4096, metavar="N",
                       help="most tokens in a question's prompt, counted with the policy's tokenizer where "
                       "it has one (default: 4096)")
    serve.add_argument("--max-n", type=int_at_least(1), default=64,
                       help="most choices (the request's n) one request may ask for (default: 64)")
    serve.add_argument("--max-in-flight", type=int_at_least(1), default=64, metavar="N",
                       help="most search requests answered at once; more wait their turn (default: 64)")
    serve.add_argument("--max-queued", type=int_at_least(0), default=256, metavar="N",
                       help="most requests waiting for their turn; one more gets 429 with Retry-After "
                       "(default: 256; 0: none wait)")
    serve.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                       help="a request's deadline in seconds: past it, 504 and its work dropped (default: "
                       "600; 0: none)")
    serve.add_argument("--drain-timeout", type=float, default=30.0, metavar="S",
                       help="on SIGTERM, seconds requests in flight get to finish before the server closes "
                       "their connections and exits (default: 30)")
    serve.add_argument("--max-batch", type=int_at_least(0), default=SERVE_MAX_BATCH, metavar="N",
                       help="most samples in one policy call and paths in one PRM call; larger rounds go in "
                       "pieces and requests take turns, so a small request never waits for a large one's "
                       f"whole round (default: {SERVE_MAX_BATCH}; 0: no bound)")
    serve.add_argument("--progress-every", type=float, default=1.0, metavar="S",
                       help="seconds between progress comments in a streamed answer (default: 1)")
    serve.add_argument("--schedule", choices=["auto", "rounds", "async"], default="auto",
                       help="driver schedule (default: auto)")
    serve.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"],
                       default="info", help="uvicorn's log level (default: info)")
    serve.set_defaults(func=cmd_serve)
