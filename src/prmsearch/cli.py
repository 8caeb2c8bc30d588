"""The ``prmsearch`` command: ``solve``, ``strategies``, ``bench``, plus the benchmark and
performance subcommands that :mod:`prmsearch.benchmarks.commands` and :mod:`prmsearch.perf`
add.

Errors: a bad flag value never ends in a traceback. It is one line on stderr that names the flag,
the value, what is wrong and the fix (:class:`FlagError`), and the exit status is 2; argparse's
own errors are one line too. Library messages that give a Python-API fix (``on_error='skip'``,
``path=...``) are rewritten to the flag that does the same (:func:`cli_text`). ``bench`` exits 1
when the sweep is incomplete (rows missing, or stopped because the server looks down).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prmsearch.api import MissingModelError, Searcher, resolve_policy, resolve_scorer
from prmsearch.policies.base import POLICIES, SamplingParams, make_policy
from prmsearch.search.protocol import STRATEGIES, BoundStrategy, as_strategy, strategy_spec


class FlagError(ValueError):
    """A bad command-line value, as one line: the flag, the value, what is wrong and the fix."""

    def __init__(self, flag: str, value: object, problem: str) -> None:
        shown = f" {value!r}" if value is not None else ""
        super().__init__(f"{flag}{shown}: {_one_line(problem)}")
        self.flag = flag
        self.value = value


def _one_line(text: str, limit: int = 600) -> str:
    """``text`` with its whitespace runs (newlines included) folded to single spaces, cut short."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


#: Python-API fixes that library messages give, and the flags that do the same (in this order).
_API_FIXES: tuple[tuple[str, str | Callable[[re.Match], str]], ...] = (
    (r"use 'jsonl' with path=\.\.\. \(and the field names\)",
     "pass --dataset FILE.jsonl (and --question-field/--answer-field for other field names)"),
    (r"on_error='skip'", "--skip-bad-rows"),
    (r"\b(question|answer|id)_field=", lambda m: f"--{m.group(1)}-field "),
    (r"\bpath='([^']*)'", lambda m: f"--dataset-path {m.group(1)}"),
    (r"\bpath=\.\.\.", "--dataset-path FILE.jsonl"),
    (r"\bsplit=", "--split "),
    (r"\blimit=N\b", "--limit N"),
    (r"\bshuffle_seed=", "--shuffle-seed "),
)  # fmt: skip


def cli_text(error: BaseException | str) -> str:
    """An error message for the command line: one line, with the Python-API fixes that library
    messages give (``pass on_error='skip'``, ``path=...``) replaced by the matching flags."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    if isinstance(error, FileNotFoundError) and error.filename and error.strerror is not None:
        text = f"{error.strerror}: {error.filename}"
    for pattern, replacement in _API_FIXES:
        text = re.sub(pattern, replacement, text)
    return _one_line(text)


#: What a flag's value can raise when it is bad (a backend that cannot load raises OSError, a
#: factory missing an argument TypeError, a missing extra ImportError).
_BAD_VALUE = (ValueError, KeyError, TypeError, OSError, ImportError)


@contextmanager
def flag_context(flag: str, value: object, fix: str = "") -> Iterator[None]:
    """Turn a bad-value error raised inside into a :class:`FlagError` for ``flag``, with ``fix``
    appended when given."""
    try:
        yield
    except FlagError:
        raise
    except _BAD_VALUE as exc:
        raise FlagError(flag, value, cli_text(exc) + (f"; {fix}" if fix else "")) from exc


class CliParser(argparse.ArgumentParser):
    """argparse with one-line errors that point at ``--help`` (not the whole usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see `{self.prog} --help`)\n")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an int >= {low}, got {value}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


def option_type(form: str) -> Callable[[str], tuple[str, object]]:
    """An argparse type for ``-o``: ``key=value`` with the value read as JSON when it parses
    (numbers, booleans), else text; ``form`` (e.g. ``KEY=VALUE (e.g. width=4)``) goes into the error."""

    def parse(text: str) -> tuple[str, object]:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"strategy options look like {form}, got {text!r}")
        try:
            return key, json.loads(value)
        except json.JSONDecodeError:
            return key, value

    return parse


