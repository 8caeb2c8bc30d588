"""Benchmark problems: one :class:`Problem` type and loaders for MATH-500, GSM8K, AIME 2024, AMC 2023,
any JSONL file, and the built-in arithmetic split.

Every dataset is a :class:`DatasetSpec` in a registry (``register_dataset`` / ``dataset_names`` /
``load_dataset``). Files are read from a local JSONL path, a folder holding the spec's file, or the
data folder (``$PRMSEARCH_DATA_DIR``, else ``../shared/data`` beside the working directory or the
repository); ``path="hub:<dataset id>"`` loads from the Hugging Face Hub instead (``datasets`` is
imported only then). Bad rows raise :class:`DatasetFormatError` naming the file, line, field and
fix, or, with ``on_error="skip"``, are recorded in the returned list's ``errors`` and skipped.

Why one module over 500 lines: the loaders share the row reading, the error records and the
filters; the built-in specs at the end are data, a few lines each.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from prmsearch.benchmarks.grading import gsm8k_gold
from prmsearch.fixes import Arg, attach, fixed, literal
from prmsearch.registry import Registry
from prmsearch.text_lines import numbered_lines

__all__ = [
    "DATA_DIR_ENV",
    "DatasetError",
    "DatasetFormatError",
    "DatasetSpec",
    "OnError",
    "Problem",
    "ProblemList",
    "dataset_names",
    "dataset_spec",
    "default_data_dir",
    "load_dataset",
    "register_dataset",
]

#: Environment variable naming the folder that holds the benchmark JSONL files.
DATA_DIR_ENV = "PRMSEARCH_DATA_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[3]
_HUB_PREFIX = "hub:"
#: The fix every bad-row error offers: skip and record (``--skip-bad-rows`` on the command line).
_SKIP_HINT = ", or pass {} to record bad rows and go on"
_SKIP = Arg("on_error", "'skip'")
#: Where to point a loader at a file (``--dataset-path`` on the command line).
_PATH = Arg("path")


@dataclass(frozen=True)
class Problem:
    """One benchmark problem: a unique ``id``, the ``question``, the gold ``answer`` as a string,
    and ``meta`` (the row's other fields, e.g. MATH ``level`` as an int and ``subject``)."""

    id: str
    question: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("id", "question", "answer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Problem.{name} must be a non-empty string, got {value!r:.80}")
        if not isinstance(self.meta, dict):
            raise ValueError(f"Problem.meta must be a dict, got {type(self.meta).__name__}")


@dataclass(frozen=True)
class DatasetError:
    """One bad row: where it is (``source``, 1-based ``line``), which ``field``, what is wrong and the
    fix. With ``fix_args`` the message is a :mod:`prmsearch.fixes` template, each ``{}`` one of
    them (so the command line can name its flags instead)."""

    source: str
    line: int | None
    field: str | None
    message: str
    fix_args: tuple[Arg, ...] = ()

    def template(self) -> str:
        """The whole line as a template (its fixed parts made literal)."""
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        what = f" field {self.field!r}:" if self.field else ""
        message = self.message if self.fix_args else literal(self.message)
        return f"{literal(where)}:{literal(what)} {message}"

    def __str__(self) -> str:
        return self.template().format(*(a.spelled_for_python() for a in self.fix_args))


class DatasetFormatError(ValueError):
    """A dataset row (or the dataset as a whole) cannot be read; ``record`` says where and why."""

    def __init__(self, record: DatasetError) -> None:
        super().__init__(str(record))
        self.record = record
        attach(self, record.template(), record.fix_args)


def _message_of(error: BaseException) -> tuple[str, tuple[Arg, ...]]:
    """An exception's message as (template, arguments) for a :class:`DatasetError`."""
    template = getattr(error, "fix_template", None)
    if template is not None:
        return template, getattr(error, "fix_args", ())
    return str(error.args[0] if error.args else error), ()


class OnError(enum.Enum):
    """What a loader does with a bad row: raise at once, or record it and go on."""

    RAISE = "raise"
    SKIP = "skip"


class ProblemList(list):
    """A ``list[Problem]`` that also carries the :class:`DatasetError` records of skipped rows."""

    def __init__(self, problems: Iterable[Problem] = (), errors: Sequence[DatasetError] = ()) -> None:
        super().__init__(problems)
        self.errors: list[DatasetError] = list(errors)


@dataclass(frozen=True)
class DatasetSpec:
    """How to read one named dataset.

    ``filename`` is looked up in the data folder; ``question_field`` / ``answer_field`` /
    ``id_field`` name the row fields (no ``id_field``: ids are ``<name>/<0-based line index>``, stable
    when other rows are skipped);
    ``parse_answer`` turns the raw answer field into the gold string (GSM8K: text after ``####``);
    ``split`` is the split the local file holds (None: any); ``other_splits`` names the local files
    of further splits (GSM8K's train split, for labelling and training; its ids are
    ``<name>-<split>/<line>``, so they never collide with the main split's); ``hub_id`` /
    ``hub_config`` / ``hub_split`` say where the Hub copy lives. ``loader(split, limit)``, when
    set, replaces file reading entirely.
    """

    name: str
    description: str
    filename: str | None = None
    question_field: str = "question"
    answer_field: str = "answer"
    id_field: str | None = None
    parse_answer: Callable[[str], str] | None = None
    split: str | None = "test"
    other_splits: tuple[tuple[str, str], ...] = ()
    hub_id: str | None = None
    hub_config: str | None = None
    hub_split: str = "test"
    loader: Callable[[str | None, int | None], list[Problem]] | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"DatasetSpec.name must be letters, digits, '_', '.' or '-', got {self.name!r}")
        for name in ("question_field", "answer_field"):
            if not getattr(self, name):
                raise ValueError(
                    f"DatasetSpec.{name} must be a non-empty string, got {getattr(self, name)!r}"
                )


