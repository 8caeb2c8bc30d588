"""Dataset loaders: row counts and filters on the shared benchmark files, GSM8K gold parsing,
deterministic shuffles, and clear errors (or recorded skips) for bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prmsearch.benchmarks import datasets
from prmsearch.benchmarks.datasets import (
    DatasetError,
    DatasetFormatError,
    DatasetSpec,
    Problem,
    dataset_names,
    load_dataset,
    register_dataset,
)
from prmsearch.benchmarks.grading import is_equivalent

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"  # tests/benchmarks -> ../shared/data
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "math500.jsonl").is_file(), reason=f"benchmark data not found at {DATA_DIR}"
)


@pytest.fixture(autouse=True)
def _point_at_shared_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(DATA_DIR))


def _write(tmp_path: Path, lines: list[str], name: str = "rows.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- the shared benchmark files ---


@needs_data
@pytest.mark.parametrize(("name", "rows"), [("math500", 500), ("gsm8k", 1319), ("aime24", 30), ("amc23", 40)])
def test_row_counts(name: str, rows: int) -> None:
    problems = load_dataset(name)
    assert len(problems) == rows
    assert len({p.id for p in problems}) == rows
    assert all(isinstance(p, Problem) and p.question and p.answer for p in problems)
    assert problems.errors == []


@needs_data
def test_math500_levels_and_subjects() -> None:
    counts = {level: len(load_dataset("math500", levels=[level])) for level in range(1, 6)}
    assert counts == {1: 43, 2: 90, 3: 105, 4: 128, 5: 134}
    assert len(load_dataset("math500", levels="Level 3")) == 105
    assert len(load_dataset("math500", levels=[1, "Level 2"])) == 43 + 90
    algebra = load_dataset("math500", subjects="algebra")  # case-insensitive
    assert len(algebra) == 124
    assert {p.meta["subject"] for p in algebra} == {"Algebra"}
    both = load_dataset("math500", levels=5, subjects=["Algebra", "Geometry"])
    assert all(p.meta["level"] == 5 and p.meta["subject"] in {"Algebra", "Geometry"} for p in both)


@needs_data
def test_math500_meta_and_ids() -> None:
    first = load_dataset("math500", limit=1)[0]
    assert first.id == "test/precalculus/807.json"
    assert first.meta["level"] == 2 and first.meta["subject"] == "Precalculus"
    assert "solution" in first.meta and "problem" not in first.meta


@needs_data
def test_bad_filters_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"levels must be 1..5"):
        load_dataset("math500", levels=[6])
    with pytest.raises(ValueError, match=r"not in dataset 'math500'; known: Algebra"):
        load_dataset("math500", subjects="Topology")
    with pytest.raises(ValueError, match=r"has no 'level' field"):
        load_dataset("gsm8k", levels=[1])
    with pytest.raises(ValueError, match=r"limit"):
        load_dataset("gsm8k", limit=-1)


@needs_data
def test_gsm8k_gold_parsing() -> None:
    problems = load_dataset("gsm8k")
    raw = [json.loads(line)["answer"] for line in (DATA_DIR / "gsm8k_test.jsonl").open(encoding="utf-8")]
    with_commas = [r for r in raw if "," in r.rsplit("####", 1)[1]]
    assert len(with_commas) == 14
    assert all("," not in p.answer and p.answer.lstrip("-").replace(".", "").isdigit() for p in problems)
    assert problems[0].answer == "18" and problems[0].id == "gsm8k/0"
    assert problems[0].meta["solution"].endswith("#### 18")


@needs_data
def test_aime_and_amc_answers_as_given() -> None:
    aime = load_dataset("aime24")
    assert all(p.answer.isdigit() for p in aime)
    amc = load_dataset("amc23")
    assert amc[0].answer == "27.0"  # kept as given ...
    assert is_equivalent("27", amc[0].answer)  # ... the grader handles 27 == 27.0


@needs_data
def test_shuffle_is_deterministic_and_before_limit() -> None:
    a = load_dataset("gsm8k", shuffle_seed=7, limit=20)
    b = load_dataset("gsm8k", shuffle_seed=7, limit=20)
    c = load_dataset("gsm8k", shuffle_seed=8, limit=20)
    assert [p.id for p in a] == [p.id for p in b]
    assert [p.id for p in a] != [p.id for p in c]
    assert [p.id for p in a] != [p.id for p in load_dataset("gsm8k", limit=20)]  # shuffled, then cut
    full = load_dataset("gsm8k", shuffle_seed=7)
    assert [p.id for p in full[:20]] == [p.id for p in a]


@needs_data
def test_path_may_be_the_file_or_its_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(datasets.DATA_DIR_ENV)
    assert len(load_dataset("aime24", DATA_DIR)) == 30
    assert len(load_dataset("aime24", DATA_DIR / "aime24.jsonl")) == 30
    assert len(load_dataset("jsonl", DATA_DIR / "amc23.jsonl", question_field="problem", id_field="id")) == 40


@needs_data
def test_local_file_holds_one_split() -> None:
    with pytest.raises(ValueError, match=r"hold the 'test', 'train' split\(s\).*hub:openai/gsm8k"):
        load_dataset("gsm8k", split="validation")
    with pytest.raises(ValueError, match=r"hold the 'test' split\(s\).*hub:HuggingFaceH4/MATH-500"):
        load_dataset("math500", split="train")


# --- registry and location errors (no data needed) ---


def test_registry_names() -> None:
    assert {"math500", "gsm8k", "aime24", "amc23", "jsonl", "arith"} <= set(dataset_names())


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'math5000'; known: .*math500"):
        load_dataset("math5000")


def test_register_a_new_dataset(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"q": "1+1?", "a": 2}'])
    register_dataset(
        DatasetSpec("tiny-test", "test only", question_field="q", answer_field="a"), overwrite=True
    )
    assert load_dataset("tiny-test", path) == [Problem("tiny-test/0", "1+1?", "2", {})]
    with pytest.raises(ValueError, match=r"already registered"):
        register_dataset(DatasetSpec("tiny-test", "again"))


def test_missing_file_names_it_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"math500\.jsonl.*PRMSEARCH_DATA_DIR"):
        load_dataset("math500")


def test_generic_jsonl_needs_a_path() -> None:
    with pytest.raises(ValueError, match=r"needs path"):
        load_dataset("jsonl")


def test_problem_validates_fields() -> None:
    with pytest.raises(ValueError, match=r"Problem.answer"):
        Problem("a", "question?", "")
    with pytest.raises(ValueError, match=r"Problem.meta"):
        Problem("a", "question?", "1", meta=[])  # type: ignore[arg-type]


# --- bad rows ---


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"question": "q1", "answer": "1"}', '{"question": "q2", "answer": '])
    with pytest.raises(DatasetFormatError, match=rf"{path.name}:2: malformed JSON.*on_error='skip'") as info:
        load_dataset("jsonl", path)
    assert info.value.record.line == 2


def test_missing_field_names_field_and_fix(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"problem": "q1", "answer": "1"}'])
    with pytest.raises(DatasetFormatError, match=r":1: field 'question': row has no field 'question'.*"
                       r"fields: answer, problem.*question_field="):  # fmt: skip
        load_dataset("jsonl", path)


def test_unknown_field_override(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"question": "q1", "answer": "1"}'])
    with pytest.raises(DatasetFormatError, match=r"no field 'solution'.*answer_field="):
        load_dataset("jsonl", path, answer_field="solution")


def test_field_overrides_and_generic_meta(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"prompt": "q1", "gold": 3, "key": "k1", "source": "x"}'])
    (problem,) = load_dataset("jsonl", path, question_field="prompt", answer_field="gold", id_field="key")
    assert problem == Problem("k1", "q1", "3", {"source": "x"})


def test_skip_mode_records_bad_rows_and_goes_on(tmp_path: Path) -> None:
    lines = [
        '{"question": "q1", "answer": "1", "id": "a"}',
        "not json",
        '{"question": "q3", "id": "c"}',
        "[1, 2]",
        '{"question": "", "answer": "5", "id": "e"}',
        "",
        '{"question": "q7", "answer": "7", "id": "a"}',
        '{"question": "q8", "answer": "8", "id": "h"}',
    ]
    path = _write(tmp_path, lines)
    problems = load_dataset("jsonl", path, id_field="id", on_error="skip")
    assert [p.id for p in problems] == ["a", "h"]
    expected = [(2, None), (3, "answer"), (4, None), (5, "question"), (7, "id")]
    assert [(e.line, e.field) for e in problems.errors] == expected
    assert all(isinstance(e, DatasetError) and str(path) in str(e) for e in problems.errors)
    assert "duplicate id 'a'" in problems.errors[-1].message
    with pytest.raises(DatasetFormatError, match=r":2: malformed JSON"):
        load_dataset("jsonl", path, id_field="id")


def test_skip_mode_with_nothing_readable_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"q": "1"}', '{"q": "2"}'])
    with pytest.raises(DatasetFormatError, match=r"no row could be read \(2 bad\)"):
        load_dataset("jsonl", path, on_error="skip")


def test_bad_on_error_value(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"question": "q", "answer": "1"}'])
    with pytest.raises(ValueError, match=r"on_error must be one of"):
        load_dataset("jsonl", path, on_error="ignore")


def test_gsm8k_row_without_marker(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"question": "q", "answer": "no marker"}'], name="gsm8k_test.jsonl")
    with pytest.raises(DatasetFormatError, match=r":1: field 'answer':.*####"):
        load_dataset("gsm8k", path)


# --- the built-in arithmetic split ---


def test_arith_split() -> None:
    problems = load_dataset("arith", limit=5)
    assert len(problems) == 5
    assert all(p.answer.lstrip("-").isdigit() for p in problems)
    assert load_dataset("arith", limit=5) == problems


def test_arith_import_failure_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prmsearch.arith.problems", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"dataset 'arith' needs prmsearch.arith.problems.load_split"):
        load_dataset("arith", limit=1)
