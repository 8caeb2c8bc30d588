"""The flags that choose the backends, sampling and strategy, and what builds them from the flags."""

from __future__ import annotations

import argparse
import json
from typing import Any

from prmsearch.api import MissingModelError, Searcher, reads_no_scores, resolve_policy, resolve_scorer
from prmsearch.cli.errors import (
    _BAD_VALUE,
    FlagError,
    _unescape,
    cli_text,
    config_from_flags,
    flag_context,
    int_at_least,
    option_type,
)
from prmsearch.engines.backend_pair import load_together, share_one_gpu, start_together
from prmsearch.policies.base import POLICIES, SamplingParams
from prmsearch.search.protocol import BoundStrategy, as_strategy, strategy_spec


def add_strategy_arguments(parser: argparse.ArgumentParser, max_budget: int | None = None) -> None:
    """Flags choosing one strategy and its options (``solve``, ``serve``), with the budget cap
    (``max_budget``: its default, else :data:`DEFAULT_MAX_BUDGET`)."""
    parser.add_argument("--strategy", default="beam", help="strategy name (see `prmsearch strategies`)")
    parser.add_argument(
        "--n", type=int_at_least(1), default=None,
        help="compute budget in generations (default: the strategy's own, 16; greedy: 1)",
    )
    parser.add_argument(
        "--option",
        "-o",
        action="append",
        type=option_type("KEY=VALUE (e.g. width=4)"),
        default=[],
        metavar="KEY=VALUE",
        help="strategy option, e.g. -o width=4 -o aggregation=min (repeatable)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="run seed; each problem's seed derives from it and the question"
    )
    add_max_budget_argument(parser, max_budget or DEFAULT_MAX_BUDGET)


#: The largest budget a command runs unless ``--max-budget`` raises it: every generation's path is
#: held in memory, so a typo of a few zeros must be refused, not grow the process until the kernel
#: kills it.
DEFAULT_MAX_BUDGET = 65536


def add_max_budget_argument(parser: argparse.ArgumentParser, default: int = DEFAULT_MAX_BUDGET) -> None:
    """``--max-budget``: the cap on ``--n``/``--budgets`` (and a strategy's ``-o n=``)."""
    parser.add_argument(
        "--max-budget", type=int_at_least(1), default=default, metavar="N",
        help=f"refuse budgets above N (default: {default}); raise it for a deliberately huge search",
    )