def add_strategy_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags choosing one strategy and its options (``solve``)."""
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


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags choosing the backends, sampling and search limits (``solve`` and ``bench``)."""
    parser.add_argument(
        "--policy", default=None, help="policy backend name or model path/Hub id (default: embedded)"
    )
    parser.add_argument("--policy-backend", default=None, help="backend for a model path (default: hf)")
    parser.add_argument(
        "--prm", default=None, help="scorer name or PRM model path/Hub id (default: embedded)"
    )
    parser.add_argument("--prm-family", default=None, help="PRM family of a model path, e.g. qwen-prm")
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


def _unescape(text: str) -> str:
    """Let shell users write the delimiter as ``\\n\\n``."""
    if "\\" not in text:
        return text
    with flag_context("--delimiter", text, "write escapes as \\n or \\t, e.g. --delimiter '\\n\\n'"):
        return text.encode("utf-8").decode("unicode_escape")


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
    try:
        return SamplingParams(**values)
    except ValueError as exc:
        field = next((f for f in _SAMPLING_FLAGS if str(exc).startswith(f)), "temperature")
        raise FlagError(_SAMPLING_FLAGS[field], values[field], str(exc)) from None


def load_policy(name: str | None, backend: str | None, flag: str = "--policy"):
    """The policy of ``--policy`` (and ``--policy-backend``), or of another flag pair such as
    ``--judge``/``--judge-backend``; a failure names the flag."""
    backend_flag = f"{flag}-backend"
    if backend is not None:
        if not name:
            raise FlagError(backend_flag, backend, f"needs {flag} MODEL (a model folder or Hub id)")
        with flag_context(backend_flag, backend):
            POLICIES.entry(backend)  # an unknown backend lists the known ones
    try:
        return make_policy(backend, model=name) if backend is not None else resolve_policy(name)
    except MissingModelError as exc:
        fix = f"pass {flag} MODEL {backend_flag} {name}"
        raise FlagError(flag, name, f"policy backend {name!r} needs a model: {fix}") from exc
    except ValueError as exc:
        raise FlagError(flag, name, cli_text(exc)) from exc
    except _BAD_VALUE as exc:
        fix = f"give a registered policy ({', '.join(POLICIES.names())}), or a model folder or Hub id"
        raise FlagError(flag, name, f"could not load it ({cli_text(exc)}); {fix}") from exc


def load_scorer(name: str | None, family: str | None):
    """The PRM scorer of ``--prm`` (and ``--prm-family``); a failure names the flag."""
    from prmsearch.scorers.base import SCORERS

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
        return resolve_scorer(name, family)
    except MissingModelError as exc:
        fix = f"pass --prm MODEL --prm-family {name}"
        raise FlagError("--prm", name, f"scorer {name!r} needs a model: {fix}") from exc
    except ValueError as exc:
        raise FlagError("--prm", name, cli_text(exc)) from exc
    except _BAD_VALUE as exc:
        fix = "give a registered scorer, or a PRM model folder or Hub id with --prm-family"
        raise FlagError("--prm", name, f"could not load it ({cli_text(exc)}); {fix}") from exc


def _option_text(options: dict[str, object]) -> str:
    return " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in options.items())


def strategy_from_flags(args: argparse.Namespace) -> BoundStrategy:
    """``--strategy`` with ``--n`` and ``-o`` options, bound; a bad value names its flag."""
    with flag_context("--strategy", args.strategy):
        strategy_spec(args.strategy)
    options = dict(args.option)
    if args.n is not None:
        options.setdefault("n", args.n)  # else the strategy's own default (16; greedy 1)
    flag = "-o/--option" if args.option else "--n"
    value = _option_text(dict(args.option)) if args.option else args.n
    with flag_context(flag, value, "change --n, or set the option with -o KEY=VALUE"):
        return as_strategy(args.strategy, options)


def check_question(question: str) -> None:
    """Refuse an empty or blank QUESTION before any model loads."""
    if not question.strip():
        raise FlagError("QUESTION", question, 'is empty or blank; give the question, e.g. "What is 2+3?"')


