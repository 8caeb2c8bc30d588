"""The samples of a benchmark's best-of-N cell as `prmsearch aggregate` rows, so that any verifier
can re-pick from the same samples: a paired comparison, with no new generation.

A real model's samples cost hours of CPU, and the vLLM CPU engine does not draw the same samples
twice, so comparing two scorers by two benchmark runs compares different sample sets. Run the
benchmark once with ``--save-trees``, export its samples, then score them with each verifier:

    python scripts/export_samples.py export RUNS/bon16 samples.jsonl --strategy best_of_n --budget 16
    prmsearch aggregate samples.jsonl --ns 1,4,16 --out RUNS/agg-pc        # the run's own scores
    prmsearch aggregate samples.jsonl --ns 1,4,16 --rescore --prm DIR --prm-family qwen-prm

Each row: ``id``, ``question``, the gold ``answer``, ``responses`` (each sample's steps joined by
the blank-line delimiter) and ``scores`` (each sample's step scores from the run's scorer).
``--strip`` writes ``question: null`` (the repository keeps no benchmark data); ``restore``
puts the questions back from the dataset by id.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from label_questions import add_restore_parser

DELIMITER = "\n\n"


def sample_paths(tree: dict[str, Any]) -> list[tuple[list[str], list[float]]]:
    """Each leaf's steps and step scores, root to leaf, in node order (a best-of-N tree is one
    path per sample)."""
    nodes = {node["id"]: node for node in tree["nodes"]}
    parents = {node["parent"] for node in tree["nodes"]}
    samples = []
    for node in tree["nodes"]:
        if node["parent"] < 0 or node["id"] in parents:
            continue
        steps: list[str] = []
        scores: list[float] = []
        at = node
        while at["parent"] >= 0:
            steps.append(at["step_text"])
            scores.append(at["score"])
            at = nodes[at["parent"]]
        samples.append((steps[::-1], scores[::-1]))
    return samples


def export(run: Path, out: Path, strategy: str, budget: int, seed: int, strip: bool) -> int:
    """Write one aggregate row per problem of the cell; returns the rows written."""
    from prmsearch.benchmarks.sweeps.trees import TreesFolder
    from prmsearch.tree_graph import read_tree_graph

    trees = TreesFolder.of_run(run)
    written = 0
    with (run / "results.jsonl").open(encoding="utf-8") as read, out.open("w", encoding="utf-8") as write:
        for line in read:
            row = json.loads(line)
            if (row["strategy"], row["budget"], row["seed"]) != (strategy, budget, seed) or row.get("error"):
                continue
            path = trees.tree_path((row["qid"], strategy, budget, seed))
            if not path.exists():
                continue
            graph = read_tree_graph(path)
            samples = sample_paths(graph)
            if not samples:
                continue
            write.write(json.dumps({
                "id": row["qid"],
                "question": None if strip else graph["graph"]["question"],
                "answer": row["gold"],
                "responses": [DELIMITER.join(steps) for steps, _ in samples],
                # a step nothing scored leaves the row to be scored by `aggregate --prm`
                "scores": (None if any(s is None for _, scores in samples for s in scores)
                           else [scores for _, scores in samples]),
            }) + "\n")
            written += 1
    return written


def restore(source: Path, out: Path, dataset: str, split: str | None) -> int:
    """Copy stripped rows with each question read back from the dataset by id."""
    from prmsearch.benchmarks.datasets import load_dataset
    from prmsearch.benchmarks.sweeps.sweep import sweep_problems

    questions = {p.qid: p.question for p in sweep_problems(load_dataset(dataset, split=split))}
    written = 0
    with source.open(encoding="utf-8") as read, out.open("w", encoding="utf-8") as write:
        for number, line in enumerate(read, start=1):
            row = json.loads(line)
            if row["id"] not in questions:
                raise SystemExit(f"{source}:{number}: problem {row['id']!r} is not in {dataset} "
                                 f"{split or ''}")
            write.write(json.dumps({**row, "question": questions[row["id"]]}) + "\n")
            written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    out = sub.add_parser("export", help="a bench folder's saved trees of one cell as aggregate rows")
    out.add_argument("run", type=Path, help="a `prmsearch bench --save-trees` folder")
    out.add_argument("out", type=Path, help="the JSONL file to write")
    out.add_argument("--strategy", default="best_of_n")
    out.add_argument("--budget", type=int, required=True)
    out.add_argument("--seed", type=int, default=0)
    out.add_argument("--strip", action="store_true", help="write question: null")
    add_restore_parser(sub, "stripped rows with their questions read back")
    args = parser.parse_args(argv)
    if args.command == "export":
        rows = export(args.run, args.out, args.strategy, args.budget, args.seed, args.strip)
    else:
        rows = restore(args.source, args.target, args.dataset, args.split)
    print(f"{rows} rows: {args.out if args.command == 'export' else args.target}", file=sys.stderr)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
