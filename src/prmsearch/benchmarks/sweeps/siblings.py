"""Best-of-N-family siblings: the rows of one run re-selected under another final selection.

``best_of_n``, ``self_consistency`` and ``weighted_vote`` draw the SAME samples when their configs
differ only in the final selection (same request seeds, one round of N whole solutions). With
``share_bon_samples`` a sweep runs one of them per budget (the *runner*) and derives the others'
rows at the same budget from the runner's candidates with the search's own selection
(:func:`prmsearch.search.selection.choose`). Such a row is what a real run would have written:

* the answer, its grade and the candidates are the same (same samples, same selection rule);
* the ledger is the runner's, exactly: a scored sibling pays the same generation and scoring; a
  PRM-free sibling (majority voting) pays the same generation and no PRM at all, and its
  candidates carry no score, so its ties break on the earliest sample as in a real run;
* wall time was not measured for it, so it is recorded as not measured (``None``), never copied.

A derived row keeps the candidates but not the chosen path's steps, and says which strategy's run
it came from (``derived_from``). The runner is a strategy that reads scores whenever a sibling
needs them (a PRM-free run has no scores to re-select by). Rows at smaller budgets are never
derived from a larger run: every budget is a real run, so every cost is measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from prmsearch.benchmarks.sweeps.config import SweepConfig, family_runners
from prmsearch.benchmarks.sweeps.results import ResultRow, ResultsFolder, RowKey
from prmsearch.search.protocol import strategy_names, strategy_spec
from prmsearch.search.selection import Ballot, Selection, choose
from prmsearch.tree import NO_GROUP

Grade = Callable[[str | None, str], bool]

#: Ledger fields a PRM-free strategy never pays.
PRM_FIELDS = ("prm_calls", "prm_tokens_computed", "prm_tokens_cached", "prm_flops")


def family_selection(strategy: str, options: Mapping[str, Any] | None = None) -> tuple[Selection, bool]:
    """(final selection, whether it reads scores) of family ``strategy`` under ``options``."""
    if strategy_spec(strategy).sample_family is None:
        family = ", ".join(s for s in strategy_names() if strategy_spec(s).sample_family is not None)
        raise ValueError(f"strategy {strategy!r} is not in the best-of-N family ({family})")
    bound = strategy_spec(strategy).configure(**{"n": 1, **dict(options or {})})
    return Selection.parse(bound.config.selection), bound.needs_scores


def _key(score: float | None) -> float:
    """Ranking key of a stored score: a missing (unscored) one ranks below every real score."""
    return -math.inf if score is None or math.isnan(score) else float(score)


def _group(candidate: Mapping[str, Any]) -> Any:
    """The candidate's answer group: the recorded one, else its answer string (None: no answer)."""
    if candidate.get("answer") is None or candidate.get("group") == NO_GROUP:
        return None
    return candidate.get("group", candidate["answer"])


def select_candidate(candidates: Iterable[Mapping[str, Any]], selection: Selection | str) -> int:
    """Index of the stored candidate that the final ``selection`` picks: the search's own
    :func:`prmsearch.search.selection.choose`, candidate order standing for node order."""
    candidates = list(candidates)
    if not candidates:
        raise ValueError("select_candidate() needs at least one candidate")
    return choose([Ballot(_group(c), _key(c["score"]), i) for i, c in enumerate(candidates)], selection)


def sibling_ledger(ledger: Mapping[str, Any] | None, needs_scores: bool) -> dict[str, Any] | None:
    """The runner's ledger as the sibling's: identical, less the PRM for a PRM-free sibling, with
    wall time not measured."""
    if ledger is None:
        return None
    out = dict(ledger)
    if not needs_scores:
        for name in PRM_FIELDS:
            if name in out:
                out[name] = 0
        if "flops" in out:
            out["flops"] = out.get("policy_flops", 0)
    out["wall_s"] = None
    return out


def sibling_row(
    row: ResultRow, strategy: str, selection: Selection, needs_scores: bool, grade: Grade
) -> ResultRow:
    """The row ``strategy`` (with ``selection``) would have written from the samples of ``row``."""
    base = replace(
        row,
        strategy=strategy,
        derived_from=row.strategy,
        steps=(),
        step_scores=(),
        ledger=sibling_ledger(row.ledger, needs_scores),
    )
    if row.error:
        return replace(base, answer=None, correct=False, score=None)
    candidates = tuple(row.candidates or ())
    if not candidates:
        raise ValueError(f"row {row.key} has no candidates to re-select from")
    if not needs_scores:
        candidates = tuple({**c, "score": None} for c in candidates)
    chosen = candidates[select_candidate(candidates, selection)]
    answer = chosen["answer"]
    return replace(
        base,
        answer=answer,
        correct=answer is not None and bool(grade(answer, row.gold)),
        score=chosen["score"],
        candidates=candidates,
    )


def append_sibling_rows(
    folder: ResultsFolder, config: SweepConfig, done: set[RowKey], grade: Grade | None = None
) -> int:
    """Derive every sibling row of ``config`` from its runner's rows in ``folder`` and append
    those not in ``done``; returns how many were appended (resumable, never a key twice)."""
    runners = family_runners(config)
    siblings = {s: r for s, r in runners.items() if s != r}
    if not siblings:
        return 0
    if grade is None:
        from prmsearch.benchmarks.grading import is_equivalent

        grade = is_equivalent
    verdicts: dict[tuple[str | None, str], bool] = {}

    def cached_grade(answer: str | None, gold: str) -> bool:
        if (answer, gold) not in verdicts:
            verdicts[(answer, gold)] = bool(grade(answer, gold))
        return verdicts[(answer, gold)]

    by_runner: dict[str, list[ResultRow]] = {}
    for row in folder.result_rows():
        if row.derived_from is None and row.strategy in runners.values():
            by_runner.setdefault(row.strategy, []).append(row)
    appended = 0
    for strategy, runner in siblings.items():
        for row in by_runner.get(runner, []):
            key = (row.qid, strategy, row.budget, row.seed)
            if key in done:
                continue
            options = config.strategy_options(strategy, row.budget)
            selection, needs_scores = family_selection(strategy, options)
            folder.append(sibling_row(row, strategy, selection, needs_scores, cached_grade))
            done.add(key)
            appended += 1
    return appended