def build_searcher(args: argparse.Namespace) -> Searcher:
    """A Searcher from parsed search flags (cheap checks first, then the models load)."""
    sampling = sampling_from_flags(args)
    strategy = strategy_from_flags(args)
    policy = load_policy(args.policy, args.policy_backend)
    scorer = load_scorer(args.prm, args.prm_family)
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


def cmd_solve(args: argparse.Namespace) -> int:
    check_question(args.question)
    set_threads(args.threads)
    searcher = build_searcher(args)
    result = searcher(args.question)
    if args.json:
        print(json.dumps(result.to_dict(include_tree=args.tree)))
    else:
        for i, (step, score) in enumerate(zip(result.steps, result.step_scores, strict=True), 1):
            print(f"[{i}] ({score:.3f}) {step}")
        print(f"answer: {result.answer}")
        ledger = result.ledger
        print(
            f"cost: {ledger.generations} generations, {ledger.generated_tokens} tokens generated, "
            f"{ledger.prm_tokens_computed} PRM tokens, {ledger.flops:.3g} FLOPs, {ledger.wall_s:.2f}s"
        )
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        if result.error:
            print(f"error: {result.error}", file=sys.stderr)
    return 1 if result.error else 0


def cmd_strategies(args: argparse.Namespace) -> int:
    rows = []
    for name in STRATEGIES.names():
        spec = strategy_spec(name)
        rows.append({"name": name, "summary": spec.summary, "options": spec.options()})
    if args.json:
        print(json.dumps([{**r, "options": [list(o) for o in r["options"]]} for r in rows], default=str))
        return 0
    for row in rows:
        print(f"{row['name']}: {row['summary']}")
        for name, default, _ in row["options"]:
            print(f"    {name} = {default}")
    return 0


