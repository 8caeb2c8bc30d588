"""PRM models as ``base transformer + small head``, loaded without remote code.

Qwen2.5-Math-PRM ships its ``Qwen2ForProcessRewardModel`` class only as remote code, and
Skywork's PRM adds a value head the same way. Here the base is loaded with transformers'
``AutoModel`` (checkpoint keys ``model.*``) and the head weights are read from the
checkpoint's safetensors with this module's own code:

* ``Qwen2ForProcessRewardModel``: ``score = Linear(h, h) -> ReLU -> Linear(h, 2)`` (keys
  ``score.0.*``, ``score.2.*``); :func:`save_qwen_prm` writes a folder in exactly this layout
  (config ``architectures: ["Qwen2ForProcessRewardModel"]``, safetensors), loadable by vLLM too.
* Skywork value head: ``Linear(h, 1)`` (keys ``v_head.summary.*``), sigmoid applied by the format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

QWEN_PRM_ARCH = "Qwen2ForProcessRewardModel"
SAFE_INDEX = "model.safetensors.index.json"
SAFE_SINGLE = "model.safetensors"


def make_qwen_prm_head(hidden: int, num_labels: int = 2) -> nn.Sequential:
    """The Qwen PRM head: Linear(h, h) -> ReLU -> Linear(h, num_labels)."""
    return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_labels))


class BaseWithHead(nn.Module):
    """A base transformer (``AutoModel``) and a head over its last hidden state.

    ``forward`` returns head outputs ``[batch, tokens, labels]``; the scorer usually calls
    ``base`` and ``head`` separately so the head runs only at separator positions.
    """

    def __init__(self, base: nn.Module, head: nn.Module, head_name: str) -> None:
        super().__init__()
        self.base = base
        self.head = head
        self.head_name = head_name

    @property
    def config(self) -> Any:
        return self.base.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Any) -> torch.Tensor:
        hidden = self.base(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return self.head(hidden.last_hidden_state)

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """State dict in checkpoint naming: ``model.*`` for the base, ``<head_name>.*`` for the head."""
        state = {f"model.{k}": v for k, v in self.base.state_dict().items()}
        state.update({f"{self.head_name}.{k}": v for k, v in self.head.state_dict().items()})
        return {k: v.detach().contiguous() for k, v in state.items()}


def _checkpoint_files(folder: Path) -> dict[str, Path]:
    """Map every tensor name of a safetensors checkpoint folder to its file."""
    index = folder / SAFE_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {k: folder / v for k, v in weight_map.items()}
    single = folder / SAFE_SINGLE
    if not single.is_file():
        raise FileNotFoundError(
            f"no {SAFE_SINGLE} or {SAFE_INDEX} in {folder}; PRM heads load from safetensors only"
        )
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {k: single for k in f.keys()}  # noqa: SIM118 (safe_open is not a mapping)


def read_head_state(folder: str | Path, prefix: str) -> dict[str, torch.Tensor]:
    """Tensors under ``prefix.`` in a local checkpoint folder, with the prefix removed."""
    from safetensors import safe_open

    folder = Path(folder)
    files = _checkpoint_files(folder)
    names = [k for k in files if k.startswith(prefix + ".")]
    if not names:
        raise KeyError(
            f"checkpoint in {folder} has no tensors under {prefix!r}; is this the right PRM family?"
        )
    out: dict[str, torch.Tensor] = {}
    for name in names:
        with safe_open(str(files[name]), framework="pt") as f:
            out[name[len(prefix) + 1 :]] = f.get_tensor(name)
    return out


def resolve_folder(model: str | Path) -> Path:
    """A local folder for ``model``: the folder itself, or the Hub cache snapshot (offline)."""
    path = Path(model)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(model), allow_patterns=["*.json", "*.safetensors"]))


def load_base_with_head(model: str | Path, head: nn.Module, head_prefix: str, *,
                        dtype: torch.dtype, device: torch.device,
                        trust_remote_code: bool = False,
                        attn_implementation: str | None = "sdpa") -> BaseWithHead:
    """Load ``AutoModel`` from ``model`` and fill ``head`` from the checkpoint's ``head_prefix.*``."""
    from transformers import AutoModel

    folder = resolve_folder(model)
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    from prmsearch.engines.loading import quiet_loading

    with quiet_loading():  # the head keys are "unexpected" to AutoModel; they are loaded below
        base = AutoModel.from_pretrained(str(folder), **kwargs)
    state = read_head_state(folder, head_prefix)
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"PRM head {head_prefix!r} does not match the checkpoint: missing {missing}, "
            f"unexpected {unexpected}"
        )
    return BaseWithHead(base, head.to(dtype), head_prefix).to(device).eval()


def load_qwen_prm(model: str | Path, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu",
                  attn_implementation: str | None = "sdpa") -> BaseWithHead:
    """Load a ``Qwen2ForProcessRewardModel`` folder (base ``model.*`` + head ``score.*``)."""
    from transformers import AutoConfig

    folder = resolve_folder(model)
    config = AutoConfig.from_pretrained(str(folder))
    archs = getattr(config, "architectures", None) or []
    if QWEN_PRM_ARCH not in archs:
        raise ValueError(
            f"{model} declares architectures {archs}, not [{QWEN_PRM_ARCH!r}]; the qwen-prm family "
            "needs a Qwen2.5-Math-PRM style checkpoint (see save_qwen_prm)"
        )
    num_labels = int(getattr(config, "num_labels", 2))
    head = make_qwen_prm_head(config.hidden_size, num_labels)
    return load_base_with_head(folder, head, "score", dtype=dtype, device=torch.device(device),
                               attn_implementation=attn_implementation)


def build_qwen_prm(config: Any, *, seed: int = 0) -> BaseWithHead:
    """A freshly initialised Qwen PRM (``Qwen2Model`` + head) for ``config`` (a ``Qwen2Config``).

    For training a project PRM; save it with :func:`save_qwen_prm`.
    """
    from transformers import Qwen2Model

    torch.manual_seed(seed)
    base = Qwen2Model(config)
    head = make_qwen_prm_head(config.hidden_size, int(getattr(config, "num_labels", 2)))
    return BaseWithHead(base, head, "score")


def save_qwen_prm(prm: BaseWithHead, folder: str | Path, tokenizer: Any | None = None) -> Path:
    """Write ``prm`` as a ``Qwen2ForProcessRewardModel`` folder (config + safetensors + tokenizer).

    The layout matches Qwen2.5-Math-PRM: base weights under ``model.*``, head under
    ``score.0.*`` / ``score.2.*``, ``architectures: ["Qwen2ForProcessRewardModel"]``; this
    module's loader and vLLM's pooling runner both read it.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config: Any = prm.base.config  # the base model's PretrainedConfig
    config.architectures = [QWEN_PRM_ARCH]
    config.num_labels = cast(nn.Sequential, prm.head)[-1].out_features  # the head: Linear, ReLU, Linear
    config.save_pretrained(folder)
    save_file(prm.checkpoint_state(), str(folder / SAFE_SINGLE), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder
