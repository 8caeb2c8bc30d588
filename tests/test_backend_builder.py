"""One backend builder: `resolve_policy` and `resolve_scorer` build every backend from names
(`solve`, the command line, sweeps and recipes all come through them), and say what is wrong."""

from __future__ import annotations

import pytest

from prmsearch.api import resolve_policy, resolve_scorer
from prmsearch.registry import UnknownNameError
from prmsearch.scorers import backend_scorer


def test_an_unknown_policy_backend_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="hf"):
        resolve_policy("some/model", "no-such-backend")


@pytest.mark.parametrize(("backend", "family", "scorer"), [
    (None, "qwen-prm", "qwen-prm"),
    ("hf", "verifier", "verifier"),
    ("vllm", "qwen-prm", "vllm-qwen-prm"),
    ("vllm", "verifier", "vllm-verifier"),
    ("vllm", "math-shepherd", "vllm-math-shepherd"),
    ("vllm-server", "qwen-prm", "vllm-server"),
])
def test_a_prm_backend_and_family_name_one_scorer(backend, family, scorer):
    assert backend_scorer(backend, family) == scorer


def test_a_family_the_backend_does_not_run_names_the_fix():
    with pytest.raises(ValueError, match=r"runs the families qwen-prm, .*verifier, got 'skywork'; use"):
        resolve_scorer("some/model", "skywork", "vllm")
    with pytest.raises(ValueError, match="runs the families qwen-prm, got 'verifier'; use the hf backend"):
        resolve_scorer("some/model", "verifier", "vllm-server")
    with pytest.raises(ValueError, match="unknown PRM backend 'tpu'"):
        resolve_scorer("some/model", "qwen-prm", "tpu")
    with pytest.raises(ValueError, match="needs its family"):
        resolve_scorer("some/model", None, "vllm")