def csv_of(kind: Callable[[str], Any], what: str, example: str) -> Callable[[str], tuple]:
    """An argparse type: a non-empty comma-separated list of ``kind`` values (``what`` and
    ``example`` go into the error)."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(x.strip()) for x in text.split(",") if x.strip())
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {what}, e.g. {example}, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected at least one of {what}, e.g. {example}, got {text!r}")
        return values

    return parse


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
    if args.ray_workers is not None and not (args.ray or args.ray_address):
        raise FlagError("--ray-workers", args.ray_workers, "needs --ray or --ray-address")
    if args.policy_backend is not None and not args.policy:
        raise FlagError(
            "--policy-backend", args.policy_backend, "needs --policy MODEL (a model folder or Hub id)"
        )
    if args.prm_family is not None and not args.prm:
        raise FlagError("--prm-family", args.prm_family, "needs --prm MODEL (a PRM model folder or Hub id)")


#: Sweep flags of ``bench`` whose parser default is None, so that a recipe can tell which ones the
#: user gave; without a recipe these are their values.
BENCH_SWEEP_DEFAULTS: dict[str, Any] = {
    "dataset": "arith",
    "budgets": (1, 4, 16),
    "seeds": (0,),
    "chunk": 64,
    "temperature": 0.8,
    "top_p": 1.0,
    "max_step_tokens": 256,
    "delimiter": "\n\n",
    "max_depth": 32,
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
    return _run_bench(args, config, lambda: (load_policy(config.policy, config.policy_backend),
                                             load_scorer(config.prm, config.prm_family)))  # fmt: skip


def bench_config(args: argparse.Namespace):
    """The SweepConfig of the bench flags; a bad value names its flag."""
    from prmsearch.benchmarks.sweep_config import DEFAULT_STRATEGIES, SweepConfig

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
        )


def _bench_recipe(args: argparse.Namespace) -> int:
    """``bench --recipe FILE``: the sweep and backends come from the YAML recipe; sweep flags given
    on the command line replace the recipe's values, and flags that would change its models or
    dataset are refused (never silently ignored)."""
    import dataclasses

    from prmsearch.benchmarks.recipes import load_recipe

    with flag_context("--recipe", args.recipe, "give an existing YAML recipe, e.g. one of recipes/*.yaml"):
        recipe = load_recipe(args.recipe)
    config = dataclasses.replace(recipe.sweep, **recipe_overrides(args, recipe.sweep))

    def backends():
        with flag_context("--recipe", args.recipe, "fix the recipe's policy or prm section"):
            return recipe.build_backends()

    return _run_bench(args, config, backends, ray_backends=recipe.build_backends)


def recipe_overrides(args: argparse.Namespace, sweep) -> dict[str, Any]:
    """The SweepConfig fields that ``bench --recipe`` flags replace, validated flag by flag."""
    import dataclasses

    for name, flag in _RECIPE_CONFLICTS.items():
        value = getattr(args, name, None)
        if value is not None:
            fix = f"the recipe {args.recipe} names its models and dataset; edit the recipe, or drop --recipe"
            raise FlagError(flag, value, fix)
    overrides: dict[str, Any] = {"max_consecutive_failures": args.max_consecutive_failures}
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
    from prmsearch.benchmarks.sweep import sweep_problems

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


def _runner(args: argparse.Namespace, ray_backends):
    """The Ray runner of ``--ray``/``--ray-address`` (None: run in this process)."""
    if not (args.ray or args.ray_address):
        return None
    from prmsearch.benchmarks.distributed import RayConfig, RayRunner, import_ray

    flag = "--ray-address" if args.ray_address else "--ray"
    with flag_context(flag, args.ray_address):
        import_ray()
        ray_config = RayConfig(address=args.ray_address, workers=args.ray_workers)
    return RayRunner(ray_config, backends=ray_backends)  # each actor builds its own backends


def _run_bench(args: argparse.Namespace, config, backends, ray_backends=None) -> int:
    """Load the dataset, run (or resume) the sweep, write and print the summary; 1 when the
    sweep is incomplete (it stopped on a dead server, or rows are missing)."""
    from prmsearch.benchmarks.report import missing_text, summary_markdown, write_reports
    from prmsearch.benchmarks.results import ResultsFolder, ResultsFolderError
    from prmsearch.benchmarks.sweep import ServerDownError, run_sweep, timestamped_folder

    flag, value = ("--recipe", args.recipe) if args.recipe else ("--dataset", args.dataset)
    problems = load_problems(config, flag, value, args.skip_bad_rows)
    name = config.dataset
    if name == "jsonl" and config.dataset_path:
        name = Path(config.dataset_path).stem
    out = Path(args.out) if args.out else timestamped_folder("runs", name)
    runner = _runner(args, ray_backends)
    if out.exists() and not out.is_dir():
        raise FlagError("--out", str(out), "is a file; give a folder (a new one, or a run to --resume)")
    with flag_context("--out", str(out), "give a folder for the results"):
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
        )
    except ResultsFolderError as exc:
        raise FlagError("--out", str(out), str(exc)) from None
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
            f"(the last: {_one_line(stopped.last_error, 300)}); the server looks down, so the remaining "
            "problems were not run. When it is back, `prmsearch bench --resume --retry-errors --out "
            f"{folder.path}` (with the same other flags) continues.",
            file=sys.stderr,
        )
    if summary["missing"]:
        print(
            f"prmsearch bench: incomplete: {missing_text(summary['missing'], len(problems))}; "
            f"`prmsearch bench --resume --out {folder.path}` (with the same other flags) runs them.",
            file=sys.stderr,
        )
    return 1 if stopped is not None or summary["missing"] else 0


DESCRIPTION = """\
Test-time search for reasoning, guided by process reward models (PRMs): a policy model proposes
steps, a PRM scores them, a search strategy decides where the next generations go. Without
--policy/--prm it runs the embedded tiny arithmetic models (no download)."""

EPILOG = """\
examples:
  prmsearch solve "Start with 7. Add 5. Multiply by 3. Subtract 6. What is the result?" --n 16
  prmsearch strategies
  prmsearch bench --strategies beam,best_of_n --budgets 4,16 --limit 50
  prmsearch bench --recipe recipes/qwen25-math-1.5b_qwen-prm-7b_math500.yaml