def check_budget(flag: str, budget: object, cap: int) -> None:
    """Refuse a budget above ``cap`` naming ``flag`` and the way to raise it."""
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > cap:
        raise FlagError(flag, budget, f"is above --max-budget {cap} (every path of a search is held in "
                        "memory); lower it, or raise --max-budget if you mean it")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags choosing the backends, sampling and search limits (``solve`` and ``bench``)."""
    parser.add_argument(
        "--policy", default=None, help="policy backend name or model path/Hub id (default: embedded)"
    )
    parser.add_argument("--policy-backend", default=None, help="backend for a model path (default: hf)")
    parser.add_argument(
        "--prm", default=None, help="scorer name or PRM model path/Hub id (default: embedded)"
    )
    parser.add_argument("--prm-family", default=None,
                        help="PRM family of a model path, e.g. qwen-prm, or verifier (any instruct model)")
    add_prm_backend_argument(parser)
    parser.add_argument(
        "--prompt-format", default=None, metavar="NAME",
        help="the policy's prompt format: auto (default: the folder's own, else step-by-step for chat "
        "models), step-by-step, chat, plain, qwen25-math-cot, llama3-math",
    )
    parser.add_argument(
        "--policy-arg", action="append", type=option_type("KEY=VALUE (e.g. dtype=float32)"), default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of the policy backend, e.g. dtype=bfloat16, max_model_len=4096, "
        "gpu_memory_utilization=0.5 (repeatable)",
    )
    parser.add_argument(
        "--prm-arg", action="append", type=option_type("KEY=VALUE (e.g. dtype=float32)"), default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of the scorer, e.g. aggregation=last (policy-confidence), dtype=bfloat16, "
        "max_batch_tokens=8192 (repeatable)",
    )
    add_prm_server_arguments(parser)
    parser.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default: 0.8)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (default: 1.0)")
    parser.add_argument(
        "--max-step-tokens", type=int_at_least(1), default=256,
        help="most tokens one step may generate (default: 256)",
    )
    parser.add_argument("--delimiter", default="\n\n", help="step delimiter (default: blank line)")
    parser.add_argument(
        "--max-depth", type=int_at_least(1), default=32, help="most steps in one solution (default: 32)"
    )
    parser.add_argument(
        "--threads", type=int_at_least(1), default=None,
        help="torch CPU threads for in-process models (default: torch's own; 1 is often fastest for "
        "tiny models on a busy machine)",
    )


def add_prm_backend_argument(parser: argparse.ArgumentParser) -> None:
    """``--prm-backend``: where a PRM model path runs (transformers by default)."""
    parser.add_argument(
        "--prm-backend", default=None, metavar="NAME",
        help="backend for a PRM model path: hf (default) or vllm (qwen-prm on the pooling runner; "
        "verifier, math-shepherd, rlhflow as the label tokens' logprobs: 4x hf's speed on a bf16 CPU)",
    )


def add_prm_server_arguments(parser: argparse.ArgumentParser) -> None:
    """``--prm-url`` and ``--prm-tokenizer``: the PRM on a vLLM pooling server (``solve``, ``serve``,
    ``bench`` in this process)."""
    parser.add_argument(
        "--prm-url", default=None, metavar="URL",
        help="score on a vLLM pooling server at URL (e.g. http://host:8001/v1, started with --runner "
        "pooling); --prm then names the served PRM (default: the embedded PRM)",
    )
    parser.add_argument(
        "--prm-tokenizer", default=None, metavar="PATH",
        help="with --prm-url: the PRM's tokenizer folder or Hub id (default: --prm)",
    )


#: SamplingParams fields and the flags that set them.
_SAMPLING_FLAGS = {
    "temperature": "--temperature",
    "top_p": "--top-p",
    "max_new_tokens": "--max-step-tokens",
    "delimiter": "--delimiter",
}


def sampling_from_flags(args: argparse.Namespace) -> SamplingParams:
    """The sampling parameters of the flags; a bad value names its flag."""
    values = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_step_tokens,
        "delimiter": _unescape(args.delimiter),
    }
    return config_from_flags(SamplingParams, values, _SAMPLING_FLAGS)


def policy_args_from_flags(args: argparse.Namespace) -> dict[str, object]:
    """``--policy-arg`` pairs, with ``--prompt-format`` as the ``prompt_format`` argument."""
    values = dict(getattr(args, "policy_arg", None) or [])
    if getattr(args, "prompt_format", None) is not None:
        values["prompt_format"] = args.prompt_format
    return values


def load_policy(name: str | None, backend: str | None, flag: str = "--policy",
                kwargs: dict[str, object] | None = None):
    """The policy of ``--policy`` (and ``--policy-backend``, with ``kwargs`` from ``--policy-arg``
    and ``--prompt-format``), or of another flag pair such as ``--judge``/``--judge-backend``; a
    failure names the flag."""
    kwargs = dict(kwargs or {})
    backend_flag = f"{flag}-backend"
    if backend is not None:
        if not name:
            raise FlagError(backend_flag, backend, f"needs {flag} MODEL (a model folder or Hub id)")
        with flag_context(backend_flag, backend):
            POLICIES.entry(backend)  # an unknown backend lists the known ones
    try:
        return resolve_policy(name, backend, **kwargs)
    except MissingModelError as exc:
        fix = f"pass {flag} MODEL {backend_flag} {name}"
        raise FlagError(flag, name, f"policy backend {name!r} needs a model: {fix}") from exc
    except ValueError as exc:
        raise FlagError(flag, name, cli_text(exc)) from exc
    except _BAD_VALUE as exc:
        fix = f"give a registered policy ({', '.join(POLICIES.names())}), or a model folder or Hub id"
        raise FlagError(flag, name, f"could not load it ({cli_text(exc)}); {fix}") from exc


def load_scorer(name: str | None, family: str | None, url: str | None = None,
                tokenizer: str | None = None, kwargs: dict[str, Any] | None = None,
                backend: str | None = None):
    """The PRM scorer of ``--prm`` (and ``--prm-family``, ``--prm-backend``, ``--prm-url``,
    ``--prm-tokenizer``, with ``kwargs`` from ``--prm-arg``); a failure names the flag."""
    kwargs = dict(kwargs or {})
    from prmsearch.scorers.base import SCORERS

    if backend not in (None, "hf"):
        return _load_backend_scorer(name, family, url, backend, kwargs)
    if url is not None:
        return load_server_scorer(name, family, url, tokenizer)
    if tokenizer is not None:
        raise FlagError("--prm-tokenizer", tokenizer, "needs --prm-url URL (a PRM on a vLLM pooling server)")
    if name == SERVER_SCORER:
        raise FlagError("--prm", name, "needs --prm-url URL, the vLLM pooling server that runs the PRM")
    names = ", ".join(SCORERS.names())
    if family is not None:
        if not name:
            raise FlagError("--prm-family", family, "needs --prm MODEL (a PRM model folder or Hub id)")
        with flag_context("--prm-family", family):
            SCORERS.entry(family)  # an unknown family lists the known ones
    elif name is not None and name not in SCORERS:
        fix = "to load it as a PRM model also give --prm-family FAMILY (one of those names)"
        raise FlagError("--prm", name, f"not a registered scorer ({names}); {fix}")
    try:
        return resolve_scorer(name, family, **kwargs)
    except MissingModelError as exc:
        fix = f"pass --prm MODEL --prm-family {name}"
        raise FlagError("--prm", name, f"scorer {name!r} needs a model: {fix}") from exc
    except ValueError as exc:
        raise FlagError("--prm", name, cli_text(exc)) from exc
    except _BAD_VALUE as exc:
        fix = "give a registered scorer, or a PRM model folder or Hub id with --prm-family"
        raise FlagError("--prm", name, f"could not load it ({cli_text(exc)}); {fix}") from exc


def check_prm_backend(backend: str, name: str | None, family: str | None, url: str | None) -> None:
    """``--prm-backend`` with the flags it needs, checked before any model loads."""
    from prmsearch.scorers import backend_scorer

    if url is not None:
        raise FlagError("--prm-backend", backend, "drop it with --prm-url (the server is the backend)")
    if backend == "hf":
        return
    if not name or not family:
        raise FlagError("--prm-backend", backend, "needs --prm MODEL and --prm-family FAMILY (e.g. "
                        "--prm DIR --prm-family verifier --prm-backend vllm)")
    with flag_context("--prm-backend", backend):
        backend_scorer(backend, family)  # an unknown backend or family names the known ones


def _load_backend_scorer(name: str | None, family: str | None, url: str | None, backend: str,
                         kwargs: dict[str, object]):
    """``--prm MODEL --prm-family F --prm-backend B``: the family's scorer on backend ``B``."""
    check_prm_backend(backend, name, family, url)
    try:
        return resolve_scorer(name, family, backend=backend, **kwargs)
    except ValueError as exc:
        raise FlagError("--prm", name, cli_text(exc)) from exc
    except _BAD_VALUE as exc:
        raise FlagError("--prm", name, f"could not load it on {backend} ({cli_text(exc)})") from exc


