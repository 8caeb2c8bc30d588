"""The trained models shipped inside the package, and where to find them.

``policy/`` is the tiny arithmetic policy (a Qwen2ForCausalLM with its tokenizer and a
``prmsearch.json`` that records the prompt format and the exact command that trained it).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["POLICY_RETRAIN_COMMAND", "ShippedModelError", "default_policy_path"]

POLICY_RETRAIN_COMMAND = (
    "python -m training.train_arith policy --out src/prmsearch/arith/models/policy "
    "--steps 900 --lr-horizon 1000 --seed 0 --phrased 0.5 --vocab-size 256"
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


def check_shipped_folder(folder: Path, kind: str, files: tuple[str, ...], command: str) -> Path:
    """Raise `ShippedModelError` naming the missing, empty or corrupt file of a shipped model
    folder and the command that retrains it; return the folder when it is complete."""
    hint = f"retrain it with: {command}"
    if not folder.is_dir():
        raise ShippedModelError(f"the shipped {kind} folder {folder} is missing; {hint}")
    for name in files:
        path = folder / name
        if not path.is_file() or path.stat().st_size == 0:
            raise ShippedModelError(f"the shipped {kind} file {path} is missing or empty; {hint}")
    weights = folder / "model.safetensors"
    with weights.open("rb") as handle:
        magic = handle.read(8)
    if magic in (b"version ", b"\x00" * 8):  # a git-lfs pointer or zeros
        raise ShippedModelError(f"{weights} is not a safetensors file (a git-lfs pointer?); {hint}")
    return folder


def default_policy_path() -> Path:
    """The folder of the shipped arithmetic policy, checked for completeness.

    Raises `ShippedModelError` naming the missing or corrupt file and the command that retrains it.
    """
    folder = check_shipped_folder(_models_dir() / "policy", "policy", _POLICY_FILES, POLICY_RETRAIN_COMMAND)
    hint = f"retrain it with: {POLICY_RETRAIN_COMMAND}"
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
