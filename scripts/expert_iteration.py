"""Expert iteration on the embedded arithmetic domain: search, export, fine-tune, measure.

Each round searches fresh train problems with beam@16 and the shipped PRM, exports the best right
path of each problem (``--paths best-correct``), fine-tunes the policy on them with TRL's SFT and
measures greedy, majority@16 and beam@16. Two settings: ``gold`` grades paths against the gold
answer (expert iteration); ``vote`` never reads the gold and grades against the PRM-weighted vote
of the tree (the TTRL setting). A ``dpo`` arm trains the base policy with DPO on the step pairs of
round 1's trees instead. Learning rates are chosen on the validation split only; the test split is
measured once per chosen policy.

Every stage writes into ``--out`` and is skipped when its output is complete, so a killed run
continues where it stopped (a search resumes row by row with ``bench --resume``).

    python scripts/expert_iteration.py --out RUNS/expert-iteration --problems 2000 --rounds 2
    python scripts/expert_iteration.py --out RUNS/ei-small --problems 40 --rounds 1 --lrs 3e-4 \
        --eval-limit 20 --settings gold          # a smoke run (minutes)

The table goes to ``OUT/table.md`` and ``OUT/table.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

from prmsearch.arith.models import default_policy_path
from prmsearch.arith.problems import iter_split

#: The shipped policy trained on the first 57,600 train problems; rounds start past them.
FIRST_FRESH_PROBLEM = 60_000
EVAL_CELLS = (("greedy", 1), ("self_consistency", 16), ("beam", 16))
#: The shipped policy's greedy accuracy moves with the learning rate: tried on validation only.


def prmsearch(*args: str, log: Path) -> None:
    """Run one prmsearch command, its output appended to ``log``; a failure stops the script."""
    command = [sys.executable, "-m", "prmsearch", *args]
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"\n$ prmsearch {' '.join(args)}\n")
        handle.flush()
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"`prmsearch {' '.join(args)}` failed ({done.returncode}); see {log}")


def write_problems(path: Path, start: int, count: int) -> None:
    """Train problems ``start`` .. ``start + count`` of the stream, as question/answer rows."""
    if path.is_file() and sum(1 for _ in path.open()) == count:
        return
    rows = itertools.islice(iter_split("train"), start, start + count)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        for problem in rows:
            handle.write(
                json.dumps({"id": problem.id, "question": problem.question, "answer": str(problem.answer)})
                + "\n"
            )
    temporary.replace(path)


def accuracy(run: Path) -> dict[str, float]:
    """``strategy@budget -> accuracy`` from a bench run's summary."""
    summary = json.loads((run / "summary.json").read_text())
    return {f"{r['strategy']}@{r['budget']}": r["accuracy"] for r in summary["runs"]}


def search_cost(run: Path) -> dict[str, float]:
    summary = json.loads((run / "summary.json").read_text())
    cell = summary["runs"][0]
    n = summary["n_problems"]
    return {
        "problems": n,
        "generated_tokens": cell["generated_tokens"] * n,
        "flops": cell["flops"] * n,
        "wall_s": cell["wall_s"] * n,
        "search_accuracy": cell["accuracy"],
    }


def evaluate(
    policy: Path | None, split: str, out: Path, limit: int | None, threads: int, log: Path, full: bool = True
) -> dict:
    """Accuracy of ``policy`` on ``split``: greedy, majority@16 and beam@16 (``full``), or greedy only
    (how learning rates are compared on validation)."""
    strategies = ",".join(s for s, _ in EVAL_CELLS) if full else "greedy"
    args = [
        "bench",
        "--dataset",
        "arith",
        "--split",
        split,
        "--strategies",
        strategies,
        "--budgets",
        "16",
        "--threads",
        str(threads),
        "--no-progress",
        "--out",
        str(out),
    ]
    if policy is not None:
        args += ["--policy", str(policy)]
    if limit:
        args += ["--limit", str(limit)]
    if not (out / "summary.json").is_file():
        prmsearch(*args, *(["--resume"] if (out / "manifest.json").is_file() else []), log=log)
    return accuracy(out)


def train(
    data: Path, base: Path, out: Path, method: str, lr: float, epochs: float, threads: int, log: Path
) -> Path:
    if not (out / "training.json").is_file():
        prmsearch(
            "train-policy",
            str(data),
            "--method",
            method,
            "--base",
            str(base),
            "--out",
            str(out),
            "--lr",
            str(lr),
            "--epochs",
            str(epochs),
            "--threads",
            str(threads),
            log=log,
        )
    return out


