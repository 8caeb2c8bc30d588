"""The settings of one policy fine-tune, checked at the boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["METHODS", "PolicyTrainConfig"]

#: ``sft`` (TRL's SFTTrainer, loss on the completion only) or ``dpo`` (TRL's DPOTrainer).
METHODS = ("sft", "dpo")


@dataclass(frozen=True)
class PolicyTrainConfig:
    """How to fine-tune the policy.

    Attributes:
        method: ``sft`` or ``dpo``.
        epochs: passes over the data (ignored when ``steps`` is set).
        steps: optimiser steps (None: ``epochs`` decides).
        learning_rate: peak learning rate (cosine decay after ``warmup_ratio`` of the steps).
        batch_size: rows per optimiser step.
        beta: DPO's KL weight.
        lora_rank: 0 trains every weight; above 0, a LoRA adapter of this rank (with ``peft``),
            merged into the weights before saving, so the folder loads without peft.
        max_length: rows are truncated to this many tokens.
        seed: the trainer's seed (data order and initialisation of LoRA weights).
        threads: torch CPU threads.
        warmup_ratio: share of the steps spent warming the learning rate up (Adam's first steps,
            with fresh moments, move every weight by about the learning rate: without a warm-up a
            small model's loss jumps tenfold at 3e-4).
    """

    method: str = "sft"
    epochs: float = 1.0
    steps: int | None = None
    learning_rate: float | None = None
    batch_size: int = 16
    beta: float = 0.1
    lora_rank: int = 0
    max_length: int = 1024
    seed: int = 0
    threads: int = 1
    warmup_ratio: float = 0.1

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"epochs must be > 0, got {self.epochs!r}")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"steps must be an integer >= 1 (or None: epochs decide), got {self.steps!r}")
        if self.learning_rate is not None and not (
            math.isfinite(self.learning_rate) and self.learning_rate > 0
        ):
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        for name in ("batch_size", "max_length", "threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ValueError(
                f"lora_rank must be an integer >= 0 (0: full fine-tuning), got {self.lora_rank!r}"
            )
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"beta must be > 0, got {self.beta!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")

    @property
    def lr(self) -> float:
        """The learning rate: as given, else 1e-4 for SFT and 1e-6 for DPO (common defaults)."""
        if self.learning_rate is not None:
            return self.learning_rate
        return 1e-4 if self.method == "sft" else 1e-6
