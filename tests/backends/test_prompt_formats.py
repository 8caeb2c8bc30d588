"""Prompt formats: the plain contract, chat rendering, 'auto' resolution and clear errors."""

from __future__ import annotations

import shutil

import pytest
import tiny
from conftest import write_settings

from prmsearch.engines.prompt_formats import (
    QWEN_MATH_SYSTEM,
    MissingChatTemplateError,
    get_prompt_format,
    resolve_prompt_format,
)


@pytest.fixture(scope="module")
def chat_tok():
    return tiny.build_tokenizer(["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
                                eos="<|endoftext|>", chat_template=tiny.CHATML_TEMPLATE)


@pytest.fixture(scope="module")
def bare_tok():
    return tiny.build_tokenizer(["<|endoftext|>"], eos="<|endoftext|>")


def test_plain_contract(bare_tok):
    fmt = get_prompt_format("plain")
    text = fmt.render(bare_tok, "Q?", ["a", "b"], "\n\n")
    assert text == "Q?" + "\n\n" + "a\n\n" + "b\n\n"
    assert fmt.render(bare_tok, "Q?", [], "\n\n") == "Q?\n\n"
    assert fmt.render(bare_tok, "Q?", ["a"], " ## ") == "Q?\n\na ## "


def test_qwen_math_cot_has_system_prompt_and_open_assistant_turn(chat_tok):
    text = get_prompt_format("qwen25-math-cot").render(chat_tok, "Q?", ["a"], "\n\n")
    assert text == (
        f"<|im_start|>system\n{QWEN_MATH_SYSTEM}<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n"
        "<|im_start|>assistant\na\n\n"
    )


def test_chat_uses_model_template_without_system(chat_tok):
    text = get_prompt_format("chat").render(chat_tok, "Q?", [], "\n\n")
    assert text == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    assert "Solve the following math problem" in get_prompt_format("llama3-math").render(
        chat_tok, "Q?", [], "\n\n")


def test_chat_format_without_template_names_the_fix(bare_tok):
    with pytest.raises(MissingChatTemplateError, match="prompt_format='plain'"):
        resolve_prompt_format("qwen25-math-cot", bare_tok, None)


def test_unknown_format_lists_known(bare_tok):
    with pytest.raises(ValueError, match="known: chat, llama3-math, plain, qwen25-math-cot"):
        resolve_prompt_format("alpaca", bare_tok, None)


def test_auto(tmp_path, chat_tok, bare_tok):
    assert resolve_prompt_format("auto", chat_tok, tmp_path).name == "step-by-step"
    assert resolve_prompt_format("auto", bare_tok, tmp_path).name == "plain"
    write_settings(tmp_path, prompt_format="plain")
    assert resolve_prompt_format("auto", chat_tok, tmp_path).name == "plain"


def test_policy_auto_reads_prmsearch_json(policy_dir, tmp_path):
    from prmsearch.policies.hf import HFPolicy

    folder = tmp_path / "m"
    shutil.copytree(policy_dir, folder)
    assert HFPolicy(folder, device="cpu").prompt_format.name == "step-by-step"  # has a chat template
    write_settings(folder, prompt_format="plain")
    p = HFPolicy(folder, device="cpu")
    assert p.prompt_format.name == "plain"
    assert p.prompt_text("Q", ["s"]) == "Q\n\ns\n\n"
