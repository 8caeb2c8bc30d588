"""The repository speaks of the product alone: no numbered work sessions or issues and no planning
goals of how it was built, in the README, the docs, the package, the lab beside it (scripts,
benchmarks, training, recipes, results) or the tests. A reader needs the date, the machine and the
command instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACES = ("README.md", "docs", "src/prmsearch", "scripts", "examples", "tests", "benchmarks", "training",
          "recipes", "results")
SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".js", ".html", ".css", ".txt"}

#: Words of how the project was built. "A session" alone stays allowed: a search session is part
#: of the product (``Searcher.session()``).
PROCESS_WORDS = re.compile(
    r"\bsessions?[ -]\d+"
    r"|\b(this|that|a later|an earlier|the next|the previous|later|earlier) session\b"
    r"|\bissues? #?\d+\b"
    r"|\bthe\sgoal\b"
    # a target of our own planning: met, missed, reached, or a bound called one
    r"|\btargets?\s+(is\s+|was\s+|are\s+)?(not\s+|still\s+not\s+)?(met|missed|reached|unmet)\b"
    r"|\b(short of|missed|meets?|reach(es|ed)?) the\s(\S+\s){0,3}target\b"
    r"|[<>]=\s*[\d.]+\s*\S*\s+target\b"
    r"|\bneither target\b",
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
    session, issue, goal, target = "session", "issue", "goal", "target"  # spelled apart: this file is read
    for said in (f"measured in {session} 31", f"{session.title()}s 24 and 25", f"Run of this {session}",
                 f"a later {session} will", f"({issue} 7)", f"{issue.title()} 12, item 6",
                 f"the {goal} was + 10", f"the {session}-17 changes",
                 f"the <= 4 us/node {target}", f"short of the 0.8 {target}", f"Neither {target} is met"):
        assert PROCESS_WORDS.search(said), said
    for fine in ("questions join a search session", "Searcher.session()", "a session's callers",
                 "close the session", "the issue tracker of vLLM", "each level's target is the mean FLOPs",
                 "a lazy target is heavy", "Thread(target=run)", "--targets mc"):
        assert not PROCESS_WORDS.search(fine), fine
