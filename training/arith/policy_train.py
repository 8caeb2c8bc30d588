"""Train the tiny arithmetic policy (a small `Qwen2ForCausalLM`) on gold solutions.

Prompt format ("plain", a contract with the policy backends): the model sees
``question + "\\n\\n" + "".join(step + "\\n\\n" for step in steps_so_far)`` and generates the next
step followed by ``"\\n\\n"``; after the final step (the one with ``\\boxed``) it generates
``<|im_end|>`` instead. The loss is taken on solution tokens only (delimiters and EOS included).

Determinism: the model is initialised from ``seed``; batch ``i`` is always train problems
``[i * batch_size, (i + 1) * batch_size)``; the learning-rate schedule depends on ``lr_horizon``
(default: ``steps``), not on when training stops. So a checkpoint saved at step ``s`` of a run
equals the final model of ``--steps s`` with the same ``--lr-horizon``. Torch runs on one thread
(the 2-core machine is shared; two torch jobs with 2 threads each slow each other 5-10x).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from prmsearch.arith.phrasing import TRAIN_BANK, phrased_problem
from prmsearch.arith.problems import ArithProblem, load_split, solution_text
from prmsearch.arith.tokenizer import (
    DEFAULT_VOCAB_SIZE,
    DELIMITER,
    EOS_TOKEN,
    PAD_TOKEN,
    save_tokenizer,
    train_tokenizer,
)

__all__ = [
    "METADATA_FILE",
    "ModelConfig",
    "TrainConfig",
    "build_config",
    "encode_example",
    "smoke_config",
    "train_command",
    "train_policy",
]

METADATA_FILE = "prmsearch.json"


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the policy. ``hidden_size / num_heads`` is the head dim (64: vLLM's CPU engine
    accepts it)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 2
    intermediate_size: int = 512
    max_positions: int = 256

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size must be divisible by num_heads ({self.num_heads}), got {self.hidden_size}"
            )


@dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Attributes:
        steps: optimizer steps to run.
        lr_horizon: steps over which the cosine schedule decays (default: ``steps``).
        batch_size: problems per step.
        lr: peak learning rate (AdamW), reached after ``warmup`` steps, decayed to ``lr * min_lr_ratio``.
        seed: model initialisation seed.
        save_at: extra steps at which to save a checkpoint into ``<out>/ckpt-<step>``.
        vocab_size: size of the BPE vocabulary, special tokens included.
        phrased: share of training questions written in a phrasing of the training bank
            (`prmsearch.arith.phrasing`) instead of the canonical one; above 0 the tokenizer also
            learns the phrasings' words.
        model: the model shape.
    """

    steps: int = 700
    lr_horizon: int | None = None
    batch_size: int = 64
    lr: float = 2e-3
    warmup: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    save_at: tuple[int, ...] = ()
    log_every: int = 25
    vocab_size: int = DEFAULT_VOCAB_SIZE
    phrased: float = 0.0
    model: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        if self.lr_horizon is None:
            object.__setattr__(self, "lr_horizon", self.steps)
        object.__setattr__(self, "save_at", tuple(sorted(set(self.save_at))))
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.lr_horizon < self.steps:
            raise ValueError(f"lr_horizon must be >= steps ({self.steps}), got {self.lr_horizon}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if any(s < 1 or s > self.steps for s in self.save_at):
            raise ValueError(f"save_at must lie in [1, steps={self.steps}], got {self.save_at}")
        if self.log_every < 1:
            raise ValueError(f"log_every must be >= 1, got {self.log_every}")
        if not 0 <= self.phrased <= 1:
            raise ValueError(f"phrased must be in [0, 1], got {self.phrased}")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine decay to ``lr * min_lr_ratio`` at ``lr_horizon``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    horizon = max(1, cfg.lr_horizon - cfg.warmup)
    progress = min(1.0, (step - cfg.warmup) / horizon)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def encode_example(tok, problem: ArithProblem, eos_id: int) -> tuple[list[int], int]:
    """Token ids of ``prompt + solution + <|im_end|>`` and the number of prompt tokens.

    The prompt and the solution are tokenized separately, the way a backend tokenizes the prompt
    and then appends generated ids. (Within the solution, the delimiter sits between a digit and a
    digit, so tokenizing steps one by one gives the same ids.)
    """
    prompt = tok.encode(problem.question + DELIMITER, add_special_tokens=False).ids
    solution = tok.encode(solution_text(problem.gold_steps), add_special_tokens=False).ids
    return prompt + solution + [eos_id], len(prompt)


def training_problems(n: int, phrased: float = 0.0) -> list[ArithProblem]:
    """The first ``n`` train problems, a ``phrased`` share of them (chosen by a hash of the id, so
    the choice does not depend on ``n``) rephrased from the training bank."""
    problems = load_split("train", n)
    if phrased <= 0:
        return problems
    return [phrased_problem(p, TRAIN_BANK) if _unit_hash(p.id) < phrased else p for p in problems]


def _unit_hash(key: str) -> float:
    digest = hashlib.sha256(f"prmsearch.policy_train/phrased/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def _batch(examples: Sequence[tuple[list[int], int]], pad_id: int):
    """Right-padded input ids, attention mask and labels (-100 on prompt and padding)."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(examples):
        t = torch.tensor(ids, dtype=torch.long)
        input_ids[row, : len(ids)] = t
        mask[row, : len(ids)] = 1
        labels[row, n_prompt : len(ids)] = t[n_prompt:]
    return input_ids, mask, labels


def build_model(cfg: TrainConfig, tok):
    """A freshly initialised Qwen2ForCausalLM sized to the tokenizer exactly."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    m = cfg.model
    config = Qwen2Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_heads,
        head_dim=m.hidden_size // m.num_heads,
        max_position_embeddings=m.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.token_to_id(EOS_TOKEN),
        pad_token_id=tok.token_to_id(PAD_TOKEN),
        use_cache=True,
    )
    torch.manual_seed(cfg.seed)
    return Qwen2ForCausalLM(config)


def save_policy(model, tok, out: str | Path, command: str, extra: dict | None = None) -> Path:
    """Write weights (safetensors, fp32), generation config, tokenizer files and prmsearch.json."""
    from transformers import GenerationConfig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    eos_id, pad_id = tok.token_to_id(EOS_TOKEN), tok.token_to_id(PAD_TOKEN)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(str(out))
    save_tokenizer(tok, out)
    meta = {
        "prompt_format": "plain",
        "delimiter": DELIMITER,
        "eos": EOS_TOKEN,
        "trained_with": command,
    }
    meta.update(extra or {})
    (out / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def train_policy(
    cfg: TrainConfig,
    out: str | Path,
    command: str | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Train the policy and save it into ``out`` (checkpoints into ``out/ckpt-<step>``)."""
    import torch

    torch.set_num_threads(1)
    command = command or train_command(cfg, out)
    started = time.time()
    tok = train_tokenizer(cfg.vocab_size, phrased=cfg.phrased > 0)
    eos_id, pad_id = tok.token_to_id(EOS_TOKEN), tok.token_to_id(PAD_TOKEN)
    problems = training_problems(cfg.steps * cfg.batch_size, cfg.phrased)
    examples = [encode_example(tok, p, eos_id) for p in problems]
    if max(len(ids) for ids, _ in examples) > cfg.model.max_positions:
        raise ValueError(f"model.max_positions={cfg.model.max_positions} is shorter than an example")
    model = build_model(cfg, tok)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"policy: {n_params} parameters, vocab {tok.get_vocab_size()}, {len(examples)} examples")
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    model.train()
    running = 0.0
    for step in range(cfg.steps):
        for group in optim.param_groups:
            group["lr"] = lr_at(step, cfg)
        batch = examples[step * cfg.batch_size : (step + 1) * cfg.batch_size]
        input_ids, mask, labels = _batch(batch, pad_id)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        running += loss.item()
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            n = cfg.log_every if done % cfg.log_every == 0 else done % cfg.log_every
            log(
                f"step {done}/{cfg.steps} loss {running / n:.4f} lr {lr_at(step, cfg):.2e} "
                f"{time.time() - started:.0f}s"
            )
            running = 0.0
        if done in cfg.save_at and done != cfg.steps:
            ckpt_cfg = replace(cfg, steps=done, save_at=())
            ckpt_cmd = train_command(ckpt_cfg, out)
            save_policy(model.eval(), tok, Path(out) / f"ckpt-{done:05d}", ckpt_cmd)
            model.train()
    model.eval()
    meta = {
        "train_config": _jsonable(cfg),
        "train_seconds": round(time.time() - started, 1),
        "parameters": n_params,
    }
    path = save_policy(model, tok, out, command, extra=meta)
    log(f"saved {path} in {time.time() - started:.0f}s")
    return path


def _jsonable(cfg: TrainConfig) -> dict:
    d = asdict(cfg)
    d["save_at"] = list(d["save_at"])
    return d


def smoke_config() -> TrainConfig:
    """A run of a few seconds that exercises the whole pipeline (for CI)."""
    return TrainConfig(
        steps=3,
        batch_size=8,
        warmup=1,
        log_every=1,
        model=ModelConfig(hidden_size=64, num_layers=1, num_heads=1, intermediate_size=128),
    )


_CLI_FLAGS = (
    ("steps", "--steps"),
    ("lr_horizon", "--lr-horizon"),
    ("batch_size", "--batch-size"),
    ("lr", "--lr"),
    ("seed", "--seed"),
    ("phrased", "--phrased"),
    ("vocab_size", "--vocab-size"),
)


def build_config(smoke: bool = False, save_at: tuple[int, ...] = (), **overrides) -> TrainConfig:
    """The config the CLI builds: the default (or smoke) config with the given flags applied.

    ``overrides`` are the CLI-settable fields (``steps``, ``lr_horizon``, ``batch_size``, ``lr``,
    ``seed``, ``phrased``, ``vocab_size``); None means "not given". An unset ``lr_horizon`` follows ``steps``.
    """
    unknown = set(overrides) - {name for name, _ in _CLI_FLAGS}
    if unknown:
        raise ValueError(f"overrides must be among {[n for n, _ in _CLI_FLAGS]}, got {sorted(unknown)}")
    base = smoke_config() if smoke else TrainConfig()
    given = {name: value for name, value in overrides.items() if value is not None}
    given.setdefault("lr_horizon", None)
    return replace(base, save_at=tuple(save_at), **given)


def train_command(cfg: TrainConfig, out: str | Path) -> str:
    """The exact CLI command that reproduces ``cfg``'s weights (``save_at`` is left out).

    Raises ValueError when ``cfg`` has a field that the CLI cannot set.
    """
    smoke = cfg.model == smoke_config().model
    base = smoke_config() if smoke else TrainConfig()
    args = ["--smoke"] if smoke else []
    overrides: dict[str, object] = {}
    for name, flag in _CLI_FLAGS:
        value = getattr(cfg, name)
        if name == "lr_horizon":
            if value == cfg.steps:
                continue
        elif value == getattr(base, name) and (smoke or name not in ("steps", "seed")):
            continue  # the full run always spells out --steps and --seed
        overrides[name] = value
        args += [flag, str(value)]
    if build_config(smoke, **overrides) != replace(cfg, save_at=()):
        raise ValueError(f"cfg has fields that the CLI cannot set, got {cfg}")
    return shlex.join(["python", "-m", "training.train_arith", "policy", "--out", str(out), *args])