DATASETS: Registry[DatasetSpec] = Registry(
    "dataset", listing="", hint="For any other JSONL file use {}.",
    hint_args=(Arg("dataset_file", python="'jsonl' with path=... (and the field names)"),),
)


def register_dataset(spec: DatasetSpec, *, overwrite: bool = False) -> None:
    """Make ``spec`` loadable as ``load_dataset(spec.name)``."""
    DATASETS.register(spec.name, spec, spec.description, replace=overwrite)


def dataset_names() -> list[str]:
    """The registered dataset names, sorted."""
    return DATASETS.names()


def dataset_spec(name: str) -> DatasetSpec:
    """The spec registered as ``name``; an unknown name gets an error listing the known ones."""
    return DATASETS.get(name)


# ---------------------------------------------------------------------------------------------
# Locating files
# ---------------------------------------------------------------------------------------------


def default_data_dir() -> Path | None:
    """``$PRMSEARCH_DATA_DIR``, else the first existing ``../shared/data`` beside the working
    directory or the repository root, else None."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    for base in (Path.cwd(), _REPO_ROOT):
        candidate = (base / ".." / "shared" / "data").resolve()
        if candidate.is_dir():
            return candidate
    return None


def _resolve_file(spec: DatasetSpec, path: str | os.PathLike | None) -> Path:
    """The JSONL file to read for ``spec``, with an error that says how to point at it."""
    how = f"pass {{}} (a file or the folder holding it) or set {DATA_DIR_ENV}=/path/to/data"
    where = Arg("path", repr(f"/path/to/{spec.filename or 'file.jsonl'}"))
    if path is None:
        if spec.filename is None:
            raise fixed(ValueError, f"dataset {literal(repr(spec.name))} needs {{}} pointing at a JSONL file",
                        _PATH)
        data_dir = default_data_dir()
        if data_dir is None:
            raise fixed(FileNotFoundError, f"no data folder found for {literal(repr(spec.filename))}: {how}",
                        where)
        file = data_dir / spec.filename
    else:
        file = Path(path).expanduser()
        if file.is_dir():
            if spec.filename is None:
                raise ValueError(f"dataset {spec.name!r} needs a JSONL file, got the folder {str(file)!r}")
            file = file / spec.filename
    if not file.is_file():
        raise fixed(FileNotFoundError, f"dataset {literal(repr(spec.name))}: file {literal(repr(str(file)))} "
                    f"does not exist; {how}", where)
    return file


def _is_hub_path(path: str | os.PathLike | None) -> bool:
    return isinstance(path, str) and path.startswith(_HUB_PREFIX)


# ---------------------------------------------------------------------------------------------
# Reading rows
# ---------------------------------------------------------------------------------------------


def _iter_jsonl(file: Path, errors: list[DatasetError], on_error: OnError) -> Iterator[tuple[int, dict]]:
    """(line number, row) for every non-blank line; a line that is not UTF-8 text or not a JSON
    object is an error of that line."""
    for number, line, problem in numbered_lines(file):
        if line is None:
            message = f"{problem}; save the file as UTF-8, or fix or delete the line"
            _fail(DatasetError(str(file), number, None, literal(message) + _SKIP_HINT, (_SKIP,)), errors,
                  on_error)
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            message = f"malformed JSON ({exc.msg} at column {exc.colno}); fix or delete the line"
            _fail(DatasetError(str(file), number, None, literal(message) + _SKIP_HINT, (_SKIP,)), errors,
                  on_error)
            continue
        if not isinstance(row, dict):
            message = f"expected a JSON object, got {type(row).__name__}; each line must be one {{...}} row"
            _fail(DatasetError(str(file), number, None, literal(message) + _SKIP_HINT, (_SKIP,)), errors,
                  on_error)
            continue
        yield number, row


def _fail(record: DatasetError, errors: list[DatasetError], on_error: OnError) -> None:
    if on_error is OnError.RAISE:
        raise DatasetFormatError(record)
    errors.append(record)


def _text_field(row: Mapping, name: str, argument: str) -> str:
    """A row's field as a string; raises KeyError/ValueError with the fix in the message."""
    if name not in row:
        fields = ", ".join(sorted(map(str, row)))
        raise fixed(KeyError, f"row has no field {literal(repr(name))} (fields: {literal(fields)}); "
                    "pass {}",
                    Arg(argument, "<one of them>"))
    value = row[name]
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise ValueError(f"must be a string or number, got {value!r:.60}")
    text = str(value).strip()
    if not text:
        raise ValueError("is empty")
    return text


