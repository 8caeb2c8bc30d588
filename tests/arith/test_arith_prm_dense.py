"""Dense per-token PRM targets: where the first wrong character is, and which tokens get 0."""

from __future__ import annotations

import pytest

from prmsearch.arith.problems import load_split
from training.arith.dense_targets import dense_targets, first_wrong_offset
from training.arith.labels import checker_labels

PROBLEM = load_split("test", 1)[0]  # 12 * 2 = 24 | 24 - 5 = 19 | 19 + 13 = 32 (boxed)
GOLD = PROBLEM.gold_steps
SEP = "<extra_0>"


@pytest.fixture(scope="module")
def fmt():
    from transformers import AutoTokenizer

    from prmsearch.arith.models import default_policy_path
    from prmsearch.scorers.formats import QwenPRMFormat

    return QwenPRMFormat(AutoTokenizer.from_pretrained(str(default_policy_path())))


def test_a_right_solution_has_no_wrong_offset():
    assert first_wrong_offset(PROBLEM, GOLD, -1, SEP) is None


def test_the_offset_is_the_first_character_that_differs_from_the_gold_step():
    steps = (GOLD[0], "24 - 5 = 18", "18 + 13 = 31. The answer is \\boxed{31}")
    first, _, _ = checker_labels(PROBLEM, steps)
    offset = first_wrong_offset(PROBLEM, steps, first, SEP)
    content = SEP.join(steps) + SEP
    assert first == 1
    assert content[offset:].startswith("8" + SEP)
    assert content[:offset] == GOLD[0] + SEP + "24 - 5 = 1"


def test_a_step_cut_short_is_wrong_from_the_separator_after_it():
    steps = (GOLD[0], "24 - 5 = 1")
    offset = first_wrong_offset(PROBLEM, steps, 1, SEP)
    assert (SEP.join(steps) + SEP)[offset:] == SEP


def test_a_step_after_the_last_operation_is_wrong_from_its_start():
    steps = (*GOLD, "32")
    offset = first_wrong_offset(PROBLEM, steps, 3, SEP)
    assert (SEP.join(steps) + SEP)[offset:] == "32" + SEP
    with pytest.raises(ValueError, match="past the last"):
        first_wrong_offset(PROBLEM, GOLD, 3, SEP)


def test_dense_targets_agree_with_the_step_labels_at_the_separators(fmt):
    steps = (GOLD[0], "24 - 5 = 18", "18 + 13 = 31. The answer is \\boxed{31}")
    first, _, labels = checker_labels(PROBLEM, steps)
    dense = dense_targets(fmt, PROBLEM.question, steps, first_wrong_offset(PROBLEM, steps, first, SEP))
    encoded = fmt.encode(PROBLEM.question, steps)
    assert dense.ids == encoded.ids
    by_position = dict(zip(dense.positions, dense.targets))
    assert [by_position[p] for p in encoded.positions] == list(labels)
    # the targets switch from 1 to 0 once, at the token holding the wrong digit "8"
    switch = dense.targets.index(0.0)
    assert all(t == 1.0 for t in dense.targets[:switch]) and all(t == 0.0 for t in dense.targets[switch:])
    assert fmt.tokenizer.decode([dense.ids[dense.positions[switch]]]) == "8"
    assert fmt.tokenizer.decode([dense.ids[dense.positions[switch - 1]]]) == "1"
    # only the assistant turn is labelled: nothing of the question
    assert dense.positions[0] > encoded.ids.index(fmt.tokenizer.convert_tokens_to_ids("<|im_start|>"))


def test_a_right_solution_is_labelled_one_everywhere(fmt):
    dense = dense_targets(fmt, PROBLEM.question, GOLD, None)
    assert set(dense.targets) == {1.0}
    text = fmt.tokenizer.decode([dense.ids[p] for p in dense.positions])
    assert text == SEP.join(GOLD) + SEP


def test_step_arithmetic_judges_a_step_on_its_own_operands():
    from prmsearch.arith.checker import step_arithmetic

    wrong = step_arithmetic("24 - 5 = 18")
    assert (wrong.written, wrong.exact, wrong.right) == ("18", 19, False)
    assert "24 - 5 = 18"[slice(*wrong.result_span)] == "18"
    assert step_arithmetic("18 + 13 = 31. The answer is \\boxed{31}").right  # right from a wrong 18
    assert step_arithmetic("7 / 2 = 3").exact is None and not step_arithmetic("7 / 2 = 3").right
    assert step_arithmetic("The answer is \\boxed{3}") is None


