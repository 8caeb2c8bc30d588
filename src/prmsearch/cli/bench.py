"""The ``bench`` command: its flags, the sweep config they (or a recipe) make, and the sweep's run.

Why one module over 500 lines: every line is one subcommand's flags and their checks, read
together when a flag changes; the shared parts (errors, backends) already live beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prmsearch.api import reads_no_scores
from prmsearch.benchmarks.sweeps.config import SweepConfig
from prmsearch.cli.backends import (
    _option_text,
    add_backend_arguments,
    add_max_budget_argument,
    check_budget,
    check_prm_backend,
    load_policy,
    load_scorer,
    policy_args_from_flags,
    sampling_from_flags,
    set_threads,
)
from prmsearch.cli.errors import (
    FlagError,
    _one_line,
    _unescape,
    cli_text,
    csv_of,
    flag_context,
    int_at_least,
    option_type,
)
from prmsearch.engines.backend_pair import load_together, share_one_gpu, start_together
from prmsearch.scorers.base import NoScorer
from prmsearch.search.protocol import as_strategy, strategy_spec


def bench_options(pairs: Sequence[tuple[str, object]], strategies: Sequence[str]) -> dict[str, dict]:
    """``-o STRATEGY.KEY=VALUE`` pairs as per-strategy option dicts; each names a swept strategy."""
    options: dict[str, dict] = {}
    for key, value in pairs:
        strategy, dot, name = key.partition(".")
        shown = f"{key}={value}"
        if not dot or not strategy or not name:
            fix = "bench options look like STRATEGY.KEY=VALUE, e.g. -o beam.width=4"
            raise FlagError("-o/--option", shown, fix)
        if strategy not in strategies:
            fix = f"add {strategy} to --strategies ({','.join(strategies)}) or drop the option"
            raise FlagError("-o/--option", shown, f"strategy {strategy!r} is not in the sweep; {fix}")
        with flag_context("-o/--option", shown, "give a plan file written by `prmsearch plan fit`"):
            value = strategy_spec(strategy).read_option(name, value)  # a plan file is read here
        options.setdefault(strategy, {})[name] = value
    return options


def dataset_from_flags(name: str, path: str | None) -> tuple[str, str | None]:
    """``--dataset`` and ``--dataset-path`` as (dataset name, path): a registered name as is, a
    ``.jsonl`` file as the generic ``jsonl`` dataset with that path."""
    from prmsearch.benchmarks.datasets import dataset_names, dataset_spec

    if name in dataset_names():
        return name, path
    if name.endswith(".jsonl") or Path(name).expanduser().is_file():
        if path is not None:
            fix = "give the file once: --dataset FILE.jsonl, or --dataset jsonl --dataset-path FILE"
            raise FlagError("--dataset", name, fix)
        if not Path(name).expanduser().is_file():
            fix = f"give an existing .jsonl file or a dataset name ({', '.join(dataset_names())})"
            raise FlagError("--dataset", name, f"no such file; {fix}")
        return "jsonl", name
    with flag_context("--dataset", name):
        dataset_spec(name)  # an unknown name lists the known ones
    return name, path


def check_bench_flags(args: argparse.Namespace) -> None:
    """Flag combinations that cannot work, refused before anything loads."""
    if args.retry_errors and not args.resume:
        raise FlagError(
            "--retry-errors", None, "needs --resume --out FOLDER (it re-runs that run's errored rows)"
        )
    if args.resume and not args.out:
        raise FlagError("--resume", None, "needs --out FOLDER, the folder of the run to continue")
    if args.set_aside_damaged and not args.resume:
        raise FlagError("--set-aside-damaged", None, "needs --resume --out FOLDER (it repairs that run's "
                        "results file)")
    check_ray_flags(args)
    if args.prm_url and (args.ray or args.ray_address):
        fix = ("scores from this process only; with Ray name the PRM server in a recipe "
               "(prm.backend: vllm-server, args.base_url), or drop --ray")
        raise FlagError("--prm-url", args.prm_url, fix)
    if args.prm_url and args.recipe:
        fix = "a recipe names its own PRM: set prm.backend: vllm-server and args.base_url in it"
        raise FlagError("--prm-url", args.prm_url, fix)
    if args.prm_tokenizer and not args.prm_url:
        fix = "needs --prm-url URL (a PRM on a vLLM pooling server)"
        raise FlagError("--prm-tokenizer", args.prm_tokenizer, fix)
    if getattr(args, "save_trees", False) and (args.ray or args.ray_address):
        fix = "keeps the trees of searches run in this process; drop --ray/--ray-address"
        raise FlagError("--save-trees", None, fix)
    if args.policy_backend is not None and not args.policy:
        raise FlagError(
            "--policy-backend", args.policy_backend, "needs --policy MODEL (a model folder or Hub id)"
        )
    if args.prm_family is not None and not args.prm:
        raise FlagError("--prm-family", args.prm_family, "needs --prm MODEL (a PRM model folder or Hub id)")
    if args.prm_backend is not None and not args.recipe:
        check_prm_backend(args.prm_backend, args.prm, args.prm_family, args.prm_url)


#: Sweep flags of ``bench`` whose parser default is None, so that a recipe can tell which ones the
#: user gave; without a recipe these are their values.
BENCH_SWEEP_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(SweepConfig)
    if f.name in ("dataset", "budgets", "seeds", "chunk", "temperature", "top_p", "max_step_tokens",
                  "delimiter", "max_depth")
}

#: Flags a recipe takes over from the command line (the recipe's value is replaced), by SweepConfig field.
_RECIPE_OVERRIDES = {
    "budgets": "--budgets",
    "seeds": "--seeds",
    "chunk": "--chunk",
    "max_depth": "--max-depth",
    "split": "--split",
    "shuffle_seed": "--shuffle-seed",
    "limit": "--limit",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "max_step_tokens": "--max-step-tokens",
    "delimiter": "--delimiter",
    "share_bon_samples": "--share-bon-samples",
    "question_field": "--question-field",
    "answer_field": "--answer-field",
    "id_field": "--id-field",
}

#: Flags that contradict a recipe: it names the models and the dataset itself.
_RECIPE_CONFLICTS = {
    "policy": "--policy",
    "policy_backend": "--policy-backend",
    "prm": "--prm",
    "prm_family": "--prm-family",
    "prm_backend": "--prm-backend",
    "dataset": "--dataset",
    "dataset_path": "--dataset-path",
}


def cmd_bench(args: argparse.Namespace) -> int:
    check_bench_flags(args)
    set_threads(args.threads)
    if args.recipe:
        return _bench_recipe(args)
    for name, default in BENCH_SWEEP_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)
    config = bench_config(args)

    def backends():
        policy_args, prm_args = share_one_gpu(config.policy_backend, config.prm_backend, config.policy,
                                              config.prm, config.policy_args, config.prm_args)

        def open_policy():
            return load_policy(config.policy, config.policy_backend, kwargs=policy_args)

        def open_scorer():
            return load_scorer(config.prm, config.prm_family, args.prm_url, args.prm_tokenizer,
                               kwargs=prm_args, backend=config.prm_backend)

        strategies = [as_strategy(name, {}) for name in config.strategies]
        if reads_no_scores(strategies, config.prm, config.prm_family, args.prm_url):
            return open_policy(), NoScorer()  # greedy, self-consistency: no PRM to load
        together = start_together(config.policy_backend, config.prm_backend)
        return load_together(open_policy, open_scorer, concurrent=together)

    return _run_bench(args, config, backends)


def bench_config(args: argparse.Namespace):
    """The SweepConfig of the bench flags; a bad value names its flag."""
    from prmsearch.benchmarks.sweeps.config import DEFAULT_STRATEGIES

    strategies = args.strategies or DEFAULT_STRATEGIES
    for name in strategies:
        with flag_context("--strategies", name):
            strategy_spec(name)  # an unknown name lists the known ones
    options = bench_options(args.option, strategies)
    dataset, dataset_path = dataset_from_flags(args.dataset, args.dataset_path)
    sampling = sampling_from_flags(args)
    flag, value = ("-o/--option", _option_text(dict(args.option))) if options else ("--budgets", args.budgets)
    with flag_context(flag, value, "change the option with -o STRATEGY.KEY=VALUE, or --budgets"):
        return SweepConfig(
            dataset=dataset,
            dataset_path=dataset_path,
            split=args.split,
            limit=args.limit,
            shuffle_seed=args.shuffle_seed,
            strategies=strategies,
            budgets=args.budgets,
            seeds=args.seeds,
            policy=args.policy,
            policy_backend=args.policy_backend,
            prm=args.prm,
            prm_family=args.prm_family,
            prm_backend=args.prm_backend,
            policy_args=policy_args_from_flags(args),
            prm_args=dict(args.prm_arg),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_step_tokens=sampling.max_new_tokens,
            delimiter=sampling.delimiter,
            max_depth=args.max_depth,
            options=options,
            chunk=args.chunk,
            share_bon_samples=args.share_bon_samples is not False,
            question_field=args.question_field,
            answer_field=args.answer_field,
            id_field=args.id_field,
            max_consecutive_failures=args.max_consecutive_failures,
            overlap=args.overlap,
            schedule=args.schedule,
            save_trees=getattr(args, "save_trees", False),
            policy_logprobs=getattr(args, "policy_logprobs", None) or "auto",
        )


def _bench_recipe(args: argparse.Namespace) -> int:
    """``bench --recipe FILE``: the sweep and backends come from the YAML recipe; sweep flags given
    on the command line replace the recipe's values, and flags that would change its models or
    dataset are refused (never silently ignored)."""

    from prmsearch.benchmarks.sweeps.recipes import load_recipe

    with flag_context("--recipe", args.recipe, "give an existing YAML recipe, e.g. one of recipes/*.yaml"):
        recipe = load_recipe(args.recipe)
    config = dataclasses.replace(recipe.sweep, **recipe_overrides(args, recipe.sweep))

    def backends():
        with flag_context("--recipe", args.recipe, "fix the recipe's policy or prm section"):
            return recipe.build_backends()

    return _run_bench(args, config, backends, ray_backends=recipe.build_backends)


def recipe_overrides(args: argparse.Namespace, sweep) -> dict[str, Any]:
    """The SweepConfig fields that ``bench --recipe`` flags replace, validated flag by flag."""

    for name, flag in _RECIPE_CONFLICTS.items():
        value = getattr(args, name, None)
        if value is not None:
            fix = f"the recipe {args.recipe} names its models and dataset; edit the recipe, or drop --recipe"
            raise FlagError(flag, value, fix)
    for flag, value in (("--prompt-format", args.prompt_format), ("--policy-arg", args.policy_arg),
                        ("--prm-arg", args.prm_arg)):
        if value:
            fix = f"the recipe {args.recipe} gives its backends' arguments (policy.args, prm.args); edit it"
            raise FlagError(flag, _option_text(dict(value)) if isinstance(value, list) else value, fix)
    overrides: dict[str, Any] = {
        "max_consecutive_failures": args.max_consecutive_failures,
        "overlap": args.overlap,
        "schedule": args.schedule,
    }
    if getattr(args, "save_trees", False):  # the flag turns it on; a recipe may also set it
        overrides["save_trees"] = True
    if getattr(args, "policy_logprobs", None) is not None:
        overrides["policy_logprobs"] = args.policy_logprobs
    for name, flag in _RECIPE_OVERRIDES.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name == "delimiter":
            value = _unescape(value)
        with flag_context(flag, value):
            dataclasses.replace(sweep, **{name: value})  # a bad value names its flag
        overrides[name] = value
    strategies = tuple(args.strategies) if args.strategies else sweep.strategies
    if args.strategies:
        for name in strategies:
            with flag_context("--strategies", name):
                strategy_spec(name)
    options = {name: dict(opts) for name, opts in sweep.options.items() if name in strategies}
    for name, extra in bench_options(args.option, strategies).items():
        options.setdefault(name, {}).update(extra)
    if args.strategies or args.option:
        shown = ("-o/--option", _option_text(dict(args.option))) if args.option else \
            ("--strategies", ",".join(strategies))
        with flag_context(*shown, "change the option with -o STRATEGY.KEY=VALUE"):
            dataclasses.replace(sweep, strategies=strategies, options=options)
        overrides.update(strategies=strategies, options=options)
    return overrides


def load_problems(config, flag: str, value: str, skip_bad_rows: bool) -> list:
    """The sweep's problems; a dataset that cannot be read names ``flag`` and the fix flags."""
    from prmsearch.benchmarks.datasets import load_dataset
    from prmsearch.benchmarks.sweeps.sweep import sweep_problems

    with flag_context(flag, value):
        dataset = load_dataset(
            config.dataset,
            config.dataset_path,
            split=config.split,
            limit=config.limit,
            shuffle_seed=config.shuffle_seed,
            question_field=config.question_field,
            answer_field=config.answer_field,
            id_field=config.id_field,
            on_error="skip" if skip_bad_rows else "raise",
        )
    if dataset.errors:
        print(
            f"prmsearch bench: skipped {len(dataset.errors)} bad dataset rows (--skip-bad-rows); the first: "
            f"{cli_text(str(dataset.errors[0]))}",
            file=sys.stderr,
        )
    return sweep_problems(dataset)


