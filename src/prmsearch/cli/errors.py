"""One-line command-line errors (:class:`FlagError`, :func:`cli_text`) and the argparse value types."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prmsearch.fixes import PLACEHOLDER, Arg, spelled


class FlagError(ValueError):
    """A bad command-line value, as one line: the flag, the value, what is wrong and the fix."""

    def __init__(self, flag: str, value: object, problem: str) -> None:
        shown = f" {value!r}" if value is not None else ""
        super().__init__(f"{flag}{shown}: {_one_line(problem)}")
        self.flag = flag
        self.value = value


def _one_line(text: str, limit: int = 600) -> str:
    """``text`` with its whitespace runs (newlines included) folded to single spaces, cut short."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _flag_for(arg: Arg) -> str | None:
    """The flag that does what a library fix's keyword argument does (None: keep the Python
    spelling). The library's errors carry their fixes as :class:`~prmsearch.fixes.Arg` data, so
    nothing here reads message text."""
    filled = arg.value != PLACEHOLDER
    if arg.name == "on_error":
        return "--skip-bad-rows"
    if arg.name == "set_aside_damaged":
        return "--resume --set-aside-damaged (and the run's other flags)"
    if arg.name == "dataset_file":
        return "--dataset FILE.jsonl (and --question-field/--answer-field for other field names)"
    if arg.name in ("question_field", "answer_field", "id_field"):
        return f"--{arg.name.replace('_', '-')} {arg.value}"
    if arg.name == "path":
        return f"--dataset-path {arg.value.strip(chr(39)) if filled else 'FILE.jsonl'}"
    if arg.name in ("split", "limit", "shuffle_seed"):
        return f"--{arg.name.replace('_', '-')} {arg.value.strip(chr(39)) if filled else 'N'}"
    return None


def cli_text(error: BaseException | str) -> str:
    """An error message for the command line: one line, with the Python-API fixes that library
    errors carry (``pass on_error='skip'``, ``path=...``) spelled as the matching flags."""
    if isinstance(error, BaseException) and (flagged := spelled(error, _flag_for)) is not None:
        return _one_line(flagged)
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    if isinstance(error, FileNotFoundError) and error.filename and error.strerror is not None:
        text = f"{error.strerror}: {error.filename}"
    return _one_line(text)


#: What a flag's value can raise when it is bad (a backend that cannot load raises OSError, a
#: factory missing an argument TypeError, a missing extra ImportError).
_BAD_VALUE = (ValueError, KeyError, TypeError, OSError, ImportError)


@contextmanager
def flag_context(flag: str, value: object, fix: str = "") -> Iterator[None]:
    """Turn a bad-value error raised inside into a :class:`FlagError` for ``flag``, with ``fix``
    appended when given."""
    try:
        yield
    except FlagError:
        raise
    except _BAD_VALUE as exc:
        raise FlagError(flag, value, cli_text(exc) + (f"; {fix}" if fix else "")) from exc


def config_from_flags(cls: Callable[..., Any], values: Mapping[str, Any],
                      flags: Mapping[str, str] | None = None) -> Any:
    """``cls(**values)`` for a frozen config; its ValueError (which starts with the field's name)
    becomes a FlagError naming that field's flag: ``flags[field]``, else ``--field-name``."""
    try:
        return cls(**values)
    except ValueError as exc:
        field = next((f for f in values if str(exc).startswith(f)), next(iter(values)))
        flag = (flags or {}).get(field, f"--{field.replace('_', '-')}")
        raise FlagError(flag, values[field], str(exc)) from None


class CliParser(argparse.ArgumentParser):
    """argparse with one-line errors that point at ``--help`` (not the whole usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see `{self.prog} --help`)\n")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an int >= {low}, got {value}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


def option_type(form: str) -> Callable[[str], tuple[str, object]]:
    """An argparse type for ``-o``: ``key=value`` with the value read as JSON when it parses
    (numbers, booleans), else text; ``form`` (e.g. ``KEY=VALUE (e.g. width=4)``) goes into the error."""

    def parse(text: str) -> tuple[str, object]:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"strategy options look like {form}, got {text!r}")
        try:
            return key, json.loads(value)
        except json.JSONDecodeError:
            return key, value

    return parse


def csv_of(kind: Callable[[str], Any], what: str, example: str) -> Callable[[str], tuple]:
    """An argparse type: a non-empty comma-separated list of ``kind`` values (``what`` and
    ``example`` go into the error)."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(x.strip()) for x in text.split(",") if x.strip())
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {what}, e.g. {example}, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected at least one of {what}, e.g. {example}, got {text!r}")
        return values

    return parse


def _unescape(text: str) -> str:
    """Let shell users write the delimiter as ``\\n\\n``."""
    if "\\" not in text:
        return text
    with flag_context("--delimiter", text, "write escapes as \\n or \\t, e.g. --delimiter '\\n\\n'"):
        return text.encode("utf-8").decode("unicode_escape")