def choose_and_measure(data, base, prefix, method, lrs, epochs, args, timed, log):
    """Train ``base`` on ``data`` at each learning rate, keep the best greedy accuracy on
    validation (the smaller rate on ties), and measure it once on test.

    Returns (chosen folder, its validation figures, its test figures, greedy accuracy of each tried).
    """
    candidates = []
    for lr in lrs:
        trained = timed(
            "train", train, data, base, args.out / f"{prefix}-lr{lr:g}", method, lr, epochs, args.threads, log
        )
        val = timed(
            "eval",
            evaluate,
            trained,
            "validation",
            trained.with_name(trained.name + "-validation"),
            args.eval_limit,
            args.threads,
            log,
            full=False,
        )
        candidates.append((val["greedy@1"], -lr, trained, val))
    _, _, chosen, val = max(candidates, key=lambda c: (c[0], c[1]))
    test = timed(
        "eval",
        evaluate,
        chosen,
        "test",
        chosen.with_name(chosen.name + "-test"),
        args.eval_limit,
        args.threads,
        log,
    )
    return chosen, val, test, {c[2].name: c[3]["greedy@1"] for c in candidates}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--problems", type=int, default=2000, help="fresh train problems searched per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", default="gold,vote", help="comma-separated: gold, vote")
    parser.add_argument(
        "--lrs", default="3e-5,1e-4,3e-4", help="SFT learning rates tried (chosen on validation)"
    )
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument(
        "--dpo", action="store_true", help="also train the base with DPO on round 1's step pairs"
    )
    parser.add_argument("--dpo-lrs", default="1e-6,1e-5")
    parser.add_argument(
        "--dpo-max-pairs", type=int, default=0, help="at most K step pairs per problem (0: no limit)"
    )
    parser.add_argument(
        "--eval-limit", type=int, default=None, help="first N problems of validation/test only"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    base = default_policy_path()
    table: list[dict] = []
    timings: dict[str, float] = {}

    def timed(name: str, fn, *a, **kw):
        started = time.perf_counter()
        result = fn(*a, **kw)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started
        return result

    base_val = timed(
        "eval", evaluate, None, "validation", out / "base-validation", args.eval_limit, args.threads, log
    )
    base_test = timed("eval", evaluate, None, "test", out / "base-test", args.eval_limit, args.threads, log)
    table.append({"setting": "base", "round": 0, "validation": base_val, "test": base_test})
    lrs = [float(x) for x in args.lrs.split(",")]
    searched: dict[int, Path] = {}
    for setting in [s.strip() for s in args.settings.split(",") if s.strip()]:
        policy, policy_path = None, base
        for round_ in range(1, args.rounds + 1):
            problems = out / f"problems-r{round_}.jsonl"
            write_problems(problems, FIRST_FRESH_PROBLEM + (round_ - 1) * args.problems, args.problems)
            # round 1 searches with the shipped policy, shared by both settings
            search = out / (f"r{round_}-search" if round_ == 1 else f"{setting}-r{round_}-search")
            if not (search / "summary.json").is_file():
                flags = [
                    "bench",
                    "--dataset",
                    str(problems),
                    "--strategies",
                    "beam",
                    "--budgets",
                    "16",
                    "--save-trees",
                    "--threads",
                    str(args.threads),
                    "--no-progress",
                    "--out",
                    str(search),
                ]
                if policy is not None:
                    flags += ["--policy", str(policy)]
                timed(
                    "search",
                    prmsearch,
                    *flags,
                    *(["--resume"] if (search / "manifest.json").is_file() else []),
                    log=log,
                )
            searched[round_] = search
            data = out / f"{setting}-r{round_}-sft"
            if not (data / "export.json").is_file():
                reference = "gold" if setting == "gold" else "vote"
                timed(
                    "export",
                    prmsearch,
                    "export",
                    str(search),
                    "--kind",
                    "sft",
                    "--paths",
                    "best-correct",
                    "--reference",
                    reference,
                    "--out",
                    str(data),
                    "--format",
                    "jsonl,disk",
                    log=log,
                )
            chosen, val, test, tried = choose_and_measure(
                data, policy_path, f"{setting}-r{round_}", "sft", lrs, args.epochs, args, timed, log
            )
            card = json.loads((data / "export.json").read_text())
            table.append(
                {
                    "setting": setting,
                    "round": round_,
                    "chosen": chosen.name,
                    "validation": val,
                    "test": test,
                    "rows": card["counts"]["rows"],
                    "search": search_cost(search),
                    "tried": tried,
                }
            )
            policy = policy_path = chosen
    if args.dpo and 1 in searched:
        pairs = out / "dpo-r1-pairs"
        if not (pairs / "export.json").is_file():
            prmsearch(
                "export",
                str(searched[1]),
                "--kind",
                "preference",
                "--pairs",
                "step",
                "--reference",
                "gold",
                "--out",
                str(pairs),
                "--max-pairs",
                str(args.dpo_max_pairs),
                log=log,
            )
        dpo_lrs = [float(x) for x in args.dpo_lrs.split(",")]
        chosen, val, test, tried = choose_and_measure(
            pairs, base, "dpo-r1", "dpo", dpo_lrs, 1.0, args, timed, log
        )
        card = json.loads((pairs / "export.json").read_text())
        table.append(
            {
                "setting": "dpo-step-pairs",
                "round": 1,
                "chosen": chosen.name,
                "validation": val,
                "test": test,
                "rows": card["counts"]["rows"],
                "tried": tried,
            }
        )
    (out / "table.json").write_text(json.dumps({"rows": table, "timings_s": timings}, indent=2) + "\n")
    lines = [
        "| setting | round | rows | val greedy | test greedy | test majority@16 | test beam@16 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        t, v = row["test"], row["validation"]
        lines.append(
            f"| {row['setting']} | {row['round']} | {row.get('rows', '-')} | {100 * v['greedy@1']:.1f} | "
            f"{100 * t['greedy@1']:.1f} | {100 * t['self_consistency@16']:.1f} | {100 * t['beam@16']:.1f} |"
        )
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
