"""The label-source study of "The Lessons of Developing PRMs" on the embedded arithmetic domain.

Input: three ``prmsearch label --method consensus`` runs (train, validation and test problems)
whose rows carry MC values, the judge's verdict and the consensus label, so every source labels
the very same policy solutions. The exact checker plays human annotation. The script

1. measures each source's label quality against the checker (first-error accuracy, wrong-step
   precision and recall, retention);
2. trains one PRM per source (``mc``, ``judge``, ``consensus``) with the same recipe, at each
   learning rate of ``--lrs``, from the same base model;
3. chooses, per source, the learning rate with the best first-error F1 on the validation
   solutions (labelled by the checker), and reads the validation search accuracy (best-of-16,
   weighted-vote-16, beam-16) of the chosen PRMs and of the references (the shipped PRM, the base
   model's own token confidence, the exact checker);
4. reads the test split once, for the chosen PRMs and the references: step-level F1, the bias
   measures, and search accuracy.

Every finished part is cached in ``--out`` (a killed run continues where it stopped), and the
tables are printed and written to ``--out/report.md``. ``--smoke`` runs the whole chain in
seconds on tiny settings (CI runs it).

    python -m training.prm_label_study --labels runs/study3k --base runs/prm-final/base \
        --out runs/study3k/study
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOURCES = ("mc", "judge", "consensus")
SPLITS = ("train", "validation", "test")


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of one labelling run (``labels.jsonl``), errors left out."""
    from prmsearch.prm.labelling import labels_folder

    rows = [row for row in labels_folder(folder).rows() if row["status"] != "error" and row["completions"]]
    if not rows:
        raise SystemExit(
            f"{folder} holds no labelled solutions: run `prmsearch label --method consensus` first"
        )
    return rows


