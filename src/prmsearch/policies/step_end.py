"""Stop-at-delimiter on token boundaries, robust to how the tokenizer splits the delimiter.

The delimiter may be one token (``"\\n\\n"``), span several tokens, or share a token with other
text (``".\\n\\n"``). A sample is checked only after a token that could complete the delimiter
(its text holds the delimiter's last character, or is a partial UTF-8 byte); then the decoded
text is searched and cut at the first delimiter that ends a *complete* step (the rule lives in
:mod:`prmsearch.steps`, so that the driver cuts whole solutions the same way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prmsearch.steps import find_step_end

__all__ = ["Cut", "DelimiterWatch", "cut_at", "decode", "find_step_end"]


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
