"""PRM step-level evaluation in the ProcessBench format: first-error accuracy and F1.

A ProcessBench row is one solution to ``problem`` cut into ``steps`` (a list of strings) and a
``label``: the index of the first wrong step, or -1 when every step is right. A PRM scores every
step; its *prediction* is the first step whose score falls below a threshold (or -1). The metric
(Zheng et al., 2024, "ProcessBench") is the accuracy on erroneous rows (the exact first wrong step
found), the accuracy on correct rows (no step flagged), and their harmonic mean, the F1.

The module has three layers, each usable alone:

- **pure metric** (:func:`predicted_first_error`, :func:`first_error_report`,
  :func:`tune_threshold`): plain lists in, figures out; the arithmetic PRM code reuses them;
- **rows** (:func:`parse_row`, :func:`load_rows`, :func:`rows_from_dicts`): validated
  :class:`ProcessBenchRow` objects from JSONL/JSON files or in-memory dicts, with bad rows named
  by file, line and field;
- **runner** (:func:`score_rows`, :func:`evaluate`, :func:`run_eval_prm`): scores rows through
  the :class:`~prmsearch.scorers.base.Scorer` protocol in batched calls and reports per split,
  with a given threshold or one tuned on a named split; :func:`markdown_report` and
  :func:`write_report` write the result.

Why one module over 500 lines: the three layers above are one file format and its metric;
each is short, and a reader checking the metric wants the rows' validation beside it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.benchmarks.datasets import DatasetError, DatasetFormatError
from prmsearch.scorers.base import Scorer, ScoreRequest, check_scores
from prmsearch.text_lines import numbered_lines

__all__ = [
    "DEFAULT_GRID_STEP",
    "DEFAULT_THRESHOLD",
    "EvalPrmConfig",
    "FirstErrorReport",
    "ProcessBenchRow",
    "evaluate",
    "first_error_report",
    "iter_json_rows",
    "load_rows",
    "markdown_report",
    "parse_row",
    "predicted_first_error",
    "predictions_for_grid",
    "rows_from_dicts",
    "run_eval_prm",
    "score_rows",
    "threshold_grid",
    "tune_threshold",
    "write_report",
]

#: Threshold used when none is given and none is tuned.
DEFAULT_THRESHOLD = 0.5
#: Spacing of the threshold grid searched by :func:`tune_threshold`.
DEFAULT_GRID_STEP = 0.01
#: Name of the pooled figures over every split.
OVERALL = "all"

# ---------------------------------------------------------------------------------------------
# Pure metric
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstErrorReport:
    """ProcessBench figures for one threshold.

    Attributes:
        threshold: a step scored strictly below it is flagged as wrong.
        n_erroneous: rows with a wrong step (label >= 0).
        n_correct: rows without one (label -1).
        accuracy_erroneous: share of erroneous rows whose first wrong step was found exactly.
        accuracy_correct: share of correct rows with no step flagged.
    """

    threshold: float
    n_erroneous: int
    n_correct: int
    accuracy_erroneous: float
    accuracy_correct: float

    @property
    def f1(self) -> float:
        """Harmonic mean of the two accuracies (0 when both are 0)."""
        a, b = self.accuracy_erroneous, self.accuracy_correct
        return 0.0 if a + b == 0 else 2 * a * b / (a + b)

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "n": self.n_erroneous + self.n_correct,
            "n_erroneous": self.n_erroneous,
            "n_correct": self.n_correct,
            "accuracy_erroneous": self.accuracy_erroneous,
            "accuracy_correct": self.accuracy_correct,
            "f1": self.f1,
        }


def predicted_first_error(scores: Sequence[float], threshold: float) -> int:
    """Index of the first step scored below ``threshold``, or -1."""
    for i, score in enumerate(scores):
        if score < threshold:
            return i
    return -1


def first_error_report(
    labels: Sequence[int], step_scores: Sequence[Sequence[float]], threshold: float = DEFAULT_THRESHOLD
) -> FirstErrorReport:
    """Accuracy on erroneous (label >= 0) and correct (label -1) samples, and their F1.

    An empty group has accuracy 0 (so its F1 is 0: a split without both kinds says nothing).
    """
    hits_err = hits_ok = n_err = n_ok = 0
    for label, scores in zip(labels, step_scores, strict=True):
        predicted = predicted_first_error(scores, threshold)
        if label == -1:
            n_ok += 1
            hits_ok += predicted == -1
        else:
            n_err += 1
            hits_err += predicted == label
    return FirstErrorReport(threshold, n_err, n_ok, hits_err / max(1, n_err), hits_ok / max(1, n_ok))


def threshold_grid(step: float = DEFAULT_GRID_STEP) -> np.ndarray:
    """Thresholds ``0, step, 2*step, ..., 1`` (1 included), rounded to clean decimals."""
    if not 0.0 < step <= 1.0:
        raise ValueError(f"grid step must be in (0, 1], got {step}")
    count = math.floor(1.0 / step + 1e-9)
    grid = np.round(np.arange(count + 1) * step, 10)
    return grid if grid[-1] >= 1.0 else np.append(grid, 1.0)


def predictions_for_grid(scores: Sequence[float], grid: np.ndarray) -> np.ndarray:
    """:func:`predicted_first_error` at every threshold of ``grid`` at once (int array).

    The prefix minimum of the scores is non-increasing, so the number of leading steps that stay
    at or above a threshold is one ``searchsorted``; that count is the prediction unless every
    step passes (then -1).
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return np.full(len(grid), -1, dtype=np.int64)
    prefix_min = np.minimum.accumulate(values)
    passing = values.size - np.searchsorted(prefix_min[::-1], grid, side="left")
    return np.where(passing >= values.size, -1, passing)