def source_rows(rows: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """The stepwise rows (prompt, completions, labels) that ``source`` labels."""
    from prmsearch.prm.labelling import labels_from_first_error

    out = []
    for row in rows:
        if source == "consensus":
            labels = row["labels"] if row["status"] == "labelled" else None
        else:
            first = row["mc_first_error"] if source == "mc" else row["judge_first_error"]
            labels = None if first is None else labels_from_first_error(len(row["completions"]), first)
        if labels is not None:
            out.append({"prompt": row["prompt"], "completions": row["completions"], "labels": labels})
    return out


def checker_candidates(rows: list[dict[str, Any]]):
    """Every solution labelled by the exact checker: the reference for the step-level figures."""
    from prmsearch.arith.checker import check_solution
    from prmsearch.benchmarks.prm_eval.prm_bias import LabelledCandidate
    from training.arith.label_quality import problems_by_id

    problems = problems_by_id({row["problem_id"] for row in rows})
    out = []
    for row in rows:
        check = check_solution(problems[row["problem_id"]], tuple(row["completions"]))
        out.append(LabelledCandidate(row["problem_id"], row["prompt"], tuple(row["completions"]),
                                     check.first_error, bool(row["answer_correct"])))  # fmt: skip
    return out


def cached(path: Path, compute: Callable[[], Any]) -> Any:
    """A finished part of an earlier run of the same study, else ``compute()`` saved to ``path``."""
    if path.exists():
        return json.loads(path.read_text())
    value = compute()
    path.write_text(json.dumps(value, indent=2) + "\n")
    return value


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--labels", default="runs/study3k", help="folder with labels-train, -validation, -test"
    )
    parser.add_argument("--base", default="runs/prm-final/base", help="the model every PRM starts from")
    parser.add_argument("--out", default="runs/study3k/study", help="output folder (cached parts are reused)")
    parser.add_argument("--steps", type=int, default=1200, help="training steps per PRM")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--lrs", default="5e-4,1e-4", help="learning rates tried per source (chosen on validation)"
    )
    parser.add_argument("--search-n", type=int, default=16, help="N of best-of-N, weighted vote and beam")
    parser.add_argument(
        "--search-problems", type=int, default=200, help="problems per split for search accuracy"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--smoke", action="store_true", help="tiny settings: the chain in seconds (CI)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.smoke:
        args.steps, args.lrs, args.search_n, args.search_problems = 3, "5e-4", 2, 3
    from prmsearch.arith.defaults import default_prm_path
    from prmsearch.arith.models import default_policy_path
    from prmsearch.arith.oracle import CheckerScorer
    from prmsearch.arith.problems import load_split
    from prmsearch.benchmarks.prm_eval.prm_bias import bias_report, score_candidates
    from prmsearch.policies.hf import HFPolicy
    from prmsearch.prm.stepwise_train import StepwiseTrainConfig, train_stepwise_prm
    from prmsearch.scorers.confidence import PolicyConfidenceScorer
    from prmsearch.scorers.hf import HFPRMScorer
    from training.arith.evaluate import search_accuracy
    from training.arith.label_quality import label_quality

    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = Path(args.labels)
    rows = {split: read_rows(labels / f"labels-{split}") for split in SPLITS}
    report: dict[str, Any] = {"quality": {s: label_quality(rows[s], (0.0, 0.5)) for s in SPLITS}}
    candidates = {s: checker_candidates(rows[s]) for s in ("validation", "test")}
    lrs = [float(v) for v in args.lrs.split(",")]

    # 2. one PRM per source and learning rate, same recipe and base
    trained: dict[str, dict[float, dict[str, Any]]] = {}
    for source in SOURCES:
        data = source_rows(rows["train"], source)
        if not data:
            print(f"[{source}] no training solutions carry its labels: no PRM for it", flush=True)
            continue
        for lr in lrs:
            folder = out / f"prm-{source}-lr{lr:g}"
            cfg = StepwiseTrainConfig(steps=args.steps, batch_size=args.batch_size, lr=lr,
                                      warmup=max(1, args.steps // 20), validation_fraction=0.0,
                                      device="cpu", log_every=max(1, args.steps // 24))  # fmt: skip
            report_path = folder / "train_report.json"
            if not report_path.exists():
                log = []
                train_stepwise_prm(
                    args.base, data, folder, cfg, log=lambda line, log=log: (print(line), log.append(line))
                )
                (folder / "train_log.txt").write_text("\n".join(log) + "\n")
            train = json.loads(report_path.read_text())
            scorer = HFPRMScorer(folder, "qwen-prm", device="cpu")
            val = cached(folder / "validation-steps.json", lambda scorer=scorer: bias_report(
                candidates["validation"], score_candidates(scorer, candidates["validation"])))
            trained.setdefault(source, {})[lr] = {"folder": str(folder), "train": train, "validation": val,
                                                   "rows": len(data)}  # fmt: skip
            print(
                f"[{source} lr {lr:g}] rows {len(data)} loss {train['loss_first']:.3f} -> "
                f"{train['loss_last']:.3f} validation F1 {val['step']['f1']:.3f}",
                flush=True,
            )

    # 3. the choice, on validation only
    chosen = {
        s: max(lrs, key=lambda lr, s=s: (trained[s][lr]["validation"]["step"]["f1"], -lr)) for s in trained
    }
    report["trained"] = {s: {f"{lr:g}": v for lr, v in by_lr.items()} for s, by_lr in trained.items()}
    report["chosen_lr"] = dict(chosen)
    policy = HFPolicy(model=str(default_policy_path()), device="cpu")
    scorers: dict[str, Callable[[], Any]] = {
        f"PRM on {s} labels": (
            lambda s=s: HFPRMScorer(trained[s][chosen[s]]["folder"], "qwen-prm", device="cpu")
        )
        for s in trained
    }
    scorers["shipped PRM"] = lambda: HFPRMScorer(default_prm_path(), "qwen-prm", device="cpu")
    scorers["base-model confidence (no PRM)"] = lambda: PolicyConfidenceScorer(str(args.base), device="cpu")
    scorers["exact checker (oracle)"] = CheckerScorer

    def search(scorer, split: str) -> dict[str, float]:
        problems = load_split(split, min(args.search_problems, 200))
        n, kw = args.search_n, {"temperature": 0.8, "seed": 0}
        return {
            "best_of_n": search_accuracy(policy, scorer, problems, "best_of_n", n, **kw),
            "weighted_vote": search_accuracy(policy, scorer, problems, "weighted_vote", n, **kw),
            "beam": search_accuracy(policy, scorer, problems, "beam", n, width=min(4, n), **kw),
        }

    # 3b and 4: validation search figures, then the test split read once
    for split in ("validation", "test"):
        report[split] = {}
        for name, make in scorers.items():
            slug = name.split(" (")[0].replace(" ", "-")
            path = out / f"{split}-{slug}.json"

            def evaluate(make=make, split=split) -> dict[str, Any]:
                scorer = make()
                steps = bias_report(candidates[split], score_candidates(scorer, candidates[split]))
                return {"steps": steps, "search": search(scorer, split)}

            report[split][name] = cached(path, evaluate)
            print(f"[{split}] {name}: {report[split][name]['search']}", flush=True)
    report["wall_s"] = time.perf_counter() - started
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report, args)
    (out / "report.md").write_text(text)
    print(text)
    return 0


def markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    """The study's tables: label quality, training, validation and test."""
    lines = ["## Label quality against the exact checker (training solutions)", "",
             "| labels | solutions | retention | first-error accuracy | wrong-step precision | "
             "wrong-step recall |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in report["quality"]["train"].items():
        lines.append(
            f"| {name} | {r['solutions']} | {pct(r['retention'])} | {pct(r['first_error_accuracy'])} | "
            f"{pct(r['wrong_step_precision'])} | {pct(r['wrong_step_recall'])} |"
        )
    lines += [
        "",
        f"## Training ({args.steps} steps x {args.batch_size} solutions per PRM)",
        "",
        "| source | lr | rows | loss first -> last | validation first-error F1 |",
        "|---|---|---|---|---|",
    ]
    for source, by_lr in report["trained"].items():
        for lr, t in by_lr.items():
            mark = " (chosen)" if float(lr) == report["chosen_lr"][source] else ""
            lines.append(
                f"| {source} | {lr}{mark} | {t['rows']} | {t['train']['loss_first']:.3f} -> "
                f"{t['train']['loss_last']:.3f} | {t['validation']['step']['f1']:.3f} |"
            )
    for split in ("validation", "test"):
        title = "Validation (the choice is made here)" if split == "validation" else "Test, read once"
        lines += ["", f"## {title}", "",
                  "| scorer | first-error F1 | best-of-16 | weighted-vote-16 | beam-16 | "
                  "right answer, wrong step, ranked first | lowest score on the final step | "
                  "lowest score at the first error |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for name, r in report[split].items():
            st, se = r["steps"], r["search"]
            lines.append(
                f"| {name} | {st['step']['f1']:.3f} | {pct(se['best_of_n'])} | {pct(se['weighted_vote'])} | "
                f"{pct(se['beam'])} | {pct(st['right_answer_wrong_step']['ranked_first'])} | "
                f"{pct(st['min_on_last_step']['all'])} | "
                f"{pct(st['min_on_last_step']['min_at_first_error'])} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
