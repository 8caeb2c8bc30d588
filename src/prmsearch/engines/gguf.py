"""Turn a GGUF checkpoint into a plain Hugging Face model folder (bf16 safetensors + tokenizer).

A GGUF file loads in transformers only by dequantising it at every start (about a minute for a
0.5B model on two cores), and vLLM's CPU engine wants a plain folder. Converting once gives a
folder that loads in seconds everywhere. On transformers 5.19 a model loaded from GGUF refuses
``save_pretrained`` ("quantized with GGUF, not serializable"), so the weights are dequantised,
moved into a model built from the bare config, and that model is saved.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

#: Written last into a converted folder: a folder without it is an interrupted conversion.
CONVERTED_MARKER = "prmsearch-converted.json"


def is_converted(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished conversion (its marker file exists)."""
    return (Path(folder) / CONVERTED_MARKER).is_file()


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, dtype: str = "bfloat16",
                 source: dict[str, Any] | None = None) -> Path:
    """Convert the GGUF file ``gguf_path`` into a model folder at ``out_dir``.

    The folder is written under a temporary name and renamed when complete, so an interrupted
    conversion never looks finished. ``source`` is recorded in the marker file (where the file
    came from, its checksum). Returns ``out_dir``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf_config: type[Any] | None
    try:
        from transformers import GgufConfig
    except ImportError:  # older transformers dequantise GGUF on load anyway
        gguf_config = None
    else:
        gguf_config = GgufConfig

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file {gguf_path} does not exist")
    torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be 'bfloat16', 'float16' or 'float32', got {dtype!r}")
    kwargs: dict[str, Any] = {"gguf_file": gguf_path.name, "dtype": torch_dtype}
    if gguf_config is not None:
        kwargs["quantization_config"] = gguf_config(dequantize=True)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **kwargs)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch_dtype
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{gguf_path.name}: the dequantised weights do not fit the model built from its "
                         f"config (missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})")
    model.tie_weights()
    del loaded
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)

    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    stops = [t for t in _stop_ids(tokenizer) if t is not None]
    if stops:  # chat models end a turn with their own token: both engines must stop there
        GenerationConfig(eos_token_id=stops if len(stops) > 1 else stops[0]).save_pretrained(tmp)
    marker = {"converted_from": gguf_path.name, "dtype": dtype, **(source or {})}
    (tmp / CONVERTED_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def _stop_ids(tokenizer: Any) -> list[int | None]:
    """The end-of-turn token (when the vocabulary has one) and the tokenizer's EOS, deduplicated."""
    ids: list[int | None] = []
    for token in ("<|im_end|>", "<|eot_id|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.append(tid)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids
