"""The PRM development kit end to end at real model size on one GPU: label, train, evaluate.

    python -m training.gpu_prm_kit --out gpu_prm_kit.json            # on the GPU machine, < 10 minutes
    python -m training.gpu_prm_kit --small --out /tmp/kit.json       # tiny models on CPU (CI), < 60 s

(the command line is :mod:`training.gpu_prm_kit`). It sits above both the PRM kit and the perf
tools it measures with, on a floor of its own.

Why: ``prmsearch label``, ``train-prm`` and ``eval-prm --labels`` have only run with tiny models on
a CPU. This runs the same library calls with models of real shapes (random weights, built
directly on the device; nothing is downloaded) to measure their throughput and prove the
mechanics at scale. The figures say how fast the kit goes, not how good a PRM it makes.

1. labelling: a Qwen2.5-Math-1.5B-shaped policy (bf16) wrapped in the real transformers policy
   backend (``HFPolicy``, Qwen2.5-Math chat prompt) labels arithmetic train-split problems with
   ``run_labelling`` (method ``mc``, the real grader against the gold answers). The random policy's
   output layer is biased so that it writes printable text with a step delimiter every
   ``--step-tokens`` tokens on average and never EOS: every solution and every rollout runs to
   ``--solution-tokens``, which keeps the cost bounded and predictable. Problems are labelled in
   chunks; labelling stops adding chunks when its time cap is spent. Every ``--eval-every``-th
   problem is held out for step 3.
2. training: a base of ``--base-shape`` (default the 1.5B shape) with random weights is saved
   (bf16) to a work folder and ``train_stepwise_prm`` trains a ``qwen-prm`` PRM from it on the
   labelled rows of the other problems (fp32 master weights, bf16 autocast, AdamW, gradient
   accumulation) for ``--train-steps`` steps, then saves it.
3. evaluation: the trained PRM is loaded with ``HFPRMScorer`` and ``score_candidates`` +
   ``bias_report`` evaluate it on the held-out labelled solutions.

Random weights solve nothing, so nearly every label is "wrong from step 0"; that is expected.
Each phase runs in its own ``try``: one that fails (out of memory, say) is recorded in the JSON
with its error and the next phase still runs, on synthetic rows or a random-weight PRM when
what it needed is missing. The estimate printed before the start uses conservative H200 rates
(see ``Rates``); the run refuses to start when it exceeds ``--budget-minutes``. The JSON is
rewritten after every phase, so a killed run still leaves what it measured.

Why one module over 500 lines: the three phases share one :class:`Kit` (device, models, clock)
and each falls back on what the phase before it left; they are read as one run.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu import building, error_message, free_device_memory
from benchmarks.synthetic_models import ModelShape, TextMaker

Log = Callable[[str], None]

#: Qwen2.5-Math-1.5B (Qwen2ForCausalLM, tied embeddings, about 1.54e9 parameters).
SHAPE_1_5B = ModelShape(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, vocab=151936,
                        tie_embeddings=True)
#: The Qwen2 base of Qwen2.5-Math-PRM-7B / Qwen2.5-Math-7B (about 7.07e9 parameters).
SHAPE_7B = ModelShape(hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, vocab=152064)
#: Tiny shapes for --small (CPU, seconds).
SHAPE_TINY = ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=512,
                        tie_embeddings=True)
BASE_SHAPES = {"1.5b": SHAPE_1_5B, "7b": SHAPE_7B, "tiny": SHAPE_TINY}
#: The policy's prompt: Qwen2.5-Math's chat layout and system prompt.
PROMPT_FORMAT = "qwen25-math-cot"


@dataclass(frozen=True)
class KitConfig:
    """Sizes of the three phases.

    Attributes:
        policy: shape of the labelling policy.
        base: shape of the base the PRM is trained from.
        problems: arithmetic train-split problems to label.
        eval_every: every this-many-th problem is held out for the evaluation.
        samples: policy solutions per problem.
        rollouts: MC completions per distinct step prefix.
        solution_tokens: token limit of a solution or rollout (every one reaches it).
        step_tokens: mean tokens per step of the shaped random policy.
        label_chunk: problems per batched labelling call.
        label_seconds: labelling starts no new chunk after this many seconds.
        policy_batch_tokens: the policy backend's ``max_batch_tokens``.
        train_steps: optimiser steps.
        train_batch: rows per forward pass.
        grad_accum: forward passes per optimiser step.
        lr: peak learning rate.
        max_length: longest training row, tokens.
        prm_batch_tokens: the PRM scorer's ``max_batch_tokens``.
        budget_minutes: the run refuses to start when its estimate exceeds this.
        seed: weights, sampling and data order.
    """

    policy: ModelShape = SHAPE_1_5B
    base: ModelShape = SHAPE_1_5B
    problems: int = 64
    eval_every: int = 4
    samples: int = 4
    rollouts: int = 4
    solution_tokens: int = 192
    step_tokens: float = 48.0
    label_chunk: int = 32
    label_seconds: float = 240.0
    policy_batch_tokens: int = 262144
    train_steps: int = 40
    train_batch: int = 8
    grad_accum: int = 4
    lr: float = 1e-5
    max_length: int = 2048
    prm_batch_tokens: int = 65536
    budget_minutes: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("problems", "eval_every", "samples", "rollouts", "solution_tokens", "label_chunk",
                     "policy_batch_tokens", "train_steps", "train_batch", "grad_accum", "max_length",
                     "prm_batch_tokens"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.eval_every < 2:
            raise ValueError(f"eval_every must be >= 2 (some problems must be left to train on), "
                             f"got {self.eval_every}")
        if not self.step_tokens > 1:
            raise ValueError(f"step_tokens must be > 1, got {self.step_tokens}")
        for name in ("label_seconds", "lr", "budget_minutes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def small(cls) -> KitConfig:
        """Tiny models and sizes that run on a CPU in seconds (CI; the figures mean nothing)."""
        return cls(policy=SHAPE_TINY, base=SHAPE_TINY, problems=6, eval_every=3, samples=2, rollouts=2,
                   solution_tokens=24, step_tokens=8.0, label_chunk=3, label_seconds=60.0,
                   policy_batch_tokens=8192, train_steps=3, train_batch=2, grad_accum=2, lr=1e-4,
                   max_length=1024, prm_batch_tokens=8192)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------- estimate
@dataclass(frozen=True)
class Rates:
    """Conservative H200 rates for the time estimate (transformers in eager mode, bf16).

    Attributes:
        startup_s: interpreter, torch, transformers and the CUDA context.
        decode_step_s: one decode step of a whole row chunk. A 1.5B model's step needs ~1.5 ms
            of H200 time at 400 rows (3 GB of weights + ~6 GB of KV at 4.8 TB/s, ~1.2 TFLOP),
            but the Python decode loop and ~700 kernel launches through 28 eager layers cost
            10-20 ms (a tiny 28-layer model decodes a step in 11 ms at 8 rows, 21 ms at 64, on
            a loaded 2-core CPU: mostly that overhead); 40 ms leaves room.
        prefill_tokens_s: prompt tokens per second (30% of the bf16 peak for 1.5B would be 100k).
        train_flops: sustained training FLOP/s under bf16 autocast (20% of the 989 TFLOP/s peak).
        micro_overhead_s: per forward+backward pass (launches, padding, the autocast weight casts).
        optimizer_s_per_gparam: AdamW + clipping per 1e9 fp32 parameters (~28 bytes each).
        io_gbs: saving and loading checkpoints, GB/s (a slow disk, plus dtype conversion).
        score_tokens_s: PRM scoring tokens/s for the 1.5B shape (the kit's eval batches are small).
    """

    startup_s: float = 30.0
    decode_step_s: float = 0.04
    prefill_tokens_s: float = 100_000.0
    train_flops: float = 200e12
    micro_overhead_s: float = 0.1
    optimizer_s_per_gparam: float = 0.06
    io_gbs: float = 0.5
    score_tokens_s: float = 20_000.0


def parameters(shape: ModelShape, *, lm_head: bool) -> int:
    """Parameters of a Qwen2 model of ``shape`` (the output layer counted when untied)."""
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    attention = 2 * h * h + 2 * h * kv + h + 2 * kv  # q, o; k, v; q/k/v biases
    layer = attention + 3 * h * shape.intermediate + 2 * h
    total = shape.vocab * h + shape.layers * layer + h
    if lm_head and not shape.tie_embeddings:
        total += shape.vocab * h
    return total


def estimate(cfg: KitConfig, prompt_tokens: int, rates: Rates = Rates()) -> dict[str, float]:
    """Seconds per part of the run at ``rates`` (labelling capped by ``cfg.label_seconds``)."""
    policy_p = parameters(cfg.policy, lm_head=True)
    base_p = parameters(cfg.base, lm_head=False)
    length = cfg.solution_tokens
    prefixes = cfg.samples * length / cfg.step_tokens  # non-final steps of one problem's samples
    calls = math.ceil(cfg.problems / cfg.label_chunk)
    rows_sample = cfg.label_chunk * cfg.samples
    rows_rollout = math.ceil(cfg.label_chunk * prefixes * cfg.rollouts)
    batch = max(1, cfg.policy_batch_tokens // (prompt_tokens + 2 * length))  # decode rows per chunk
    decode = (math.ceil(rows_sample / batch) + math.ceil(rows_rollout / batch)) * length * rates.decode_step_s
    prefill = (cfg.label_chunk + cfg.label_chunk * prefixes) * (prompt_tokens + length / 2)
    per_call = decode + prefill / rates.prefill_tokens_s
    labelling = min(calls * per_call, cfg.label_seconds + per_call)
    row_tokens = prompt_tokens + length + length / cfg.step_tokens
    micro = cfg.train_batch * row_tokens
    micro_s = 6 * base_p * micro / rates.train_flops + rates.micro_overhead_s
    train = cfg.train_steps * (cfg.grad_accum * micro_s + rates.optimizer_s_per_gparam * base_p / 1e9)
    held = math.ceil(cfg.problems / cfg.eval_every) * cfg.samples
    return {
        "startup": rates.startup_s,
        "policy build": 5 + policy_p / 1e9,  # random init on the device
        "labelling": labelling,
        "base build + save": 5 + 2 * base_p / 1e9 / rates.io_gbs,
        "train load": 5 + 2 * base_p / 1e9 / rates.io_gbs,
        "training": train,
        "PRM save": 4 * base_p / 1e9 / rates.io_gbs,
        "PRM load": 5 + 4 * base_p / 1e9 / rates.io_gbs,
        "scoring": 1 + held * row_tokens / rates.score_tokens_s,
    }


def policy_prompt_tokens(question: str) -> int:
    """Tokens of the policy's Qwen2.5-Math chat prompt of ``question`` (the kit's byte tokenizer)."""
    from benchmarks.synthetic_models import bench_tokenizer
    from prmsearch.engines.prompt_formats import PromptBuilder, get_prompt_format

    return len(PromptBuilder(get_prompt_format(PROMPT_FORMAT), bench_tokenizer()).ids(question, ()))


# ---------------------------------------------------------------------------- machinery
class Clock:
    """Wall-clock timing with the device synchronised, and peak memory of the device."""

    def __init__(self, device: Any) -> None:
        self.device = device

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def now(self) -> float:
        self.sync()
        return time.perf_counter()

    def reset_peak(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_gb(self) -> float | None:
        import torch

        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / 1e9


class CountingPolicy:
    """A policy that passes every call to ``inner`` and counts rows, tokens and time."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner = inner
        self.clock = clock
        self.calls = self.rows = self.generated = self.computed = self.cached = 0
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, requests: Sequence[Any]) -> list[Any]:
        start = self.clock.now()
        gens = self.inner.generate(requests)
        self.seconds += self.clock.now() - start
        self.calls += 1
        self.rows += sum(r.n for r in requests)
        for gen in gens:
            self.generated += gen.tokens_generated
            self.computed += gen.prompt_tokens_computed + gen.prompt_tokens_recomputed
            self.cached += gen.prompt_tokens_cached
        return gens


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file (none when it does not exist)."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def synthetic_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """Stepwise rows of random lexicon text with first-error labels (when labelling gave none)."""
    rng = np.random.default_rng(seed)
    texts = TextMaker(rng)
    rows = []
    for _ in range(count):
        steps = [texts.step(8, 30) for _ in range(int(rng.integers(2, 7)))]
        first = int(rng.integers(-1, len(steps)))
        rows.append({"prompt": texts.question(20), "completions": steps,
                     "labels": [first == -1 or i < first for i in range(len(steps))]})
    return rows


# --------------------------------------------------------------------------------- phases
class Kit:
    """One run: the configuration, the device, the work folder and the figures so far."""

    def __init__(self, cfg: KitConfig, device: Any, dtype: Any, dtype_name: str | None, work: Path,
                 log: Log, threads: int | None) -> None:
        self.cfg = cfg
        self.device = device
        self.dtype = dtype
        self.dtype_name = dtype_name
        self.work = work
        self.log = log
        self.threads = threads
        self.clock = Clock(device)
        self.labels_dir = work / "labels"
        self.base_dir = work / "base"
        self.prm_dir = work / "prm"
        from prmsearch.arith.problems import load_split
        from prmsearch.prm.labelling import LabelProblem

        split = load_split("train", cfg.problems)
        self.problems = [LabelProblem(p.id, p.question, str(p.answer)) for p in split]
        #: every eval_every-th problem: labelled with the rest, kept out of training, evaluated on
        self.held_out = {p.id for i, p in enumerate(split) if i % cfg.eval_every == cfg.eval_every - 1}

    # ------------------------------------------------------------------------ labelling
    def label(self, deadline: float) -> dict[str, Any]:
        """Label problems with the random policy until they are done or ``deadline`` passes."""
        from benchmarks.synthetic_models import bench_tokenizer, build_policy_model, shape_step_lengths
        from prmsearch.engines.loading import count_parameters
        from prmsearch.policies.hf import HFPolicy
        from prmsearch.prm.labelling import LabelConfig, run_labelling

        cfg, log = self.cfg, self.log
        tok = bench_tokenizer()
        start = self.clock.now()
        with building(self.device, self.dtype):
            model = build_policy_model(cfg.policy, tok, seed=cfg.seed)
        allowed = shape_step_lengths(model, tok, cfg.step_tokens)
        build_s = self.clock.now() - start
        log(f"policy: {count_parameters(model):,} parameters on {self.device}, built in {build_s:.1f} s "
            f"({allowed} token ids allowed)")
        backend = HFPolicy.from_model(model, tok, prompt_format=PROMPT_FORMAT,
                                      max_batch_tokens=cfg.policy_batch_tokens)
        policy = CountingPolicy(backend, self.clock)
        problems = self.problems
        label_cfg = LabelConfig(method="mc", samples=cfg.samples, rollouts=cfg.rollouts, temperature=1.0,
                                solution_max_tokens=cfg.solution_tokens, chunk=cfg.label_chunk,
                                seed=cfg.seed)  # fmt: skip
        provenance = {"policy": f"random weights, {asdict(cfg.policy)}", "script": "gpu_prm_kit"}
        self.clock.reset_peak()
        start = self.clock.now()
        summary: dict[str, Any] = {}
        done = 0
        interrupted: str | None = None
        while done < len(problems):
            end = min(done + cfg.label_chunk, len(problems))
            try:
                summary = run_labelling(label_cfg, problems[:end], self.labels_dir, policy=policy,
                                        resume=True, provenance=provenance)  # fmt: skip
            except Exception as err:  # keep the chunks already labelled; the next phases use them
                if not done:
                    raise
                interrupted = error_message(err, 300)
                log(f"labelling stopped at {done} problems: {interrupted}")
                free_device_memory(self.device)
                break
            done = end
            elapsed = self.clock.now() - start
            log(f"labelled {done}/{len(problems)} problems in {elapsed:.1f} s: "
                f"{policy.generated:,} tokens generated, statuses {summary['statuses']}")
            if done < len(problems) and time.perf_counter() >= deadline:
                log(f"labelling time cap reached: stopping at {done} problems")
                break
        seconds = self.clock.now() - start
        rows = read_rows(self.labels_dir / "labels.jsonl")
        errors = [r["error"] for r in rows if r["status"] == "error"]
        steps = [len(r["completions"]) for r in rows if r["completions"]]
        solutions = done * cfg.samples
        figures = {
            "error": interrupted,
            "seconds": seconds,
            "build_s": build_s,
            "problems": done,
            "problems_per_s": done / seconds,
            "solutions": summary.get("solutions", 0),
            "labelled": summary.get("labelled", 0),
            "steps": summary.get("steps", 0),
            "mean_steps_per_solution": float(np.mean(steps)) if steps else None,
            "rollouts": policy.rows - solutions,
            "sequences_generated": policy.rows,
            "generated_tokens": policy.generated,
            "generated_tokens_per_s": policy.generated / seconds,
            "policy_s": policy.seconds,
            "policy_tokens_per_s": policy.generated / policy.seconds if policy.seconds else None,
            "prompt_tokens_computed": policy.computed,
            "prompt_tokens_cached": policy.cached,
            "policy_calls": policy.calls,
            "peak_gpu_gb": self.clock.peak_gb(),
            "stopped_early": done < len(problems),
            "error_rows": len(errors),
            "first_error_row": errors[0] if errors else None,
            "summary": summary,
        }
        if rows and len(errors) == len(rows):
            raise RuntimeError(f"every labelling row failed: {errors[0]}")
        return figures

    # ------------------------------------------------------------------------- training
    def train(self) -> dict[str, Any]:
        """Save a random base of ``cfg.base`` and train a qwen-prm PRM from it."""
        import torch
        from transformers import Qwen2Model

        from benchmarks.synthetic_models import bench_tokenizer
        from prmsearch.prm.stepwise_train import StepwiseTrainConfig, train_stepwise_prm
        from prmsearch.scorers.formats import make_format

        cfg, log = self.cfg, self.log
        rows = [{k: r[k] for k in ("prompt", "completions", "labels")}
                for r in read_rows(self.labels_dir / "labels.jsonl")
                if r["status"] == "labelled" and r["problem_id"] not in self.held_out]
        data = "labelled rows of the training problems"
        if not rows:
            data = "synthetic rows (labelling gave no training rows)"
            rows = synthetic_rows(64, cfg.seed)
            log(f"training on {data}")
        tok = bench_tokenizer()
        start = self.clock.now()
        torch.manual_seed(cfg.seed + 1)
        with building(self.device, self.dtype):
            base = Qwen2Model(cfg.base.qwen2_config(tok))
        base.save_pretrained(self.base_dir)
        tok.save_pretrained(self.base_dir)
        del base
        free_device_memory(self.device)
        base_s = self.clock.now() - start
        log(f"base ({cfg.base.layers} layers, hidden {cfg.base.hidden}) built and saved in {base_s:.1f} s")
        fmt = make_format("qwen-prm", tok)
        lengths = [n for n in (len(fmt.encode(r["prompt"], r["completions"]).ids) for r in rows)
                   if n <= cfg.max_length]
        train_cfg = StepwiseTrainConfig(
            steps=cfg.train_steps, batch_size=cfg.train_batch, grad_accum=cfg.grad_accum, lr=cfg.lr,
            warmup=min(5, cfg.train_steps - 1), max_length=cfg.max_length, validation_fraction=0.0,
            device=str(self.device), threads=self.threads, seed=cfg.seed,
            log_every=max(1, cfg.train_steps // 5),
        )
        self.clock.reset_peak()
        start = self.clock.now()
        report = train_stepwise_prm(self.base_dir, rows, self.prm_dir, train_cfg, log=log, data=data)
        wall = self.clock.now() - start
        seconds = report["seconds"]
        passes = cfg.train_steps * cfg.grad_accum * cfg.train_batch
        tokens = passes * float(np.mean(lengths)) if lengths else 0.0
        return {
            "data": data,
            "rows": report["train_rows"],
            "skipped_rows": report["skipped_rows"],
            "positive_share": report["positive_share"],
            "steps": cfg.train_steps,
            "batch_size": cfg.train_batch,
            "grad_accum": cfg.grad_accum,
            "seconds": seconds,
            "steps_per_s": cfg.train_steps / seconds,
            "tokens": tokens,
            "tokens_per_s": tokens / seconds,
            "tokens_note": "rows seen x mean row tokens (batches are drawn at random; padding not counted)",
            "base_build_save_s": base_s,
            "load_and_save_s": wall - seconds,
            "peak_gpu_gb": self.clock.peak_gb(),
            "loss_first": report["loss_first"],
            "loss_last": report["loss_last"],
        }

    # ---------------------------------------------------------------------- evaluation
    def evaluate(self) -> dict[str, Any]:
        """Score the held-out labelled solutions with the trained PRM; best-of-N and bias figures."""
        from benchmarks.synthetic_models import bench_tokenizer, build_prm_model
        from prmsearch.benchmarks.prm_eval.prm_bias import (
            LabelledCandidate,
            bias_report,
            read_labelled,
            score_candidates,
        )
        from prmsearch.scorers.base import ScoreRequest
        from prmsearch.scorers.hf import HFPRMScorer

        cfg, log = self.cfg, self.log
        labels = self.labels_dir / "labels.jsonl"
        candidates: list[LabelledCandidate] = []
        if labels.exists():
            try:
                candidates = [c for c in read_labelled(labels) if c.problem_id in self.held_out]
            except ValueError:  # no labelled solution at all
                candidates = []
        data = "held-out labelled solutions"
        if not candidates:
            data = "synthetic candidates (no held-out labelled solution)"
            candidates = [
                LabelledCandidate(f"synthetic-{i // 4}", r["prompt"], tuple(r["completions"]),
                                  next((j for j, y in enumerate(r["labels"]) if not y), -1), i % 3 == 0)
                for i, r in enumerate(synthetic_rows(32, cfg.seed + 7))
            ]  # fmt: skip
            log(f"evaluating on {data}")
        options = {"max_batch_tokens": cfg.prm_batch_tokens}
        start = self.clock.now()
        if (self.prm_dir / "train_report.json").exists():  # written last: the PRM is complete
            prm = "trained"
            scorer = HFPRMScorer(self.prm_dir, "qwen-prm", device=str(self.device), dtype=self.dtype_name,
                                 **options)  # fmt: skip
        else:
            prm = "random weights (no trained PRM)"
            log(f"evaluating a PRM with {prm}")
            tok = bench_tokenizer()
            with building(self.device, self.dtype):
                model = build_prm_model(cfg.base, tok, seed=cfg.seed + 2)
            scorer = HFPRMScorer.from_model(model, tok, "qwen-prm", **options)
        load_s = self.clock.now() - start
        log(f"PRM ({prm}) ready in {load_s:.1f} s; scoring {len(candidates)} solutions")
        tokens = sum(len(scorer.encode(ScoreRequest(c.prompt, c.steps))[0]) for c in candidates)
        self.clock.reset_peak()
        start = self.clock.now()
        scores = score_candidates(scorer, candidates)
        seconds = self.clock.now() - start
        report = bias_report(candidates, scores)
        return {
            "prm": prm,
            "data": data,
            "problems": report["problems"],
            "solutions": len(candidates),
            "load_s": load_s,
            "seconds": seconds,
            "solutions_per_s": len(candidates) / seconds,
            "tokens": tokens,
            "tokens_per_s": tokens / seconds,
            "peak_gpu_gb": self.clock.peak_gb(),
            "bias": report,
        }


# ----------------------------------------------------------------------------------- report
#: (phase, JSON key, label, format) of the figures table.
TABLE = (
    ("labelling", "problems", "problems labelled", "{:,.0f}"),
    ("labelling", "problems_per_s", "problems/s", "{:,.3f}"),
    ("labelling", "solutions", "solutions", "{:,.0f}"),
    ("labelling", "labelled", "solutions labelled", "{:,.0f}"),
    ("labelling", "rollouts", "MC rollouts", "{:,.0f}"),
    ("labelling", "mean_steps_per_solution", "steps per solution", "{:,.1f}"),
    ("labelling", "generated_tokens", "generated tokens", "{:,.0f}"),
    ("labelling", "generated_tokens_per_s", "generated tokens/s (labelling wall)", "{:,.0f}"),
    ("labelling", "policy_tokens_per_s", "generated tokens/s (inside the policy)", "{:,.0f}"),
    ("labelling", "seconds", "seconds", "{:,.1f}"),
    ("labelling", "peak_gpu_gb", "peak GPU memory, GB", "{:,.1f}"),
    ("training", "rows", "training rows", "{:,.0f}"),
    ("training", "steps_per_s", "optimiser steps/s", "{:,.3f}"),
    ("training", "tokens_per_s", "tokens/s", "{:,.0f}"),
    ("training", "seconds", "seconds (loop)", "{:,.1f}"),
    ("training", "load_and_save_s", "seconds (load + save)", "{:,.1f}"),
    ("training", "peak_gpu_gb", "peak GPU memory, GB", "{:,.1f}"),
    ("training", "loss_last", "final loss", "{:,.4f}"),
    ("eval", "solutions", "held-out solutions", "{:,.0f}"),
    ("eval", "solutions_per_s", "solutions/s", "{:,.1f}"),
    ("eval", "tokens_per_s", "tokens/s", "{:,.0f}"),
    ("eval", "load_s", "PRM load seconds", "{:,.1f}"),
    ("eval", "peak_gpu_gb", "peak GPU memory, GB", "{:,.1f}"),
)


def table(phases: dict[str, dict[str, Any]]) -> str:
    """The figures of every phase, one row each (a failed phase as one FAILED row)."""
    lines = ["| phase | figure | value |", "|---|---|---|"]
    for name, figures in phases.items():
        if figures.get("error"):
            lines.append(f"| {name} | FAILED | {figures['error']} |")
        for phase, key, label, fmt in TABLE:
            if phase == name and figures.get(key) is not None:
                lines.append(f"| {name} | {label} | {fmt.format(figures[key])} |")
        if name == "eval" and figures.get("bias"):
            bias = figures["bias"]
            bon, f1 = bias["response"]["best_of_n_accuracy"], bias["step"]["f1"]
            lines.append(f"| eval | best-of-N accuracy / first-error F1 | "
                         f"{'-' if bon is None else f'{bon:.3f}'} / {f1:.3f} |")
    return "\n".join(lines)


def environment(device: Any, dtype: Any) -> dict[str, Any]:
    """Versions and device, for the report."""
    import torch
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"device": name, "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def run_phase(name: str, fn: Callable[[], dict[str, Any]], kit: Kit) -> dict[str, Any]:
    """Run one phase; a failure becomes ``{"error": ...}`` and the device memory is freed."""
    kit.log(f"--- {name}")
    start = time.perf_counter()
    try:
        figures = fn()
    except Exception as err:  # one failure (an OOM, say) must not stop the other phases
        figures = {"error": error_message(err, 300)}
        kit.log(f"{name} FAILED: {figures['error']}")
    else:
        figures = {"error": None, **figures}
    figures["phase_wall_s"] = time.perf_counter() - start
    free_device_memory(kit.device)
    kit.log(f"{name} done in {figures['phase_wall_s']:.1f} s")
    return figures