def _meta(row: Mapping, skip: set[str]) -> dict[str, Any]:
    """The row's remaining fields; a MATH-style ``level`` ("Level 3") becomes the int 3."""
    meta = {k: v for k, v in row.items() if k not in skip}
    level = meta.get("level")
    if isinstance(level, str):
        match = re.fullmatch(r"(?:Level\s*)?([0-9]+)", level.strip(), re.IGNORECASE)
        if match:
            meta["level"] = int(match.group(1))
    return meta


class _RowOptions(TypedDict):
    """The keyword arguments of `_rows_to_problems` other than ``source``."""

    name: str
    question_field: str
    answer_field: str
    id_field: str | None
    parse_answer: Callable[[str], str] | None
    errors: list[DatasetError]
    on_error: OnError


def _rows_to_problems(
    rows: Iterable[tuple[int, Mapping]],
    *,
    source: str,
    name: str,
    question_field: str,
    answer_field: str,
    id_field: str | None,
    parse_answer: Callable[[str], str] | None,
    errors: list[DatasetError],
    on_error: OnError,
) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    fields = {"question": (question_field, "question_field"), "answer": (answer_field, "answer_field")}
    if id_field is not None:
        fields["id"] = (id_field, "id_field")
    for line, row in rows:
        values: dict[str, str] = {}
        for key, (column, argument) in fields.items():
            try:
                values[key] = _text_field(row, column, argument)
            except (KeyError, ValueError) as exc:
                _fail(DatasetError(source, line, column, *_message_of(exc)), errors, on_error)
                break
        else:
            if parse_answer is not None:
                try:
                    values["answer"] = parse_answer(values["answer"])
                except ValueError as exc:
                    _fail(DatasetError(source, line, answer_field, str(exc)), errors, on_error)
                    continue
            problem_id = values.get("id", f"{name}/{line - 1}")
            if problem_id in seen:
                message = (
                    f"duplicate id {problem_id!r} (first on line {seen[problem_id]}); ids must be unique"
                )
                _fail(DatasetError(source, line, id_field, message), errors, on_error)
                continue
            seen[problem_id] = line
            meta = _meta(row, {question_field, answer_field, *([id_field] if id_field else [])})
            # the other name of the question ("problem" beside "question") is not worth a copy
            meta = {k: v for k, v in meta.items() if v != values["question"]}
            if parse_answer is not None and "solution" not in meta:
                meta["solution"] = row[answer_field]  # e.g. GSM8K's worked solution before '####'
            problems.append(Problem(problem_id, values["question"], values["answer"], meta))
    if not problems and errors:
        first = errors[0]
        raise DatasetFormatError(
            DatasetError(first.source, first.line, first.field,
                         f"no row could be read ({len(errors)} bad); the first: {first.message}",
                         first.fix_args),
        )  # fmt: skip
    return problems


def _hub_rows(hub_id: str, config: str | None, split: str) -> Iterator[tuple[int, Mapping]]:
    """Rows of a Hugging Face Hub dataset (needs network and the ``datasets`` package)."""
    try:
        import datasets as hf_datasets
    except ImportError as exc:
        raise fixed(ImportError, f"loading {literal(repr(hub_id))} from the Hub needs the 'datasets' package "
                    "(pip install datasets), or pass {} pointing at a local JSONL copy", _PATH) from exc
    table = hf_datasets.load_dataset(hub_id, config, split=split)
    yield from enumerate(table, start=1)