def tune_threshold(
    labels: Sequence[int],
    step_scores: Sequence[Sequence[float]],
    grid: np.ndarray | None = None,
) -> FirstErrorReport:
    """The report at the grid threshold with the highest F1.

    Ties go to the threshold closest to 0.5, then the lower one, so that a flat optimum gives a
    middle-of-the-road threshold rather than an extreme. Needs both erroneous and correct rows.
    """
    grid = threshold_grid() if grid is None else np.asarray(grid, dtype=np.float64)
    labels = list(labels)
    if len(labels) != len(step_scores):
        raise ValueError(f"{len(labels)} labels but {len(step_scores)} score lists")
    n_err = sum(1 for label in labels if label != -1)
    n_ok = len(labels) - n_err
    if n_err == 0 or n_ok == 0:
        raise ValueError(
            f"tuning a threshold needs erroneous and correct rows; got {n_err} erroneous and {n_ok} correct"
        )
    hits_err = np.zeros(len(grid))
    hits_ok = np.zeros(len(grid))
    for label, scores in zip(labels, step_scores, strict=True):
        hit = predictions_for_grid(scores, grid) == label
        if label == -1:
            hits_ok += hit
        else:
            hits_err += hit
    acc_err, acc_ok = hits_err / n_err, hits_ok / n_ok
    total = acc_err + acc_ok
    f1 = np.divide(2 * acc_err * acc_ok, total, out=np.zeros_like(total), where=total > 0)

    def rank(i: int) -> tuple[Any, Any, Any]:  # F1, then closeness to 0.5, then the lower threshold
        return round(f1[i], 12), -abs(grid[i] - 0.5), -grid[i]

    best = max(range(len(grid)), key=rank)
    return first_error_report(labels, step_scores, float(grid[best]))


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessBenchRow:
    """One labelled solution.

    Attributes:
        id: unique id (the row's ``id`` field, else ``<source>:<line>``).
        problem: the question text.
        steps: the solution's steps, none empty.
        label: index of the first wrong step, or -1 when all are right.
        split: the group it is reported under (a field value or its file's name).
    """

    id: str
    problem: str
    steps: tuple[str, ...]
    label: int
    split: str

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("ProcessBenchRow.steps must not be empty")
        if not -1 <= self.label < len(self.steps):
            raise ValueError(
                f"ProcessBenchRow.label must be -1 or a step index in [0, {len(self.steps) - 1}], "
                f"got {self.label}"
            )


