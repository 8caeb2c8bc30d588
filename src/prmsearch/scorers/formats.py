"""PRM input formats, one per family, chosen by name (never by sniffing a model id).

A format turns ``(question, steps)`` into token ids plus one *read position* per step (where
that step's score is read), says which model outputs to read there, and maps them to a
probability. Every format is validated against its tokenizer when built: separator and label
tokens must exist as single tokens, else a clear error.

Families and layouts:

* ``qwen-prm`` (Qwen2.5-Math-PRM): chat template with the Qwen math system prompt, user =
  question, assistant = ``"<extra_0>".join(steps) + "<extra_0>"``; read at each
  ``<extra_0>``; score = softmax of the head's 2 logits, index 1.
* ``math-shepherd``: ``f"{question} " + "\\n".join(f"{step} ки" for step in steps)`` (BOS as
  the tokenizer adds it); read at each ``ки`` tag; score = softmax over the LM logits of
  ``+`` / ``-``, index of ``+``.
* ``rlhflow``: chat turns (user = ``question + " " + step_1``, assistant ``+``; then user =
  step_k, assistant ``+``); read at the token before each assistant ``+`` (which is inserted
  as a token id, so steps containing ``+`` cannot shift it); score = P(``+``) over {+, -}.
* ``skywork``: ``BOS + question + "\\n"``, then each step (newlines replaced by spaces)
  tokenised alone and followed by the ``"\\n"`` token; read at each step's ``"\\n"``;
  score = sigmoid of the value head.
* ``verifier`` (a generative verifier: any instruct model, no PRM training): chat turns
  (system = the checking instructions; user = the problem and step 1, then one user turn per
  later step, each asking whether that step is correct; assistant = ``Yes``); read at the token
  before each assistant answer (inserted as a token id, as in ``rlhflow``); score =
  P(``Yes``) over {Yes, No}. Earlier steps stand answered ``Yes`` in the context of later ones,
  so a path's input extends its parent's and the prefix KV of the parent is reused.
* ``token-cls``: ``question + "\\n"`` (with the tokenizer's special tokens), then each step
  tokenised alone and followed by the separator token; read at each separator; score =
  softmax over the 2 labels, index ``positive_index``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from prmsearch.engines.prompt_formats import QWEN_MATH_SYSTEM
from prmsearch.registry import Alias, Registry
from prmsearch.scorers.base import HF_PRM, SCORERS

if TYPE_CHECKING:  # torch is imported when a format reads model outputs, not at import time
    import torch


class PRMInputError(ValueError):
    """A question or step that the PRM format cannot represent faithfully."""


@dataclass(frozen=True)
class Encoded:
    """Token ids of one request and the read position of each step (ascending)."""

    ids: list[int]
    positions: list[int]


def single_token(tokenizer: Any, text: str, family: str, what: str) -> int:
    """The id of ``text`` when it is one token of ``tokenizer``; else a clear error."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(
            f"{family}: the {what} {text!r} must be a single token of this tokenizer, got "
            f"{len(ids)} tokens {ids}; is this the right PRM family or tokenizer?"
        )
    return int(ids[0])


def require_chat_template(tokenizer: Any, family: str) -> None:
    """Raise when the tokenizer has no chat template (chat-based families need it)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{family}: the tokenizer has no chat template; load the PRM's own tokenizer "
            "folder (with its chat_template) or set tokenizer.chat_template"
        )


def check_positions(family: str, positions: list[int], steps: Sequence[str]) -> None:
    """One read position per step, or the input's separators misaligned."""
    if len(positions) != len(steps):
        raise PRMInputError(
            f"{family}: found {len(positions)} step separators for {len(steps)} steps; "
            "the question or a step tokenised into the separator token"
        )


