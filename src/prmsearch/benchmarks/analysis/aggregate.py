"""Offline re-aggregation: accuracy of every selection x aggregation at every N from saved responses.

Input is JSONL, one question per line: ``{"question", "answer" (gold), "responses": [...],
"scores": optional}``, where ``scores`` holds per response either one float (an outcome score:
every aggregation is that float) or a list of step scores. Rows without scores are scored by a
PRM (responses split into steps at a delimiter, default a blank line) in batched calls.

For every N in 1, 2, 4, ... up to the smallest response count (and that count itself), each
question's responses are subsampled ``subsamples`` times (seeded per question, the same subsets
for every method, so methods are compared on identical draws), and ``argmax`` (best-of-N),
``majority`` (self-consistency) and ``weighted`` (PRM-weighted vote) pick an answer under each
aggregation (min/last/prod/mean). Accuracy is the mean over questions of the mean over
subsamples, with a bootstrap interval over questions; ``oracle`` (pass@N, any response correct)
is reported as an upper bound.

Selection follows :mod:`prmsearch.search.selection` exactly: votes count only responses with an
extracted answer; ties break on total weight (majority) or count (weighted), then on the best
response's position; ``argmax`` prefers answered responses; unscored (NaN) responses rank last
and weigh 0. Equal answers vote together: answers are grouped once per question by their
canonical form and the grader's equivalence (:func:`~prmsearch.benchmarks.grading.search_matcher`),
and each response is graded once per distinct answer with
:func:`~prmsearch.benchmarks.grading.is_equivalent`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.answers import AnswerMatcher, extract_answer
from prmsearch.benchmarks.analysis.report import bootstrap_ci
from prmsearch.benchmarks.analysis.score_journal import ScoreJournal, response_digest
from prmsearch.benchmarks.datasets import DatasetError, DatasetFormatError
from prmsearch.benchmarks.grading import DEFAULT_TIMEOUT_S, is_equivalent, search_matcher
from prmsearch.benchmarks.prm_eval.processbench import iter_json_rows
from prmsearch.scorers.base import Scorer, ScoreRequest, check_scores
from prmsearch.search.aggregation import Aggregation, aggregate_scores
from prmsearch.search.selection import Ballot, Selection, choose

__all__ = [
    "ORACLE",
    "AggregateConfig",
    "AggregateRow",
    "PreparedQuestion",
    "aggregate",
    "default_ns",
    "load_aggregate_rows",
    "markdown_table",
    "parse_aggregate_row",
    "prepare_question",
    "rows_to_jsonl",
    "run_aggregate",
    "score_missing",
    "select_response",
    "split_steps",
    "write_outputs",
]

#: Name of the pass@N upper bound in the results.
ORACLE = "oracle"

# ---------------------------------------------------------------------------------------------
# Configuration and rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AggregateConfig:
    """What to compute.

    Attributes:
        ns: subsample sizes; None means 1, 2, 4, ... up to the smallest response count, and it.
        subsamples: random subsets drawn per question and N (one when N is the full count).
        seed: base seed; question ``i`` (0-based line order) draws from ``default_rng([seed, i])``.
        selections / aggregations: the methods to report (default: all).
        delimiter: step delimiter for responses scored by a PRM.
        batch_size: requests per PRM call.
        skip_bad_rows: record malformed rows and go on instead of stopping at the first.
        timeout_s: per-comparison limit of the grader's symbolic checker.
    """

    ns: tuple[int, ...] | None = None
    subsamples: int = 16
    seed: int = 0
    selections: tuple[Selection, ...] = tuple(Selection)
    aggregations: tuple[Aggregation, ...] = tuple(Aggregation)
    delimiter: str = "\n\n"
    batch_size: int = 64
    skip_bad_rows: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.ns is not None:
            ns = tuple(sorted(set(int(n) for n in self.ns)))
            if not ns or ns[0] < 1:
                raise ValueError(f"ns must be positive sizes, got {self.ns}")
            object.__setattr__(self, "ns", ns)
        if self.subsamples < 1:
            raise ValueError(f"subsamples must be >= 1, got {self.subsamples}")
        selections = tuple(Selection.parse(s, "selections") for s in self.selections)
        aggregations = tuple(Aggregation.parse(a, "aggregations") for a in self.aggregations)
        if not selections or not aggregations:
            raise ValueError("at least one selection and one aggregation are needed")
        object.__setattr__(self, "selections", tuple(dict.fromkeys(selections)))
        object.__setattr__(self, "aggregations", tuple(dict.fromkeys(aggregations)))
        if not self.delimiter:
            raise ValueError("delimiter must be a non-empty string")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


Score = float | tuple[float, ...]


@dataclass(frozen=True)
class AggregateRow:
    """One validated question.

    Attributes:
        index: 0-based position in the input (seeds its subsamples).
        line: 1-based line in the file (for messages).
        question / answer: the question and its gold answer.
        responses: the full responses.
        scores: per response a float or a tuple of step scores; None when the row had none.
    """

    index: int
    line: int | None
    question: str
    answer: str
    responses: tuple[str, ...]
    scores: tuple[Score, ...] | None


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_aggregate_row(obj: Any, *, index: int, line: int | None, source: str) -> AggregateRow:
    """Validate one raw row; raises :class:`DatasetFormatError` naming the line and the field."""

    def bad(name: str | None, message: str) -> DatasetFormatError:
        return DatasetFormatError(DatasetError(source, line, name, message))

    if not isinstance(obj, Mapping):
        raise bad(None, f"expected a JSON object, got {type(obj).__name__}")
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise bad("question", f"must be a non-empty string, got {question!r:.60}")
    answer = obj.get("answer")
    if _finite_number(answer):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        raise bad("answer", f"must be the gold answer as a non-empty string or number, got {answer!r:.60}")
    responses = obj.get("responses")
    if not isinstance(responses, list) or not responses:
        raise bad("responses", f"must be a non-empty list of strings, got {responses!r:.60}")
    for i, response in enumerate(responses):
        if not isinstance(response, str):
            raise bad("responses", f"response {i} must be a string, got {type(response).__name__}")
    raw_scores = obj.get("scores")
    scores: tuple[Score, ...] | None = None
    if raw_scores is not None:
        if not isinstance(raw_scores, list) or len(raw_scores) != len(responses):
            got = len(raw_scores) if isinstance(raw_scores, list) else type(raw_scores).__name__
            raise bad("scores", f"must be a list with one entry per response ({len(responses)}), got {got}")
        parsed: list[Score] = []
        for i, value in enumerate(raw_scores):
            if _finite_number(value):
                parsed.append(float(value))
            elif isinstance(value, list) and all(_finite_number(v) for v in value):
                parsed.append(tuple(float(v) for v in value))
            else:
                raise bad("scores", f"entry {i} must be a finite number or a list of them, got {value!r:.60}")
        scores = tuple(parsed)
    return AggregateRow(index, line, question, answer.strip(), tuple(responses), scores)


def load_aggregate_rows(
    path: str | Path, *, skip_bad_rows: bool = False
) -> tuple[list[AggregateRow], list[DatasetError]]:
    """Validated rows of a JSONL file and the records of skipped ones."""
    file = Path(path).expanduser()
    errors: list[DatasetError] = []
    rows: list[AggregateRow] = []
    for index, (line, obj) in enumerate(iter_json_rows(file, errors, skip_bad_rows)):
        try:
            rows.append(parse_aggregate_row(obj, index=index, line=line, source=str(file)))
        except DatasetFormatError as exc:
            if not skip_bad_rows:
                raise
            errors.append(exc.record)
    return rows, errors


# ---------------------------------------------------------------------------------------------
# PRM scoring of rows without scores
# ---------------------------------------------------------------------------------------------


def split_steps(response: str, delimiter: str) -> tuple[str, ...]:
    """The response's steps: its parts between delimiters, blank parts dropped."""
    return tuple(part for part in response.split(delimiter) if part.strip())