def iter_json_rows(path: Path, errors: list[DatasetError], skip: bool) -> Iterator[tuple[int, Any]]:
    """(1-based line, value) per non-blank JSONL line, or per item of a ``.json`` array file.

    A line that is not JSON raises :class:`DatasetFormatError`, or with ``skip`` is recorded in
    ``errors`` and passed over.
    """
    if not path.is_file():
        raise FileNotFoundError(f"input file {str(path)!r} does not exist")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            record = DatasetError(str(path), exc.lineno, None, f"malformed JSON: {exc.msg}")
            raise DatasetFormatError(record) from None
        except UnicodeDecodeError as exc:
            record = DatasetError(str(path), None, None, f"not UTF-8 text (byte {exc.start} of the file)")
            raise DatasetFormatError(record) from None
        if not isinstance(data, list):
            raise DatasetFormatError(
                DatasetError(str(path), None, None, "a .json input must hold a list of rows (or use .jsonl)")
            )
        yield from enumerate(data, start=1)
        return
    for number, line, problem in numbered_lines(path):
        if line is not None:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                problem = f"malformed JSON ({exc.msg}, column {exc.colno})"
            else:
                yield number, row
                continue
        record = DatasetError(str(path), number, None, problem or "unreadable line")
        if not skip:
            raise DatasetFormatError(record) from None
        errors.append(record)


def _bad(source: str, line: int | None, name: str | None, message: str) -> DatasetFormatError:
    return DatasetFormatError(DatasetError(source, line, name, message))


def parse_row(
    obj: Any,
    *,
    source: str,
    line: int | None,
    split: str,
    split_field: str | None = None,
) -> ProcessBenchRow:
    """Validate one raw row; raises :class:`DatasetFormatError` naming the field and the fix.

    ``split_field``, when given, overrides ``split`` with the row's value of that field. An
    empty (or whitespace-only) step is an error: a PRM cannot score it and dropping it would
    shift the label.
    """
    if not isinstance(obj, Mapping):
        raise _bad(source, line, None, f"expected a JSON object, got {type(obj).__name__}")
    problem = obj.get("problem")
    if not isinstance(problem, str) or not problem.strip():
        raise _bad(source, line, "problem", f"must be a non-empty string, got {problem!r:.60}")
    steps = obj.get("steps")
    if not isinstance(steps, list) or not steps:
        raise _bad(source, line, "steps", f"must be a non-empty list of strings, got {steps!r:.60}")
    for i, step in enumerate(steps):
        if not isinstance(step, str):
            raise _bad(source, line, "steps", f"step {i} must be a string, got {type(step).__name__}")
        if not step.strip():
            raise _bad(source, line, "steps", f"step {i} is empty; every step needs text for the PRM")
    label = obj.get("label")
    if isinstance(label, bool) or not isinstance(label, int) or not -1 <= label < len(steps):
        raise _bad(
            source, line, "label",
            f"must be -1 (no wrong step) or a step index in [0, {len(steps) - 1}], got {label!r}",
        )  # fmt: skip
    raw_id = obj.get("id")
    row_id = str(raw_id) if raw_id is not None and str(raw_id).strip() else f"{source}:{line}"
    if split_field is not None:
        if obj.get(split_field) is None:
            raise _bad(source, line, split_field, "the split field is missing from this row")
        split = str(obj[split_field])
    return ProcessBenchRow(row_id, problem, tuple(steps), label, split)


def rows_from_dicts(
    items: Iterable[tuple[int | None, Any]],
    *,
    source: str,
    split: str,
    split_field: str | None = None,
    skip_bad_rows: bool = False,
    errors: list[DatasetError] | None = None,
) -> tuple[list[ProcessBenchRow], list[DatasetError]]:
    """Parse ``(line, raw row)`` pairs into rows.

    Rows with an empty step are always recorded and skipped (the run goes on); other bad rows
    raise unless ``skip_bad_rows``.
    """
    errors = [] if errors is None else errors
    rows: list[ProcessBenchRow] = []
    for line, obj in items:
        try:
            rows.append(parse_row(obj, source=source, line=line, split=split, split_field=split_field))
        except DatasetFormatError as exc:
            empty_step = exc.record.field == "steps" and "is empty" in exc.record.message
            if not (skip_bad_rows or empty_step):
                raise
            errors.append(exc.record)
    return rows, errors


