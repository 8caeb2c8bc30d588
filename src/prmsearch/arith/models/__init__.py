"""The trained models shipped inside the package, and where to find them.

``policy/`` is the tiny arithmetic policy (a Qwen2ForCausalLM with its tokenizer and a
``prmsearch.json`` that records the prompt format and the exact command that trained it).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["POLICY_RETRAIN_COMMAND", "ShippedModelError", "default_policy_path"]

POLICY_RETRAIN_COMMAND = (
    "python scripts/train_arith.py policy --out src/prmsearch/arith/models/policy "
    "--steps 675 --lr-horizon 1000 --seed 0"
)
_POLICY_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "prmsearch.json",
)


class ShippedModelError(FileNotFoundError):
    """A shipped model folder is missing or incomplete."""


def _models_dir() -> Path:
    return Path(__file__).resolve().parent


def default_policy_path() -> Path:
    """The folder of the shipped arithmetic policy, checked for completeness.

    Raises `ShippedModelError` naming the missing or corrupt file and the command that retrains it.
    """
    folder = _models_dir() / "policy"
    hint = f"retrain it with: {POLICY_RETRAIN_COMMAND}"
    if not folder.is_dir():
        raise ShippedModelError(f"the shipped policy folder {folder} is missing; {hint}")
    for name in _POLICY_FILES:
        path = folder / name
        if not path.is_file() or path.stat().st_size == 0:
            raise ShippedModelError(f"the shipped policy file {path} is missing or empty; {hint}")
    weights = folder / "model.safetensors"
    if weights.read_bytes()[:8] in (b"version ", b"\x00" * 8):  # a git-lfs pointer or zeros
        raise ShippedModelError(f"{weights} is not a safetensors file (a git-lfs pointer?); {hint}")
    try:
        meta = json.loads((folder / "prmsearch.json").read_text())
    except (OSError, ValueError) as err:
        raise ShippedModelError(f"{folder / 'prmsearch.json'} is corrupt ({err}); {hint}") from err
    if meta.get("prompt_format") != "plain":
        raise ShippedModelError(
            f"{folder / 'prmsearch.json'} has prompt_format {meta.get('prompt_format')!r}, "
            f"expected 'plain'; {hint}"
        )
    return folder
