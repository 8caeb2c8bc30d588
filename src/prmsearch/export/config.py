"""The settings of one export (``prmsearch export``), checked once at the boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prmsearch.export.values import REFERENCES
from prmsearch.search.aggregation import Aggregation

__all__ = ["KINDS", "PAIRS", "PATHS", "STEP_LABELS", "STYLES", "ExportConfig"]

#: The datasets TRL's trainers read: SFT rows, DPO preference pairs, stepwise supervision (PRMs).
KINDS = ("sft", "preference", "stepwise")
#: ``text``: plain strings (``prompt`` = question + delimiter, as the plain prompt format feeds a
#: model); ``chat``: conversational prompt/completion lists of messages; ``messages``: one
#: ``messages`` column (SFT only).
STYLES = ("text", "chat", "messages")
#: Which paths of a tree become SFT rows or stepwise rows.
PATHS = ("chosen", "correct", "best-correct", "all")
#: Which preference pairs: whole solutions, sibling steps at a branching point, or both.
PAIRS = ("solution", "step", "both")
#: Where stepwise labels come from: PRM scores thresholded, the tree's MC values, the label
#: run's own labels, or a checker scorer (``checker``).
STEP_LABELS = ("prm", "mc", "source", "checker")
_AGGREGATIONS = tuple(a.value for a in Aggregation)


@dataclass(frozen=True)
class ExportConfig:
    """What to export and how.

    Attributes:
        kind: one of :data:`KINDS`.
        style: one of :data:`STYLES`.
        paths: SFT and stepwise rows: ``chosen`` (what the search returned), ``correct`` (every
            path graded right), ``best-correct`` (the best-scored right path of each problem),
            ``all`` (stepwise only: every finished path).
        pairs: preference rows: one of :data:`PAIRS`.
        reference: what grades paths (:data:`~prmsearch.export.values.REFERENCES`).
        aggregation: how a path's step scores make its score (min, mean, prod, last).
        step_labels: stepwise rows: one of :data:`STEP_LABELS`.
        threshold: a step is labelled right when its score (``prm``, ``checker``) is at least
            this, or its MC value (``mc``) is above ``mc_threshold``.
        mc_threshold: see ``threshold``; 0 means "some path below it is right".
        min_margin: preference pairs whose values differ by less are dropped.
        max_pairs: at most this many pairs per problem (0: no limit), largest margins first.
        dedup: drop rows whose text repeats one already written (the same path found twice).
        delimiter: the text between steps.
        system: a system prompt for the chat styles (None: leave it to the model's template).
    """

    kind: str
    style: str = "text"
    paths: str = "correct"
    pairs: str = "both"
    reference: str = "auto"
    aggregation: str = "min"
    step_labels: str = "prm"
    threshold: float = 0.5
    mc_threshold: float = 0.0
    min_margin: float = 0.0
    max_pairs: int = 0
    dedup: bool = True
    delimiter: str = "\n\n"
    system: str | None = None

    def __post_init__(self) -> None:
        for name, allowed in (
            ("kind", KINDS), ("style", STYLES), ("paths", PATHS), ("pairs", PAIRS),
            ("reference", REFERENCES), ("aggregation", _AGGREGATIONS), ("step_labels", STEP_LABELS),
        ):  # fmt: skip
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.style == "messages" and self.kind != "sft":
            raise ValueError(f"style 'messages' is for sft rows; {self.kind} rows take 'text' or 'chat'")
        if self.kind == "stepwise" and self.style != "text":
            raise ValueError(
                "style must be 'text' for stepwise rows (TRL's stepwise format has no chat form)"
            )
        if self.paths == "all" and self.kind == "sft":
            raise ValueError(
                "paths 'all' would train on wrong solutions; sft takes chosen, correct or best-correct"
            )
        for name in ("threshold", "mc_threshold"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if not (
            isinstance(self.min_margin, (int, float))
            and math.isfinite(self.min_margin)
            and self.min_margin >= 0
        ):
            raise ValueError(f"min_margin must be a number >= 0, got {self.min_margin!r}")
        if not isinstance(self.max_pairs, int) or isinstance(self.max_pairs, bool) or self.max_pairs < 0:
            raise ValueError(f"max_pairs must be an integer >= 0 (0: no limit), got {self.max_pairs!r}")
        if not isinstance(self.delimiter, str) or not self.delimiter:
            raise ValueError("delimiter must be a non-empty string")