#: The registered scorer that scores on a vLLM pooling server (``--prm-url``).
SERVER_SCORER = "vllm-server"


def load_server_scorer(name: str | None, family: str | None, url: str, tokenizer: str | None):
    """The PRM on the vLLM pooling server at ``--prm-url``. ``--prm`` names the served model (its
    folder or Hub id, where the tokenizer is read too unless ``--prm-tokenizer`` says otherwise);
    no ``--prm`` (or ``arith``) is the embedded PRM on that server, read like the in-process one."""
    from prmsearch.scorers import SCORERS, make_scorer

    if family not in (None, "qwen-prm"):
        raise FlagError("--prm-family", family, "a vLLM pooling server runs the qwen-prm family only; "
                        "drop --prm-url to run this family in process")
    embedded = name in (None, "arith")
    if not embedded and name != SERVER_SCORER and name in SCORERS:
        raise FlagError("--prm", name, f"is an in-process scorer; with --prm-url give the served PRM "
                        f"(its model folder or Hub id), or --prm {SERVER_SCORER} --prm-tokenizer PATH")
    if embedded and tokenizer is None:
        from prmsearch.arith.defaults import default_prm_path

        tokenizer = str(default_prm_path())
    if name == SERVER_SCORER and tokenizer is None:
        raise FlagError("--prm", name, "needs --prm-tokenizer PATH (the served PRM's tokenizer folder "
                        "or Hub id), or give the served PRM itself as --prm MODEL")
    model = None if embedded or name == SERVER_SCORER else name
    try:
        scorer = make_scorer(SERVER_SCORER, base_url=url, model=model, tokenizer=tokenizer)
    except ValueError as exc:
        flag, value = ("--prm-url", url) if "base_url" in str(exc) else ("--prm", name)
        raise FlagError(flag, value, cli_text(exc)) from exc
    if embedded:
        from prmsearch.arith.defaults import CanonicalQuestions

        return CanonicalQuestions(scorer)  # the questions the shipped PRM reads, as `arith` does
    return scorer


