"""The ``prmsearch plan`` subcommands: ``fit`` a compute-optimal plan on a validation sweep, and
``report`` how a sweep's planner spent its compute (per-problem FLOPs spread, accuracy at equal
compute). See :mod:`prmsearch.planner.fit` and the ``planner`` strategy.

Registered by the CLI beside :mod:`prmsearch.cli.evaluate`; each command returns an
exit code: 0 when it ran, 2 on bad input (the reason on stderr, one line).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from prmsearch.cli.evaluate import csv_of, fail, input_errors


def cmd_plan_fit(args: argparse.Namespace) -> int:
    """Fit a plan on a validation results folder and write it as JSON."""
    from prmsearch.planner.fit import FitConfig, fit_folder, fit_markdown, fit_report
    from prmsearch.planner.plan import write_plan

    try:
        config = FitConfig(
            levels=args.levels,
            reference=args.reference,
            probe_strategy=args.probe_strategy,
            probe=args.probe,
            bins=args.bins,
            strategies=args.strategies,
            seed=args.seed,
            any_split=args.any_split,
        )
        plan, fitted, facts = fit_folder(args.folders, config)
    except input_errors() as exc:
        return fail("plan fit", exc)
    report = fit_report(fitted, facts)
    write_plan(plan, args.out, report)
    if args.json:
        print(json.dumps({"plan": plan.to_dict(), "fit": report}))
    else:
        print(fit_markdown(fitted, facts, config.reference), end="")
        print(f"plan: {args.out}  (use it: prmsearch bench --strategies planner -o planner.plan={args.out} "
              f"--budgets {','.join(map(str, config.levels))} --split test ...)")
    return 0


def cmd_plan_report(args: argparse.Namespace) -> int:
    """Per-problem compute of a strategy (the planner by default) and accuracy at equal compute,
    over the rows of one or more bench folders of the same problems."""
    from prmsearch.benchmarks.analysis.equal_compute import equal_compute, markdown_table
    from prmsearch.benchmarks.analysis.report import summarize
    from prmsearch.benchmarks.sweeps.results import ResultsFolder, row_key
    from prmsearch.planner.fit import arm_breakdown, compute_spread

    try:
        rows: dict = {}
        for folder in map(Path, args.folders):
            if not (folder / "results.jsonl").is_file():
                raise FileNotFoundError(f"{folder} has no results.jsonl (give `prmsearch bench` folders)")
            rows.update((row_key(row), row) for row in ResultsFolder(folder).rows())
        spread = compute_spread(rows.values(), args.strategy)
        arms = arm_breakdown(rows.values(), args.strategy)
        if not spread:
            raise ValueError(f"no {args.strategy} rows with a ledger in {', '.join(args.folders)}")
        summary = summarize(rows.values(), "", len({row["qid"] for row in rows.values()}))
        strategies = {row["strategy"] for row in rows.values()}
        # the reference's table only when its runs are in the folders (a seed-only rerun of the
        # planner and the searches may leave it out); the planner's own always
        tables = [(ref, equal_compute(summary, reference=ref)) for ref in dict.fromkeys(
            (args.reference, args.strategy)) if ref in strategies]
    except input_errors() as exc:
        return fail("plan report", exc)
    if args.json:
        print(json.dumps({"strategy": args.strategy, "compute": spread, "arms": arms,
                          "equal_compute": {ref: table.to_dict() for ref, table in tables}}))
        return 0
    lines = [
        f"## Per-problem compute of {args.strategy}",
        "",
        "| budget | problems | accuracy | mean FLOPs | p10 | p50 | p90 |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in spread:
        lines.append(f"| {c['budget']} | {c['problems']} | {100 * c['accuracy']:.1f}% | "
                     f"{c['mean_flops']:.3g} | {c['p10']:.3g} | {c['p50']:.3g} | {c['p90']:.3g} |")
    if arms:
        lines += ["", f"## Where {args.strategy}'s compute went: per difficulty bin (0 = hardest) and arm",
                  "", "| budget | bin | arm | problems | share | accuracy | mean FLOPs |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {a['budget']} | {a['bin']} | {a['arm']} | {a['problems']} | {100 * a['share']:.0f}% | "
                  f"{100 * a['accuracy']:.1f}% | {a['mean_flops']:.3g} |" for a in arms]
    for ref, table in tables:
        lines += ["", f"## Accuracy at equal compute: at the mean FLOPs per problem of {ref}", "",
                  "Interpolated linearly in log FLOPs between each strategy's measured budgets; `-`: "
                  "outside its measured FLOPs range (no extrapolation).", "", markdown_table(table)]
    print("\n".join(lines), end="")
    return 0


def _probe_spec(text: str) -> tuple[str, int]:
    """``strategy@budget`` (e.g. ``particle_filter@4``) as an argparse type."""
    strategy, sep, budget = text.strip().partition("@")
    if not sep or not strategy or not budget.isdigit() or int(budget) < 1:
        raise argparse.ArgumentTypeError(f"expected strategy@budget (e.g. particle_filter@4), got {text!r}")
    return strategy, int(budget)


def cmd_plan_cv(args: argparse.Namespace) -> int:
    """Cross-validate probe and bin settings inside a validation sweep and print the table."""
    from prmsearch.planner.cv import cross_validate_folders, cv_markdown
    from prmsearch.planner.fit import FitConfig

    try:
        base = FitConfig(levels=args.levels, reference=args.reference, strategies=args.strategies,
                         seed=args.seed, any_split=args.any_split)
        results = cross_validate_folders(args.folders, base, args.probes, args.bins, args.folds)
    except input_errors() as exc:
        return fail("plan cv", exc)
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    else:
        print(cv_markdown(results, args.folds, args.probes), end="")
    return 0


def _add_fit_flags(parser: argparse.ArgumentParser) -> None:
    """The fit's settings that ``plan fit`` and ``plan cv`` share."""
    parser.add_argument("--levels", type=csv_of(int), default=(4, 8, 16),
                        help="planner budgets n to fit; each targets the reference's FLOPs at budget n "
                             "(default: 4,8,16)")
    parser.add_argument("--reference", default="best_of_n", help="strategy whose FLOPs are the targets")
    parser.add_argument("--strategies", type=csv_of(str), default=None,
                        help="strategies the arms may use (default: every one in the folder but mcts)")
    parser.add_argument("--seed", type=int, default=None, help="run seed to read (default: the smallest)")
    parser.add_argument("--any-split", action="store_true",
                        help="allow a folder of another split than validation (a dataset without one)")


