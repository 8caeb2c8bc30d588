"""Best-of-N-family results at smaller budgets, derived from one run at the largest budget.

``best_of_n``, ``self_consistency`` and ``weighted_vote`` generate their N solutions
independently in one round and differ only in the final selection, so a run at N' < N can be
estimated from a run at N by keeping N' of its candidates and selecting again (the peers'
benchmarks do the same). Each row at N carries its candidates (answer, answer group, aggregated
score; see :func:`prmsearch.benchmarks.sweep.result_row`), and the selection is re-applied with
the rules of :mod:`prmsearch.search.selection`: ``argmax`` takes the best-scored answered
candidate, ``majority`` the answer with the most votes, ``weighted`` the answer with the largest
summed score; ties break on the total score, then on the earliest candidate.

Which N' candidates:

* by default (``seed=None``) the FIRST N': the samples of one request are exchangeable, so the
  first N' are as random a subset as any; the subsets are nested, so the curve over budgets is
  that of one growing run; and with a backend whose i-th sample depends only on the request seed
  and i (the scripted and embedded policies), it reproduces a real run at N' exactly.
* with an int ``seed``, a seeded uniform subset per (problem, budget, run seed).

Siblings: the three also draw the SAME samples (same request seeds) when their configs differ
only in the selection, so with ``subsample_bon`` a sweep runs the first of them only and derives
the others at every budget, their largest included, from its candidates (see `family_sources`).

One draw per row, not an average of several: a row's ``correct`` stays a 0/1 outcome, which the
summary's bootstrap interval assumes. Derived rows are marked ``"subsampled": true`` (the summary
carries it per run), have no ``steps`` (only the candidates were kept), and their ledger is the
full run's scaled to N' samples (see :func:`scaled_ledger`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from prmsearch.benchmarks.results import ResultRow, ResultsFolder, RowKey
from prmsearch.benchmarks.sweep_config import SUBSAMPLABLE, SweepConfig, family_sources
from prmsearch.search.protocol import strategy_spec
from prmsearch.search.selection import Candidate, Selection, choose
from prmsearch.seeding import mix_seed
from prmsearch.tree import NO_GROUP

#: Ledger counts that grow with the number of samples (scaled by N'/N); the others (policy
#: calls, prompt tokens) are per request and stay as they are.
_PER_SAMPLE = (
    "generations",
    "generated_tokens",
    "prm_calls",
    "prm_tokens_computed",
    "prm_tokens_cached",
    "prm_flops",
)

Grade = Callable[[str | None, str], bool]


def default_selection(strategy: str, options: Mapping[str, Any] | None = None) -> Selection:
    """The final selection ``strategy`` uses with ``options`` (its config decides, not its name)."""
    if strategy not in SUBSAMPLABLE:
        raise ValueError(f"strategy {strategy!r} cannot be subsampled; only {', '.join(SUBSAMPLABLE)} can")
    bound = strategy_spec(strategy).configure(**{"n": 1, **dict(options or {})})
    return Selection.parse(bound.config.selection)


def _key(score: float | None) -> float:
    """Ranking key of a stored score: a missing (unscored) one ranks below every real score."""
    return -math.inf if score is None or math.isnan(score) else float(score)


def _group(candidate: Mapping[str, Any]) -> Any:
    """The candidate's answer group: the recorded one, else its answer string (None: no answer)."""
    if candidate.get("answer") is None or candidate.get("group") == NO_GROUP:
        return None
    return candidate.get("group", candidate["answer"])


def select_candidate(candidates: Sequence[Mapping[str, Any]], selection: Selection | str) -> int:
    """Index of the stored candidate that the final ``selection`` picks: the search's own
    :func:`prmsearch.search.selection.choose`, candidate order standing for node order."""
    if not candidates:
        raise ValueError("select_candidate() needs at least one candidate")
    return choose([Candidate(_group(c), _key(c["score"]), i) for i, c in enumerate(candidates)], selection)


def scaled_ledger(ledger: Mapping[str, Any] | None, fraction: float) -> dict[str, Any] | None:
    """The ledger of ``fraction`` of a run's samples: per-sample counts (and wall time) scaled
    and rounded, per-request counts kept, policy FLOPs recomputed from the scaled tokens."""
    if not ledger:
        return None
    out = dict(ledger)
    for name in _PER_SAMPLE:
        if name in out:
            out[name] = round(out[name] * fraction)
    if "wall_s" in out:
        out["wall_s"] = out["wall_s"] * fraction
    tokens = ledger.get("prompt_tokens_computed", 0) + ledger.get("generated_tokens", 0)
    if tokens and "policy_flops" in out:
        per_token = ledger["policy_flops"] // tokens  # exactly 2 x policy parameters
        out["policy_flops"] = per_token * (out.get("prompt_tokens_computed", 0) + out["generated_tokens"])
    if "flops" in out:
        out["flops"] = out.get("policy_flops", 0) + out.get("prm_flops", 0)
    return out