def score_missing(
    scorer: Scorer,
    rows: Sequence[AggregateRow],
    config: AggregateConfig,
    journal: ScoreJournal | None = None,
) -> tuple[list[AggregateRow], list[DatasetError]]:
    """Rows with PRM step scores filled in where they had none, in batched scorer calls.

    A response with no step (blank) gets an empty score list (it ranks last). A batch the
    scorer rejects is retried response by response; a response that still fails is an error
    (raised, or with ``skip_bad_rows`` recorded and left unscored). With a ``journal``, scores
    it already holds are reused and each batch's scores are appended as soon as they return,
    so a killed run resumes where it stopped.
    """
    jobs: list[tuple[int, int, ScoreRequest]] = []
    filled: dict[tuple[int, int], tuple[float, ...]] = {}
    digests: dict[tuple[int, int], str] = {}
    for r, row in enumerate(rows):
        if row.scores is None:
            for k, response in enumerate(row.responses):
                steps = split_steps(response, config.delimiter)
                if not steps:
                    continue
                if journal is not None:
                    digest = digests[(r, k)] = response_digest(row.question, response, config.delimiter)
                    saved = journal.get(row.index, k, digest)
                    if saved is not None and len(saved) == len(steps):
                        filled[(r, k)] = saved
                        continue
                jobs.append((r, k, ScoreRequest(row.question, steps)))
    jobs.sort(key=lambda job: sum(len(s) for s in job[2].steps))
    errors: list[DatasetError] = []

    def run(batch: Sequence[tuple[int, int, ScoreRequest]]) -> None:
        results = scorer.score([job[2] for job in batch])
        if len(results) != len(batch):
            raise ValueError(f"scorer returned {len(results)} results for {len(batch)} requests")
        for (r, k, request), result in zip(batch, results, strict=True):
            filled[(r, k)] = tuple(check_scores(request, result))
            if journal is not None:
                journal.record(rows[r].index, k, digests[(r, k)], filled[(r, k)])
        if journal is not None:
            journal.flush()

    for start in range(0, len(jobs), config.batch_size):
        batch = jobs[start : start + config.batch_size]
        try:
            run(batch)
        except (ValueError, RuntimeError):
            for job in batch:
                try:
                    run([job])
                except (ValueError, RuntimeError) as exc:
                    row = rows[job[0]]
                    record = DatasetError("prm", row.line, "responses", f"response {job[1]}: {exc}")
                    if not config.skip_bad_rows:
                        raise DatasetFormatError(record) from exc
                    errors.append(record)
    out = []
    for r, row in enumerate(rows):
        if row.scores is not None:
            out.append(row)
            continue
        scores = tuple(filled.get((r, k), ()) for k in range(len(row.responses)))
        out.append(AggregateRow(row.index, row.line, row.question, row.answer, row.responses, scores))
    return out, errors