def register_plan_command(sub: argparse._SubParsersAction) -> None:
    """Add ``plan fit``, ``plan cv`` and ``plan report`` to the ``prmsearch`` CLI's subparsers."""
    parser = sub.add_parser(
        "plan",
        help="fit a compute-optimal plan for the planner strategy (Snell et al., 2024), or report "
        "its compute",
    )
    plan_sub = parser.add_subparsers(dest="plan_command", required=True,
                                     help="fit: fit a plan; cv: choose its probe and bins; "
                                          "report: the planner's compute")
    fit = plan_sub.add_parser(
        "fit",
        help="fit a plan on a VALIDATION bench folder and write it as JSON",
        description=(
            "The folder must hold, for the same problems, the probe run (--probe-strategy at budget "
            "--probe) and runs of the candidate strategies at several budgets, e.g. `prmsearch bench "
            "--split validation --strategies best_of_n,weighted_vote,beam,particle_filter --budgets "
            "4,8,16 --out FOLDER`. Per difficulty bin it picks the (strategy, budget) that maximises "
            "accuracy at the reference's mean FLOPs per problem at each level."
        ),
    )
    fit.add_argument("folders", nargs="+", metavar="FOLDER",
                     help="`prmsearch bench --split validation` results folder(s) of the same problems "
                          "(e.g. one with the probe run, one with the strategies)")
    fit.add_argument("--out", "-O", required=True, metavar="PLAN.json", help="where to write the plan")
    _add_fit_flags(fit)
    fit.add_argument("--probe-strategy", default="beam",
                     help="the probe run's strategy (default beam: a cheap search whose own answer "
                          "stands on the problems the plan stops at; or particle_filter, ..., or "
                          "weighted_vote: --probe whole solutions answered by their PRM-weighted vote); "
                          "`prmsearch plan cv` compares probes on held-out problems")
    fit.add_argument("--probe", type=int, default=4, help="the probe run's budget (default: 4)")
    fit.add_argument("--bins", type=int, default=3, help="difficulty bins, equal-count (default: 3)")
    fit.add_argument("--json", action="store_true", help="print the plan and its fit as JSON")
    fit.set_defaults(func=cmd_plan_fit)
    cv = plan_sub.add_parser(
        "cv",
        help="choose the probe and the bin count by k-fold cross-validation inside a VALIDATION sweep",
        description=(
            "Fits a plan for every probe x bins setting on all folds but one and judges it on the fold "
            "left out (replaying its problems' recorded runs), against the best fixed strategy at the "
            "same FLOPs on the same problems. The folder must hold every probe's run and the arms' runs."
        ),
    )
    cv.add_argument("folders", nargs="+", metavar="FOLDER", help="validation bench folder(s), as for fit")
    cv.add_argument("--probes", type=csv_of(_probe_spec),
                    default=(("weighted_vote", 4), ("beam", 4), ("particle_filter", 4)),
                    help="probe settings as strategy@budget "
                         "(default: weighted_vote@4,beam@4,particle_filter@4)")
    cv.add_argument("--bins", type=csv_of(int), default=(2, 3, 4, 5), help="bin counts (default: 2,3,4,5)")
    cv.add_argument("--folds", type=int, default=2, help="folds (default: 2)")
    _add_fit_flags(cv)
    cv.add_argument("--json", action="store_true", help="print JSON")
    cv.set_defaults(func=cmd_plan_cv)
    report = plan_sub.add_parser(
        "report",
        help="per-problem FLOPs (mean, p10/p50/p90) of the planner and accuracy at equal compute",
    )
    report.add_argument("folders", nargs="+", metavar="FOLDER",
                        help="`prmsearch bench` results folder(s) of the same problems (a row found in "
                             "several: the last folder's wins)")
    report.add_argument("--strategy", default="planner", help="whose per-problem compute (default: planner)")
    report.add_argument("--reference", default="best_of_n",
                        help="the other strategy whose budgets' FLOPs set equal-compute levels (default: "
                             "best_of_n; the table at the planner's own FLOPs is printed too)")
    report.add_argument("--json", action="store_true", help="print JSON")
    report.set_defaults(func=cmd_plan_report)
