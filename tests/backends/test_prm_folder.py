"""The Qwen2ForProcessRewardModel folder builder: layout on disk and exact round trip."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open

from prmsearch.scorers.heads import load_qwen_prm


def test_folder_layout(qwen_prm_dir):
    cfg = json.loads((qwen_prm_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForProcessRewardModel"]
    assert cfg["model_type"] == "qwen2"
    with safe_open(str(qwen_prm_dir / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert {"score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias"} <= keys
    assert "model.embed_tokens.weight" in keys
    assert all(k.startswith(("model.", "score.")) for k in keys)
    with safe_open(str(qwen_prm_dir / "model.safetensors"), framework="pt") as f:
        assert tuple(f.get_tensor("score.2.weight").shape) == (2, cfg["hidden_size"])


def test_round_trip_is_exact(qwen_prm_dir, tmp_path):
    from prmsearch.scorers.heads import save_qwen_prm

    prm = load_qwen_prm(qwen_prm_dir)
    save_qwen_prm(prm, tmp_path)
    again = load_qwen_prm(tmp_path)
    x = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(prm(x), again(x), rtol=0, atol=0)