def encode_answer_turns(tokenizer: Any, messages: list[dict[str, str]], mark: str, answer_id: int,
                        family: str, steps: Sequence[str]) -> Encoded:
    """Chat ``messages`` whose assistant turns hold ``mark``, as token ids: each mark becomes the
    token ``answer_id``, and its step's score is read at the token before it (where the model
    gives its answer). The marks are placed as ids, so no step text can shift them."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    pieces = text.split(mark)
    check_positions(family, list(range(len(pieces) - 1)), steps)
    ids: list[int] = []
    positions: list[int] = []
    for k, piece in enumerate(pieces):
        ids.extend(tokenizer(piece, add_special_tokens=False)["input_ids"])
        if k < len(pieces) - 1:
            if not ids:
                raise PRMInputError(f"{family}: chat template put an answer first")
            positions.append(len(ids) - 1)
            ids.append(answer_id)
    return Encoded(ids, positions)


#: Every PRM family by name: its format class (input layout and score read-out).
PRM_FORMATS: Registry[type[PRMFormat]] = Registry(
    "PRM family", listing="families", register_with="prm_family"
)

F = TypeVar("F", bound="type[PRMFormat]")


def prm_family(summary: str):
    """Declare a PRM family: the one place a new family is added.

    Decorates a :class:`PRMFormat` subclass: registers it under its ``family`` name and makes that
    name a scorer on the transformers backend (``make_scorer(family, model=...)``); the vLLM
    backend and recipes read the same registry.
    """

    def register(cls: F) -> F:
        if not cls.family:
            raise ValueError(f"{cls.__name__}.family must name the PRM family")
        PRM_FORMATS.register(cls.family, cls, summary)
        if not SCORERS.has(cls.family):  # the family's name runs it on transformers
            SCORERS.register(cls.family, Alias(HF_PRM), summary, bound={"family": cls.family})
        return cls

    return register


class PRMFormat(ABC):
    """The input layout and score read-out of one PRM family.

    Attributes:
        family: registry name.
        head: which model to load: ``"lm"`` (causal LM logits at ``label_ids``), ``"qwen"``
            (Qwen PRM head), ``"value"`` (Skywork value head) or ``"token-cls"``.
        label_ids: for ``"lm"`` formats, the vocabulary ids whose logits are read.
    """

    family: ClassVar[str] = ""
    head: ClassVar[str] = "lm"
    separator_text: str = ""
    label_ids: tuple[int, ...] = ()
    tokenizer: Any  # set by every format's __init__

    def check_text(self, question: str, steps: Sequence[str]) -> None:
        """Reject empty steps and any text holding the format's separator."""
        for j, step in enumerate(steps):
            if not isinstance(step, str) or not step.strip():
                raise PRMInputError(
                    f"{self.family}: step {j} is empty ({step!r}); a PRM scores non-empty steps, "
                    "drop or merge empty steps before scoring"
                )
        sep = self.separator_text
        if sep:
            if sep in question:
                raise PRMInputError(
                    f"{self.family}: the question contains the step separator {sep!r}; "
                    "remove it from the question"
                )
            for j, step in enumerate(steps):
                if sep in step:
                    raise PRMInputError(
                        f"{self.family}: step {j} contains the step separator {sep!r}, which "
                        "would split it into two steps; remove it from the step text"
                    )

    @abstractmethod
    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        """Token ids and read positions (``len(steps) >= 1``; text already checked)."""

    @abstractmethod
    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        """Map float32 model outputs ``[n, k]`` at read positions to probabilities ``[n]``."""


@prm_family("Qwen2.5-Math-PRM layout (<extra_0>, 2-class head)")
class QwenPRMFormat(PRMFormat):
    """Qwen2.5-Math-PRM: ``<extra_0>`` after every step inside the assistant turn."""

    family = "qwen-prm"
    head = "qwen"

    def __init__(self, tokenizer: Any, separator: str = "<extra_0>",
                 system: str = QWEN_MATH_SYSTEM, positive_index: int = 1) -> None:
        require_chat_template(tokenizer, self.family)
        self.tokenizer = tokenizer
        self.separator_text = separator
        self.sep_id = single_token(tokenizer, separator, self.family, "step separator")
        self.system = system
        self.positive_index = positive_index

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": question},
            {"role": "assistant", "content": self.separator_text.join(steps) + self.separator_text},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        positions = [i for i, t in enumerate(ids) if t == self.sep_id]
        check_positions(self.family, positions, steps)
        return Encoded(ids, positions)

    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        import torch

        if outputs.shape[-1] < 2:
            raise ValueError(f"{self.family}: the head must give 2 logits, got {outputs.shape[-1]}")
        return torch.softmax(outputs, dim=-1)[:, self.positive_index]


