"""Train a PRM from any Hugging Face causal LM on stepwise-labelled data (``prmsearch train-prm``).

Data: JSONL rows in the stepwise-supervision layout of TRL's PRM trainer and the Hub's PRM
datasets (``prompt``, ``completions`` = the steps, ``labels`` = one bool per step), as
``prmsearch label`` writes them. The result is a ``qwen-prm`` folder (the Qwen2.5-Math-PRM
layout: the base model's weights under ``model.*`` and the Linear-ReLU-Linear(2) head under
``score.*``, ``architectures: ["Qwen2ForProcessRewardModel"]``), read by prmsearch's ``qwen-prm``
scorer, and by vLLM's pooling runner when the base is a Qwen2 model.

Why not TRL's ``PRMTrainer``: it trains a token-classification model (one linear layer) on
inputs laid out its own way; a PRM for this project must be read at inference exactly as it was
trained, so the examples here are encoded by the same :class:`~prmsearch.scorers.formats.QwenPRMFormat`
that the scorer uses, and the head is the one the ``qwen-prm`` loaders expect.

What happens: the base loads with ``AutoModel`` (a GGUF file too, with ``gguf_file``); the step
separator (``<extra_0>``) is added to the tokenizer when it lacks it (its embedding starts as
the mean of the others) and a plain chat template when it has none; each row is encoded as
system/user/assistant turns with the separator after every step, and the loss is the
cross-entropy of the head at every separator against the step's label. AdamW with linear
warm-up and cosine decay, gradient accumulation, bf16 autocast on a GPU that supports it
(fp32 on CPU, where tiny models train in minutes). A held-out share of the problems reports
step accuracy and the ProcessBench first-error F1 at the end.

``train="head"`` is the mode for a CPU: the base stays frozen, its last hidden state at every
separator is computed once per row (one forward pass, no padding, no gradients), and only the
head trains, on those cached features. A 0.5B base then costs one forward pass per solution
instead of a backward pass per step, and the scorer reads the folder exactly as a fully trained
one (the base's weights are saved unchanged, the added separator's embedding included).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.benchmarks.prm_eval.prm_bias import first_error_of
from prmsearch.benchmarks.prm_eval.processbench import first_error_report
from prmsearch.benchmarks.sweeps.results import ResultsFolderError
from prmsearch.prm.labelling import labels_folder
from prmsearch.text_lines import json_rows

SEPARATOR = "<extra_0>"


@dataclass(frozen=True)
class StepwiseTrainConfig:
    """What ``train-prm`` does, validated at construction (saved with the model).

    Attributes:
        train: ``full`` (base and head) or ``head`` (a frozen base, the head on cached features).
        steps: optimiser steps.
        batch_size: rows per forward pass; ``grad_accum`` passes per optimiser step.
        lr: peak AdamW learning rate (None: 2e-5 for ``full``, 1e-3 for ``head``); ``warmup``
            steps of linear warm-up, then cosine decay to 10%.
        weight_decay: AdamW weight decay.
        max_length: rows longer than this many tokens are skipped (and counted).
        separator: the step separator token read by the head.
        validation_fraction: share of prompts (problems) whose rows are held out for the final
            report (0: none); a problem's solutions are never split between the two.
        bf16: autocast to bfloat16 (None: on a CUDA GPU that supports it).
        device: ``cuda``, ``cpu``... (None: CUDA when available).
        gguf_file: a GGUF file inside the model folder to load instead of safetensors.
        threads: torch CPU threads (None: torch's default).
        seed: data order, head initialisation and the validation split.
        log_every: steps between loss lines.
    """

    train: str = "full"
    steps: int = 1000
    batch_size: int = 8
    grad_accum: int = 1
    lr: float | None = None
    warmup: int = 50
    weight_decay: float = 0.0
    max_length: int = 2048
    separator: str = SEPARATOR
    validation_fraction: float = 0.05
    bf16: bool | None = None
    device: str | None = None
    gguf_file: str | None = None
    threads: int | None = None
    seed: int = 0
    log_every: int = 50

    def __post_init__(self) -> None:
        for name, low in (("steps", 1), ("batch_size", 1), ("grad_accum", 1), ("warmup", 0),
                          ("max_length", 8), ("log_every", 1)):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.train not in TRAIN_MODES:
            raise ValueError(f"train must be one of {', '.join(TRAIN_MODES)}, got {self.train!r}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and not isinstance(self.lr, bool)
                                        and self.lr > 0):
            raise ValueError(f"lr must be > 0 (or None for the mode's default), got {self.lr!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction!r}")
        if not isinstance(self.separator, str) or not self.separator.strip():
            raise ValueError(f"separator must be a non-blank token text, got {self.separator!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be an int >= 1 or None, got {self.threads!r}")


    @property
    def peak_lr(self) -> float:
        """``lr``, or the mode's default: a head alone on frozen features takes a far larger step."""
        return float(self.lr) if self.lr is not None else DEFAULT_LR[self.train]


#: The training modes and their default peak learning rates.
TRAIN_MODES = ("full", "head")
DEFAULT_LR = {"full": 2e-5, "head": 1e-3}


def lr_at(step: int, *, lr: float, warmup: int, steps: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of ``lr`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def read_stepwise(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a stepwise JSONL file, each checked: prompt (str), completions and labels (lists of
    one non-zero length; labels bools or 0/1), and optional ``targets`` (one float in [0, 1] per
    step: soft training targets, the hard ``labels`` still used for evaluation)."""
    rows = []
    for number, row in json_rows(path):
        if not _is_stepwise(row):
            raise ValueError(
                f"{path}:{number}: a stepwise row needs prompt (a string), completions (a list of "
                "step strings) and labels (one bool per step, same length, not empty); targets, "
                "where given, one number in [0, 1] per step"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no stepwise rows")
    return rows


def mc_target_rows(path: str | Path) -> list[dict[str, Any]]:
    """Stepwise rows from a label run's ``labels.jsonl`` with soft targets: each step's MC value,
    with the solution's own outcome counted as one more rollout from that prefix (it is one: the
    policy's own continuation), so that a right solution's early steps are not all 0 when the few
    fresh rollouts missed; the last step's target is the outcome itself. The hard labels stay for
    evaluation. Rows that are not ``labelled`` are left out (``train-prm --targets mc``)."""
    path = Path(path)
    folder = labels_folder(path.parent)
    if not path.is_file() or path.name != folder.results_name:
        raise ValueError(f"{path} is not a labels.jsonl file")
    try:
        rollouts = folder.read_manifest()["config"]["label"]["rollouts"]
        rows = list(folder.rows())
    except (ResultsFolderError, KeyError, TypeError) as exc:
        raise ValueError(f"{path.parent} is not a readable label run ({exc})") from None
    out = []
    for row in rows:
        values = row.get("mc_values")
        if row.get("status") != "labelled" or not values:
            continue
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(
                f"{path}: row {row.get('id', '?')} has no question (prompt {row.get('prompt')!r}): label "
                "files kept without their benchmark questions must have them restored first, with "
                "`python scripts/label_questions.py restore FOLDER OUT` (results/real-models/README.md)")
        own = 1.0 if row["answer_correct"] else 0.0
        soft = [(v * rollouts + own) / (rollouts + 1) for v in values[:-1]] + [own]
        out.append({"prompt": row["prompt"], "completions": row["completions"], "labels": row["labels"],
                    "targets": soft})
    if not out:
        raise ValueError(f"{path} holds no labelled rows with MC values (was it a --method mc run?)")
    return out


def _is_stepwise(row: Any) -> bool:
    """Whether ``row`` is a stepwise-supervision row."""
    if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
        return False
    completions, labels = row.get("completions"), row.get("labels")
    if not isinstance(completions, list) or not isinstance(labels, list):
        return False
    targets = row.get("targets", labels)
    if not isinstance(targets, list) or len(targets) != len(labels) or not all(
            isinstance(t, (bool, int, float)) and 0 <= t <= 1 for t in targets):
        return False
    return bool(completions) and len(completions) == len(labels) and \
        all(isinstance(c, str) for c in completions) and \
        all(isinstance(y, bool) or (isinstance(y, int) and y in (0, 1)) for y in labels)


def load_base(model: str | Path, cfg: StepwiseTrainConfig) -> tuple[Any, Any]:
    """The base transformer and its tokenizer, with the separator token and a chat template."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from prmsearch.arith.tokenizer import PLAIN_CHAT_TEMPLATE
    from prmsearch.engines.loading import quiet_loading

    extra = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(str(model), **extra)
    with quiet_loading():
        base = AutoModel.from_pretrained(str(model), dtype=torch.float32, **extra)
    if tokenizer.convert_tokens_to_ids(cfg.separator) in (None, tokenizer.unk_token_id) or \
            len(tokenizer.encode(cfg.separator, add_special_tokens=False)) != 1:
        known = len(tokenizer)
        tokenizer.add_tokens([cfg.separator], special_tokens=True)
        # Qwen2's embedding matrix has spare rows past the tokenizer (151,936 for 151,665 tokens):
        # the new token takes the next row, and the matrix only grows, never shrinks.
        if len(tokenizer) > base.get_input_embeddings().weight.shape[0]:
            base.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with torch.no_grad():
            weight = base.get_input_embeddings().weight
            weight[known : len(tokenizer)] = weight[:known].mean(dim=0, keepdim=True)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token or cfg.separator
    return base, tokenizer


@dataclass(frozen=True)
class _Encoded:
    ids: list[int]
    positions: list[int]
    targets: list[float]
    first_error: int
    labels: list[bool]


def encode_rows(fmt: Any, rows: Iterable[dict[str, Any]], max_length: int) -> tuple[list[_Encoded], int]:
    """Encode every row in the scorer's own layout; rows too long (or that the format refuses,
    e.g. a step holding the separator) are skipped and counted."""
    out, skipped = [], 0
    for row in rows:
        labels = [bool(y) for y in row["labels"]]
        try:
            encoded = fmt.encode(row["prompt"], row["completions"])
        except ValueError:
            skipped += 1
            continue
        if len(encoded.ids) > max_length:
            skipped += 1
            continue
        first = first_error_of(labels)
        targets = [float(t) for t in row.get("targets", labels)]  # soft where given, else the labels
        out.append(_Encoded(list(encoded.ids), list(encoded.positions), targets, first, labels))
    return out, skipped


def _batch(examples: Sequence[_Encoded], pad_id: int, device: Any) -> tuple[Any, Any]:
    import torch

    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
    return ids.to(device), mask.to(device)


def _separator_loss(prm: Any, examples: Sequence[_Encoded], pad_id: int, device: Any, bf16: bool) -> Any:
    """Cross-entropy of the 2-class head at every separator against the step labels."""
    import torch

    ids, mask = _batch(examples, pad_id, device)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        hidden = prm.base(input_ids=ids, attention_mask=mask).last_hidden_state
        rows = torch.tensor([i for i, e in enumerate(examples) for _ in e.positions], device=device)
        cols = torch.tensor([p for e in examples for p in e.positions], device=device)
        logits = prm.head(hidden[rows, cols]).float()
    target = torch.tensor([y for e in examples for y in e.targets], device=device)
    logp = torch.log_softmax(logits, dim=-1)
    return -(target * logp[:, 1] + (1 - target) * logp[:, 0]).mean()


def separator_features(base: Any, examples: Sequence[_Encoded], device: Any, bf16: bool = False,
                       log: Callable[[str], None] | None = None) -> list[Any]:
    """The frozen base's last hidden state at each example's separators (one ``[steps, hidden]``
    float32 tensor an example), one row per forward pass so that nothing is padded."""
    import torch

    features, start = [], time.perf_counter()
    with torch.no_grad():
        for number, e in enumerate(examples, start=1):
            ids = torch.tensor([e.ids], device=device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
                hidden = base(input_ids=ids).last_hidden_state
            features.append(hidden[0, e.positions].float())
            if log is not None and (number % 100 == 0 or number == len(examples)):
                log(f"[train-prm] features of {number}/{len(examples)} rows "
                    f"({time.perf_counter() - start:.0f}s)")
    return features


def _feature_loss(head: Any, features: Sequence[Any], examples: Sequence[_Encoded], device: Any) -> Any:
    """The separator cross-entropy of ``head`` on cached features (the ``head`` mode's loss)."""
    import torch

    logits = head(torch.cat(list(features))).float()
    target = torch.tensor([y for e in examples for y in e.targets], device=device)
    logp = torch.log_softmax(logits, dim=-1)
    return -(target * logp[:, 1] + (1 - target) * logp[:, 0]).mean()


def _report_of(examples: Sequence[_Encoded], scores: list[list[float]]) -> dict[str, Any]:
    """Step accuracy at 0.5 and the ProcessBench first-error F1 of per-step scores."""
    steps = [(s >= 0.5) == y for e, row in zip(examples, scores) for s, y in zip(row, e.labels)]
    report = first_error_report([e.first_error for e in examples], scores)
    return {"rows": len(examples), "step_accuracy": float(np.mean(steps)) if steps else None,
            "first_error": report.to_dict()}  # fmt: skip


def evaluate_examples(prm: Any, examples: Sequence[_Encoded], pad_id: int, device: Any,
                      batch_size: int = 8) -> dict[str, Any]:
    """Step accuracy at 0.5 and the ProcessBench first-error F1 of ``prm`` on encoded rows."""
    import torch

    scores: list[list[float]] = []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            ids, mask = _batch(chunk, pad_id, device)
            hidden = prm.base(input_ids=ids, attention_mask=mask).last_hidden_state
            for i, e in enumerate(chunk):
                logits = prm.head(hidden[i, e.positions]).float()
                scores.append(torch.softmax(logits, dim=-1)[:, 1].tolist())
    return _report_of(examples, scores)


def evaluate_features(head: Any, features: Sequence[Any], examples: Sequence[_Encoded]) -> dict[str, Any]:
    """:func:`evaluate_examples` on cached separator features (the ``head`` mode)."""
    import torch

    with torch.no_grad():
        scores = [torch.softmax(head(f).float(), dim=-1)[:, 1].tolist() for f in features]
    return _report_of(examples, scores)


def split_by_prompt(rows: Sequence[dict[str, Any]], fraction: float, rng: np.random.Generator
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(held out, training) rows, holding out whole prompts (about ``fraction`` of them), so that
    no problem is in both (several solutions of one problem would otherwise leak)."""
    prompts = sorted({row["prompt"] for row in rows})
    held_count = min(round(fraction * len(prompts)), len(prompts) - 1) if fraction > 0 else 0
    held = {prompts[i] for i in rng.permutation(len(prompts))[:held_count]}
    return [r for r in rows if r["prompt"] in held], [r for r in rows if r["prompt"] not in held]


def train_stepwise_prm(
    model: str | Path,
    rows: Sequence[dict[str, Any]],
    out: str | Path,
    cfg: StepwiseTrainConfig,
    log: Callable[[str], None] = print,
    data: str | None = None,
) -> dict[str, Any]:
    """Train a ``qwen-prm`` PRM on ``rows`` from the causal LM ``model``, save it to ``out``, and
    return the report (also written as ``out/train_report.json``)."""
    import torch

    from prmsearch.scorers.formats import QwenPRMFormat
    from prmsearch.scorers.heads import BaseWithHead, make_qwen_prm_head, save_qwen_prm

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    bf16 = cfg.bf16 if cfg.bf16 is not None else (device.type == "cuda" and torch.cuda.is_bf16_supported())
    base, tokenizer = load_base(model, cfg)
    torch.manual_seed(cfg.seed)
    head = make_qwen_prm_head(base.config.hidden_size)
    prm = BaseWithHead(base, head, "score").to(device)
    fmt = QwenPRMFormat(tokenizer, separator=cfg.separator)
    rng = np.random.default_rng(cfg.seed)
    held_rows, train_rows = split_by_prompt(rows, cfg.validation_fraction, rng)
    validation, skipped_val = encode_rows(fmt, held_rows, cfg.max_length)
    train, skipped = encode_rows(fmt, train_rows, cfg.max_length)
    if not rows:
        raise ValueError("no rows to train on: the data holds no labelled solutions")
    if not train:
        raise ValueError(f"no training rows left ({skipped} too long or refused by the qwen-prm layout, "
                         f"{len(held_rows)} held out; raise max_length or lower validation_fraction)")
    pad_id = tokenizer.pad_token_id
    steps_total = sum(len(e.targets) for e in train)
    positive = float(np.mean([y for e in train for y in e.targets]))
    log(f"[train-prm] {len(train)} rows ({steps_total} steps, {positive:.0%} positive) for training, "
        f"{len(validation)} held out, {skipped + skipped_val} skipped; device {device}, bf16 {bf16}, "
        f"train {cfg.train}")
    start = time.perf_counter()
    if cfg.train == "head":
        prm.base.requires_grad_(False)
        prm.base.eval()
        train_features = separator_features(prm.base, train, device, bf16, log)
        val_features = separator_features(prm.base, validation, device, bf16) if validation else []
        params = list(prm.head.parameters())

        def loss_of(batch: list[int]) -> Any:
            return _feature_loss(prm.head, [train_features[i] for i in batch], [train[i] for i in batch],
                                 device)
    else:
        params = list(prm.parameters())

        def loss_of(batch: list[int]) -> Any:
            return _separator_loss(prm, [train[i] for i in batch], pad_id, device, bf16)
    optimizer = torch.optim.AdamW(params, lr=cfg.peak_lr, weight_decay=cfg.weight_decay)
    prm.head.train()
    if cfg.train == "full":
        prm.train()
    losses: list[float] = []
    for step in range(cfg.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, lr=cfg.peak_lr, warmup=cfg.warmup, steps=cfg.steps)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(cfg.grad_accum):
            loss = loss_of([int(i) for i in rng.integers(0, len(train), cfg.batch_size)]) / cfg.grad_accum
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(total)
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            log(f"[train-prm] step {step} loss {total:.4f} ({time.perf_counter() - start:.0f}s)")
    prm.eval()
    report: dict[str, Any] = {
        "base": str(model),
        "data": data,
        "train": cfg.train,
        "lr": cfg.peak_lr,
        "train_rows": len(train),
        "validation_rows": len(validation),
        "skipped_rows": skipped + skipped_val,
        "positive_share": positive,
        "loss_first": losses[0],
        "loss_last": float(np.mean(losses[-max(1, cfg.steps // 10):])),
        "loss_curve": [  # mean training loss of each window of log_every steps: the learning curve
            [start_step, float(np.mean(losses[start_step : start_step + cfg.log_every]))]
            for start_step in range(0, len(losses), cfg.log_every)
        ],
        "seconds": time.perf_counter() - start,
        "validation": None if not validation else (
            evaluate_features(prm.head, val_features, validation) if cfg.train == "head"
            else evaluate_examples(prm, validation, pad_id, device)),
    }
    out = Path(out)
    save_qwen_prm(prm.to("cpu"), out, tokenizer)
    meta = {"family": "qwen-prm", "separator": cfg.separator, "trained_with": asdict(cfg), "base": str(model),
            "data": data}  # fmt: skip
    (out / "prmsearch.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