def in_workers(args: argparse.Namespace, build):
    """``build`` wrapped so that a Ray actor first imports the run's plugins (``--plugin`` and
    ``$PRMSEARCH_PLUGINS``), whose registrations it needs to build the backends; None stays None."""
    if build is None:
        return None
    import functools

    from prmsearch.cli.plugins import build_with_plugins, plugin_names

    return functools.partial(build_with_plugins, plugin_names(getattr(args, "plugin", ()) or ()), build)


def add_ray_arguments(parser: argparse.ArgumentParser, backends: str) -> None:
    """``--ray``, ``--ray-address`` and ``--ray-workers`` of a command that shards its problems
    (``bench``, ``label``); ``backends`` says what each actor loads."""
    parser.add_argument("--ray", action="store_true", help="shard the problems over a local Ray cluster")
    parser.add_argument("--ray-address", default=None, metavar="ADDR", help="shard over this Ray cluster")
    parser.add_argument("--ray-workers", type=int_at_least(1), default=None, metavar="K",
                        help=f"Ray actors, each with its own {backends} (default: one per GPU, else 2)")


def check_ray_flags(args: argparse.Namespace) -> None:
    """``--ray-workers`` without a cluster to run on is refused before anything loads."""
    if args.ray_workers is not None and not (args.ray or args.ray_address):
        raise FlagError("--ray-workers", args.ray_workers, "needs --ray or --ray-address")