def _draw(row: ResultRow, budget: int, seed: int | None) -> list[int]:
    """Which candidates a row keeps at a smaller ``budget`` (in their order, so ties break alike)."""
    if seed is None:
        return list(range(budget))
    qid = zlib.crc32(str(row.qid).encode("utf-8"))
    rng = np.random.default_rng(mix_seed(seed, int(row.seed), budget, qid))
    return sorted(int(i) for i in rng.choice(len(row.candidates or ()), size=budget, replace=False))


def derive_rows(
    rows: Iterable[ResultRow],
    budgets: Sequence[int],
    seed: int | None = None,
    *,
    grade: Grade | None = None,
    selections: Mapping[str, Selection | str] | None = None,
    as_strategy: str | None = None,
) -> list[ResultRow]:
    """Rows at each smaller budget in ``budgets``, derived from the best-of-N-family ``rows``.

    Each input row at budget N gives one row per budget N' < N (budgets > N are skipped), with
    the answer re-selected from N' of its candidates and graded again with ``grade`` (default:
    the benchmark grader). ``selections`` overrides a strategy's selection (default: its
    config's). ``seed=None`` keeps the first N' candidates, an int draws a seeded subset.
    Rows of other strategies are ignored; a row that failed gives failed rows.

    With ``as_strategy`` (a sibling of the rows' strategy), the rows are those of ``as_strategy``
    instead, at budget N as well (marked ``derived_from`` the strategy that ran).
    """
    if grade is None:
        from prmsearch.benchmarks.grading import is_equivalent

        grade = is_equivalent
    graded: dict[tuple[str, str], bool] = {}

    def is_correct(answer: str | None, gold: str) -> bool:
        if answer is None:
            return False
        if (answer, gold) not in graded:
            graded[(answer, gold)] = bool(grade(answer, gold))
        return graded[(answer, gold)]

    wanted = sorted({int(b) for b in budgets})
    if not wanted or wanted[0] < 1:
        raise ValueError(f"budgets must be ints >= 1, got {list(budgets)}")
    out: list[ResultRow] = []
    if as_strategy is not None and as_strategy not in SUBSAMPLABLE:
        raise ValueError(f"as_strategy must be one of {', '.join(SUBSAMPLABLE)}, got {as_strategy!r}")
    for row in rows:
        if row.strategy not in SUBSAMPLABLE:
            continue
        strategy = as_strategy or row.strategy
        sibling = strategy != row.strategy
        full = int(row.budget)
        selection = Selection.parse((selections or {}).get(strategy) or default_selection(strategy))
        candidates = row.candidates
        if not row.error and not candidates:
            raise ValueError(f"row {row.key} has no candidates to subsample (written before rows kept them?)")
        for budget in (b for b in wanted if b < full or (sibling and b == full)):
            derived = replace(
                row,
                budget=budget,
                subsampled_from=full,
                steps=(),
                step_scores=(),
                ledger=scaled_ledger(row.ledger, budget / full),
                **({"strategy": strategy, "derived_from": row.strategy} if sibling else {}),
            )
            if row.error:
                out.append(replace(derived, answer=None, correct=False, score=None, candidates=()))
                continue
            if len(candidates) != full:
                raise ValueError(f"row {row.key} has {len(candidates)} candidates, expected {full}")
            kept = tuple(candidates[i] for i in _draw(row, budget, seed))
            chosen = kept[select_candidate(kept, selection)]
            out.append(
                replace(
                    derived,
                    answer=chosen["answer"],
                    correct=is_correct(chosen["answer"], str(row.gold)),
                    score=chosen["score"],
                    candidates=kept,
                )
            )
    return out


def subsampled_rows(
    rows: Iterable[Mapping[str, Any]], budgets: Sequence[int], seed: int | None = None, **options: Any
) -> list[dict[str, Any]]:
    """:func:`derive_rows` on rows as read from ``results.jsonl`` (JSON objects in and out)."""
    derived = derive_rows([ResultRow.from_dict(r) for r in rows], budgets, seed, **options)
    return [row.to_dict() for row in derived]


def append_subsampled(
    folder: ResultsFolder, config: SweepConfig, done: set[RowKey], grade: Grade | None = None
) -> int:
    """Derive ``config``'s best-of-N family at its smaller budgets (and siblings at every budget)
    from the rows at its largest budget; append those not in ``done``; returns how many were
    appended (resumable)."""
    largest = max(config.budgets)
    sources = family_sources(config)
    if not sources:
        return 0
    selections = {s: default_selection(s, config.strategy_options(s, largest)) for s in sources}
    runners = set(sources.values())
    rows = [
        row
        for row in folder.result_rows()
        if row.strategy in runners and row.budget == largest and not row.subsampled
    ]
    appended = 0
    for strategy, source in sources.items():
        budgets = [b for b in config.budgets if b < largest or (b == largest and source != strategy)]
        pending = [
            row
            for row in rows
            if row.strategy == source and any((row.qid, strategy, b, row.seed) not in done for b in budgets)
        ]
        derived = derive_rows(
            pending,
            budgets,
            grade=grade,
            selections=selections,
            as_strategy=strategy if source != strategy else None,
        )
        for row in derived:
            key = row.key
            if key not in done:
                folder.append(row)
                done.add(key)
                appended += 1
    return appended
