"""CHAMP's first-wrong-step annotations as ProcessBench rows.

CHAMP (Mao et al., 2024, "CHAMP: A Competition-level Dataset for Fine-Grained Analyses of LLMs'
Mathematical Reasoning Capabilities") ships, through the ``champ-dataset`` PyPI package, 540
model solutions (GPT-3.5, GPT-4, GPT-4 Turbo, PaLM 2 Medium; two prompt settings) annotated with
the character span of their first wrong step, or with none when the solution has no mistake.

Step splitting (the one decision this conversion makes): a solution is cut into **paragraphs
at blank lines** (``\\n`` + optional spaces + ``\\n``), each stripped, empty ones dropped. That is
the engine's default step delimiter and the unit most PRMs are trained on (Qwen2.5-Math-PRM,
ProcessBench, Math-Shepherd all use ``\\n\\n``-separated steps). Lines would cut equation
lists and "Therefore:" headers into separate steps, and sentence splitting is unreliable on
mathematics ("3.5", "e.g.", ``$...$``). CHAMP's annotated spans are sentence-sized and sometimes
cross a paragraph boundary; the label is the paragraph that holds the span's first character
(``start_idx``), or the next paragraph when that character is blank. A solution with no
annotated mistake has label -1.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = [
    "CHAMP_VERSION",
    "ChampUnavailableError",
    "load_champ_processbench",
    "paragraph_spans",
    "step_index",
]

#: Dataset file of the champ-dataset package that holds the annotations.
CHAMP_VERSION = "v0"
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


class ChampUnavailableError(RuntimeError):
    """The ``champ-dataset`` package is not installed (or has no such dataset file)."""


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the stripped, non-empty paragraphs of ``text``."""
    spans = []
    start = 0
    for match in [*_BLANK_LINE.finditer(text), None]:
        end = match.start() if match is not None else len(text)
        chunk = text[start:end]
        stripped = chunk.strip()
        if stripped:
            left = start + (len(chunk) - len(chunk.lstrip()))
            spans.append((left, left + len(stripped)))
        if match is not None:
            start = match.end()
    return spans


def step_index(spans: list[tuple[int, int]], char_index: int) -> int:
    """Index of the span holding ``char_index``; a blank between spans maps to the next one.

    Past the last span it maps to the last one (trailing blanks of the text).
    """
    if not spans:
        raise ValueError("a solution without any text has no steps")
    for i, (_, end) in enumerate(spans):
        if char_index < end:
            return i
    return len(spans) - 1


def _import_champ():
    try:
        import champ_dataset
    except ImportError:
        raise ChampUnavailableError(
            "the CHAMP dataset needs the champ-dataset package: pip install champ-dataset"
        ) from None
    return champ_dataset


@lru_cache(maxsize=2)
def _converted(version: str) -> tuple[dict[str, Any], ...]:
    champ = _import_champ()
    try:
        dataset = champ.load(version)
    except (OSError, KeyError) as exc:
        raise ChampUnavailableError(f"champ-dataset has no dataset {version!r}: {exc}") from None
    rows = []
    for problem_id, problem in dataset.problems.items():
        for key, annotation in sorted((problem.fws_annotations or {}).items()):
            text = annotation.text or ""
            spans = paragraph_spans(text)
            if not spans:
                continue  # nothing to score; CHAMP v0 has no such annotation
            label = -1 if annotation.start_idx is None else step_index(spans, annotation.start_idx)
            model, _, prompt = key.partition("|")
            rows.append(
                {
                    "id": f"{problem_id}|{key}",
                    "problem": problem.text,
                    "steps": [text[a:b] for a, b in spans],
                    "label": label,
                    "model": model,
                    "prompt": prompt,
                    "category": problem.category,
                    "answer": problem.answer,
                }
            )
    return tuple(rows)


def load_champ_processbench(version: str = CHAMP_VERSION) -> list[dict[str, Any]]:
    """CHAMP's annotated solutions as ProcessBench rows (fresh dicts on every call).

    Each row has ``id`` (``<problem>|<model>|<prompt>``), ``problem``, ``steps``, ``label``, and
    the fields ``model``, ``prompt``, ``category`` and ``answer`` (the gold answer), any of which can
    serve as a split field. Raises :class:`ChampUnavailableError` when the package is missing.
    """
    return [{**row, "steps": list(row["steps"])} for row in _converted(version)]
