"""Fine-tune a policy with TRL's ``SFTTrainer`` or ``DPOTrainer`` and save a folder that
``--policy DIR`` loads.

The base's ``prmsearch.json`` (prompt format, delimiter, EOS) is carried over, so the trained
model is prompted exactly as the base was; ``trained_with`` records the data, the method and the
settings, and ``training.json`` the loss curve.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prmsearch.distill.config import PolicyTrainConfig
from prmsearch.distill.data import load_training_data
from prmsearch.engines.prompt_formats import SETTINGS_FILE, read_settings

__all__ = ["train_policy"]



def _trl():
    try:
        import trl
    except ImportError as exc:
        raise ImportError("train-policy needs TRL: pip install 'prmsearch[train]'") from exc
    return trl


def _trainer(config: PolicyTrainConfig, model: Any, tokenizer: Any, data: Any, scratch: Path) -> Any:
    import torch

    trl = _trl()
    common: dict[str, Any] = {
        "output_dir": str(scratch),
        "per_device_train_batch_size": config.batch_size,
        "learning_rate": config.lr,
        "lr_scheduler_type": "cosine",
        "warmup_steps": config.warmup_ratio,  # transformers 5: a value below 1 is a share of the steps
        "num_train_epochs": config.epochs,
        "max_steps": config.steps if config.steps is not None else -1,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "seed": config.seed,
        "use_cpu": not torch.cuda.is_available(),
        # TRL turns bf16 autocast on by default; on a CPU without fast bf16 that made each step 9x
        # slower (the embedded policy: 66 s against 7 s for 6 steps of 16 rows)
        "bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        "max_length": config.max_length,
        "disable_tqdm": True,
    }
    peft_config = None
    if config.lora_rank:
        try:
            from peft import LoraConfig
        except ImportError as exc:
            raise ImportError("--lora-rank needs peft: pip install 'prmsearch[train]'") from exc
        rank = config.lora_rank
        peft_config = LoraConfig(
            r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    if config.method == "sft":
        args = trl.SFTConfig(**common)
        return trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                              peft_config=peft_config)  # fmt: skip
    args = trl.DPOConfig(beta=config.beta, **common)
    return trl.DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                          peft_config=peft_config)  # fmt: skip


def _quiet_progress(trainer: Any) -> None:
    """One short line per tenth of the run on stderr (step, loss, seconds a step, time left)
    instead of the trainer's dict per step: a CPU run of a real model takes an hour."""
    import sys

    from transformers import PrinterCallback, TrainerCallback

    class Progress(TrainerCallback):
        started = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kwargs):
            step, steps = state.global_step, state.max_steps
            every = max(1, steps // 10)
            if logs and "loss" in logs and (step % every == 0 or step == steps):
                per_step = (time.perf_counter() - self.started) / max(1, step)
                left = per_step * max(0, steps - step)
                print(
                    f"train-policy: step {step}/{steps} loss {float(logs['loss']):.4f} "
                    f"({per_step:.1f} s/step, {left / 60:.0f} min left)",
                    file=sys.stderr, flush=True,
                )

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(Progress())


def _base_dtype(model_id: str) -> Any:
    """The dtype the base is stored in (None when its config does not say)."""
    import torch
    from transformers import AutoConfig

    value = getattr(AutoConfig.from_pretrained(model_id), "dtype", None)
    if isinstance(value, str):
        value = getattr(torch, value, None)
    return value if isinstance(value, torch.dtype) else None


def train_policy(
    data_path: str | Path, base: str | Path, out: str | Path, config: PolicyTrainConfig
) -> dict[str, Any]:
    """Fine-tune ``base`` on the rows at ``data_path`` and save the model into ``out``.

    Returns the record written to ``out/training.json`` (settings, row count, seconds, losses).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(config.threads)
    data = load_training_data(data_path, config.method)
    base_dir = Path(base).expanduser()
    model_id = str(base_dir) if base_dir.exists() else str(base)
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.float32)
    target = Path(out)
    scratch = target.with_name(target.name + ".trainer")
    started = time.perf_counter()
    trainer = _trainer(config, model, tokenizer, data, scratch)
    _quiet_progress(trainer)
    trainer.train()
    seconds = time.perf_counter() - started
    trained = trainer.model
    if config.lora_rank:
        trained = trained.merge_and_unload()
    trained.config.use_cache = True  # the trainers turn the KV cache off for training; search needs it
    saved_dtype = _base_dtype(model_id)
    if saved_dtype is not None and saved_dtype != torch.float32:
        trained = trained.to(saved_dtype)  # trained in float32, kept as light as the base (bf16 for vLLM)
    target.mkdir(parents=True, exist_ok=True)
    trained.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    for extra in ("chat_template.jinja", "generation_config.json"):
        if base_dir.is_dir() and (base_dir / extra).is_file() and not (target / extra).is_file():
            shutil.copy2(base_dir / extra, target / extra)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    record = {
        "base": model_id,
        "data": str(data_path),
        "rows": len(data),
        "config": asdict(config),
        "learning_rate": config.lr,
        "steps": trainer.state.global_step,
        "seconds": round(seconds, 1),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
    }
    settings = read_settings(base_dir) if base_dir.is_dir() else {}
    settings["trained_with"] = record
    (target / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    (target / "training.json").write_text(
        json.dumps({**record, "log_history": trainer.state.log_history}, indent=2, default=str) + "\n",
        encoding="utf-8",
    )
    shutil.rmtree(scratch, ignore_errors=True)
    return record
