"""The arithmetic reference scorers (exact-checker oracle, policy confidence) and synthetic
error data for PRM training."""

from __future__ import annotations

import numpy as np
import pytest

from prmsearch.arith.oracle import CheckerScorer, parse_question
from prmsearch.arith.problems import load_split
from prmsearch.scorers.base import ScoreRequest
from training.arith.labels import corrupted_gold

PROBLEMS = load_split("test", 40)


def test_questions_parse_back_into_their_problems():
    for problem in PROBLEMS:
        parsed = parse_question(problem.question)
        assert parsed.ops == problem.ops and parsed.answer == problem.answer
    assert parse_question("What is 2 + 2?") is None


def test_checker_scorer_is_one_until_the_first_error():
    problem = PROBLEMS[0]
    gold = problem.gold_steps
    wrong = (gold[0], "24 - 5 = 18", "18 + 13 = 31. The answer is \\boxed{31}")
    good, bad = CheckerScorer().score(
        [ScoreRequest(problem.question, gold), ScoreRequest(problem.question, wrong)]
    )
    assert good.scores.tolist() == [1.0, 1.0, 1.0]
    assert bad.scores.tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="only knows arithmetic"):
        CheckerScorer().score([ScoreRequest("Prove Fermat.", ("x",))])


def test_corrupted_gold_has_one_first_error_and_consistent_labels():
    solutions = corrupted_gold(PROBLEMS, np.random.default_rng(0), clean_fraction=0.25)
    clean = [s for s in solutions if s.first_error == -1]
    assert 0 < len(clean) < len(solutions)
    for sol in solutions:
        labels = sol.labels("checker")
        if sol.first_error == -1:
            assert all(y == 1.0 for y in labels) and sol.answer_correct
        else:
            assert labels[: sol.first_error] == [1.0] * sol.first_error
            assert labels[sol.first_error :] == [0.0] * (len(labels) - sol.first_error)
    with pytest.raises(ValueError, match="no MC labels"):
        solutions[0].labels("mc")


@pytest.mark.slow
def test_policy_confidence_flags_a_wrong_step():
    from prmsearch.arith.models import default_policy_path
    from prmsearch.scorers.confidence import policy_confidence

    scorer = policy_confidence(str(default_policy_path()), device="cpu", aggregation="min")
    problem = PROBLEMS[0]
    gold = problem.gold_steps
    wrong = (gold[0], "24 - 5 = 18", "18 + 13 = 31. The answer is \\boxed{31}")
    good, bad = scorer.score([ScoreRequest(problem.question, gold), ScoreRequest(problem.question, wrong)])
    assert len(good.scores) == 3 and np.all((good.scores >= 0) & (good.scores <= 1))
    assert bad.scores[1] < 0.1 < good.scores[1]
    assert np.all(np.diff(good.scores) <= 0)  # a running minimum never rises