def _option_text(options: dict[str, object]) -> str:
    return " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in options.items())


def strategy_from_flags(args: argparse.Namespace) -> BoundStrategy:
    """``--strategy`` with ``--n`` and ``-o`` options, bound; a bad value names its flag."""
    with flag_context("--strategy", args.strategy):
        strategy_spec(args.strategy)
    options = dict(args.option)
    # --n is a budget, read by the strategy's budget rule as in bench and serve (beam: width
    # gcd(n, 4)); -o n=... sets the config's n as it is; neither: the strategy's default (16)
    budget = args.n if "n" not in options else None
    cap = getattr(args, "max_budget", DEFAULT_MAX_BUDGET)
    check_budget("--n", args.n, cap)
    check_budget("-o/--option", options.get("n"), cap)  # -o values arrive JSON-parsed
    flag = "-o/--option" if args.option else "--n"
    value = _option_text(dict(args.option)) if args.option else args.n
    with flag_context(flag, value, "change --n, or set the option with -o KEY=VALUE"):
        spec = strategy_spec(args.strategy)
        options = {key: spec.read_option(key, v) for key, v in options.items()}  # a plan file is read
        if budget is None:
            return as_strategy(args.strategy, options)
        return strategy_spec(args.strategy).at_budget(budget, **options)


def build_searcher(args: argparse.Namespace) -> Searcher:
    """A Searcher from parsed search flags (cheap checks first, then the models load)."""
    sampling = sampling_from_flags(args)
    strategy = strategy_from_flags(args)
    prm_url = getattr(args, "prm_url", None)

    prm_backend = getattr(args, "prm_backend", None)
    policy_args, prm_args = share_one_gpu(args.policy_backend, prm_backend, args.policy, args.prm,
                                          policy_args_from_flags(args), dict(args.prm_arg))

    def open_policy():
        return load_policy(args.policy, args.policy_backend, kwargs=policy_args)

    def open_scorer():
        return load_scorer(args.prm, args.prm_family, prm_url, getattr(args, "prm_tokenizer", None),
                           kwargs=prm_args, backend=prm_backend)

    if reads_no_scores([strategy], args.prm, args.prm_family, prm_url):
        from prmsearch.scorers.base import NoScorer

        policy, scorer = open_policy(), NoScorer()  # greedy, self-consistency: no PRM to load
    else:
        together = start_together(args.policy_backend, prm_backend)
        policy, scorer = load_together(open_policy, open_scorer, concurrent=together)
    return Searcher(policy, scorer, strategy, sampling=sampling, max_depth=args.max_depth, seed=args.seed)


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads (only when torch is installed; nothing else changes)."""
    if threads is None:
        return
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)