def test_local_targets_label_result_digits_by_their_own_arithmetic(fmt):
    from training.arith.dense_targets import local_targets

    steps = (GOLD[0], "24 - 5 = 18", "18 + 13 = 31. The answer is \\boxed{31}")
    dense = local_targets(fmt, PROBLEM.question, steps)
    digits = [fmt.tokenizer.decode([dense.ids[p]]) for p in dense.positions]
    assert digits == ["2", "4", "1", "8", "3", "1"]  # the results only, not operands or the box
    # "18" for 19: the "1" is right, the "8" wrong; the last step computes right from 18
    assert dense.targets == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def test_corrupted_gold_with_a_step_error_rate_has_several_wrong_results():
    import numpy as np

    from prmsearch.arith.checker import step_arithmetic
    from training.arith.labels import corrupted_gold

    problems = load_split("train", 200)
    solutions = corrupted_gold(problems, np.random.default_rng(0), step_error_rate=0.3)
    wrong = [sum(not step_arithmetic(s).right for s in sol.steps) for sol in solutions]
    assert max(wrong) >= 3 and 0.2 < sum(wrong) / sum(len(s.steps) for s in solutions) < 0.4
    for sol, problem in zip(solutions, problems):
        first, _, labels = checker_labels(problem, sol.steps)
        assert sol.first_error == first and sol.checker == labels


def test_step_targets_mark_the_wrong_part_of_each_step(fmt):
    """Every part of a step is judged locally: the value it starts from against the previous
    written result, the operation and the operand against the problem's, the result against the
    step's own arithmetic. A wrong operand with a right result for it marks only the operand."""
    from training.arith.dense_targets import step_targets

    # 12 * 2 = 24 | 24 - 5 = 19 | 19 + 13 = 32: step 1 subtracts 6 (its result right for 6),
    # step 2 adds where the problem adds, from the written 18: right locally
    steps = (GOLD[0], "24 - 6 = 18", "18 + 13 = 31. The answer is \\boxed{31}")
    dense = step_targets(fmt, PROBLEM, steps)
    tokens = [fmt.tokenizer.decode([dense.ids[p]]).strip() for p in dense.positions]
    assert "".join(tokens) == "12*224" + "24-618" + "18+1331"  # values, operations, operands, results
    wrong = [t for t, y in zip(tokens, dense.targets) if y == 0.0]
    assert wrong == ["6"]

    # a wrong operation, and a step that starts from another value than the one written before
    steps = (GOLD[0], "24 + 5 = 29", "30 + 13 = 43. The answer is \\boxed{43}")
    dense = step_targets(fmt, PROBLEM, steps)
    decoded = [fmt.tokenizer.decode([dense.ids[p]]).strip() for p in dense.positions]
    labelled = list(zip(decoded, dense.targets))
    assert labelled[6:12] == [("2", 1.0), ("4", 1.0), ("+", 0.0), ("5", 1.0), ("2", 1.0), ("9", 1.0)]
    assert labelled[12:14] == [("3", 0.0), ("0", 0.0)]  # 30 where 29 was written: wrong from the "3"
    assert all(y == 1.0 for _, y in labelled[:6])  # the first step is right


def test_corrupted_gold_of_every_kind_has_operand_and_operation_errors():
    import numpy as np

    from prmsearch.arith.checker import step_arithmetic
    from training.arith.labels import corrupted_gold

    problems = load_split("train", 200)
    solutions = corrupted_gold(problems, np.random.default_rng(0), step_error_rate=0.3, results_only=False)
    kinds = {"result": 0, "operation": 0, "operand": 0}
    for sol, problem in zip(solutions, problems):
        for step, op in zip(sol.steps, problem.ops):
            arithmetic = step_arithmetic(step)
            kinds["result"] += not arithmetic.right
            kinds["operation"] += arithmetic.symbol != op.symbol
            kinds["operand"] += arithmetic.symbol == op.symbol and arithmetic.operand != op.operand
        first, _, labels = checker_labels(problem, sol.steps)
        assert sol.first_error == first and sol.checker == labels
    assert all(count >= 50 for count in kinds.values()), kinds


def test_training_examples_carry_step_targets(fmt):
    """``dense_mode="steps"``: the training examples hold the step targets of every solution."""
    import numpy as np

    from training.arith.dense_targets import step_targets
    from training.arith.labels import corrupted_gold
    from training.arith.prm_train import PRMTrainConfig, encode_examples

    problems = load_split("train", 5)
    solutions = corrupted_gold(problems, np.random.default_rng(1), step_error_rate=0.5, results_only=False)
    examples = encode_examples(fmt, solutions, "checker", {p.id: p for p in problems}, dense_mode="steps")
    for example, sol, problem in zip(examples, solutions, problems):
        expected = step_targets(fmt, problem, sol.steps)
        assert list(example.dense_positions) == expected.positions
        assert list(example.dense_targets) == expected.targets
    assert any(0.0 in e.dense_targets for e in examples)
    with pytest.raises(ValueError, match="dense_mode must be one of"):
        PRMTrainConfig(dense_mode="everywhere")
