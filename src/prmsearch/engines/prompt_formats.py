"""Prompt formats: how a question and the steps taken so far become the policy's input text.

A format is chosen by name from a small registry (``plain``, ``chat``, ``step-by-step``,
``qwen25-math-cot``, ``llama3-math``) or with ``"auto"`` (:func:`resolve_prompt_format`):
chat models get ``step-by-step``, whose system prompt asks for steps separated by blank lines
and the answer in ``\\boxed{}``, so a search can cut their steps and grade their answers.
Every format ends with the steps joined as ``"".join(step + delimiter for step in steps)`` so that a step's
continuation is exactly what the model would have generated after it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prmsearch.registry import Registry

QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."

#: The default for chat models: a search needs steps it can cut, so ask for one step per paragraph
#: with a blank line between steps, and for the final answer where the graders look for it.
STEP_BY_STEP_SYSTEM = (
    "Solve the problem step by step. Write each step as one short paragraph that does one "
    "calculation, and separate the steps with a blank line. Finish with the final answer in "
    "\\boxed{}."
)

LLAMA3_MATH_SYSTEM = (
    "Solve the following math problem efficiently and clearly:\n\n"
    "- For simple problems (2 steps or fewer):\n"
    "Provide a concise solution with minimal explanation.\n\n"
    "- For complex problems (3 steps or more):\n"
    "Use this step-by-step format:\n\n"
    "## Step 1: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)

SETTINGS_FILE = "prmsearch.json"


class MissingChatTemplateError(ValueError):
    """A chat prompt format was asked of a tokenizer that has no chat template."""


def join_steps(steps: Sequence[str], delimiter: str) -> str:
    """The steps as the model saw them: each one followed by the delimiter."""
    return "".join(step + delimiter for step in steps)


@dataclass(frozen=True)
class PromptFormat:
    """One way to render ``(question, steps)`` into text.

    Attributes:
        name: registry name.
        system: system prompt for chat formats (None: no system turn).
        chat: render the question as a user turn with the tokenizer's chat template and open
            the assistant turn; otherwise the plain ``question + "\\n\\n"`` header is used.
        add_special_tokens: whether tokenizing the text adds the tokenizer's special tokens
            (chat templates already contain them, so chat formats say False).
    """

    name: str
    system: str | None = None
    chat: bool = True
    add_special_tokens: bool = False

    def header(self, tokenizer: Any, question: str) -> str:
        """The text before the first step."""
        if not self.chat:
            return question + "\n\n"
        if not getattr(tokenizer, "chat_template", None):
            raise MissingChatTemplateError(
                f"prompt format {self.name!r} needs a chat template but the tokenizer has none; "
                "use prompt_format='plain', or set tokenizer.chat_template (or add a "
                "chat_template.jinja to the model folder)"
            )
        messages = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": question})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def render(self, tokenizer: Any, question: str, steps: Sequence[str], delimiter: str) -> str:
        """The full prompt text: header, then each step followed by the delimiter."""
        return self.header(tokenizer, question) + join_steps(steps, delimiter)


PROMPT_FORMATS: Registry[PromptFormat] = Registry(
    "prompt_format", listing="", hint="Or pass 'auto' to take the model folder's own (or its chat template)."
)


def register_prompt_format(fmt: PromptFormat, *, replace: bool = False) -> None:
    """Add a prompt format to the registry (``replace=True`` to override a name)."""
    PROMPT_FORMATS.register(fmt.name, fmt, replace=replace)


def get_prompt_format(name: str) -> PromptFormat:
    """Look a format up by name; an unknown name lists the known ones."""
    return PROMPT_FORMATS.get(name)


for _fmt in (
    PromptFormat("plain", system=None, chat=False, add_special_tokens=True),
    PromptFormat("chat", system=None),
    PromptFormat("step-by-step", system=STEP_BY_STEP_SYSTEM),
    PromptFormat("qwen25-math-cot", system=QWEN_MATH_SYSTEM),
    PromptFormat("llama3-math", system=LLAMA3_MATH_SYSTEM),
):
    register_prompt_format(_fmt)


def read_settings(model_dir: str | Path) -> dict[str, Any]:
    """The model folder's ``prmsearch.json`` (empty when absent or not a folder)."""
    path = Path(model_dir) / SETTINGS_FILE
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def resolve_prompt_format(name: str, tokenizer: Any, model_dir: str | Path | None) -> PromptFormat:
    """Resolve ``name`` (or ``"auto"``) to a format.

    ``auto``: the ``prompt_format`` named in the model folder's ``prmsearch.json``; else
    ``step-by-step`` when the tokenizer has a chat template; else ``plain``. Chat formats are checked
    against the tokenizer here, so a missing template fails at load time.
    """
    if name == "auto":
        settings = read_settings(model_dir) if model_dir is not None else {}
        if "prompt_format" in settings:
            name = settings["prompt_format"]
        elif getattr(tokenizer, "chat_template", None):
            name = "step-by-step"
        else:
            name = "plain"
    fmt = get_prompt_format(name)
    if fmt.chat:
        fmt.header(tokenizer, "")  # fails early, naming the fix, when there is no template
    return fmt


class PromptBuilder:
    """The prompts of one model: ``header + step + delimiter + ...`` in its format, with the
    per-question header (a chat-template render) cached, since every expansion re-asks it.
    Every policy backend builds its prompts here, so all engines see identical text."""

    def __init__(self, fmt: PromptFormat, tokenizer: Any, max_cached: int = 4096) -> None:
        self.format = fmt
        self.tokenizer = tokenizer
        self.max_cached = max_cached
        self._headers: dict[str, str] = {}

    def text(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> str:
        """The exact text fed to the model for ``question`` and the steps taken so far."""
        header = self._headers.get(question)
        if header is None:
            header = self.format.header(self.tokenizer, question)
            if len(self._headers) >= self.max_cached:
                self._headers.clear()
            self._headers[question] = header
        return header + "".join(s + delimiter for s in steps)

    def ids(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> list[int]:
        """The prompt's token ids under the format's special-token rule."""
        text = self.text(question, steps, delimiter)
        return list(self.tokenizer(text, add_special_tokens=self.format.add_special_tokens)["input_ids"])
