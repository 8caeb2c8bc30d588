"""The exact checker on gold, corrupted and garbage solutions."""

import pytest

from prmsearch.arith.checker import check_solution
from prmsearch.arith.problems import load_split

PROBLEMS = load_split("validation", 50)


@pytest.mark.parametrize("problem", PROBLEMS[:20], ids=lambda p: p.id)
def test_gold_has_no_error(problem):
    result = check_solution(problem, problem.gold_steps)
    assert result.first_error == -1
    assert result.answer_correct and result.answer == problem.answer


def _long():
    return next(p for p in PROBLEMS if len(p.ops) >= 5)


def test_wrong_arithmetic_is_first_error():
    p = _long()
    steps = list(p.gold_steps)
    a, rest = steps[2].split(" = ")
    steps[2] = f"{a} = {int(rest.split('.')[0]) + 1}"
    assert check_solution(p, steps).first_error == 2


def test_skipped_operation_is_an_error():
    p = _long()
    steps = list(p.gold_steps)
    del steps[1]
    assert check_solution(p, steps).first_error == 1


def test_wrong_operand_or_operator_is_an_error():
    p = _long()
    steps = list(p.gold_steps)
    a, sym, b, _, c = steps[3].split(" ")[:5]
    steps[3] = f"{a} {sym} {int(b) + 1} = {c}"
    assert check_solution(p, steps).first_error == 3
    steps = list(p.gold_steps)
    steps[3] = steps[3].replace(f" {sym} ", " + " if sym != "+" else " - ", 1)
    assert check_solution(p, steps).first_error == 3


def test_wrong_value_carried_is_an_error():
    p = _long()
    steps = list(p.gold_steps)
    a, _ = steps[1].split(" ", 1)
    steps[1] = steps[1].replace(a, str(int(a) + 1), 1)  # arithmetic may be right, but not the value
    assert check_solution(p, steps).first_error == 1


def test_early_answer_and_trailing_steps_are_errors():
    p = _long()
    early = [*p.gold_steps[:1], p.gold_steps[1] + ". The answer is \\boxed{3}"]
    assert check_solution(p, early).first_error == 1
    assert check_solution(p, [*p.gold_steps, "1 + 1 = 2"]).first_error == len(p.gold_steps)


def test_partial_prefix_and_separate_answer_step():
    p = _long()
    prefix = check_solution(p, p.gold_steps[:2])
    assert prefix.first_error == -1 and not prefix.answer_correct and prefix.answer is None
    last = p.gold_steps[-1].split(".")[0]
    split = [*p.gold_steps[:-1], last, f"The answer is \\boxed{{{p.answer}}}"]
    assert check_solution(p, split) == check_solution(p, p.gold_steps)


def test_wrong_final_answer():
    p = _long()
    steps = [*p.gold_steps[:-1], p.gold_steps[-1].replace(f"{{{p.answer}}}", "{0}")]
    result = check_solution(p, steps)
    assert result.first_error == len(steps) - 1
    assert not result.answer_correct and result.answer == 0


@pytest.mark.parametrize(
    "steps",
    [
        ["garbage"],
        [""],
        ["\\boxed{"],
        ["1 + = 2"],
        ["99999999999999999999 + 1 = 2"],
        ["\x00\uffff"],
        [None],
        [3.5],
        "not a list",
        ["12 / 0 = 0"],
    ],
)
def test_garbage_is_a_wrong_step_never_an_exception(steps):
    result = check_solution(PROBLEMS[0], steps)
    assert result.first_error == 0
    assert not result.answer_correct
