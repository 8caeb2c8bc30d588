"""Where a step ends: blank lines inside headings, announcements and code blocks are not step ends."""

from __future__ import annotations

import pytest

from prmsearch.policies.base import Finish
from prmsearch.steps import find_step_end, is_complete_step, split_steps

D = "\n\n"


@pytest.mark.parametrize("text", [
    "**Step 1: Find the total**",
    "### Step 2: Subtract",
    "Step 3:",
    "To find the total, we compute:",
    "1. **Calculate the clips sold in April:**\n   She sold:",
    "Here is the code:\n```python\nx = 48 / 2",
    "   \n ",
])
def test_unfinished_steps_are_not_complete(text):
    assert not is_complete_step(text)


@pytest.mark.parametrize("text", [
    "In May she sold 48 / 2 = 24 clips.",
    "**Step 1: Find the total**\nShe sold 48 + 24 = 72 clips.",
    "```python\nx = 48 / 2\n```\nSo x is 24.",
    "7 + 5 = 12",
])
def test_finished_steps_are_complete(text):
    assert is_complete_step(text)


def test_a_heading_runs_on_to_the_next_blank_line():
    text = "**Step 1: April**\n\nShe sold 48 clips.\n\n**Step 2: May**\n\nHalf: 24."
    end = find_step_end(text, D)
    assert text[:end] == "**Step 1: April**\n\nShe sold 48 clips."


def test_a_code_block_is_one_step_whatever_blank_lines_it_holds():
    text = "We compute:\n\n```python\na = 48\n\nb = a / 2\n```\n\nSo b = 24."
    assert text[: find_step_end(text, D)] == "We compute:\n\n```python\na = 48\n\nb = a / 2\n```"


def test_the_loose_rule_only_asks_for_text_before_the_delimiter():
    assert find_step_end("Step 1:\n\nmore", D) == -1
    assert find_step_end("Step 1:\n\nmore", D, complete=False) == len("Step 1:")


def test_a_whole_solution_splits_where_a_stepwise_search_would_cut():
    text = ("Let's solve it:\n\n1. April: 48 clips.\n\n**Step 2**\n\nMay: 24 clips.\n\n"
            "Total: \\boxed{72}.")
    assert split_steps(text, D) == [
        "Let's solve it:\n\n1. April: 48 clips.", "**Step 2**\n\nMay: 24 clips.", "Total: \\boxed{72}."
    ]
    assert split_steps("", D) == [""]
    assert split_steps("\n\nonly one\n\n", D) == ["\n\nonly one"]


def test_an_engine_stopped_inside_an_unfinished_step_is_cut_at_its_delimiter():
    from prmsearch.policies.vllm_output import step_output

    class CharTokenizer:  # one token per character: decode is exact
        def decode(self, ids, **_):
            return "".join(chr(i) for i in ids)

    ids = [ord(c) for c in "**Step 1**\n\n"]
    out = step_output(CharTokenizer(), ids, [0.0] * len(ids), stopped=True, eos_ids=(), stop_at_step=True,
                      delimiter=D)
    assert out.finish is Finish.STEP and out.text == "**Step 1**"
