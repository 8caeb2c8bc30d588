"""Where a step of reasoning ends: the one rule every backend and the driver cut text by.

Real instruct models write blank lines inside what is one step of reasoning: a heading on its
own (``**Step 1: Find the total**``), a sentence that introduces what follows (``We compute:``),
and code blocks. A blank line in those places is not a step end, so the step runs on to the next
blank line after it. Every policy backend stops a step with :func:`find_step_end`, and the driver
cuts a whole solution into steps with :func:`split_steps`, so a step-by-step search and a
best-of-N solution see the same steps.
"""

from __future__ import annotations

import re

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