# ---------------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------------


def _normalise_levels(levels: Iterable[int | str] | int | str) -> set[int]:
    if isinstance(levels, (int, str)):
        levels = [levels]
    levels = list(levels)
    if not levels:
        raise ValueError(
            "levels must name at least one level (1..5), got an empty collection; pass None for all"
        )
    wanted: set[int] = set()
    for level in levels:
        match = re.fullmatch(r"(?:Level\s*)?([1-5])", str(level).strip(), re.IGNORECASE)
        if isinstance(level, bool) or match is None:
            raise ValueError(f"levels must be 1..5 or 'Level 1'..'Level 5', got {level!r}")
        wanted.add(int(match.group(1)))
    return wanted


def _filter_meta(problems: list[Problem], key: str, keep: Callable[[Any], bool], name: str) -> list[Problem]:
    missing = [p.id for p in problems if key not in p.meta]
    if missing:
        raise ValueError(
            f"dataset {name!r} has no {key!r} field (e.g. problem {missing[0]!r}); drop the {key} filter"
        )
    return [p for p in problems if keep(p.meta[key])]


def _apply_filters(
    problems: list[Problem],
    name: str,
    levels: Iterable[int | str] | int | str | None,
    subjects: Iterable[str] | str | None,
    shuffle_seed: int | None,
    limit: int | None,
) -> list[Problem]:
    if levels is not None:
        wanted = _normalise_levels(levels)
        problems = _filter_meta(problems, "level", lambda v: v in wanted, name)
    if subjects is not None:
        subjects = [subjects] if isinstance(subjects, str) else list(subjects)
        if not subjects:
            raise ValueError(
                "subjects must name at least one subject, got an empty collection; pass None for all"
            )
        wanted_subjects = {s.strip().lower() for s in subjects}
        known = {str(p.meta.get("subject", "")).lower() for p in problems}
        unknown = sorted(wanted_subjects - known)
        if unknown and "subject" in (problems[0].meta if problems else {}):
            raise ValueError(
                f"subjects {unknown} not in dataset {name!r}; known: "
                f"{', '.join(sorted({str(p.meta['subject']) for p in problems}))}"
            )
        problems = _filter_meta(problems, "subject", lambda v: str(v).lower() in wanted_subjects, name)
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(problems))
        problems = [problems[i] for i in order]
    if limit is not None:
        problems = problems[:limit]
    return problems


# ---------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------


def load_dataset(
    name: str,
    path: str | os.PathLike | None = None,
    *,
    split: str | None = None,
    limit: int | None = None,
    shuffle_seed: int | None = None,
    levels: Iterable[int | str] | int | str | None = None,
    subjects: Iterable[str] | str | None = None,
    question_field: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
    on_error: OnError | str = OnError.RAISE,
) -> ProblemList:
    """Problems of dataset ``name`` (see :func:`dataset_names`), filtered, shuffled, then cut.

    ``path``: a JSONL file, a folder holding the dataset's file, ``"hub:<id>"`` for the Hugging
    Face Hub (``"hub:"`` alone: the spec's default id), or None for the data folder. ``split``:
    the Hub split (a local file holds ``spec.split`` only); for ``arith``, the split to generate.
    ``levels`` (1..5 or "Level 3") and ``subjects`` filter MATH problems; ``shuffle_seed`` shuffles
    deterministically before ``limit`` keeps the first problems. ``*_field`` override the row
    field names. ``on_error="skip"`` records bad rows in the result's ``errors`` and goes on.
    """
    spec = dataset_spec(name)
    try:
        mode = OnError(on_error) if not isinstance(on_error, OnError) else on_error
    except ValueError:
        raise ValueError(f"on_error must be one of {[m.value for m in OnError]}, got {on_error!r}") from None
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    if shuffle_seed is not None and (isinstance(shuffle_seed, bool) or not isinstance(shuffle_seed, int)):
        raise ValueError(f"shuffle_seed must be an int or None, got {shuffle_seed!r}")

    errors: list[DatasetError] = []
    if spec.loader is not None:
        problems = spec.loader(split, limit if shuffle_seed is None and not (levels or subjects) else None)
    else:
        options: _RowOptions = dict(
            name=spec.name,
            question_field=question_field or spec.question_field,
            answer_field=answer_field or spec.answer_field,
            id_field=id_field or spec.id_field,
            parse_answer=spec.parse_answer,
            errors=errors,
            on_error=mode,
        )
        if _is_hub_path(path):
            hub_id = str(path)[len(_HUB_PREFIX) :] or spec.hub_id
            if not hub_id:
                raise fixed(ValueError, f"dataset {literal(repr(spec.name))} has no default Hub id; "
                            "pass {}",
                            Arg("path", "'hub:<owner>/<name>'"))
            hub_split = split or spec.hub_split
            source = f"hub:{hub_id}[{hub_split}]"
            config = spec.hub_config if hub_id == spec.hub_id else None
            problems = _rows_to_problems(_hub_rows(hub_id, config, hub_split), source=source, **options)
        else:
            local = dict(spec.other_splits)
            if split is not None and split in local:
                spec = replace(spec, filename=local[split], split=split)
                options["name"] = f"{spec.name}-{split}"
            elif split is not None and spec.split is not None and split != spec.split:
                known = ", ".join(repr(s) for s in (spec.split, *local))
                raise fixed(ValueError, f"the local {literal(repr(spec.name))} files hold the "
                            f"{literal(known)} "
                            "split(s), got {}; pass {} to load other splits from the Hub",
                            Arg("split", repr(split)), Arg("path", repr(f"hub:{spec.hub_id or '<id>'}")))
            file = _resolve_file(spec, path)
            rows = _iter_jsonl(file, errors, mode)
            problems = _rows_to_problems(rows, source=str(file), **options)
    return ProblemList(_apply_filters(problems, spec.name, levels, subjects, shuffle_seed, limit), errors)


