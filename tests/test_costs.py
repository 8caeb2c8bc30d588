"""The one FLOP formula (prmsearch.costs) and its use by every backend and by the driver."""

from __future__ import annotations

import pytest
from helpers import run_one

from prmsearch.arith.defaults import default_prm_path
from prmsearch.arith.models import default_policy_path
from prmsearch.costs import ModelCost, cost_from_shapes, folder_cost, safetensors_shapes
from prmsearch.policies.base import Finish, Generation, StepOutput
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import make_strategy


def test_forward_flops_by_hand():
    cost = ModelCost(non_embedding_params=100, layers=2, attention_width=8, head_flops=50)
    # 3 tokens at positions 1, 2, 3: 2*100*3 + 2*2*8*(1+2+3)
    assert cost.forward_flops(0, 3) == 600 + 192
    # 2 tokens after 5 cached: positions 6 and 7
    assert cost.forward_flops(5, 2) == 400 + 2 * 2 * 8 * 13
    assert cost.forward_flops(7, 0) == 0
    # prefill 3 of a 5-token prompt, two samples of 2 and 1 tokens, output head per decoded token
    flops = cost.generation_flops(cached=2, computed=3, sample_tokens=[2, 1])
    assert flops == cost.forward_flops(2, 3) + cost.forward_flops(5, 2) + cost.forward_flops(5, 1) + 3 * 50
    # the PRM head runs at each step's read position, unless nothing was computed (reused)
    assert cost.scoring_flops(cached=0, computed=4, steps=2) == cost.forward_flops(0, 4) + 100
    assert cost.scoring_flops(cached=4, computed=0, steps=2) == 0


def test_closed_forms_equal_the_per_request_sums():
    """generation_flops sums its samples in closed form, and scoring_flops_total sums many score
    requests at once: both equal the plain per-item sums of forward_flops."""
    import random

    rng = random.Random(0)
    cost = ModelCost(non_embedding_params=997, layers=3, attention_width=24, head_flops=71)
    for _ in range(200):
        cached, computed, recomputed = rng.randrange(50), rng.randrange(50), rng.randrange(3)
        samples = [rng.randrange(40) for _ in range(rng.randrange(1, 6))]
        prompt = cached + computed
        by_sample = cost.forward_flops(cached, computed) + cost.forward_flops(prompt, recomputed) + sum(
            cost.forward_flops(prompt, t) + cost.head_flops * t for t in samples
        )
        assert cost.generation_flops(
            cached=cached, computed=computed, sample_tokens=samples, recomputed=recomputed
        ) == by_sample
        count = rng.randrange(8)
        requests = [(rng.randrange(60), rng.randrange(30), rng.randrange(1, 9)) for _ in range(count)]
        assert cost.scoring_flops_total(requests) == sum(
            cost.scoring_flops(cached=c, computed=k, steps=s) for c, k, s in requests
        )


def test_dense_cost_is_two_flops_per_parameter_and_token():
    assert ModelCost.dense(10).generation_flops(cached=0, computed=3, sample_tokens=[4]) == 2 * 10 * 7


def test_cost_leaves_out_embeddings_and_charges_heads_where_read():
    config = {"num_hidden_layers": 2, "hidden_size": 4, "num_attention_heads": 2, "vocab_size": 10}
    shapes = {"model.embed_tokens.weight": (10, 4), "model.layers.0.mlp.weight": (4, 4),
              "model.layers.1.mlp.weight": (4, 4), "lm_head.weight": (10, 4),
              "score.0.weight": (4, 4), "score.2.weight": (2, 4)}
    policy = cost_from_shapes(config, {k: v for k, v in shapes.items() if not k.startswith("score")})
    assert policy == ModelCost(non_embedding_params=32, layers=2, attention_width=4, head_flops=2 * 4 * 10)
    prm = cost_from_shapes(config, shapes, score_head="score")
    assert prm == ModelCost(non_embedding_params=32, layers=2, attention_width=4, head_flops=2 * 24)
    with pytest.raises(ValueError, match="layers must be an int >= 0"):
        ModelCost(1, layers=-1)


def test_head_dim_sets_the_attention_width():
    config = {"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 4, "head_dim": 4}
    assert cost_from_shapes(config, {"w": (2, 2)}).attention_width == 16


def test_blank_step_reprefill_and_extra_tokens_are_charged():
    sample = StepOutput("x", (1, 2), -1.0, Finish.STEP)
    gen = Generation((sample,), prompt_tokens_computed=5, generated_tokens=4, prompt_tokens_recomputed=3)
    assert gen.sample_tokens() == [2, 2]  # 2 decoded tokens the sample no longer holds
    with pytest.raises(ValueError, match="recomputed=-1"):
        Generation((sample,), prompt_tokens_computed=5, prompt_tokens_recomputed=-1)


@pytest.mark.slow
def test_every_backend_of_one_model_has_the_same_cost():
    """transformers (from the loaded modules) and vLLM / OpenAI-server / SGLang (from the
    folder's safetensors headers) see the same shape, so the same tokens cost the same FLOPs."""
    from prmsearch.policies.hf import HFPolicy
    from prmsearch.policies.openai import OpenAIPolicy
    from prmsearch.policies.sglang import SGLangPolicy
    from prmsearch.scorers.hf import HFPRMScorer

    folder = default_policy_path()
    expected = folder_cost(folder)
    assert expected.layers == 4 and expected.attention_width == 128 and expected.head_flops > 0
    assert "model.embed_tokens.weight" in safetensors_shapes(folder)
    assert HFPolicy(str(folder), device="cpu").cost == expected
    assert OpenAIPolicy("http://127.0.0.1:9", "arith", tokenizer=str(folder)).cost == expected
    assert SGLangPolicy(str(folder), base_url="http://127.0.0.1:9").cost == expected
    prm = HFPRMScorer(default_prm_path(), "qwen-prm", device="cpu")
    assert prm.cost == folder_cost(default_prm_path(), score_head="score")  # what the vLLM scorer reads


def test_driver_charges_the_formula():
    policy = ScriptedPolicy({(): ["a", "b"], ("a",): ["\\boxed{1}"], ("b",): ["\\boxed{2}"]})
    scorer = ScriptedScorer({}, default=0.5)
    policy.cost = ModelCost(non_embedding_params=7, layers=2, attention_width=3, head_flops=11)
    scorer.cost = ModelCost(non_embedding_params=5, layers=1, attention_width=2, head_flops=13)
    result, _ = run_one(policy, scorer, make_strategy("beam", n=2, width=2))
    ledger = result.ledger
    assert ledger.policy_flops > 2 * 7 * (ledger.prompt_tokens_computed + ledger.generated_tokens)
    assert ledger.prm_flops > 2 * 5 * ledger.prm_tokens_computed
