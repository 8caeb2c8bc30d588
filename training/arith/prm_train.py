"""Training the arithmetic PRM in the Qwen2.5-Math-PRM layout.

The PRM is a ``Qwen2Model`` plus the Linear-ReLU-Linear(2) head, read at the ``<extra_0>`` after
every step, exactly the ``qwen-prm`` code path of the real 7B PRM. Its body starts from the
trained policy (which already computes the arithmetic), and training mixes two losses:

* step classification at every separator (cross-entropy against a hard or soft label; masked
  steps do not count);
* the language-model loss on gold solutions in the same input layout (through the tied
  embeddings, so no extra weights are saved), which keeps the body's arithmetic from being
  forgotten while the head learns to compare a step with it.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from prmsearch.arith.problems import ArithProblem
from prmsearch.arith.tokenizer import PLAIN_CHAT_TEMPLATE
from prmsearch.scorers.formats import QwenPRMFormat
from prmsearch.scorers.heads import BaseWithHead, build_qwen_prm, save_qwen_prm
from training.arith.dense_targets import (
    dense_targets,
    first_wrong_offset,
    local_targets,
    step_targets,
)
from training.arith.labels import LabelledSolution, LabelSource

#: The per-token target kinds of `PRMTrainConfig.dense_mode` (see `prm.dense_targets`).
DENSE_MODES = ("prefix", "local", "steps")


@dataclass(frozen=True)
class PRMTrainConfig:
    """PRM training budget and optimiser.

    Attributes:
        steps: optimiser steps; batch_size: solutions per step.
        lr: peak AdamW learning rate (linear warm-up over ``warmup`` steps, cosine decay to 10%).
        lm_weight: weight of the gold-solution language-model loss (0 disables it).
        lm_batch: gold solutions per step for that loss.
        seed: data order and head initialisation.
        threads: torch CPU threads.
        extra_layers: transformer layers stacked on top of the policy's (copies of its top
            layers whose output projections start at zero, so the PRM starts as the policy).
            The policy's last layer holds its prediction of each result; layers above it can
            compare that prediction with the digits actually written, which the policy's own
            layers cannot do.
        dense_weight: weight of the per-token loss (see `prm_dense`). 0 trains on the
            separator labels alone.
        dense_mode: ``prefix`` (every solution token labelled with whether the solution is
            still right up to it), ``local`` (each result's digits labelled with whether the
            step computes right from its own operands) or ``steps`` (``local`` plus each step's
            starting value, operation and operand against the problem's).
    """

    steps: int = 600
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 30
    lm_weight: float = 0.5
    lm_batch: int = 8
    seed: int = 0
    threads: int = 2
    extra_layers: int = 0
    dense_weight: float = 0.0
    dense_mode: str = "prefix"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "warmup", "lm_batch", "threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name == "warmup" else 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.lm_weight < 0:
            raise ValueError(f"lm_weight must be >= 0, got {self.lm_weight}")
        if not isinstance(self.extra_layers, int) or self.extra_layers < 0:
            raise ValueError(f"extra_layers must be an int >= 0, got {self.extra_layers!r}")
        if self.dense_weight < 0:
            raise ValueError(f"dense_weight must be >= 0, got {self.dense_weight}")
        if self.dense_mode not in DENSE_MODES:
            raise ValueError(f"dense_mode must be one of {DENSE_MODES}, got {self.dense_mode!r}")


@dataclass(frozen=True)
class _Example:
    ids: list[int]
    positions: list[int]
    targets: list[float]
    dense_positions: tuple[int, ...] = ()
    dense_targets: tuple[float, ...] = ()


def encode_examples(
    fmt: QwenPRMFormat,
    solutions: Sequence[LabelledSolution],
    source: LabelSource | str,
    problems: Mapping[str, ArithProblem] | None = None,
    dense_mode: str = "prefix",
) -> list[_Example]:
    """Token ids, separator positions and targets; steps masked by ``source`` are dropped.

    With ``problems`` (id -> problem), every example also gets dense per-token targets of
    ``dense_mode`` (see `prm_dense`).
    """
    examples = []
    for sol in solutions:
        labels = sol.labels(source)
        encoded = fmt.encode(sol.question, sol.steps)
        keep = [(p, y) for p, y in zip(encoded.positions, labels, strict=True) if y is not None]
        if not keep:
            continue
        dense: tuple[tuple[int, ...], tuple[float, ...]] = ((), ())
        if problems is not None and dense_mode == "local":
            targets = local_targets(fmt, sol.question, sol.steps)
            dense = (tuple(targets.positions), tuple(targets.targets))
        elif problems is not None:
            problem = problems.get(sol.problem_id)
            if problem is None:
                raise ValueError(f"no problem with id {sol.problem_id!r} for the dense targets")
            if dense_mode == "steps":
                targets = step_targets(fmt, problem, sol.steps)
            else:
                offset = first_wrong_offset(problem, sol.steps, sol.first_error, fmt.separator_text)
                targets = dense_targets(fmt, sol.question, sol.steps, offset)
            dense = (tuple(targets.positions), tuple(targets.targets))
        examples.append(_Example(encoded.ids, [p for p, _ in keep], [y for _, y in keep], *dense))
    return examples


def encode_gold(fmt: QwenPRMFormat, problems: Sequence[ArithProblem]) -> list[tuple[list[int], int]]:
    """Gold solutions in the PRM's input layout, with the index of the first solution token.

    The language-model loss covers only the solution (the assistant turn): the chat header is
    not text the policy ever learned to predict.
    """
    out = []
    for problem in problems:
        ids = fmt.encode(problem.question, problem.gold_steps).ids
        header = fmt.tokenizer.apply_chat_template(
            [{"role": "system", "content": fmt.system}, {"role": "user", "content": problem.question}],
            tokenize=False,
            add_generation_prompt=True,
        )
        start = len(fmt.tokenizer(header, add_special_tokens=False)["input_ids"])
        if ids[:start] != fmt.tokenizer(header, add_special_tokens=False)["input_ids"]:
            start = 0  # the header did not tokenise as a prefix: fall back to the whole input
        out.append((ids, start))
    return out


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def _head_loss(head, hidden: torch.Tensor, positions: Sequence[Sequence[int]], targets: Sequence[float]
               ) -> torch.Tensor:
    """Cross-entropy of the 2-class head at ``positions[row]`` of each row against hard or soft
    ``targets`` (P(good), flattened in row order)."""
    rows = torch.tensor([i for i, row in enumerate(positions) for _ in row], dtype=torch.long)
    cols = torch.tensor([p for row in positions for p in row], dtype=torch.long)
    logp = torch.log_softmax(head(hidden[rows, cols]).float(), dim=-1)
    target = torch.tensor(targets, dtype=torch.float32)
    return -(target * logp[:, 1] + (1 - target) * logp[:, 0]).mean()


def _lr(step: int, cfg: PRMTrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def init_from_policy(
    policy_dir: str | Path,
    seed: int,
    separator: str = "<extra_0>",
    delimiter: str = "\n\n",
    extra_layers: int = 0,
) -> tuple[BaseWithHead, object]:
    """A PRM whose body is the policy's transformer and whose head is fresh.

    The separator token never occurs in the policy's training text, so its embedding starts as a
    copy of the step delimiter's: between steps the PRM's input then looks like what the policy
    saw, and the body's arithmetic carries over from the first step of training.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmsearch.engines.loading import quiet_loading

    with quiet_loading():
        policy = AutoModelForCausalLM.from_pretrained(str(policy_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(policy_dir))
    tokenizer.chat_template = PLAIN_CHAT_TEMPLATE  # the PRM reads the layout its base learned
    config = copy.deepcopy(policy.config)
    depth = config.num_hidden_layers
    if extra_layers:
        config.num_hidden_layers = depth + extra_layers
        if getattr(config, "layer_types", None):
            config.layer_types = list(config.layer_types) + [config.layer_types[-1]] * extra_layers
    prm = build_qwen_prm(config, seed=seed)
    missing, unexpected = prm.base.load_state_dict(policy.model.state_dict(), strict=False)
    if unexpected or any(not k.startswith("layers.") for k in missing):
        raise ValueError(f"policy and PRM bodies differ: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        # block expansion (LLaMA Pro, Wu et al. 2024): each extra layer starts as a copy of one of
        # the top layers, with its output projections zeroed, so the PRM starts as the base model
        # but the new layers already have working attention patterns to build the comparison on
        for j, layer in enumerate(prm.base.layers[depth:]):
            source = depth - min(extra_layers, depth) + j % depth
            layer.load_state_dict(prm.base.layers[source].state_dict())
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    (sep_id,) = tokenizer.encode(separator, add_special_tokens=False)
    delim_ids = tokenizer.encode(delimiter, add_special_tokens=False)
    if len(delim_ids) == 1:
        with torch.no_grad():
            embeddings = prm.base.get_input_embeddings().weight
            embeddings[sep_id] = embeddings[delim_ids[0]]
    return prm, tokenizer


def train_prm(
    policy_dir: str | Path,
    solutions: Sequence[LabelledSolution],
    source: LabelSource | str,
    gold_problems: Sequence[ArithProblem],
    cfg: PRMTrainConfig,
    out: str | Path | None = None,
    log=print,
    problems: Mapping[str, ArithProblem] | None = None,
) -> BaseWithHead:
    """Train a PRM on ``solutions`` labelled by ``source``; save it to ``out`` when given.

    ``policy_dir`` is the causal LM the body starts from: the policy itself, or a stronger model
    of the same shape (as the 7B PRM starts from a model stronger than the 1.5B policy).
    ``problems`` (id -> problem) is needed for the dense targets (``cfg.dense_weight > 0``).
    """
    torch.set_num_threads(cfg.threads)
    prm, tokenizer = init_from_policy(policy_dir, cfg.seed, extra_layers=cfg.extra_layers)
    fmt = QwenPRMFormat(tokenizer)
    if cfg.dense_weight > 0 and problems is None:
        raise ValueError("dense_weight > 0 needs the problems of the solutions (problems=...)")
    examples = encode_examples(
        fmt, solutions, source, problems if cfg.dense_weight > 0 else None, cfg.dense_mode
    )
    if not examples:
        raise ValueError(f"no training steps left for label source {source!r}")
    gold = encode_gold(fmt, gold_problems) if cfg.lm_weight > 0 else []
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rng = np.random.default_rng(cfg.seed)
    optimizer = torch.optim.AdamW(prm.parameters(), lr=cfg.lr, weight_decay=0.01)
    embed = prm.base.get_input_embeddings()
    prm.train()
    start = time.perf_counter()
    positives = float(np.mean([y for e in examples for y in e.targets]))
    source = LabelSource(source).value
    log(
        f"[prm {source}] {len(examples)} solutions, {sum(len(e.targets) for e in examples)} steps, "
        f"{100 * positives:.0f}% positive"
    )
    for step in range(cfg.steps):
        for group in optimizer.param_groups:
            group["lr"] = _lr(step, cfg)
        batch = [examples[i] for i in rng.integers(0, len(examples), cfg.batch_size)]
        ids, mask = _pad([e.ids for e in batch], pad_id)
        hidden = prm.base(input_ids=ids, attention_mask=mask).last_hidden_state
        loss_cls = _head_loss(
            prm.head, hidden, [e.positions for e in batch], [y for e in batch for y in e.targets]
        )
        loss = loss_cls
        parts = {"cls": loss_cls.item()}
        if cfg.dense_weight > 0 and any(e.dense_positions for e in batch):
            loss_dense = _head_loss(
                prm.head,
                hidden,
                [e.dense_positions for e in batch],
                [y for e in batch for y in e.dense_targets],
            )
            loss = loss + cfg.dense_weight * loss_dense
            parts["dense"] = loss_dense.item()
        if gold:
            lm_rows = [gold[i] for i in rng.integers(0, len(gold), cfg.lm_batch)]
            lm_ids, attention = _pad([ids for ids, _ in lm_rows], pad_id)
            loss_mask = attention.clone()
            for row, (_, begin) in enumerate(lm_rows):
                loss_mask[row, :begin] = 0  # no loss on the chat header (still attended to)
            lm_hidden = prm.base(input_ids=lm_ids, attention_mask=attention).last_hidden_state
            logits = lm_hidden[:, :-1] @ embed.weight.T
            labels = lm_ids[:, 1:].masked_fill(loss_mask[:, 1:] == 0, -100)
            labels = labels.masked_fill(labels == fmt.sep_id, -100)  # a read position, not text
            loss_lm = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
            )
            loss = loss + cfg.lm_weight * loss_lm
            parts["lm"] = loss_lm.item()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(prm.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0 or step == cfg.steps - 1:
            log(
                f"[prm {source}] step {step} loss {loss.item():.4f} "
                + " ".join(f"{k} {v:.4f}" for k, v in parts.items())
                + f" ({time.perf_counter() - start:.0f}s)"
            )
    prm.eval()
    if out is not None:
        save_qwen_prm(prm, out, tokenizer)
        meta = {
            "trained_with": asdict(cfg),
            "label_source": str(LabelSource(source).value),
            "family": "qwen-prm",
            "separator": "<extra_0>",
        }
        (Path(out) / "prmsearch.json").write_text(json.dumps(meta, indent=2) + "\n")
    return prm
