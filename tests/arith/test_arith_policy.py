"""The shipped policy loads, follows the prompt format and greedy-solves some test problems;
the smoke training run works end to end."""

import json
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from prmsearch.arith.checker import check_solution
from prmsearch.arith.models import ShippedModelError, default_policy_path
from prmsearch.arith.problems import load_split


def test_metadata_records_format_and_command():
    meta = json.loads((default_policy_path() / "prmsearch.json").read_text())
    assert meta["prompt_format"] == "plain"
    assert meta["delimiter"] == "\n\n" and meta["eos"] == "<|im_end|>"
    assert meta["trained_with"].startswith("python -m training.train_arith policy")


def test_shipped_policy_greedy_solves_some_test_problems():
    from training.arith.policy_eval import generate_solutions, load_policy

    model, tok = load_policy(default_policy_path())
    assert model.config.vocab_size == len(tok)
    problems = load_split("test", 16)
    sols = generate_solutions(model, tok, problems, n=1, batch_size=16)
    checks = [check_solution(p, s[0]) for p, s in zip(problems, sols, strict=True)]
    assert sum(c.answer_correct for c in checks) >= 3
    assert all(c.answer is not None for c in checks[:8])  # it ends with a boxed answer


def test_policy_stops_at_delimiter_then_eos():
    import torch

    from training.arith.policy_eval import load_policy

    model, tok = load_policy(default_policy_path())
    p = load_split("test", 1)[0]
    enc = tok(p.question + "\n\n", return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=160)
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    delim = tok.convert_tokens_to_ids("ĊĊ")
    assert new[-1] == tok.eos_token_id
    assert new.count(delim) == len(tok.decode(new, skip_special_tokens=True).split("\n\n")) - 1


def test_missing_policy_error_names_file_and_command(tmp_path, monkeypatch):
    from prmsearch.arith import models

    monkeypatch.setattr(models, "_models_dir", lambda: tmp_path)
    with pytest.raises(ShippedModelError, match=r"training\.train_arith policy"):
        models.default_policy_path()
    (tmp_path / "policy").mkdir()
    with pytest.raises(ShippedModelError, match=r"config\.json"):
        models.default_policy_path()


def test_smoke_training_runs_end_to_end(tmp_path):
    from training.arith.commands import train_policy_main as main
    from training.arith.policy_eval import EvalConfig, evaluate_policy

    out = tmp_path / "policy"
    assert main(["policy", "--smoke", "--out", str(out), "--save-at", "2"]) == 0
    meta = json.loads((out / "prmsearch.json").read_text())
    assert meta["trained_with"].endswith("--smoke")
    assert (out / "ckpt-00002" / "model.safetensors").is_file()
    report = evaluate_policy(out, EvalConfig(split="test", n_problems=2, k=2, max_new_tokens=8))
    assert report.n_problems == 2 and 0 <= report.greedy <= 1


def test_retrain_hint_matches_the_recorded_command():
    from prmsearch.arith.models import POLICY_RETRAIN_COMMAND

    meta = json.loads((default_policy_path() / "prmsearch.json").read_text())
    assert meta["trained_with"] == POLICY_RETRAIN_COMMAND


def test_train_command_reproduces_config():
    from training.arith.policy_train import TrainConfig, build_config, smoke_config, train_command

    cfg = build_config(steps=675, lr_horizon=1000, seed=0)
    assert train_command(cfg, "d") == (
        "python -m training.train_arith policy --out d --steps 675 --lr-horizon 1000 --seed 0"
    )
    assert train_command(smoke_config(), "d").endswith("--out d --smoke")
    with pytest.raises(ValueError, match="CLI cannot set"):
        train_command(TrainConfig(warmup=3), "d")


def test_shipped_policy_reads_phrasings_it_never_trained_on():
    from prmsearch.arith.phrasing import phrased_split
    from training.arith.policy_eval import generate_solutions, load_policy

    meta = json.loads((default_policy_path() / "prmsearch.json").read_text())
    assert meta["train_config"]["phrased"] > 0
    model, tok = load_policy(default_policy_path())
    problems = phrased_split("test", "heldout", 16)
    sols = generate_solutions(model, tok, problems, n=1, batch_size=16)
    checks = [check_solution(p, s[0]) for p, s in zip(problems, sols, strict=True)]
    assert sum(c.answer_correct for c in checks) >= 3
    assert all(c.answer is not None for c in checks[:8])