@prm_family("Math-Shepherd (ки tags, +/- logits)")
class MathShepherdFormat(PRMFormat):
    """Math-Shepherd: ``question step_1 ки\\nstep_2 ки``; P(+) over {+, -} at each tag."""

    family = "math-shepherd"
    head = "lm"

    def __init__(self, tokenizer: Any, tag: str = "ки", good: str = "+", bad: str = "-",
                 label_ids: tuple[int, int] | None = None) -> None:
        self.tokenizer = tokenizer
        self.separator_text = tag
        probe = tokenizer.encode(f"a {tag}", add_special_tokens=False)
        if not probe or tokenizer.decode([probe[-1]]).strip() != tag:
            raise ValueError(
                f"{self.family}: the step tag {tag!r} is not a single token of this tokenizer "
                f"(got {tokenizer.convert_ids_to_tokens(probe)}); is this a Math-Shepherd PRM?"
            )
        self.tag_id = int(probe[-1])
        if label_ids is None:
            pair = tokenizer.encode(f"{good} {bad}", add_special_tokens=False)
            if len(pair) != 2:
                raise ValueError(
                    f"{self.family}: {good!r} {bad!r} must tokenise to 2 tokens, got {pair}; "
                    "pass label_ids=(good_id, bad_id)"
                )
            label_ids = (int(pair[0]), int(pair[1]))
        self.label_ids = tuple(label_ids)

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        tag = self.separator_text
        text = f"{question} " + "\n".join(f"{step} {tag}" for step in steps)
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        positions = [i for i, t in enumerate(ids) if t == self.tag_id]
        check_positions(self.family, positions, steps)
        return Encoded(ids, positions)

    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.softmax(outputs[:, :2], dim=-1)[:, 0]


@prm_family("RLHFlow multi-turn chat PRM (+/- turns)")
class RLHFlowFormat(PRMFormat):
    """RLHFlow PRMs: one user turn per step, assistant ``+``; P(+) read before each ``+``."""

    family = "rlhflow"
    head = "lm"
    MARK: ClassVar[str] = "\u27e6prmsearch-label\u27e7"

    def __init__(self, tokenizer: Any, good: str = "+", bad: str = "-") -> None:
        require_chat_template(tokenizer, self.family)
        self.tokenizer = tokenizer
        self.good_id = single_token(tokenizer, good, self.family, "positive label")
        self.bad_id = single_token(tokenizer, bad, self.family, "negative label")
        self.label_ids = (self.good_id, self.bad_id)
        self.separator_text = self.MARK

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        messages: list[dict[str, str]] = []
        for k, step in enumerate(steps):
            content = f"{question} {step}" if k == 0 else step
            messages.append({"role": "user", "content": content})
            messages.append({"role": "assistant", "content": self.MARK})
        return encode_answer_turns(self.tokenizer, messages, self.MARK, self.good_id, self.family, steps)

    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.softmax(outputs[:, :2], dim=-1)[:, 0]


VERIFIER_SYSTEM = (
    "You check solutions to math word problems one step at a time. For each step, decide whether "
    "it is correct: its reasoning fits the problem and the steps before it, and every calculation "
    "in it is right. Answer with one word: Yes if the step is correct, No if it has any error."
)

#: One step's user turn ({k}: its number, {step}: its text, {good}/{bad}: the verdict words).
VERIFIER_TURN = "Step {k}:\n{step}\n\nIs step {k} correct? Answer {good} or {bad}."
#: What comes before the first step's turn ({question}: the problem).
VERIFIER_PROBLEM = "Problem:\n{question}\n\n"


