"""Session fixtures: tiny random models of every backend family, saved and loaded back."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
torch.set_num_threads(1)

import tiny  # noqa: E402

CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def _quiet() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


_quiet()


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory) -> Path:
    """A tiny Phi causal LM (its lm_head has a bias, used to make steps end often)."""
    from transformers import PhiConfig, PhiForCausalLM

    folder = tmp_path_factory.mktemp("policy")
    tok = tiny.build_tokenizer(CHATML_SPECIALS, eos="<|endoftext|>",
                               chat_template=tiny.CHATML_TEMPLATE)
    torch.manual_seed(0)
    eos = tok.eos_token_id
    cfg = PhiConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                    num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256,
                    eos_token_id=eos, bos_token_id=eos, pad_token_id=eos)
    model = PhiForCausalLM(cfg)
    with torch.no_grad():
        bias = model.lm_head.bias
        bias.zero_()
        bias[tok.convert_tokens_to_ids("ĊĊ")] = 2.0
        bias[tok.convert_tokens_to_ids(".ĊĊ")] = 2.0
        bias[tok.convert_tokens_to_ids("Ċ")] = 2.5
        bias[eos] = 0.5
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def policy(policy_dir):
    from prmsearch.policies.hf import HFPolicy

    return HFPolicy(policy_dir, prompt_format="plain", device="cpu", dtype="float32")


def _qwen_config(vocab: int):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=512)


def _llama_config(vocab: int, **kw):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=512, **kw)


@pytest.fixture(scope="session")
def qwen_prm_dir(tmp_path_factory) -> Path:
    """A tiny Qwen2ForProcessRewardModel folder written by save_qwen_prm."""
    from prmsearch.scorers.heads import build_qwen_prm, save_qwen_prm

    folder = tmp_path_factory.mktemp("qwen_prm")
    tok = tiny.build_tokenizer([*CHATML_SPECIALS, "<extra_0>"], eos="<|im_end|>",
                               pad="<|endoftext|>", chat_template=tiny.CHATML_TEMPLATE)
    prm = build_qwen_prm(_qwen_config(len(tok)), seed=1)
    with torch.no_grad():  # spread the head's outputs so scores are not all ~0.5
        prm.head[2].weight.mul_(20)
    save_qwen_prm(prm, folder, tok)
    return folder


@pytest.fixture(scope="session")
def math_shepherd_dir(tmp_path_factory) -> Path:
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("math_shepherd")
    tok = tiny.build_tokenizer(["<|endoftext|>"], eos="<|endoftext|>")
    torch.manual_seed(2)
    LlamaForCausalLM(_llama_config(len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def rlhflow_dir(tmp_path_factory) -> Path:
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("rlhflow")
    specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = tiny.build_tokenizer(specials, eos="<|eot_id|>", bos="<|begin_of_text|>",
                               chat_template=tiny.LLAMA3_TEMPLATE)
    torch.manual_seed(3)
    LlamaForCausalLM(_llama_config(len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def skywork_dir(tmp_path_factory) -> Path:
    """Qwen2 base + value head Linear(h, 1) under ``v_head.summary`` (Skywork layout)."""
    from safetensors.torch import save_file
    from transformers import Qwen2Model

    folder = tmp_path_factory.mktemp("skywork")
    tok = tiny.build_tokenizer(["<|endoftext|>", "<|bos|>"], eos="<|endoftext|>", bos="<|bos|>")
    torch.manual_seed(4)
    cfg = _qwen_config(len(tok))
    base = Qwen2Model(cfg)
    head = torch.nn.Linear(cfg.hidden_size, 1)
    with torch.no_grad():
        head.weight.mul_(10)
    state = {f"model.{k}": v.contiguous() for k, v in base.state_dict().items()}
    state.update({f"v_head.summary.{k}": v.contiguous() for k, v in head.state_dict().items()})
    cfg.architectures = ["Qwen2ForPrmModel"]
    cfg.save_pretrained(folder)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def token_cls_dir(tmp_path_factory) -> Path:
    from transformers import LlamaForTokenClassification

    folder = tmp_path_factory.mktemp("token_cls")
    tok = tiny.build_tokenizer(["<|endoftext|>", "<sep>"], eos="<|endoftext|>")
    torch.manual_seed(5)
    model = LlamaForTokenClassification(_llama_config(len(tok), num_labels=2))
    with torch.no_grad():
        model.score.weight.mul_(20)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


FAMILY_DIRS = {
    "qwen-prm": "qwen_prm_dir",
    "math-shepherd": "math_shepherd_dir",
    "rlhflow": "rlhflow_dir",
    "skywork": "skywork_dir",
    "token-cls": "token_cls_dir",
    "verifier": "policy_dir",  # any chat causal LM is a generative verifier
}

#: The tiny tokenizer has no single-token "Yes"/"No": single bytes stand in for the verdicts, and a
#: short system prompt keeps the byte-level input inside the tiny model's 256 positions.
FAMILY_OPTIONS = {"token-cls": {"separator": "<sep>"},
                  "verifier": {"good": "Y", "bad": "N", "system": "Check.", "turn": "{step}",
                               "problem": "{question}\n"}}


@pytest.fixture(scope="session", params=sorted(FAMILY_DIRS))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def family_dir(request, family) -> Path:
    return request.getfixturevalue(FAMILY_DIRS[family])


def make_scorer_for(family: str, folder: Path, **kw):
    from prmsearch.scorers.hf import HFPRMScorer

    return HFPRMScorer(folder, family, device="cpu", dtype="float32",
                       format_options=FAMILY_OPTIONS.get(family), **kw)


def write_settings(folder: Path, **settings) -> None:
    (folder / "prmsearch.json").write_text(json.dumps(settings))
