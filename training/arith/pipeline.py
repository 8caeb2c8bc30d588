"""The whole PRM experiment: label policy samples three ways, train one PRM per label source with
the same budget, evaluate each, print the table, and optionally ship the best.

    python -m training.train_arith_prm --out runs/prm [--ship] [--smoke] [--base DIR]

Every PRM body starts from a base model: by default one of the policy's shape trained longer on
gold solutions (``OUT/base``, trained first: the policy's recipe run to 1,400 steps), the way
Qwen2.5-Math-PRM-7B starts from a model stronger than the 1.5B policy it guides; ``--base DIR``
uses a finished one (the policy itself is a valid but weak choice).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prmsearch.arith.checker import check_solution
from prmsearch.arith.oracle import CheckerScorer
from prmsearch.arith.problems import load_split
from training.arith.evaluate import first_error_report, score_solutions, search_accuracy
from training.arith.labels import (
    LabelledSolution,
    LabelSource,
    RolloutConfig,
    corrupted_gold,
    label_solutions,
)
from training.arith.policy_train import TrainConfig, smoke_config, train_command, train_policy
from training.arith.prm_train import PRMTrainConfig, train_prm

SOURCES = (LabelSource.CHECKER, LabelSource.MC, LabelSource.CONSENSUS)
#: variants trained only when named in ``--variants`` (see the model card for their figures)
OPT_IN_VARIANTS = ("checker+synthetic-steps",)


@dataclass(frozen=True)
class PipelineConfig:
    """Sizes of the experiment (the defaults are the shipped run)."""

    train_problems: int = 600
    samples: int = 4
    rollouts: int = 4
    heldout_problems: int = 100
    heldout_samples: int = 4
    validation_problems: int = 200
    test_problems: int = 200
    search_n: int = 16
    temperature: float = 0.8
    synthetic_problems: int = 20000
    synthetic_error_rate: float | None = 0.3
    #: the checker+synthetic-steps variant's synthetic errors: per-step rate and the weights of a
    #: wrong result, operand and operation (results stay as frequent as in the shipped variant)
    steps_error_rate: float = 0.4
    steps_kind_weights: tuple[float, float, float] = (0.75, 0.125, 0.125)
    train: PRMTrainConfig = dataclasses.field(
        default_factory=lambda: PRMTrainConfig(steps=400, extra_layers=2)
    )
    shipped_train: PRMTrainConfig = dataclasses.field(
        default_factory=lambda: PRMTrainConfig(
            steps=2000, dense_weight=1.0, dense_mode="local", extra_layers=2
        )
    )
    steps_train: PRMTrainConfig = dataclasses.field(
        default_factory=lambda: PRMTrainConfig(
            steps=2000, dense_weight=1.0, dense_mode="steps", extra_layers=2
        )
    )
    seed: int = 0
    variants: tuple[str, ...] | None = None
    base: TrainConfig = dataclasses.field(default_factory=lambda: TrainConfig(steps=1400, seed=0))

    @classmethod
    def smoke(cls) -> PipelineConfig:
        return cls(
            train_problems=6,
            samples=2,
            rollouts=2,
            heldout_problems=4,
            heldout_samples=2,
            validation_problems=4,
            test_problems=4,
            search_n=4,
            synthetic_problems=8,
            base=smoke_config(),
            train=PRMTrainConfig(steps=3, batch_size=4, lm_batch=2, extra_layers=1),
            shipped_train=PRMTrainConfig(
                steps=3, batch_size=4, lm_batch=2, dense_weight=1.0, dense_mode="local", extra_layers=1
            ),
            steps_train=PRMTrainConfig(
                steps=3, batch_size=4, lm_batch=2, dense_weight=1.0, dense_mode="steps", extra_layers=1
            ),
        )


def _save_labels(path: Path, solutions: Sequence[LabelledSolution]) -> None:
    with path.open("w") as handle:
        for sol in solutions:
            handle.write(json.dumps(dataclasses.asdict(sol)) + "\n")


def _load_labels(path: Path) -> list[LabelledSolution]:
    out = []
    for line in path.read_text().splitlines():
        data = json.loads(line)
        data["steps"] = tuple(data["steps"])
        data["checker"] = tuple(data["checker"])
        data["mc_soft"] = tuple(data["mc_soft"])
        out.append(LabelledSolution(**data))
    return out


def run(policy_dir: Path, out: Path, cfg: PipelineConfig, log=print, base_dir: Path | None = None) -> dict:
    """Label, train, evaluate; returns the report (also written to ``out/report.json``).

    ``base_dir`` is the model the PRM bodies start from; by default ``out/base``, trained here
    with ``cfg.base`` (the policy's recipe, run longer) unless a finished one is already there.
    """
    if base_dir is None:
        base_dir = out / "base"
        if not (base_dir / "model.safetensors").exists():
            log(f"training the PRM's base model into {base_dir}")
            train_policy(cfg.base, base_dir, command=train_command(cfg.base, base_dir), log=log)
    from prmsearch.policies.hf import HFPolicy
    from prmsearch.scorers.confidence import PolicyConfidenceScorer
    from prmsearch.scorers.hf import HFPRMScorer

    out.mkdir(parents=True, exist_ok=True)
    policy = HFPolicy(model=str(policy_dir), device="cpu")
    labels_path = out / "labels.jsonl"
    train_problems = load_split("train", cfg.train_problems)
    started = time.perf_counter()
    if labels_path.exists():
        solutions = _load_labels(labels_path)
        log(f"reusing {len(solutions)} labelled solutions from {labels_path}")
    else:
        solutions = label_solutions(
            policy, train_problems, RolloutConfig(cfg.samples, cfg.rollouts), seed=cfg.seed
        )
        _save_labels(labels_path, solutions)
        log(f"labelled {len(solutions)} solutions in {time.perf_counter() - started:.0f}s")

    heldout = load_split("validation", cfg.heldout_problems)
    held = label_solutions(policy, heldout, RolloutConfig(cfg.heldout_samples, 0), seed=cfg.seed + 1)
    held_labels = [
        check_solution(p, s.steps).first_error for p in heldout for s in held if s.problem_id == p.id
    ]
    held_pairs = [(s.question, s.steps) for p in heldout for s in held if s.problem_id == p.id]
    validation = load_split("validation", cfg.validation_problems)
    test = load_split("test", cfg.test_problems)

    def search_figures(scorer, problems) -> dict:
        n, t, seed = cfg.search_n, cfg.temperature, cfg.seed
        return {
            "best_of_n": search_accuracy(policy, scorer, problems, "best_of_n", n, temperature=t, seed=seed),
            "weighted_vote": search_accuracy(
                policy, scorer, problems, "weighted_vote", n, temperature=t, seed=seed
            ),
            "beam": search_accuracy(policy, scorer, problems, "beam", n, temperature=t, seed=seed, width=4),
        }

    def evaluate(scorer) -> dict:
        """Held-out F1 and search accuracy on the VALIDATION split: what variants are chosen by."""
        scores = score_solutions(scorer, [q for q, _ in held_pairs], [s for _, s in held_pairs])
        f1 = first_error_report(held_labels, scores, 0.5)
        return {
            "f1": f1.f1,
            "acc_erroneous": f1.accuracy_erroneous,
            "acc_correct": f1.accuracy_correct,
            **search_figures(scorer, validation),
        }

    stream = load_split("train", cfg.train_problems + cfg.synthetic_problems)
    synthetic_problems = stream[cfg.train_problems :]

    def synthetic() -> list[LabelledSolution]:
        return corrupted_gold(
            synthetic_problems, np.random.default_rng(cfg.seed), step_error_rate=cfg.synthetic_error_rate
        )

    def synthetic_all_kinds() -> list[LabelledSolution]:
        """The same problems with every kind of error (wrong result, operand or operation), for the
        variant whose local targets cover each step's value, operation and operand too."""
        return corrupted_gold(
            synthetic_problems, np.random.default_rng(cfg.seed + 1), step_error_rate=cfg.steps_error_rate,
            results_only=False, kind_weights=cfg.steps_kind_weights,
        )

    by_id = {p.id: p for p in [*train_problems, *synthetic_problems]}
    # (name, training data (built only when the variant trains), label source, training config)
    variants = [
        ("checker+synthetic", lambda: [*solutions, *synthetic()], LabelSource.CHECKER, cfg.shipped_train),
        ("checker+synthetic-steps", lambda: [*solutions, *synthetic_all_kinds()], LabelSource.CHECKER,
         cfg.steps_train),
    ]  # fmt: skip
    variants += [(source.value, lambda: solutions, source, cfg.train) for source in SOURCES]
    if cfg.variants is not None:
        unknown = set(cfg.variants) - {name for name, *_ in variants}
        if unknown:
            raise ValueError(f"unknown variants {sorted(unknown)}; known: {[n for n, *_ in variants]}")
        variants = [v for v in variants if v[0] in cfg.variants]
    else:  # the default run: the variants of the shipped choice (the steps variant lost on validation)
        variants = [v for v in variants if v[0] not in OPT_IN_VARIANTS]
    report: dict = {
        "config": dataclasses.asdict(cfg),
        "base": str(base_dir),
        "label_stats": _label_stats(solutions),
        "prms": {},
    }

    def cached(path: Path, compute) -> dict:
        """Reuse a finished part of an interrupted run (same folder, same configuration)."""
        if path.exists():
            return json.loads(path.read_text())
        result = compute()
        path.write_text(json.dumps(result) + "\n")
        return result

    for name, make_data, source, train_cfg in variants:
        folder = out / f"prm-{name}"

        def train_and_evaluate(folder=folder, make_data=make_data, source=source, train_cfg=train_cfg
                               ) -> dict:  # fmt: skip
            t0 = time.perf_counter()
            if _trained_with(folder) == (dataclasses.asdict(train_cfg), source.value, str(base_dir)):
                log(f"[{folder.name}] reusing the model already trained with this configuration in {folder}")
            else:
                train_prm(base_dir, make_data(), source, train_problems, train_cfg, out=folder, log=log,
                          problems=by_id)  # fmt: skip
                _record_base(folder, base_dir)
            figures = evaluate(HFPRMScorer(folder, "qwen-prm", device="cpu"))
            return {**figures, "train_s": time.perf_counter() - t0}

        report["prms"][name] = cached(out / f"eval-{name}.json", train_and_evaluate)
        log(f"[{name}] " + ", ".join(f"{k} {v:.3f}" for k, v in report["prms"][name].items()))
    report["references"] = {
        "policy-confidence (no PRM)": cached(
            out / "eval-policy-confidence.json",
            lambda: evaluate(PolicyConfidenceScorer(str(policy_dir), device="cpu", aggregation="min")),
        ),
        "exact checker (oracle)": cached(out / "eval-oracle.json", lambda: evaluate(CheckerScorer())),
    }
    # The choice is made on validation; the test split is read once, for the chosen PRM and the
    # references and baselines it is compared with (none of which is chosen by it).
    chosen = best_source(report)
    report["chosen"] = chosen
    report["test"] = {
        f"PRM: {chosen}": cached(
            out / f"test-{chosen}.json",
            lambda: search_figures(HFPRMScorer(out / f"prm-{chosen}", "qwen-prm", device="cpu"), test),
        ),
        "policy-confidence (no PRM)": cached(
            out / "test-policy-confidence.json",
            lambda: search_figures(
                PolicyConfidenceScorer(str(policy_dir), device="cpu", aggregation="min"), test
            ),
        ),
        "exact checker (oracle)": cached(
            out / "test-oracle.json", lambda: search_figures(CheckerScorer(), test)
        ),
    }
    report["baselines"] = {
        "majority": search_accuracy(
            policy,
            _constant_scorer(),
            test,
            "self_consistency",
            cfg.search_n,
            temperature=cfg.temperature,
            seed=cfg.seed,
        ),
        "greedy": search_accuracy(policy, _constant_scorer(), test, "greedy", 1, seed=cfg.seed),
    }
    report["wall_s"] = time.perf_counter() - started
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    log(markdown(report))
    return report


def _trained_with(folder: Path) -> tuple[dict, str, str] | None:
    """The training configuration, label source and base model recorded in a PRM folder, if any."""
    meta = folder / "prmsearch.json"
    if not (meta.exists() and (folder / "model.safetensors").exists()):
        return None
    data = json.loads(meta.read_text())
    return data.get("trained_with"), data.get("label_source"), data.get("base")


def _record_base(folder: Path, base_dir: Path) -> None:
    """Add the base model (and the command that trained it, when recorded) to the PRM's metadata."""
    meta_path = folder / "prmsearch.json"
    meta = json.loads(meta_path.read_text())
    meta["base"] = str(base_dir)
    base_meta = Path(base_dir) / "prmsearch.json"
    if base_meta.exists():
        meta["base_trained_with"] = json.loads(base_meta.read_text()).get("trained_with")
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")


def _constant_scorer():
    from prmsearch.scorers.scripted import ScriptedScorer

    return ScriptedScorer({}, default=0.5, num_parameters=0)


def _label_stats(solutions: Sequence[LabelledSolution]) -> dict:
    stats = {"solutions": len(solutions), "correct_answers": sum(s.answer_correct for s in solutions)}
    for source in SOURCES:
        labels = [y for s in solutions for y in s.labels(source)]
        kept = [y for y in labels if y is not None]
        stats[source.value] = {"steps": len(kept), "positive": sum(kept) / max(1, len(kept))}
    return stats


def best_source(report: dict) -> str:
    """The label source whose PRM guided search best ON VALIDATION (weighted vote + beam, then
    held-out F1); the test split plays no part in the choice."""
    prms = report["prms"]
    return max(prms, key=lambda s: (prms[s]["weighted_vote"] + prms[s]["beam"], prms[s]["f1"]))


def markdown(report: dict) -> str:
    """The validation table every variant is chosen by, then the test figures of the choice."""
    n = report["config"]["search_n"]
    lines = [
        "Validation (the choice is made here):",
        "",
        f"| scorer | first-error F1 | best-of-{n} | weighted-vote-{n} | beam-{n} |",
        "|---|---|---|---|---|",
    ]
    rows = [(f"PRM: {k}", v) for k, v in report["prms"].items()]
    rows += [(k, v) for k, v in report.get("references", {}).items()]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['f1']:.3f} | {100 * r['best_of_n']:.1f}% | "
            f"{100 * r['weighted_vote']:.1f}% | {100 * r['beam']:.1f}% |"
        )
    if report.get("test"):
        lines += [
            "",
            f"Test, read once (chosen on validation: {report.get('chosen')}):",
            "",
            f"| scorer | best-of-{n} | weighted-vote-{n} | beam-{n} |",
            "|---|---|---|---|",
        ]
        for name, r in report["test"].items():
            lines.append(
                f"| {name} | {100 * r['best_of_n']:.1f}% | {100 * r['weighted_vote']:.1f}% | "
                f"{100 * r['beam']:.1f}% |"
            )
    b = report.get("baselines", {})
    if b:
        lines.append(
            f"\nTest baselines: greedy {100 * b['greedy']:.1f}%, majority-{n} {100 * b['majority']:.1f}%."
        )
    return "\n".join(lines)
