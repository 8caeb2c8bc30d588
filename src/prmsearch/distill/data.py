"""Training rows for ``train-policy``: an export folder, a JSONL or Parquet file, or a
``save_to_disk`` folder, checked to hold the columns the chosen trainer reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["load_training_data"]

#: Column sets each method accepts (any one of them), as TRL's trainers read them.
_NEEDS = {
    "sft": ({"prompt", "completion"}, {"messages"}, {"text"}),
    "dpo": ({"chosen", "rejected"},),
}
_EXPORT_KIND = {"sft": "sft", "dpo": "preference"}


def _load(path: Path) -> Any:
    import datasets

    datasets.disable_progress_bars()
    if path.is_dir():
        if (path / "dataset").is_dir():
            return datasets.load_from_disk(str(path / "dataset"))
        if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
            return datasets.load_from_disk(str(path))
        if (path / "data.jsonl").is_file():
            return datasets.load_dataset("json", data_files=str(path / "data.jsonl"), split="train")
        if (path / "data.parquet").is_file():
            return datasets.load_dataset("parquet", data_files=str(path / "data.parquet"), split="train")
        raise ValueError(
            f"{path} holds no dataset (dataset/, data.jsonl or data.parquet of `prmsearch export`)"
        )
    if path.suffix == ".parquet":
        return datasets.load_dataset("parquet", data_files=str(path), split="train")
    if path.suffix in (".jsonl", ".json"):
        return datasets.load_dataset("json", data_files=str(path), split="train")
    raise ValueError(f"{path}: expected an export folder, a .jsonl or a .parquet file")


def load_training_data(path: str | Path, method: str) -> Any:
    """The rows at ``path`` as a ``datasets.Dataset``, checked for ``method``'s columns.

    Raises ``ValueError`` naming the missing columns and the export that makes them, or
    ``FileNotFoundError`` when ``path`` does not exist.
    """
    source = Path(path).expanduser()
    if not source.exists():
        raise FileNotFoundError(f"training data {str(source)!r} does not exist")
    data = _load(source)
    columns = set(data.column_names)
    if not any(need <= columns for need in _NEEDS[method]):
        wanted = " or ".join("+".join(sorted(n)) for n in _NEEDS[method])
        raise ValueError(
            f"{source}: {method} needs the columns {wanted}, the data has {', '.join(sorted(columns))}; "
            f"make it with `prmsearch export RUN --kind {_EXPORT_KIND[method]} --out DIR`"
        )
    if len(data) == 0:
        raise ValueError(f"{source} holds no rows; nothing to train on")
    return data