def _load_arith(split: str | None, limit: int | None) -> list[Problem]:
    """The built-in arithmetic split (``test`` by default; ``train`` needs ``limit``)."""
    try:
        from prmsearch.arith.problems import load_split
    except ImportError as exc:
        raise ImportError(
            f"dataset 'arith' needs prmsearch.arith.problems.load_split, which failed to import: {exc}"
        ) from exc
    split = split or "test"
    if split == "train" and limit is None:
        raise fixed(ValueError, "dataset 'arith' split 'train' is unbounded; pass {} (without filters)",
                    Arg("limit", "N"))
    return [
        Problem(str(p.id), str(p.question), str(p.answer), {"split": split})
        for p in load_split(split, limit if split == "train" else None)
    ]


def _load_arith_phrased(split: str | None, limit: int | None) -> list[Problem]:
    """The arithmetic ``test``/``validation`` problems in phrasings the policy never trained on."""
    from prmsearch.arith.phrasing import phrased_split

    split = split or "test"
    if split not in ("test", "validation"):
        raise ValueError(f"dataset 'arith-phrased' has splits 'test' and 'validation', got {split!r}")
    return [
        Problem(str(p.id), str(p.question), str(p.answer), {"split": split, "phrasing": "heldout"})
        for p in phrased_split(split, "heldout")
    ]


for _spec in (
    DatasetSpec(
        "math500", "MATH-500 (Lightman et al.), 500 MATH test problems with level and subject",
        filename="math500.jsonl", question_field="problem", id_field="unique_id",
        hub_id="HuggingFaceH4/MATH-500", hub_split="test",
    ),
    DatasetSpec(
        "gsm8k", "GSM8K test split (Cobbe et al.); gold = the number after '####'",
        filename="gsm8k_test.jsonl", parse_answer=gsm8k_gold,
        other_splits=(("train", "gsm8k_train.jsonl"),),
        hub_id="openai/gsm8k", hub_config="main", hub_split="test",
    ),
    DatasetSpec(
        "aime24", "AIME 2024 I and II, 30 problems with integer answers",
        filename="aime24.jsonl", question_field="problem", id_field="id",
        hub_id="HuggingFaceH4/aime_2024", hub_split="train",
    ),
    DatasetSpec(
        "amc23", "AMC 2023, 40 problems (answers as floats, e.g. '27.0')",
        filename="amc23.jsonl", question_field="question", id_field="id",
        hub_id="math-ai/amc23", hub_split="test",
    ),
    DatasetSpec("jsonl", "any JSONL file: pass path=... and the field names", split=None),
    DatasetSpec("arith", "the built-in step-checkable arithmetic problems", loader=_load_arith),
    DatasetSpec(
        "arith-phrased", "the arith problems in held-out phrasings ('Next, double it.')",
        loader=_load_arith_phrased,
    ),
):  # fmt: skip
    register_dataset(_spec)
