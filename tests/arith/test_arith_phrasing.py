"""Phrasings of the arithmetic questions: the two banks, rendering, parsing, and where they are read
(the oracle, the domain note, the `arith-phrased` dataset, the policy's training mix)."""

import re

import pytest

from prmsearch.arith.phrasing import (
    ALWAYS_TRAINED,
    BANKS,
    HELDOUT_BANK,
    TRAIN_BANK,
    parse_phrased,
    phrased_problem,
    phrased_split,
)
from prmsearch.arith.problems import Op, load_split


def _sentences(question: str) -> list[str]:
    return re.findall(r"[^.?]+[.?]", question)


def test_banks_split_the_sentence_forms_without_overlap():
    train = {f.key for f in TRAIN_BANK.sentences}
    heldout = {f.key for f in HELDOUT_BANK.sentences}
    assert train and heldout and not train & heldout
    assert train >= ALWAYS_TRAINED
    assert {"|Add {k}|", "|Subtract {k}|", "|Multiply by {k}|", "|Divide by {k}|"} <= train
    assert not set(TRAIN_BANK.starts) & set(HELDOUT_BANK.starts)
    assert not set(TRAIN_BANK.ends) & set(HELDOUT_BANK.ends)
    assert 0.15 < len(heldout) / (len(train) + len(heldout)) < 0.35


def test_heldout_questions_use_no_sentence_the_policy_trained_on():
    trained = set(TRAIN_BANK.starts) | set(TRAIN_BANK.ends)
    for problem in load_split("validation", 60):
        for op in problem.ops:
            trained |= {form.render(op.operand) for form in TRAIN_BANK.sentences if form.op.fits(op)}
    for problem in phrased_split("validation", "heldout", 60):
        sentences = [s.strip() for s in _sentences(problem.question)]
        sentences[0] = re.sub(r"\d+", "{n}", sentences[0])
        assert not set(sentences) & trained, problem.question


def test_rendering_is_deterministic_and_keeps_the_problem():
    problem = load_split("test", 1)[0]
    first = phrased_problem(problem, TRAIN_BANK)
    assert first == phrased_problem(problem, TRAIN_BANK)
    assert first.question != problem.question
    assert (first.id, first.answer, first.ops, first.gold_steps) == (
        problem.id,
        problem.answer,
        problem.ops,
        problem.gold_steps,
    )
    salted = [phrased_problem(p, TRAIN_BANK, salt="x").question for p in load_split("test", 20)]
    assert salted != [phrased_problem(p, TRAIN_BANK).question for p in load_split("test", 20)]


@pytest.mark.parametrize("bank", sorted(BANKS))
def test_parse_reads_back_every_rendered_question(bank):
    for problem in phrased_split("validation", bank):
        parsed = parse_phrased(problem.question)
        assert parsed is not None, problem.question
        assert (parsed.start, parsed.ops) == (problem.start, problem.ops)


def test_parse_reads_canonical_questions():
    for problem in load_split("test", 50):
        parsed = parse_phrased(problem.question)
        assert parsed is not None and parsed.canonical == problem.question


@pytest.mark.parametrize(
    ("question", "start", "ops"),
    [
        ("Start with 5. Double it. Take away 3. What do you get?", 5, [("*", 2), ("-", 3)]),
        ("start with 5, double it and then take away 3. what do you get?", 5, [("*", 2), ("-", 3)]),
        ("  Begin with 8.  Next, halve it.   Now triple that. What is the answer? ", 8, [("/", 2), ("*", 3)]),
        ("You have 6. Then divide that by 3; add 4 to it! What is the result now?", 6, [("/", 3), ("+", 4)]),
        ("start with 5, double it, take away 3, add 4. what do you get", 5,
         [("*", 2), ("-", 3), ("+", 4)]),
        ("Take 9. After that, decrease the result by 2. Times 4. What is the result?", 9,
         [("-", 2), ("*", 4)]),
    ],
)
def test_parse_accepts_what_users_type(question, start, ops):
    parsed = parse_phrased(question)
    assert parsed is not None
    assert parsed.start == start and parsed.ops == tuple(Op(s, k) for s, k in ops)


@pytest.mark.parametrize(
    "question",
    [
        "What is 2 + 2?",
        "Start with 5. Double it. Take away 3.",  # no closing question
        "Start with 5. Double it. Take away 3. What do you get. Add 1?",  # the question is not last
        "Start with 5. Square it. Add 3. What do you get?",  # an operation the domain lacks
        "Start with 5. Double it. Take away 3. What is the meaning of life?",
        "Double it. Start with 5. Add 1. What do you get?",
        "",
    ],
)
def test_parse_rejects_other_questions(question):
    assert parse_phrased(question) is None


def test_oracle_and_domain_note_read_phrasings():
    from prmsearch.arith.defaults import domain_note
    from prmsearch.arith.oracle import CheckerScorer, parse_question
    from prmsearch.scorers.base import ScoreRequest

    for problem in phrased_split("test", "heldout", 20):
        parsed = parse_question(problem.question)
        assert parsed is not None and parsed.answer == problem.answer
        assert domain_note(problem.question) is None
        scores = CheckerScorer().score([ScoreRequest(problem.question, list(problem.gold_steps))])[0]
        assert list(scores.scores) == [1.0] * len(problem.gold_steps)
    assert domain_note("Start with 5. Double it. Take away 3. What do you get?")  # 2 operations
    assert domain_note("Start with 5. Double it. Take away 3. Add 1. What do you get?") is None
    assert parse_question("Start with 5. Divide by 2. Add 1. What do you get?") is None  # inexact


