"""The shipped tokenizer: AutoTokenizer round-trip, exact vocabulary, special tokens, template."""

import json
import os

import pytest

pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoTokenizer

from prmsearch.arith.models import default_policy_path
from prmsearch.arith.phrasing import phrased_split
from prmsearch.arith.problems import load_split, solution_text
from prmsearch.arith.tokenizer import SPECIAL_TOKENS, STEP_SEPARATOR, train_tokenizer


@pytest.fixture(scope="module")
def shipped():
    return AutoTokenizer.from_pretrained(str(default_policy_path()))


def test_autotokenizer_round_trips_trained_ids(shipped):
    config = json.loads((default_policy_path() / "prmsearch.json").read_text())["train_config"]
    # deterministic: must equal what was shipped (the v2 policy's phrased tokenizer)
    trained = train_tokenizer(config["vocab_size"], phrased=config["phrased"] > 0)
    problems = load_split("test", 30)
    for p in [*problems, *phrased_split("test", "heldout", 10)]:
        text = p.question + "\n\n" + solution_text(p.gold_steps)
        ids = shipped(text, add_special_tokens=False)["input_ids"]
        assert ids == trained.encode(text, add_special_tokens=False).ids
        assert shipped.decode(ids) == text


def test_vocabulary_is_sized_exactly(shipped):
    config = json.loads((default_policy_path() / "config.json").read_text())
    assert len(shipped) == config["vocab_size"]
    assert sorted(shipped.get_vocab().values()) == list(range(config["vocab_size"]))


def test_special_tokens_and_delimiter(shipped):
    assert shipped.eos_token == "<|im_end|>" and shipped.pad_token == "<|endoftext|>"
    for token in SPECIAL_TOKENS:
        assert shipped.convert_tokens_to_ids(token) is not None
        assert len(shipped(token, add_special_tokens=False)["input_ids"]) == 1
    assert len(shipped("\n\n", add_special_tokens=False)["input_ids"]) == 1
    sep = shipped.convert_tokens_to_ids(STEP_SEPARATOR)
    ids = shipped("1 + 2 = 3<extra_0>3 * 2 = 6<extra_0>", add_special_tokens=False)["input_ids"]
    assert ids.count(sep) == 2


def test_chat_template_is_qwen_style(shipped):
    p = load_split("test", 1)[0]
    messages = [
        {"role": "user", "content": p.question},
        {"role": "assistant", "content": STEP_SEPARATOR.join(p.gold_steps) + STEP_SEPARATOR},
    ]
    text = shipped.apply_chat_template(messages, tokenize=False)
    assert text.startswith("<|im_start|>system\nPlease reason step by step")
    assert f"<|im_start|>user\n{p.question}<|im_end|>\n<|im_start|>assistant\n" in text
    ids = shipped(text, add_special_tokens=False)["input_ids"]
    assert shipped.decode(ids) == text  # every character of the template is in the vocabulary