def load_rows(
    paths: Sequence[str | Path],
    *,
    split_field: str | None = None,
    skip_bad_rows: bool = False,
) -> tuple[list[ProcessBenchRow], list[DatasetError]]:
    """Rows of one or more JSONL (or JSON array) files and the records of skipped rows.

    Each file is one split, named by its file name without extension, unless ``split_field``
    names a row field whose value is the split.
    """
    if not paths:
        raise ValueError("eval-prm needs at least one input file (or --dataset)")
    rows: list[ProcessBenchRow] = []
    errors: list[DatasetError] = []
    for raw in paths:
        path = Path(raw).expanduser()
        items = iter_json_rows(path, errors, skip_bad_rows)
        more, _ = rows_from_dicts(
            items, source=str(path), split=path.stem, split_field=split_field,
            skip_bad_rows=skip_bad_rows, errors=errors,
        )  # fmt: skip
        rows.extend(more)
    return rows, errors


# ---------------------------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalPrmConfig:
    """How to turn step scores into figures.

    Attributes:
        threshold: fixed threshold; None means :data:`DEFAULT_THRESHOLD` unless ``tune_on`` is set.
        tune_on: name of the split on which to tune the threshold (max F1 over the grid); the
            tuned threshold is then applied to every split. Exclusive with ``threshold``.
        grid_step: spacing of the tuning grid over [0, 1].
        batch_size: requests per scorer call.
    """

    threshold: float | None = None
    tune_on: str | None = None
    grid_step: float = DEFAULT_GRID_STEP
    batch_size: int = 64

    def __post_init__(self) -> None:
        if self.threshold is not None and self.tune_on is not None:
            raise ValueError("give a threshold or a split to tune it on (tune_on), not both")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        if self.tune_on is not None and not str(self.tune_on).strip():
            raise ValueError("tune_on must name a split, got an empty string")
        if not 0.0 < self.grid_step <= 1.0:
            raise ValueError(f"grid_step must be in (0, 1], got {self.grid_step}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


def _score_batch(scorer: Scorer, rows: Sequence[ProcessBenchRow]) -> list[list[float]]:
    requests = [ScoreRequest(row.problem, row.steps) for row in rows]
    results = scorer.score(requests)
    if len(results) != len(requests):
        raise ValueError(f"scorer returned {len(results)} results for {len(requests)} requests")
    return [check_scores(req, res) for req, res in zip(requests, results, strict=True)]


def score_rows(
    scorer: Scorer, rows: Sequence[ProcessBenchRow], batch_size: int = 64
) -> tuple[list[list[float] | None], list[DatasetError]]:
    """Step scores of every row, in batched scorer calls (rows of similar length together).

    A batch that fails is retried row by row, so one bad row (too long, misaligned separators)
    is recorded as an error with its scores None, and the others are still scored.
    """
    order = sorted(range(len(rows)), key=lambda i: sum(len(s) for s in rows[i].steps))
    scores: list[list[float] | None] = [None] * len(rows)
    errors: list[DatasetError] = []
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        try:
            batch = _score_batch(scorer, [rows[i] for i in chunk])
        except (ValueError, RuntimeError):
            batch = None
        if batch is not None:
            for i, values in zip(chunk, batch, strict=True):
                scores[i] = values
            continue
        for i in chunk:
            try:
                scores[i] = _score_batch(scorer, [rows[i]])[0]
            except (ValueError, RuntimeError) as exc:
                errors.append(DatasetError(rows[i].id, None, "steps", f"scoring failed: {exc}"))
    return scores, errors


@dataclass
class _Split:
    labels: list[int] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)


