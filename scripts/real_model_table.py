"""The real-model headline: every bench folder under ``results/real-models/`` in one table, with
accuracy at equal FLOPs and the plot, so the figures of docs/results/gsm8k.md come from the rows in
the repository.

    python scripts/real_model_table.py                        # the markdown, on stdout
    python scripts/real_model_table.py --plot docs/images/gsm8k-qwen05-accuracy-vs-flops.png

Each folder's manifest names its verifier (policy confidence, a generative verifier, a trained
PRM); rows of strategies that read no scores (greedy, self_consistency) have none. A cell (verifier,
strategy, budget, seed) found in two folders is taken from the one with more rows. Only cells with
a row for every problem of the sample enter the table and the plot; the others are listed as
partial, with how many rows they have and how many of those are right.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from prmsearch.benchmarks.analysis.equal_compute import CurvePoint, interpolate
from prmsearch.benchmarks.analysis.report import plot_accuracy, summarize
from prmsearch.benchmarks.sweeps.results import ResultsFolder

ROOT = Path(__file__).resolve().parent.parent
UNSCORED = frozenset({"greedy", "self_consistency"})

Cell = tuple[str, str, int, int]  # verifier, strategy, budget, seed


def verifier_of(config: dict[str, Any]) -> str:
    """A short name for the scorer a folder's manifest names."""
    family = config.get("prm_family") or ""
    model = Path(str(config.get("prm") or "")).name
    if family == "policy-confidence" or config.get("prm") == "policy-confidence":
        return "policy confidence"
    if family == "verifier":
        return f"{model.replace('qwen2.5-coder-', '').replace('-instruct', '').upper()} as verifier"
    if family == "qwen-prm":
        return f"trained PRM ({model})"
    return model or family or "-"


def variant(strategy: str, options: dict[str, dict[str, Any]] | None) -> str:
    """``strategy`` with the options a folder set beyond the headline's convention (the last
    step's score as the path score), e.g. ``beam (distinct)`` or ``beam (aggregation=min)``, so a
    variant run is a row of its own and never stands in for the plain one."""
    own = {k: v for k, v in ((options or {}).get(strategy) or {}).items()
           if not (k == "aggregation" and v == "last")}
    if not own:
        return strategy
    parts = [k if v is True else f"{k}={v}" for k, v in sorted(own.items())]
    return f"{strategy} ({', '.join(parts)})"


def read_cells(folders: list[Path]) -> tuple[dict[Cell, list[dict]], dict[Cell, Path]]:
    """Rows per cell over ``folders``, each cell from the folder that holds most of its rows."""
    best: dict[Cell, list[dict]] = {}
    source: dict[Cell, Path] = {}
    for folder in folders:
        config = json.loads((folder / "manifest.json").read_text())["config"]
        verifier = verifier_of(config)
        cells: dict[Cell, list[dict]] = defaultdict(list)
        for row in ResultsFolder(folder).rows():
            name = "-" if row["strategy"] in UNSCORED else verifier
            strategy = variant(row["strategy"], config.get("options"))
            cells[(name, strategy, int(row["budget"]), int(row["seed"]))].append(row)
        for cell, rows in cells.items():
            if len(rows) > len(best.get(cell, ())):
                best[cell], source[cell] = rows, folder
    return best, source


def label(verifier: str, strategy: str) -> str:
    """The strategy's name in the combined summary: bare for policy confidence and no verifier
    (so best_of_n with policy confidence is the equal-compute reference), else with the verifier."""
    return strategy if verifier in ("-", "policy confidence") else f"{strategy} [{verifier}]"


def voting_at_equal_flops(summary: dict[str, Any], verifier_by_label: dict[str, str]) -> str:
    """Each scored run against unscored voting at the same FLOPs: the self-consistency curve
    (greedy as its one-sample point, then majority votes at each budget) read off at the run's
    FLOPs, linear in log FLOPs and never extrapolated."""
    curve = sorted(
        (
            CurvePoint(run["budget"], run["flops"], run["accuracy"])
            for run in summary["runs"]
            if run["strategy"] in UNSCORED and run["flops"] > 0
        ),
        key=lambda point: point.flops,
    )
    lines = [
        "",
        "Against voting at equal FLOPs (the greedy -> self_consistency curve at the run's FLOPs):",
        "",
        "| strategy | scored by | n | accuracy | voting at its FLOPs | difference |",
        "|---|---|---|---|---|---|",
    ]
    for run in sorted(summary["runs"], key=lambda r: (r["budget"], r["strategy"])):
        if run["strategy"] in UNSCORED:
            continue
        voting = interpolate(curve, run["flops"])
        gap = "-" if voting is None else f"{100 * (run['accuracy'] - voting):+.1f}"
        lines.append(
            f"| {run['strategy'].split(' [')[0]} | {verifier_by_label[run['strategy']]} | {run['budget']} | "
            f"{100 * run['accuracy']:.1f}% | {'-' if voting is None else f'{100 * voting:.1f}%'} | {gap} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "folders", nargs="*", type=Path, help="bench folders (default: results/real-models/*)"
    )
    parser.add_argument("--problems", type=int, default=100, help="rows a cell needs to be complete")
    parser.add_argument("--plot", type=Path, help="write accuracy vs budget and FLOPs here (PNG)")
    args = parser.parse_args()
    folders = args.folders or sorted(
        p for p in (ROOT / "results" / "real-models").iterdir() if (p / "manifest.json").is_file()
    )
    cells, source = read_cells(folders)
    complete = {cell: rows for cell, rows in cells.items() if len(rows) >= args.problems}
    rows = [
        {**row, "strategy": label(verifier, strategy)}
        for (verifier, strategy, _, _), group in complete.items()
        for row in group
    ]
    summary = summarize(rows, "gsm8k (Qwen2.5-Coder-0.5B policy, vLLM CPU)", args.problems)
    verifier_by_label = {label(v, s): v for v, s, _, _ in complete}
    out = [
        f"| strategy | scored by | n | right / {args.problems} | 95% CI | pass@n "
        "| generated tokens / problem | FLOPs / problem |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in sorted(summary["runs"], key=lambda r: (r["budget"], r["strategy"])):
        strategy = run["strategy"].split(" [")[0]
        lo, hi = run["ci95"]
        passed = run.get("pass_at_n")
        out.append(
            f"| {strategy} | {verifier_by_label[run['strategy']]} | {run['budget']} | "
            f"{round(run['accuracy'] * args.problems)} | {100 * lo:.0f}-{100 * hi:.0f} | "
            f"{'-' if passed is None else f'{100 * passed:.0f}'} | {run['generated_tokens']:,.0f} | "
            f"{run['flops']:.2g} |"
        )
    print("\n".join(out))
    print(voting_at_equal_flops(summary, verifier_by_label))
    partial = sorted(cell for cell in cells if cell not in complete)
    if partial:
        print("Partial cells (not in the table):\n")
        for cell in partial:
            group = cells[cell]
            right = sum(bool(r["correct"]) for r in group)
            verifier, strategy, budget, seed = cell
            print(f"- {strategy} n={budget} seed {seed}, {verifier}: {len(group)} of {args.problems} "
                  f"rows, {right} right ({source[cell].name})")
    if args.plot:
        if not plot_accuracy(summary, args.plot):
            print("matplotlib is not installed: no plot", file=sys.stderr)
        else:
            print(f"\nplot: {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