# ---------------------------------------------------------------------------------------------
# Selection on precomputed arrays
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedQuestion:
    """Everything selection needs about one question, computed once.

    Attributes:
        groups: int array (R,), the answer group of each response (-1: no answer extracted).
        correct: bool array (R,), whether each response's answer matches the gold answer.
        scores: float array (A, R), each aggregation's path score (-inf where unscored).
    """

    groups: np.ndarray
    correct: np.ndarray
    scores: np.ndarray


def _aggregated(score: Score, aggregation: Aggregation) -> float:
    value = score if isinstance(score, float) else aggregate_scores(score, aggregation)
    return -math.inf if math.isnan(value) else value


def prepare_question(
    row: AggregateRow,
    aggregations: Sequence[Aggregation],
    matcher: AnswerMatcher,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> PreparedQuestion:
    """Extract, group and grade the answers of one scored row, and aggregate its scores."""
    if row.scores is None:
        raise ValueError(f"row {row.line}: responses must be scored before selection")
    groups = np.full(len(row.responses), -1, dtype=np.int64)
    correct = np.zeros(len(row.responses), dtype=bool)
    canonical_group: dict[str, int] = {}
    verdicts: dict[str, bool] = {}
    for k, response in enumerate(row.responses):
        answer = extract_answer(response)
        if answer is None:
            continue
        canonical = matcher.canonicalize(answer)
        group = canonical_group.get(canonical)
        if group is None:
            group = next(
                (g for other, g in canonical_group.items() if matcher.same(canonical, other)),
                len(set(canonical_group.values())),
            )
            canonical_group[canonical] = group
        groups[k] = group
        if answer not in verdicts:
            verdicts[answer] = is_equivalent(answer, row.answer, timeout_s=timeout_s)
        correct[k] = verdicts[answer]
    scores = np.array([[_aggregated(s, a) for s in row.scores] for a in aggregations], dtype=np.float64)
    return PreparedQuestion(groups, correct, scores.reshape(len(aggregations), len(row.responses)))


def select_response(
    question: PreparedQuestion, indices: np.ndarray, selection: Selection, aggregation_row: int
) -> int:
    """The response that ``selection`` picks among ``indices`` (ascending) under one aggregation:
    the search's own :func:`prmsearch.search.selection.choose`, response index as the order."""
    scores = question.scores[aggregation_row]
    groups = question.groups
    candidates = [
        Ballot(None if groups[i] < 0 else int(groups[i]), float(scores[i]), int(i)) for i in indices
    ]
    return int(indices[choose(candidates, selection)])


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def default_ns(count: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``count``, and ``count`` itself."""
    ns = []
    n = 1
    while n <= count:
        ns.append(n)
        n *= 2
    if ns[-1] != count:
        ns.append(count)
    return tuple(ns)


def _subsets(rng: np.random.Generator, total: int, n: int, draws: int) -> list[np.ndarray]:
    if n == total:
        return [np.arange(total)]
    return [np.sort(rng.choice(total, size=n, replace=False)) for _ in range(draws)]


def aggregate(
    rows: Sequence[AggregateRow],
    config: AggregateConfig = AggregateConfig(),
    matcher: AnswerMatcher | None = None,
) -> dict[str, Any]:
    """Accuracy per (selection, aggregation, N) over scored ``rows``; a JSON-ready dict."""
    if not rows:
        raise ValueError("no rows to aggregate")
    matcher = matcher or search_matcher(config.timeout_s)
    counts = [len(row.responses) for row in rows]
    smallest = min(counts)
    ns = config.ns or default_ns(smallest)
    if ns[-1] > smallest:
        raise ValueError(f"N={ns[-1]} exceeds the smallest number of responses in a row ({smallest})")
    methods = [(s, a) for s in config.selections for a in config.aggregations]
    per_question = {(s.value, a.value, n): np.zeros(len(rows)) for s, a in methods for n in ns}
    oracle = {n: np.zeros(len(rows)) for n in ns}
    for q, row in enumerate(rows):
        prepared = prepare_question(row, config.aggregations, matcher, config.timeout_s)
        rng = np.random.default_rng([config.seed, row.index])
        for n in ns:
            subsets = _subsets(rng, len(row.responses), n, config.subsamples)
            oracle[n][q] = np.mean([prepared.correct[idx].any() for idx in subsets])
            for s, a in methods:
                a_row = config.aggregations.index(a)
                hits = [prepared.correct[select_response(prepared, idx, s, a_row)] for idx in subsets]
                per_question[(s.value, a.value, n)][q] = np.mean(hits)
    results = []
    for (selection, aggregation, n), values in per_question.items():
        results.append(_cell(selection, aggregation, n, values))
    for n, values in oracle.items():
        results.append(_cell(ORACLE, None, n, values))
    return {
        "n_questions": len(rows),
        "responses": {"min": smallest, "max": max(counts)},
        "ns": list(ns),
        "subsamples": config.subsamples,
        "seed": config.seed,
        "results": results,
    }


def _cell(selection: str, aggregation: str | None, n: int, values: np.ndarray) -> dict[str, Any]:
    return {
        "selection": selection,
        "aggregation": aggregation,
        "n": n,
        "accuracy": float(values.mean()),
        "ci95": bootstrap_ci(values, seed=n),
    }


def run_aggregate(
    rows: Sequence[AggregateRow],
    config: AggregateConfig = AggregateConfig(),
    *,
    scorer: Scorer | None = None,
    errors: Iterable[DatasetError] = (),
    matcher: AnswerMatcher | None = None,
    journal: ScoreJournal | None = None,
) -> tuple[dict[str, Any], list[AggregateRow]]:
    """Score rows that lack scores (needs ``scorer``, resuming from ``journal`` when given), then
    aggregate; returns report and rows."""
    errors = list(errors)
    unscored = [row for row in rows if row.scores is None]
    if unscored:
        if scorer is None:
            first = unscored[0]
            raise ValueError(
                f"{len(unscored)} rows have no 'scores' (first at line {first.line}); give a PRM to "
                "score them (--prm PATH --prm-family FAMILY) or add per-response scores"
            )
        rows, scoring_errors = score_missing(scorer, rows, config, journal)
        errors.extend(scoring_errors)
    report = aggregate(rows, config, matcher)
    report["scored_by_prm"] = len(unscored)
    if journal is not None:
        report["journal"] = {"path": str(journal.path), "resumed_responses": journal.resumed}
    report["errors"] = [str(e) for e in errors]
    return report, list(rows)


def markdown_table(report: Mapping[str, Any]) -> str:
    """Accuracy (%) per selection and aggregation (rows) at each N (columns)."""
    ns = report["ns"]
    cells: dict[tuple[str, str | None], dict[int, float]] = {}
    for r in report["results"]:
        cells.setdefault((r["selection"], r["aggregation"]), {})[r["n"]] = r["accuracy"]
    lines = [
        f"{report['n_questions']} questions, {report['subsamples']} subsamples per N "
        f"(seed {report['seed']}); accuracy in %.",
        "",
        "| selection | aggregation | " + " | ".join(f"N={n}" for n in ns) + " |",
        "|---|---|" + "---|" * len(ns),
    ]
    for (selection, aggregation), by_n in cells.items():
        values = " | ".join(f"{100 * by_n[n]:.1f}" for n in ns)
        lines.append(f"| {selection} | {aggregation or '-'} | {values} |")
    errors = report.get("errors") or []
    if errors:
        lines += ["", f"{len(errors)} rows skipped:"] + [f"- {e}" for e in errors[:20]]
    return "\n".join(lines) + "\n"


def write_outputs(report: Mapping[str, Any], folder: str | Path) -> Path:
    """Write ``aggregate.json`` and ``aggregate.md`` into ``folder`` (created)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "aggregate.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "aggregate.md").write_text(markdown_table(report))
    return out


def rows_to_jsonl(rows: Sequence[AggregateRow], path: str | Path) -> None:
    """Save (scored) rows in the input format, so a PRM pass is paid for once."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for row in rows:
            scores = (
                None if row.scores is None else [s if isinstance(s, float) else list(s) for s in row.scores]
            )
            record = {"question": row.question, "answer": row.answer, "responses": list(row.responses)}
            handle.write(json.dumps({**record, "scores": scores}) + "\n")