def ray_runner(args: argparse.Namespace, ray_backends):
    """The Ray runner of ``--ray``/``--ray-address`` (None: run in this process)."""
    if not (args.ray or args.ray_address):
        return None
    from prmsearch.benchmarks.sweeps.distributed import RayConfig, RayRunner, import_ray

    flag = "--ray-address" if args.ray_address else "--ray"
    with flag_context(flag, args.ray_address):
        import_ray()
        ray_config = RayConfig(address=args.ray_address, workers=args.ray_workers)
    return RayRunner(ray_config, backends=in_workers(args, ray_backends))  # each actor builds its own


def _run_bench(args: argparse.Namespace, config, backends, ray_backends=None) -> int:
    """Load the dataset, run (or resume) the sweep, write and print the summary; 1 when the
    sweep is incomplete (it stopped on a dead server, or rows are missing)."""
    from prmsearch.benchmarks.analysis.report import missing_text, summary_markdown, write_reports
    from prmsearch.benchmarks.sweeps.results import ResultsFolder, ResultsFolderError
    from prmsearch.benchmarks.sweeps.sweep import ServerDownError, run_sweep, timestamped_folder

    for budget in config.budgets:
        check_budget("--budgets", budget, args.max_budget)
    flag, value = ("--recipe", args.recipe) if args.recipe else ("--dataset", args.dataset)
    problems = load_problems(config, flag, value, args.skip_bad_rows)
    name = config.dataset
    if name == "jsonl" and config.dataset_path:
        name = Path(config.dataset_path).stem
    out = Path(args.out) if args.out else timestamped_folder("runs", name)
    runner = ray_runner(args, ray_backends)
    if out.exists() and not out.is_dir():
        raise FlagError("--out", str(out), "is a file; give a folder (a new one, or a run to --resume)")
    with flag_context("--out", str(out), "give a folder this user can write to"):
        out.mkdir(parents=True, exist_ok=True)
    stopped: ServerDownError | None = None
    try:
        folder = run_sweep(
            config,
            problems,
            out,
            resume=args.resume,
            retry_errors=args.retry_errors,
            progress=not args.no_progress,
            policy=None,  # built by backends() when there is work, or by each Ray actor
            scorer=None,
            backends=None if runner is not None else backends,
            runner=runner,
            set_aside_damaged=args.set_aside_damaged,
        )
    except ResultsFolderError as exc:
        raise FlagError("--out", str(out), cli_text(exc)) from None
    except ServerDownError as exc:
        stopped, folder = exc, ResultsFolder(out)
    qids = {p.qid for p in problems}
    rows = [r for r in folder.rows() if r["qid"] in qids]
    summary = write_reports(folder.path, rows, config.dataset, len(problems), config.expected_cells())
    if args.json:
        print(json.dumps(summary))
    else:
        print(summary_markdown(summary))
        print(f"results: {folder.results_path}  summary: {folder.path / 'summary.json'}")
    if stopped is not None:
        print(
            f"prmsearch bench: stopped: {stopped.failures} problems in a row failed with a connection error "
            f"or a dead engine (the last: {_one_line(stopped.last_error, 300)}); the backend looks down, so "
            "the remaining problems were not run. When it is back (a server restarted; an in-process "
            "engine that died starts again with the next command), `prmsearch bench --resume "
            f"--retry-errors --out {folder.path}` (with the same other flags) continues.",
            file=sys.stderr,
        )
    if summary["missing"]:
        print(
            f"prmsearch bench: incomplete: {missing_text(summary['missing'], len(problems))}; "
            f"`prmsearch bench --resume --out {folder.path}` (with the same other flags) runs them.",
            file=sys.stderr,
        )
    return 1 if stopped is not None or summary["missing"] else 0


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="sweep strategies x budgets x seeds over a dataset")
    bench.add_argument(
        "--dataset",
        default="arith",
        help="arith, arith-phrased, math500, gsm8k, aime24, amc23, or a FILE.jsonl "
        "(rows with question and answer)",
    )
    bench.add_argument("--dataset-path", default=None, help="local file (or folder) of a named dataset")
    bench.add_argument("--question-field", default=None, help="row field of the question (JSONL datasets)")
    bench.add_argument("--answer-field", default=None, help="row field of the gold answer (JSONL datasets)")
    bench.add_argument("--id-field", default=None, help="row field of a unique id (default: the line number)")
    bench.add_argument(
        "--skip-bad-rows", action="store_true", help="skip malformed dataset rows (see stderr)"
    )
    bench.add_argument("--split", default=None, help="dataset split where it has several (arith: test)")
    bench.add_argument(
        "--limit", type=int_at_least(1), default=None, help="the first N problems only (after any shuffle)"
    )
    bench.add_argument(
        "--shuffle-seed", type=int, default=None, help="shuffle the problems with this seed before --limit"
    )
    strategies = csv_of(str, "strategy names", "beam,best_of_n")
    bench.add_argument("--strategies", type=strategies, default=None, help="comma-separated")
    bench.add_argument(
        "--budgets", type=csv_of(int_at_least(1), "ints >= 1", "1,4,16"), default=(1, 4, 16),
        help="comma-separated values of each strategy's n (greedy runs once, at 1) (default: 1,4,16)",
    )
    bench.add_argument(
        "--seeds", type=csv_of(int, "ints", "0,1,2"), default=(0,),
        help="comma-separated run seeds; each is a full sweep (default: 0)",
    )
    add_max_budget_argument(bench)
    bench.add_argument("--out", default=None, help="results folder (default: runs/<dataset>-<time>)")
    bench.add_argument("--resume", action="store_true", help="continue the run in --out (its missing rows)")
    bench.add_argument(
        "--retry-errors",
        action="store_true",
        help="with --resume: also re-run the problems whose row ended in an error (e.g. a server outage); "
        "each new row replaces the old one",
    )
    bench.add_argument(
        "--set-aside-damaged", action="store_true",
        help="with --resume: move lines of results.jsonl that are not whole rows (a disk fault, a torn "
        "write) to results.jsonl.damaged, never deleting them, and run their problems again",
    )
    bench.add_argument(
        "--max-consecutive-failures",
        type=int_at_least(0),
        default=8,
        metavar="K",
        help="stop once K problems in a row failed with a connection error or a dead engine (the "
        "backend looks down) instead of spending every remaining problem's retries; 0 never stops "
        "(default: 8)",
    )
    bench.add_argument(
        "--overlap",
        type=int_at_least(1),
        default=1,
        metavar="K",
        help="problem groups that take turns, so the PRM scores one while the policy generates another "
        "(1: one group; for a policy on a server or another device; same rows either way)",
    )
    bench.add_argument(
        "--schedule",
        choices=("auto", "rounds", "async"),
        default="auto",
        help="rounds: every problem waits for the whole round; async: each problem advances as its "
        "own steps return; auto (default): async when the policy takes parallel calls (HTTP "
        "servers, the offline vLLM engine), else rounds, and rounds when the policy and the PRM "
        "both compute on this machine's CPU. Same rows either way (up to an engine's "
        "batch-dependent float rounding)",
    )
    bench.add_argument(
        "--policy-logprobs",
        choices=("auto", "always"),
        default=None,
        help="when the policy is asked for token log-probabilities: auto (default) only for a "
        "strategy or scorer that reads them (they cost a server about a tenth of its tokens/s); "
        "always keeps them in every saved tree. Same rows either way",
    )
    bench.add_argument(
        "--recipe",
        default=None,
        help="a YAML recipe (recipes/*.yaml): backends, dataset and sweep; sweep flags given with it "
        "(--budgets, --seeds, --strategies, -o, --limit, sampling...) replace the recipe's values",
    )
    bench.add_argument(
        "--save-trees",
        action="store_true",
        help="keep each problem's search tree beside the results, gzip-compressed node-link JSON in "
        "OUT/trees/STRATEGY/nBUDGET-sSEED/QID.json.gz (`prmsearch view OUT --problem QID` draws one); "
        "the rows are the same either way, so a --resume may add or drop it",
    )
    bench.add_argument("--chunk", type=int_at_least(1), default=64, help="problems per batched search")
    bench.add_argument("--json", action="store_true", help="print summary.json")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    bench.add_argument(
        "--share-bon-samples",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="best_of_n/self_consistency/weighted_vote draw the same samples when their options "
        "differ only in the selection: run one of them per budget and re-select the others' rows "
        "from its candidates (marked * in the summary; exact accuracy and costs, wall time not "
        "measured); --no-share-bon-samples runs every cell (default: on; a recipe's own setting "
        "otherwise)",
    )
    add_ray_arguments(bench, "backends")
    bench.add_argument(
        "--option",
        "-o",
        action="append",
        type=option_type("STRATEGY.KEY=VALUE (e.g. beam.width=4)"),
        default=[],
        metavar="STRATEGY.KEY=VALUE",
        help="strategy option, e.g. -o beam.width=4 (repeatable)",
    )
    add_backend_arguments(bench)
    # None marks "not given", so that a recipe keeps its own value (see BENCH_SWEEP_DEFAULTS)
    bench.set_defaults(func=cmd_bench, **dict.fromkeys(BENCH_SWEEP_DEFAULTS))
