"""The repository speaks of the product alone: no numbered work sessions or issues and no planning
goals of how it was built, in the README, the docs, the package, the scripts, the examples or the
tests. A reader needs the date, the machine and the command instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACES = ("README.md", "docs", "src/prmsearch", "scripts", "examples", "tests")
SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".js", ".html", ".css", ".txt"}

#: Words of how the project was built. "A session" alone stays allowed: a search session is part
#: of the product (``Searcher.session()``).
PROCESS_WORDS = re.compile(
    r"\bsessions? \d+"
    r"|\b(this|that|a later|an earlier|the next|the previous|later|earlier) session\b"
    r"|\bissues? #?\d+\b"
    r"|\bthe\sgoal\b",
    re.IGNORECASE,
)


def _files():
    for place in PLACES:
        path = ROOT / place
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if file.suffix in SUFFIXES and file.is_file() and "egg-info" not in file.parts[-2]:
                yield file


def test_no_file_speaks_of_how_the_project_was_built():
    found = []
    for file in _files():
        for number, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            match = PROCESS_WORDS.search(line)
            if match:
                where = f"{file.relative_to(ROOT)}:{number}"
                found.append(f"{where}: {match.group(0)!r} in {line.strip()[:100]!r}")
    assert not found, "say the date, the machine and the command instead:\n" + "\n".join(found)


def test_the_words_are_found_and_the_products_own_session_is_not():
    session, issue, goal = "session", "issue", "goal"  # spelled apart: this file is read too
    for said in (f"measured in {session} 31", f"{session.title()}s 24 and 25", f"Run of this {session}",
                 f"a later {session} will", f"({issue} 7)", f"{issue.title()} 12, item 6",
                 f"the {goal} was + 10"):
        assert PROCESS_WORDS.search(said), said
    for fine in ("questions join a search session", "Searcher.session()", "a session's callers",
                 "close the session", "the issue tracker of vLLM"):
        assert not PROCESS_WORDS.search(fine), fine
