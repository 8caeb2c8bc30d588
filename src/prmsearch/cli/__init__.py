"""The ``prmsearch`` command: every subcommand's parser lives in this package (``solve`` and
``strategies``, ``bench``, ``aggregate`` and ``eval-prm`` in :mod:`prmsearch.cli.evaluate`,
``plan``, ``export`` and ``train-policy``, ``label`` and ``train-prm``, ``serve``, ``view``).

Errors: a bad flag value never ends in a traceback. It is one line on stderr that names the flag,
the value, what is wrong and the fix (:class:`FlagError`), and the exit status is 2; argparse's
own errors are one line too. Library errors that give a Python-API fix (``on_error='skip'``,
``path=...``) carry it as data (:mod:`prmsearch.fixes`), and :func:`cli_text` spells it as the
flag that does the same. ``bench`` exits 1
when the sweep is incomplete (rows missing, or stopped because the server looks down).

This package builds the parser and runs a command (:func:`main`); the parts live in
:mod:`~prmsearch.cli.errors` (one-line errors, argparse types), :mod:`~prmsearch.cli.backends`
(backend, sampling and strategy flags), :mod:`~prmsearch.cli.solve` (``solve``, ``strategies``),
:mod:`~prmsearch.cli.bench` (``bench``), :mod:`~prmsearch.cli.prm_kit` (``label``, ``train-prm``),
:mod:`~prmsearch.cli.serve` (``serve``) and :mod:`~prmsearch.cli.plugins` (``--plugin``). The
names below are importable from here as they were when the CLI was one module.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from prmsearch.cli.backends import (
    add_backend_arguments,
    add_strategy_arguments,
    build_searcher,
    load_policy,
    load_scorer,
    sampling_from_flags,
    set_threads,
    strategy_from_flags,
)
from prmsearch.cli.bench import (
    BENCH_SWEEP_DEFAULTS,
    _add_bench,
    bench_config,
    bench_options,
    check_bench_flags,
    cmd_bench,
    dataset_from_flags,
    load_problems,
    recipe_overrides,
)
from prmsearch.cli.errors import (
    CliParser,
    FlagError,
    cli_text,
    csv_of,
    flag_context,
    int_at_least,
    option_type,
)
from prmsearch.cli.plugins import PLUGINS_ENV, load_plugins
from prmsearch.cli.prm_kit import _add_label, _add_train_prm, cmd_label, cmd_train_prm
from prmsearch.cli.quiet import set_engine_output
from prmsearch.cli.serve import _add_serve, cmd_serve
from prmsearch.cli.solve import _add_solve, _add_strategies, check_question, cmd_solve, cmd_strategies
from prmsearch.cli.termination import Terminated, terminate_by_exception
from prmsearch.cli.view import _add_view
from prmsearch.engines.errors import EngineError
from prmsearch.engines.open_engines import close_open_engines

__all__ = [
    "BENCH_SWEEP_DEFAULTS",
    "DESCRIPTION",
    "EPILOG",
    "PLUGINS_ENV",
    "CliParser",
    "FlagError",
    "add_backend_arguments",
    "add_strategy_arguments",
    "bench_config",
    "bench_options",
    "build_parser",
    "build_searcher",
    "check_bench_flags",
    "check_question",
    "cli_text",
    "cmd_bench",
    "cmd_label",
    "cmd_serve",
    "cmd_solve",
    "cmd_strategies",
    "cmd_train_prm",
    "csv_of",
    "dataset_from_flags",
    "flag_context",
    "int_at_least",
    "load_plugins",
    "load_policy",
    "load_problems",
    "load_scorer",
    "main",
    "option_type",
    "recipe_overrides",
    "sampling_from_flags",
    "set_threads",
    "strategy_from_flags",
]

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
  prmsearch serve --port 8000        # OpenAI-compatible search server (model ids like beam-16)
  prmsearch view --question "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?" \\
      --out tree.html

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
    _add_solve(sub)
    _add_strategies(sub)
    _add_bench(sub)
    for register in _EXTRA_COMMANDS:
        register(sub)
    add_verbose_flags(sub)
    return parser


def _benchmark_commands(sub) -> None:
    from prmsearch.cli.evaluate import register_commands
    from prmsearch.cli.export import register_export_command
    from prmsearch.cli.plan import register_plan_command
    from prmsearch.cli.train_policy import register_train_policy_command

    register_commands(sub)
    register_plan_command(sub)
    register_export_command(sub)
    register_train_policy_command(sub)


_EXTRA_COMMANDS: list = [_benchmark_commands, _add_label, _add_train_prm, _add_serve, _add_view]


def add_verbose_flags(sub) -> None:
    """``--verbose`` on every command: the engines' own logs and warnings (quiet by default)."""
    for command in sub.choices.values():
        command.add_argument("--verbose", action="store_true",
                             help="show the engines' own logs and warnings (vLLM, torch, transformers)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every engine it starts is closed on the way out, whichever way that is: a
    normal end, an error, Ctrl-C, SIGTERM or SIGHUP (which end it as Ctrl-C does)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    set_engine_output(getattr(args, "verbose", False))  # before any engine is imported
    try:
        with terminate_by_exception():
            return run_command(args)
    finally:
        close_open_engines()


def run_command(args: argparse.Namespace) -> int:
    """``args.func(args)``, with its errors as one line each and the exit status they call for."""
    try:
        load_plugins(args.plugin)
        return args.func(args)
    except FlagError as exc:
        print(f"prmsearch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"prmsearch {args.command}: error: {cli_text(exc)}", file=sys.stderr)
        return 2
    except EngineError as exc:
        print(f"prmsearch {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: every row written so far is whole (rows are appended and fsynced one
        # by one), so say how to go on instead of printing the interpreter's traceback.
        signal_number = exc.signal_number if isinstance(exc, Terminated) else signal.SIGINT
        out = getattr(args, "out", None)
        again = (f"; `prmsearch {args.command} --resume --out {out}` (with the same other flags) "
                 "continues where it stopped") if out and args.command in ("bench", "label") else ""
        name = signal.Signals(signal_number).name
        how = "interrupted" if signal_number == signal.SIGINT else f"stopped by {name}"
        print(f"prmsearch {args.command}: {how}{again}", file=sys.stderr)
        return 128 + int(signal_number)