def evaluate(
    rows: Sequence[ProcessBenchRow],
    step_scores: Sequence[Sequence[float] | None],
    config: EvalPrmConfig = EvalPrmConfig(),
) -> dict[str, Any]:
    """Per-split and pooled figures for scored rows (rows whose scores are None are left out).

    Returns a JSON-ready dict: ``threshold``, ``tuned_on``, ``splits`` (one report per split, in
    order of first appearance), ``overall`` (all rows pooled) and ``mean_f1`` (the unweighted
    mean of the splits' F1, as ProcessBench reports it).
    """
    splits: dict[str, _Split] = {}
    pooled = _Split()
    for row, scores in zip(rows, step_scores, strict=True):
        if scores is None:
            continue
        for group in (splits.setdefault(row.split, _Split()), pooled):
            group.labels.append(row.label)
            group.scores.append(list(scores))
    threshold = DEFAULT_THRESHOLD if config.threshold is None else config.threshold
    tuned: dict[str, Any] | None = None
    if config.tune_on is not None:
        if config.tune_on not in splits:
            known = ", ".join(splits) or "(none)"
            raise ValueError(f"--tune-on split {config.tune_on!r} is not among the splits: {known}")
        target = splits[config.tune_on]
        best = tune_threshold(target.labels, target.scores, threshold_grid(config.grid_step))
        threshold = best.threshold
        tuned = {"split": config.tune_on, "grid_step": config.grid_step, "f1": best.f1}
    reports = []
    for name, group in splits.items():
        reports.append({"split": name, **first_error_report(group.labels, group.scores, threshold).to_dict()})
    overall = first_error_report(pooled.labels, pooled.scores, threshold).to_dict()
    mean_f1 = float(np.mean([r["f1"] for r in reports])) if reports else float("nan")
    return {
        "threshold": threshold,
        "tuned_on": tuned,
        "splits": reports,
        "overall": {"split": OVERALL, **overall},
        "mean_f1": mean_f1,
    }


def run_eval_prm(
    scorer: Scorer,
    rows: Sequence[ProcessBenchRow],
    config: EvalPrmConfig = EvalPrmConfig(),
    errors: Sequence[DatasetError] = (),
) -> tuple[dict[str, Any], list[list[float] | None]]:
    """Score ``rows`` and evaluate them; returns the report (with ``errors``) and the scores."""
    if not rows:
        raise ValueError("no rows to evaluate" + (f" ({len(errors)} bad rows skipped)" if errors else ""))
    scores, scoring_errors = score_rows(scorer, rows, config.batch_size)
    report = evaluate(rows, scores, config)
    all_errors = [*errors, *scoring_errors]
    report["n_rows"] = len(rows) + len(errors)
    report["n_scored"] = sum(s is not None for s in scores)
    report["errors"] = [str(e) for e in all_errors]
    return report, scores


def markdown_report(report: Mapping[str, Any]) -> str:
    """The report as a markdown table, one line per split and one for all rows pooled."""
    tuned = report.get("tuned_on")
    how = f"tuned on `{tuned['split']}`" if tuned else "given"
    lines = [
        f"Threshold {report['threshold']:.3f} ({how}); a step scored below it is flagged.",
        "",
        "| split | n | erroneous | correct | acc. erroneous | acc. correct | F1 |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = list(report["splits"])
    if len(rows) > 1:
        rows.append(report["overall"])
    for r in rows:
        lines.append(
            f"| {r['split']} | {r['n']} | {r['n_erroneous']} | {r['n_correct']} | "
            f"{100 * r['accuracy_erroneous']:.1f} | {100 * r['accuracy_correct']:.1f} | {100 * r['f1']:.1f} |"
        )
    if len(report["splits"]) > 1:
        lines += ["", f"Mean F1 over splits: {100 * report['mean_f1']:.1f}"]
    errors = report.get("errors") or []
    if errors:
        lines += ["", f"{len(errors)} rows skipped:"] + [f"- {e}" for e in errors[:20]]
        if len(errors) > 20:
            lines.append(f"- ... and {len(errors) - 20} more (see the JSON report)")
    return "\n".join(lines) + "\n"


def write_report(report: Mapping[str, Any], folder: str | Path, name: str = "eval_prm") -> Path:
    """Write ``<name>.json`` and ``<name>.md`` into ``folder`` (created); returns the folder."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown_report(report))
    return out
