"""Stop-at-delimiter on token boundaries, robust to how the tokenizer splits the delimiter.

The delimiter may be one token (``"\\n\\n"``), span several tokens, or share a token with other
text (``".\\n\\n"``). A sample is checked only after a token that could complete the delimiter
(its text holds the delimiter's last character, or is a partial UTF-8 byte); then the decoded
text is searched and cut at the first delimiter that ends a *complete* step (:func:`is_complete_step`).

Real instruct models write blank lines inside what is one step of reasoning: a heading on its
own (``**Step 1: Find the total**``), a sentence that introduces what follows (``We compute:``),
and code blocks. A blank line in those places is not a step end, so the step runs on to the next
blank line after it; every backend cuts the same way because all of them call
:func:`find_step_end`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Decode exactly (special tokens kept, no clean-up of spaces)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


class DelimiterWatch:
    """Per-tokenizer table of which tokens may complete a given delimiter (built lazily)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._pieces: list[str] | None = None
        self._tables: dict[str, np.ndarray] = {}

    def _vocab_pieces(self) -> list[str]:
        if self._pieces is None:
            n = min(self.vocab_size, len(self.tokenizer))
            pieces = self.tokenizer.batch_decode(
                [[i] for i in range(n)], skip_special_tokens=False,
                clean_up_tokenization_spaces=False,
            )
            pieces += [""] * (self.vocab_size - n)
            self._pieces = pieces
        return self._pieces

    def may_complete(self, delimiter: str) -> np.ndarray:
        """Boolean table over the vocabulary: could this token end an occurrence of ``delimiter``?"""
        table = self._tables.get(delimiter)
        if table is None:
            last = delimiter[-1]
            table = np.array(
                [(last in p) or ("\ufffd" in p) or (p == "") for p in self._vocab_pieces()],
                dtype=bool,
            )
            self._tables[delimiter] = table
        return table


#: A step that is only a heading: a markdown heading, a line in bold, or "Step 3:" alone.
_HEADING_ONLY = re.compile(
    r"#{1,6}\s.*|\*\*[^\n]*\*\*:?|__[^\n]*__:?|(?:step|part)\s*\d+\s*[:.]?", re.IGNORECASE
)
#: A code fence (``` or ~~~ at a line start).
_FENCE = re.compile(r"^\s*(?:```|~~~)", re.MULTILINE)


def is_complete_step(text: str) -> bool:
    """Whether ``text`` can stand as a step: non-blank, no code block left open, not a heading
    alone, and not a line that announces what follows (ending in ``:``)."""
    body = text.strip()
    if not body:
        return False
    if len(_FENCE.findall(body)) % 2:
        return False
    if "\n" not in body and _HEADING_ONLY.fullmatch(body):
        return False
    return not body.endswith(":")


def find_step_end(text: str, delimiter: str, *, complete: bool = True) -> int:
    """Index of the first delimiter that ends a complete step (:func:`is_complete_step`), or -1.

    Delimiters before any non-blank text are part of the step (a step is never empty), and so
    are those inside a code block, after a heading alone or after a line ending in ``:``.
    ``complete=False`` only asks for non-blank text before the delimiter: the fallback for an
    engine that stopped at a delimiter and cannot be asked to go on.
    """
    start = 0
    while True:
        p = text.find(delimiter, start)
        if p < 0:
            return -1
        if is_complete_step(text[:p]) if complete else text[:p].strip():
            return p
        start = p + 1


def split_steps(text: str, delimiter: str) -> list[str]:
    """A whole solution cut into steps exactly where a step-by-step search would have cut it
    (:func:`find_step_end`), blank pieces dropped; at least one piece (``[""]`` for no text)."""
    steps: list[str] = []
    rest = text
    while True:
        end = find_step_end(rest, delimiter)
        if end < 0:
            break
        steps.append(rest[:end])
        rest = rest[end + len(delimiter):]
    if rest.strip():
        steps.append(rest)
    return [s for s in steps if s.strip()] or [""]


@dataclass(frozen=True)
class Cut:
    """Where a finished sample's step ends: its first ``n_tokens`` tokens and its text."""

    n_tokens: int
    text: str


def cut_at(tokenizer: Any, ids: Sequence[int], text_end: int, full_text: str) -> Cut:
    """The fewest leading tokens whose decoded text covers ``full_text[:text_end]``.

    When one token holds both the last step characters and the delimiter, it is kept (the
    step's token ids then include the delimiter; the text never does).
    """
    k = len(ids)
    while k > 0 and len(decode(tokenizer, ids[: k - 1])) >= text_end:
        k -= 1
    return Cut(k, full_text[:text_end])
