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


def test_round_columns_equal_the_per_request_sums():
    """The driver charges a round by columns (`generation_flops_columns`, one prefill entry per
    request plus one per re-prefill, one decode entry per sample or extra run;
    `scoring_flops_columns`): exactly the per-request formulas summed."""
    import random

    rng = random.Random(1)
    cost = ModelCost(non_embedding_params=991, layers=3, attention_width=40, head_flops=83)
    for _ in range(200):
        per_request = 0
        prefill_cached, prefill_computed, tokens, prompts = [], [], [], []
        for _ in range(rng.randrange(6)):
            cached, computed, recomputed = rng.randrange(80), rng.randrange(80), rng.choice([0, 0, 4])
            samples = [rng.randrange(50) for _ in range(rng.randrange(1, 5))]
            per_request += cost.generation_flops(
                cached=cached, computed=computed, sample_tokens=samples, recomputed=recomputed
            )
            prompt = cached + computed
            prefill_cached.append(cached)
            prefill_computed.append(computed)
            if recomputed:
                prefill_cached.append(prompt)
                prefill_computed.append(recomputed)
            tokens += samples
            prompts += [prompt] * len(samples)
        assert cost.generation_flops_columns(prefill_cached, prefill_computed, tokens, prompts) == per_request
        triples = [(rng.randrange(60), rng.choice([0, rng.randrange(40)]), rng.randrange(1, 9))
                   for _ in range(rng.randrange(8))]
        columns = [list(column) for column in zip(*triples)] or [[], [], []]
        assert cost.scoring_flops_columns(*columns) == cost.scoring_flops_total(triples)


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


class CountingPolicy:
    """Two one-token steps per request, with the backend's own token count and a re-prefill
    (what vLLM reports when it continued a blank step), then a boxed answer."""

    num_parameters = 7
    cost = ModelCost(non_embedding_params=7, layers=2, attention_width=3, head_flops=11)

    def generate(self, requests):
        out = []
        for request in requests:
            text = "\\boxed{1}" if request.steps else "a"
            samples = tuple(StepOutput(text, (5,), -1.0, Finish.STEP) for _ in range(request.n))
            out.append(Generation(samples, prompt_tokens_computed=6, prompt_tokens_cached=2,
                                  generated_tokens=request.n + 3, prompt_tokens_recomputed=4))
        return out


def test_driver_charges_a_round_as_the_sum_of_its_requests():
    """Every request's backend count (generated tokens beyond the samples, a re-prefill) is
    charged exactly as `generation_flops` per request would: n=4 width=2 beam, two rounds."""
    scorer = ScriptedScorer({}, default=0.5)
    result, _ = run_one(CountingPolicy(), scorer, make_strategy("beam", n=4, width=2))
    ledger, cost = result.ledger, CountingPolicy.cost
    # round 1: one request of 4 samples; round 2: two requests of 2 samples (the kept beams)
    one = cost.generation_flops(cached=2, computed=6, sample_tokens=[1] * 4 + [3], recomputed=4)
    two = cost.generation_flops(cached=2, computed=6, sample_tokens=[1] * 2 + [3], recomputed=4)
    assert ledger.policy_calls == 3 and ledger.generated_tokens == 7 + 2 * 5
    assert ledger.policy_flops == one + 2 * two