@prm_family("generative verifier: any instruct model asked if each step is correct, P(Yes) over Yes/No")
class VerifierFormat(PRMFormat):
    """A generative verifier: one chat turn per step asking "is step k correct?"; P(Yes) read
    where the assistant answers (an instruct model becomes a step scorer with no training)."""

    family = "verifier"
    head = "lm"
    MARK: ClassVar[str] = "\u27e6prmsearch-verdict\u27e7"

    def __init__(self, tokenizer: Any, system: str = VERIFIER_SYSTEM, good: str = "Yes",
                 bad: str = "No", turn: str = VERIFIER_TURN, problem: str = VERIFIER_PROBLEM) -> None:
        require_chat_template(tokenizer, self.family)
        for name, text, fields in (("turn", turn, ("{step}",)), ("problem", problem, ("{question}",))):
            if not all(f in text for f in fields):
                raise ValueError(f"{self.family}: the {name} template must contain {', '.join(fields)}, "
                                 f"got {text!r}")
        self.tokenizer = tokenizer
        self.system = system
        self.turn, self.problem = turn, problem
        self.good_id = single_token(tokenizer, good, self.family, "positive verdict")
        self.bad_id = single_token(tokenizer, bad, self.family, "negative verdict")
        self.label_ids = (self.good_id, self.bad_id)
        self.separator_text = self.MARK
        self.good, self.bad = good, bad

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        messages: list[dict[str, str]] = [{"role": "system", "content": self.system}]
        for k, step in enumerate(steps, 1):
            content = self.turn.replace("{k}", str(k)).replace("{good}", self.good) \
                .replace("{bad}", self.bad).replace("{step}", step)
            if k == 1:
                content = self.problem.replace("{question}", question) + content
            messages.append({"role": "user", "content": content})
            messages.append({"role": "assistant", "content": self.MARK})
        return encode_answer_turns(self.tokenizer, messages, self.MARK, self.good_id, self.family, steps)

    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.softmax(outputs[:, :2], dim=-1)[:, 0]


@prm_family("Skywork PRM (value head, sigmoid)")
class SkyworkFormat(PRMFormat):
    """Skywork-o1-Open-PRM: ``BOS question\\n`` then ``step \\n`` per step, read at each ``\\n``."""

    family = "skywork"
    head = "value"

    def __init__(self, tokenizer: Any, step_token: str = "\n") -> None:
        if tokenizer.bos_token is None:
            raise ValueError(
                f"{self.family}: the tokenizer has no bos_token; the Skywork layout starts "
                "with it (load the PRM's own tokenizer, or set tokenizer.bos_token)"
            )
        self.tokenizer = tokenizer
        self.step_token = step_token
        self.step_id = single_token(tokenizer, step_token, self.family, "step token")

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        tok = self.tokenizer
        ids = list(tok(tok.bos_token + question + "\n", add_special_tokens=False)["input_ids"])
        positions: list[int] = []
        for step in steps:
            piece = tok(step.replace(self.step_token, " "), add_special_tokens=False)["input_ids"]
            ids.extend(piece)
            positions.append(len(ids))
            ids.append(self.step_id)
        return Encoded(ids, positions)

    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.sigmoid(outputs[:, 0])


@prm_family("any 2-label token classifier at a separator")
class TokenClassificationFormat(PRMFormat):
    """Any 2-label token classifier: ``question\\n`` then ``step <sep>`` per step."""

    family = "token-cls"
    head = "token-cls"

    def __init__(self, tokenizer: Any, separator: str | None = None,
                 positive_index: int = 1) -> None:
        separator = separator if separator is not None else tokenizer.sep_token
        if not separator:
            raise ValueError(
                f"{self.family}: no separator given and the tokenizer has no sep_token; "
                "pass separator='<your step token>'"
            )
        self.tokenizer = tokenizer
        self.separator_text = separator
        self.sep_id = single_token(tokenizer, separator, self.family, "step separator")
        if positive_index not in (0, 1):
            raise ValueError(f"positive_index must be 0 or 1, got {positive_index!r}")
        self.positive_index = positive_index

    def encode(self, question: str, steps: Sequence[str]) -> Encoded:
        tok = self.tokenizer
        ids = list(tok(question + "\n", add_special_tokens=True)["input_ids"])
        positions: list[int] = []
        for step in steps:
            ids.extend(tok(step, add_special_tokens=False)["input_ids"])
            positions.append(len(ids))
            ids.append(self.sep_id)
        return Encoded(ids, positions)

    def probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.softmax(outputs[:, :2], dim=-1)[:, self.positive_index]


def families_with_head(head: str) -> tuple[str, ...]:
    """The registered PRM families whose model is read from ``head`` (``"lm"``, ``"qwen"``...), sorted."""
    return tuple(sorted(name for name in PRM_FORMATS.names() if PRM_FORMATS.get(name).head == head))


def make_format(family: str, tokenizer: Any, **options: Any) -> PRMFormat:
    """Build the format of ``family`` for ``tokenizer``; an unknown family lists the known ones."""
    return PRM_FORMATS.get(family)(tokenizer, **options)