def test_arith_phrased_dataset_has_the_test_answers_in_heldout_phrasings():
    from prmsearch.benchmarks.datasets import load_dataset

    phrased = load_dataset("arith-phrased")
    plain = load_dataset("arith")
    assert [p.id for p in phrased] == [p.id for p in plain]
    assert [p.answer for p in phrased] == [p.answer for p in plain]
    assert all(a.question != b.question for a, b in zip(phrased, plain, strict=True))
    with pytest.raises(ValueError, match="'test' and 'validation'"):
        load_dataset("arith-phrased", split="train")


def test_training_mix_is_a_stable_share():
    from training.arith.policy_train import (
        TrainConfig,
        build_config,
        train_command,
        training_problems,
    )

    canonical = load_split("train", 400)
    mixed = training_problems(400, 0.5)
    changed = [a.question != b.question for a, b in zip(mixed, canonical, strict=True)]
    assert 0.4 < sum(changed) / 400 < 0.6
    assert training_problems(100, 0.5) == mixed[:100]  # the choice does not depend on n
    assert training_problems(50) == canonical[:50]
    with pytest.raises(ValueError, match="phrased"):
        TrainConfig(phrased=1.5)
    cfg = build_config(steps=700, lr_horizon=1000, seed=0, phrased=0.5, vocab_size=256)
    flags = "--steps 700 --lr-horizon 1000 --seed 0 --phrased 0.5 --vocab-size 256"
    assert train_command(cfg, "d").endswith(flags)


def test_policy_eval_rejects_an_unknown_phrasing():
    from training.arith.policy_eval import EvalConfig

    assert EvalConfig(phrasing="heldout").phrasing == "heldout"
    with pytest.raises(ValueError, match="phrasing must be one of"):
        EvalConfig(phrasing="pirate")


def test_phrased_tokenizer_keeps_every_printable_character():
    pytest.importorskip("tokenizers")
    from prmsearch.arith.tokenizer import DELIMITER, PHRASED_VOCAB_SIZE, train_tokenizer

    tok = train_tokenizer(PHRASED_VOCAB_SIZE, phrased=True)
    assert tok.get_vocab_size() == PHRASED_VOCAB_SIZE
    text = "Square it! (x^2) #3 @ ~`|<>[]_\"' & Kg%."
    assert tok.decode(tok.encode(text).ids) == text
    assert len(tok.encode(DELIMITER).ids) == 1
    question = phrased_split("test", "heldout", 1)[0].question
    assert tok.decode(tok.encode(question).ids) == question


class _RecordingScorer:
    """Records the questions it is asked about; every step scores 0.5."""

    num_parameters = 7
    cost = "the wrapped cost"

    def __init__(self):
        self.questions = []

    def score(self, requests):
        import numpy as np

        from prmsearch.scorers.base import StepScores

        self.questions += [r.question for r in requests]
        return [StepScores(np.full(len(r.steps), 0.5)) for r in requests]


def test_the_shipped_prm_reads_phrased_questions_in_canonical_form():
    import pickle

    from prmsearch.arith.defaults import CanonicalQuestions
    from prmsearch.scorers.base import ScoreRequest

    inner = _RecordingScorer()
    scorer = CanonicalQuestions(inner)
    problem = phrased_split("test", "heldout", 1)[0]
    plain = load_split("test", 1)[0]
    out = scorer.score(
        [ScoreRequest(problem.question, ("a",)), ScoreRequest("What is love?", ("b", "c"))]
    )
    assert inner.questions == [plain.question, "What is love?"]
    assert [len(r.scores) for r in out] == [1, 2]
    assert scorer.num_parameters == 7 and scorer.cost == "the wrapped cost"
    copy = pickle.loads(pickle.dumps(scorer))
    assert copy.canonical(problem.question) == plain.question


@pytest.mark.parametrize(
    ("question", "start", "ops"),
    [
        ("Think of 8. Cut it in half. Take 3 away. Quadruple that number. What's the result?", 8,
         [("/", 2), ("-", 3), ("*", 4)]),
        ("Start at 20, reduce it by 4, then divide this into 2 equal parts. What do you end up with?", 20,
         [("-", 4), ("/", 2)]),
        ("Let the number be 6. Times by 3. Take off 2 and add on 5. What is the final answer?", 6,
         [("*", 3), ("-", 2), ("+", 5)]),
    ],
)
def test_parse_also_reads_forms_outside_the_banks(question, start, ops):
    parsed = parse_phrased(question)
    assert parsed is not None and parsed.start == start and parsed.ops == tuple(Op(s, k) for s, k in ops)


def test_parse_does_not_take_any_question_as_the_closing_one():
    assert parse_phrased("Start with 5. Add 3. Add 2. Add 1. What is 2 + 2?") is None
    assert parse_phrased("Start with 5. Add 3. Add 2. Add 1. Why?") is None


def test_forms_outside_the_banks_get_a_note_that_names_the_reading():
    from prmsearch.arith.defaults import domain_note

    note = domain_note("Think of 8. Cut it in half. Take 3 away. Quadruple it. What's the result?")
    assert note is not None and "never trained on this way of phrasing" in note
    assert "Start with 8. Divide by 2. Subtract 3. Multiply by 4. What is the result?" in note
    assert parse_phrased("Think of 8. Halve it. Add 3. Add 1. What's the result?", read_extra=False) is None
    assert domain_note(phrased_split("test", "heldout", 1)[0].question) is None