`prmsearch COMMAND --help` lists a command's flags. A bad flag value is one line on stderr naming
the flag and the fix (exit 2); bench exits 1 when a sweep is incomplete."""


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="prmsearch", description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE",
        help="import a module or .py file first, so the strategies, backends, scorers and datasets it "
        f"registers can be named (repeatable; also ${PLUGINS_ENV}, comma-separated)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    solve = sub.add_parser("solve", help="solve one question with search")
    solve.add_argument("question", help="the question, in quotes")
    add_strategy_arguments(solve)
    add_backend_arguments(solve)
    solve.add_argument("--json", action="store_true", help="print one JSON object")
    solve.add_argument("--tree", action="store_true", help="with --json, include the search tree")
    solve.set_defaults(func=cmd_solve)

    strategies = sub.add_parser("strategies", help="list strategies and their options")
    strategies.add_argument("--json", action="store_true", help="print the strategies and options as JSON")
    strategies.set_defaults(func=cmd_strategies)

    bench = sub.add_parser("bench", help="sweep strategies x budgets x seeds over a dataset")
    bench.add_argument(
        "--dataset",
        default="arith",
        help="arith, math500, gsm8k, aime24, amc23, or a FILE.jsonl (rows with question and answer)",
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
    bench.add_argument("--out", default=None, help="results folder (default: runs/<dataset>-<time>)")
    bench.add_argument("--resume", action="store_true", help="continue the run in --out (its missing rows)")
    bench.add_argument(
        "--retry-errors",
        action="store_true",
        help="with --resume: also re-run the problems whose row ended in an error (e.g. a server outage); "
        "each new row replaces the old one",
    )
    bench.add_argument(
        "--max-consecutive-failures",
        type=int_at_least(0),
        default=8,
        metavar="K",
        help="stop once K problems in a row failed with a connection error (the server looks down) "
        "instead of spending every remaining problem's retries; 0 never stops (default: 8)",
    )
    bench.add_argument(
        "--recipe",
        default=None,
        help="a YAML recipe (recipes/*.yaml): backends, dataset and sweep; sweep flags given with it "
        "(--budgets, --seeds, --strategies, -o, --limit, sampling...) replace the recipe's values",
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
    bench.add_argument("--ray", action="store_true", help="shard problems over a local Ray cluster")
    bench.add_argument("--ray-address", default=None, metavar="ADDR", help="shard over this Ray cluster")
    bench.add_argument(
        "--ray-workers",
        type=int_at_least(1),
        default=None,
        metavar="K",
        help="Ray actors, each with its own backends (default: one per GPU, else 2)",
    )
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

    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


def cmd_label(args: argparse.Namespace) -> int:
    """``prmsearch label``: sample solutions and label their steps (MC, judge or consensus)."""
    import time
    from types import SimpleNamespace

    from prmsearch import __version__
    from prmsearch.benchmarks.results import ResultsFolderError
    from prmsearch.prm.labelling import LabelConfig, LabelProblem, run_labelling

    if args.resume and not args.out:
        raise FlagError("--resume", None, "needs --out FOLDER, the folder of the run to continue")
    if args.judge_backend is not None and not args.judge:
        raise FlagError("--judge-backend", args.judge_backend, "needs --judge MODEL")
    values = {
        "method": args.method, "samples": args.samples, "rollouts": args.rollouts,
        "mc_threshold": args.mc_threshold, "judge_samples": args.judge_samples,
        "temperature": args.temperature, "judge_temperature": args.judge_temperature,
        "solution_max_tokens": args.max_solution_tokens, "judge_max_tokens": args.judge_max_tokens,
        "delimiter": _unescape(args.delimiter), "seed": args.seed, "chunk": args.chunk,
    }  # fmt: skip
    try:
        cfg = LabelConfig(**values)
    except ValueError as exc:
        field = next((f for f in values if str(exc).startswith(f)), "method")
        flag = _LABEL_FLAGS.get(field, f"--{field.replace('_', '-')}")
        raise FlagError(flag, values[field], str(exc)) from None
    dataset, dataset_path = dataset_from_flags(args.dataset, args.dataset_path)
    source = SimpleNamespace(dataset=dataset, dataset_path=dataset_path, split=args.split, limit=args.limit,
                             shuffle_seed=args.shuffle_seed, question_field=args.question_field,
                             answer_field=args.answer_field, id_field=args.id_field)  # fmt: skip
    problems = [LabelProblem(p.qid, p.question, p.gold)
                for p in load_problems(source, "--dataset", args.dataset, args.skip_bad_rows)]
    name = Path(dataset_path).stem if dataset == "jsonl" and dataset_path else dataset
    out = Path(args.out) if args.out else Path("runs") / f"labels-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    policy = load_policy(args.policy, args.policy_backend)
    judge = None
    if cfg.uses_judge:
        judge = load_policy(args.judge, args.judge_backend, "--judge") if args.judge else policy
    provenance = {
        "policy": args.policy or "embedded arith policy", "policy_backend": args.policy_backend,
        "judge": (args.judge or args.policy or "embedded arith policy") if cfg.uses_judge else None,
        "judge_backend": args.judge_backend if cfg.uses_judge else None,
        "dataset": name, "split": args.split, "seed": cfg.seed, "prmsearch": __version__,
    }  # fmt: skip

    def progress(done: int, total: int) -> None:
        if not args.no_progress:
            print(f"labelled {done}/{total} problems", file=sys.stderr, flush=True)

    try:
        summary = run_labelling(cfg, problems, out, policy=policy, judge=judge, resume=args.resume,
                                provenance=provenance, progress=progress)  # fmt: skip
    except ResultsFolderError as exc:
        raise FlagError("--out", str(out), str(exc)) from None
    if args.json:
        print(json.dumps(summary))
    else:
        kept = f"{summary['labelled']}/{summary['solutions']} solutions labelled"
        if summary["retention"] is not None:
            kept += f" (retention {summary['retention']:.1%})"
        print(f"{kept}, {summary['steps']} steps ({summary['negative_steps']} wrong); statuses "
              f"{summary['statuses']}\nlabels: {out / 'labels.jsonl'}  stepwise: {out / 'stepwise.jsonl'}")
    errors = summary["statuses"].get("error", 0)
    if errors:
        print(f"prmsearch label: {errors} solutions or problems ended in an error (their rows in "
              f"{out / 'labels.jsonl'} say why)", file=sys.stderr)
        return 1
    return 0


#: LabelConfig fields and the flags that set them, where the names differ.
_LABEL_FLAGS = {"solution_max_tokens": "--max-solution-tokens"}


def _add_label(sub) -> None:
    label = sub.add_parser(
        "label",
        help="sample solutions and label their steps: Monte Carlo, an LLM judge, or their consensus",
        description="Labels steps of the policy's own solutions for PRM training, as in \"The Lessons of "
        "Developing Process Reward Models\": mc (rollouts from every step prefix), judge (a model names "
        "the earliest wrong paragraph), consensus (kept where both agree). Writes labels.jsonl (every "
        "solution, soft values, verdicts, provenance) and stepwise.jsonl (prompt, completions, labels: "
        "the layout of TRL's PRM trainer).",
    )
    label.add_argument("--method", choices=("mc", "judge", "consensus"), default="mc",
                       help="how steps are labelled (default: mc)")
    label.add_argument("--dataset", default="arith", help="a dataset name or FILE.jsonl with questions and "
                       "gold answers (default: arith)")
    label.add_argument("--dataset-path", default=None, help="local file (or folder) of a named dataset")
    label.add_argument("--split", default=None, help="dataset split (arith: train, validation or test)")
    label.add_argument("--limit", type=int_at_least(1), default=None, help="the first N problems only")
    label.add_argument("--shuffle-seed", type=int, default=None, help="shuffle the problems before --limit")
    label.add_argument("--question-field", default=None, help="row field of the question (JSONL datasets)")
    label.add_argument("--answer-field", default=None, help="row field of the gold answer (JSONL datasets)")
    label.add_argument("--id-field", default=None, help="row field of a unique id (JSONL datasets)")
    label.add_argument("--skip-bad-rows", action="store_true", help="skip malformed dataset rows")
    label.add_argument("--policy", default=None, help="the policy that writes solutions: a backend name, "
                       "model folder or Hub id (default: embedded)")
    label.add_argument("--policy-backend", default=None, help="backend for a policy model path (default: hf)")
    label.add_argument("--judge", default=None, help="the judge for judge/consensus: a backend name, model "
                       "folder or Hub id (default: the policy itself)")
    label.add_argument("--judge-backend", default=None, help="backend for a judge model path (default: hf)")
    label.add_argument("--samples", type=int_at_least(1), default=4, help="solutions per problem (default 4)")
    label.add_argument("--rollouts", type=int_at_least(1), default=8,
                       help="MC completions per distinct step prefix (default: 8)")
    label.add_argument("--mc-threshold", type=float, default=0.0,
                       help="a step whose MC value is at or below this is wrong (default: 0)")
    label.add_argument("--judge-samples", type=int_at_least(1), default=3,
                       help="judge verdicts per solution, majority-voted (default: 3)")
    label.add_argument("--temperature", type=float, default=0.7, help="policy temperature (default: 0.7)")
    label.add_argument("--judge-temperature", type=float, default=0.7,
                       help="judge temperature; one judge sample is greedy (default: 0.7)")
    label.add_argument("--max-solution-tokens", type=int_at_least(1), default=1024,
                       help="token limit of one solution or rollout (default: 1024)")
    label.add_argument("--judge-max-tokens", type=int_at_least(1), default=1024,
                       help="token limit of one judge critique (default: 1024)")
    label.add_argument("--delimiter", default="\n\n", help="step delimiter (default: blank line)")
    label.add_argument("--seed", type=int, default=0, help="run seed (default: 0)")
    label.add_argument("--chunk", type=int_at_least(1), default=16,
                       help="problems per batched run and per write to disk (default: 16)")
    label.add_argument("--out", default=None, help="output folder (default: runs/labels-<dataset>-<time>)")
    label.add_argument("--resume", action="store_true", help="continue the run in --out")
    label.add_argument("--json", action="store_true", help="print summary.json")
    label.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    label.set_defaults(func=cmd_label)


def _stepwise_rows(data: str) -> list[dict]:
    """``--data``: a stepwise JSONL file, or ``hub:<dataset id>[:split]`` (needs ``datasets``)."""
    from prmsearch.prm.stepwise_train import read_stepwise

    if not data.startswith("hub:"):
        fix = "give a stepwise JSONL file (prmsearch label writes stepwise.jsonl)"
        with flag_context("--data", data, fix):
            return read_stepwise(data)
    name, _, split = data[len("hub:"):].partition(":")
    with flag_context("--data", data, "install `datasets` and give hub:<dataset id>[:split]"):
        import datasets

        table = datasets.load_dataset(name, split=split or "train")
        return [{"prompt": r["prompt"], "completions": list(r["completions"]), "labels": list(r["labels"])}
                for r in table]


def cmd_train_prm(args: argparse.Namespace) -> int:
    """``prmsearch train-prm``: a qwen-prm PRM from any causal LM on stepwise data."""
    from prmsearch.prm.stepwise_train import StepwiseTrainConfig, train_stepwise_prm

    values = {
        "steps": args.steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum, "lr": args.lr,
        "warmup": args.warmup, "max_length": args.max_length, "validation_fraction": args.validation_fraction,
        "bf16": args.bf16, "device": args.device, "gguf_file": args.gguf_file, "threads": args.threads,
        "seed": args.seed, "log_every": args.log_every,
    }  # fmt: skip
    try:
        cfg = StepwiseTrainConfig(**values)
    except ValueError as exc:
        field = next((f for f in values if str(exc).startswith(f)), "steps")
        raise FlagError(f"--{field.replace('_', '-')}", values[field], str(exc)) from None
    rows = _stepwise_rows(args.data)
    if args.base is None:
        from prmsearch.arith.models import default_policy_path

        base = str(default_policy_path())
    else:
        base = args.base
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise FlagError("--out", str(out), "holds files already; give a new or empty folder")

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    with flag_context("--base", base, "give a Hugging Face causal LM folder or Hub id (and --gguf-file "
                      "for a GGUF checkpoint)"):
        report = train_stepwise_prm(base, rows, out, cfg, log=log, data=args.data)
    if args.json:
        print(json.dumps(report))
    else:
        val = report["validation"]
        tail = (f"; held out: step accuracy {val['step_accuracy']:.3f}, first-error F1 "
                f"{val['first_error']['f1']:.3f} on {val['rows']} rows") if val else ""
        print(f"trained on {report['train_rows']} rows in {report['seconds']:.0f}s, loss "
              f"{report['loss_first']:.3f} -> {report['loss_last']:.3f}{tail}\nPRM: {out} (use it with "
              f"--prm {out} --prm-family qwen-prm)")
    return 0


def _add_train_prm(sub) -> None:
    train = sub.add_parser(
        "train-prm",
        help="train a PRM (qwen-prm layout) from any causal LM on stepwise-labelled data",
        description="Trains the Qwen2.5-Math-PRM head (Linear-ReLU-Linear(2) at a separator after every "
        "step) on a base causal LM, with the loss at the separators, from JSONL rows {prompt, completions, "
        "labels} (what prmsearch label writes, or a Hub dataset in that layout). The folder it writes is "
        "read by --prm FOLDER --prm-family qwen-prm.",
    )
    train.add_argument("--data", required=True, help="stepwise JSONL file, or hub:<dataset id>[:split]")
    train.add_argument("--base", default=None, help="causal LM folder or Hub id (default: embedded policy)")
    train.add_argument("--out", required=True, help="folder for the trained PRM (new or empty)")
    train.add_argument("--steps", type=int, default=1000, help="optimiser steps (default: 1000)")
    train.add_argument("--batch-size", type=int, default=8, help="rows per forward pass (default: 8)")
    train.add_argument("--grad-accum", type=int, default=1, help="forward passes per step (default: 1)")
    train.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (default: 2e-5)")
    train.add_argument("--warmup", type=int, default=50, help="warm-up steps (default: 50)")
    train.add_argument("--max-length", type=int, default=2048, help="skip longer rows (tokens; default 2048)")
    train.add_argument("--validation-fraction", type=float, default=0.05,
                       help="share of problems held out for the final report (default: 0.05)")
    train.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                       help="bfloat16 autocast (default: on a CUDA GPU that supports it)")
    train.add_argument("--device", default=None, help="cuda, cpu, ... (default: CUDA when available)")
    train.add_argument("--gguf-file", default=None, help="a GGUF file inside --base to load")
    train.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    train.add_argument("--seed", type=int, default=0, help="data order, head, held-out split (default 0)")
    train.add_argument("--log-every", type=int, default=50, help="steps between loss lines (default: 50)")
    train.add_argument("--json", action="store_true", help="print the training report as JSON")
    train.add_argument("--quiet", action="store_true", help="no loss lines on stderr")
    train.set_defaults(func=cmd_train_prm)


def _benchmark_commands(sub) -> None:
    from prmsearch.benchmarks.commands import register_commands
    from prmsearch.perf.command import register_perf_command

    register_commands(sub)
    register_perf_command(sub)


_EXTRA_COMMANDS: list = [_benchmark_commands, _add_label, _add_train_prm]


#: Environment variable naming plugin modules to import (comma-separated), like ``--plugin``.
PLUGINS_ENV = "PRMSEARCH_PLUGINS"


def load_plugins(names: Sequence[str]) -> None:
    """Import each plugin (a module name, or a path to a ``.py`` file) so its registrations run."""
    import importlib
    import importlib.util
    import os

    from_env = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in [*from_env, *names]:
        try:
            if name.endswith(".py"):
                path = Path(name).expanduser()
                if not path.is_file():
                    raise FileNotFoundError(f"no such file: {path}")
                spec = importlib.util.spec_from_file_location(f"prmsearch_plugin_{path.stem}", path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(name)
        except Exception as exc:  # any failure of the user's module: one line naming it
            fix = "give an importable module (pkg.module) or an existing .py file that imports cleanly"
            raise FlagError("--plugin", name, f"{type(exc).__name__}: {exc}; {fix}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        load_plugins(args.plugin)
        return args.func(args)
    except FlagError as exc:
        print(f"prmsearch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"prmsearch {args.command}: error: {cli_text(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
