"""The conformance kit: every built-in passes every check, and every check fails on a part that
is broken on purpose (a check that cannot fail proves nothing)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace

import numpy as np
import pytest

from prmsearch import resolve_policy, resolve_scorer, strategy_names
from prmsearch.arith.models import default_policy_path
from prmsearch.benchmarks import datasets as datasets_module
from prmsearch.benchmarks.datasets import DatasetSpec, Problem, register_dataset
from prmsearch.conformance import (
    ConformanceError,
    check_dataset,
    check_policy,
    check_scorer,
    check_strategy,
)
from prmsearch.policies.base import Finish, SamplingParams
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.registry import Registry
from prmsearch.scorers.base import make_scorer
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search import protocol
from prmsearch.search.job import Job
from prmsearch.search.protocol import Choice, Expand, register_strategy
from prmsearch.search.strategies.common import SearchConfig
from prmsearch.tree import ROOT


def scratch(registry: Registry) -> Registry:
    """A copy of ``registry``, so parts registered by a test vanish with it."""
    copy = Registry(registry.kind, listing=registry.listing, register_with=registry.register_with,
                    hint=registry.hint)
    for entry in registry.entries():
        copy.register(entry.name, entry.target, entry.summary, bound=entry.bound)
    return copy


@pytest.fixture
def strategies(monkeypatch):
    monkeypatch.setattr(protocol, "STRATEGIES", scratch(protocol.STRATEGIES))


@pytest.fixture
def datasets(monkeypatch):
    monkeypatch.setattr(datasets_module, "DATASETS", scratch(datasets_module.DATASETS))


# =============================================================================================
# Strategies
# =============================================================================================


@pytest.mark.parametrize("name", strategy_names())
def test_every_builtin_strategy_conforms(name):
    check_strategy(name)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("beam", {"n": 8, "width": 2, "selection": "argmax", "aggregation": "prod"}),
        ("dvts", {"n": 4, "width": 4}),
        ("mcts", {"n": 12, "leaves_per_round": 2, "final": "value", "prior": "policy"}),
        ("mcts", {"n": 5, "rollout": False}),
        ("particle_filter", {"n": 6, "resampling": "systematic"}),
        ("rebase", {"n": 3, "temperature": 1.0}),
        ("best_of_n", {"n": 4, "selection": "majority"}),
        ("weighted_vote", {"n": 1, "aggregation": "mean"}),
    ],
)
def test_builtin_strategies_conform_with_other_options(name, options):
    check_strategy(name, **options)


@dataclass(frozen=True)
class ToyConfig(SearchConfig):
    """Config of the broken strategies below."""


def overspending(tree, cfg, rng):
    """Asks for twice its budget in one round."""
    (leaves,) = yield Expand(((ROOT, 2 * cfg.n),), full_solution=True)
    return Choice(leaves[0], tuple(leaves))


def never_stopping(tree, cfg, rng):
    """Keeps sampling first steps, round after round."""
    while True:
        yield Expand(((ROOT, cfg.n),))


def too_many_candidates(tree, cfg, rng):
    """Two rounds of n solutions, then chooses among all 2n."""
    (first,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    (second,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return Choice(first[0], (*first, *second))


def outside_the_tree(tree, cfg, rng):
    """Chooses a node id the tree does not have."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return Choice(len(tree) + 5, tuple(leaves))


def negative_node(tree, cfg, rng):
    """Chooses node -1 (the driver would read the tree's last node for it)."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return Choice(-1, tuple(leaves))


def not_a_choice(tree, cfg, rng):
    """Returns a bare node id instead of a Choice."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return leaves[0]


def off_the_list(tree, cfg, rng):
    """Chooses a node that is not among its candidates."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return Choice(leaves[0], tuple(leaves[1:]))


_calls = itertools.count()


def stateful(tree, cfg, rng):
    """Picks by a counter shared across searches: not reproducible."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return Choice(leaves[next(_calls) % len(leaves)], tuple(leaves))


def unseeded(tree, cfg, rng):
    """Draws from an rng of its own instead of the one it is given."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    own = np.random.default_rng()
    return Choice(leaves[int(own.integers(len(leaves)))], tuple(leaves))


def crashing(tree, cfg, rng):
    """Fails after its first round."""
    yield Expand(((ROOT, cfg.n),))
    raise KeyError("no such beam")


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        (overspending, "round 1 asked for 32 samples"),
        (never_stopping, "more than n x max_depth"),
        (too_many_candidates, "32 candidates"),
        (outside_the_tree, "strategy chose node 45, not in the tree"),
        (negative_node, "chose node -1"),
        (not_a_choice, "strategies must return a Choice"),
        (off_the_list, "not among its candidates"),
        (stateful, "two runs with the same seeds differ"),
        (unseeded, "differ"),
        (crashing, "KeyError: 'no such beam'"),
    ],
)
def test_check_strategy_fails_on_a_broken_strategy(strategies, algorithm, message):
    register_strategy("broken", ToyConfig, algorithm)
    with pytest.raises(ConformanceError, match="check_strategy\\('broken'\\)") as caught:
        check_strategy("broken", n=16)
    assert message in str(caught.value)
    assert "Fix:" in str(caught.value)


def test_check_strategy_fails_on_a_mutable_or_unvalidated_config(strategies):
    @dataclass
    class Mutable:
        n: int = 4

        def __post_init__(self):
            if self.n < 1:
                raise ValueError("n must be >= 1")

    @dataclass(frozen=True)
    class Unchecked:
        n: int = 4

    register_strategy("mutable", Mutable, overspending)
    register_strategy("unchecked", Unchecked, overspending)
    with pytest.raises(ConformanceError, match="frozen=True"):
        check_strategy("mutable")
    with pytest.raises(ConformanceError, match="n=0\\) was accepted"):
        check_strategy("unchecked")
    with pytest.raises(ConformanceError, match="unknown strategy 'nowhere'"):
        check_strategy("nowhere")
    with pytest.raises(ConformanceError, match="do not build its config"):
        check_strategy("beam", width=3)


def test_check_strategy_fails_when_a_prm_free_strategy_gets_scored(monkeypatch):
    monkeypatch.setattr(Job, "wants_scores", property(lambda job: True))
    with pytest.raises(ConformanceError, match="needs_scores is False but the PRM was called"):
        check_strategy("self_consistency")
    check_strategy("beam")  # a strategy that reads scores is unaffected


# =============================================================================================
# Policies
# =============================================================================================


def script(question, steps, index, seed):
    """Two steps, then a boxed answer; sample i takes option i."""
    if len(steps) >= 2:
        return f"so the answer is \\boxed{{{index}}}"
    return f"step {len(steps) + 1} option {index}"


def scripted_policy() -> ScriptedPolicy:
    return ScriptedPolicy(script)


def test_the_scripted_policy_conforms():
    # it replays whole scripted steps whatever max_new_tokens says, so the token-limit probe is off
    check_policy(scripted_policy(), token_limit=None)
    check_policy(ScriptedPolicy(script, vary_with_seed=True), token_limit=None,
                 sampling=SamplingParams(temperature=0.5, delimiter="\n"), steps=("given step",))
    check_policy(ScriptedPolicy(script, token_logprobs=True), token_limit=None)  # per-token values too


class Broken:
    """A scripted policy whose every Generation is passed through ``alter(request, gen)``."""

    def __init__(self, alter, *, num_parameters=1000):
        self.inner = scripted_policy()
        self.alter = alter
        self._num_parameters = num_parameters

    @property
    def num_parameters(self):
        return self._num_parameters

    def generate(self, requests):
        return [self.alter(r, g) for r, g in zip(requests, self.inner.generate(requests))]


def one_sample_short(request, gen):
    return replace(gen, samples=gen.samples[:-1]) if request.n > 1 else gen


def with_delimiter(request, gen):
    d = request.sampling.delimiter
    return replace(gen, samples=tuple(replace(s, text=s.text + d + "more") for s in gen.samples))


def whole_solution_as_step(request, gen):
    return replace(gen, samples=tuple(replace(s, finish=Finish.STEP) for s in gen.samples))


def seed_ignored(request, gen):
    if request.sampling.temperature == 0:
        return gen
    draw = np.random.default_rng().integers(10**9)
    return replace(gen, samples=tuple(replace(s, text=f"{s.text} {draw}") for s in gen.samples))


def greedy_depends_on_seed(request, gen):
    return replace(gen, samples=tuple(replace(s, text=f"{s.text} {request.seed}") for s in gen.samples))


def prompt_unread(request, gen):
    return replace(gen, prompt_tokens_computed=0)


def token_count_short(request, gen):
    return replace(gen, generated_tokens=0)


def positive_logprob(request, gen):
    return replace(gen, samples=tuple(replace(s, logprob=2.0) for s in gen.samples))


def numpy_tokens(request, gen):
    samples = tuple(replace(s, token_ids=tuple(np.array(s.token_ids))) for s in gen.samples)
    return replace(gen, samples=samples)


def token_logprobs_off_sum(request, gen):
    samples = tuple(replace(s, token_logprobs=(s.logprob - 1.0,) + (0.0,) * (len(s.token_ids) - 1))
                    for s in gen.samples)
    return replace(gen, samples=samples)


def numpy_token_logprobs(request, gen):
    samples = tuple(replace(s, token_logprobs=tuple(np.full(len(s.token_ids), s.logprob / len(s.token_ids),
                                                            dtype=np.float32)))
                    for s in gen.samples)
    return replace(gen, samples=samples)


def wrong_type(request, gen):
    return replace(gen, samples=tuple(replace(s, finish="eos") for s in gen.samples))


@pytest.mark.parametrize(
    ("alter", "message"),
    [
        (one_sample_short, "asked for n=2 samples and got 1"),
        (with_delimiter, "runs past the step delimiter"),
        (whole_solution_as_step, "a whole solution finished with 'step'"),
        (seed_ignored, "asked again in another batch"),
        (greedy_depends_on_seed, "temperature 0 with seeds 21 and 22"),
        (prompt_unread, "prompt_tokens_computed + prompt_tokens_cached is 0"),
        (token_count_short, "generated_tokens=0"),
        (positive_logprob, "logprob is 2.0"),
        (wrong_type, "finish is 'eos'"),
        (numpy_tokens, "a tuple of Python ints"),
        (token_logprobs_off_sum, "token_logprobs sum to"),
        (numpy_token_logprobs, "a tuple of Python floats"),
    ],
)
def test_check_policy_fails_on_a_broken_policy(alter, message):
    with pytest.raises(ConformanceError, match="check_policy\\(Broken\\)") as caught:
        check_policy(Broken(alter), token_limit=None)
    assert message in str(caught.value)


def test_check_policy_fails_on_other_broken_policies():
    class Reversed(Broken):
        def generate(self, requests):
            return super().generate(requests)[::-1]

    class Dropping(Broken):
        def generate(self, requests):
            return super().generate(requests)[:1]

    with pytest.raises(ConformanceError, match="asked for n=2 samples and got 3"):
        check_policy(Reversed(lambda r, g: g), token_limit=None)
    with pytest.raises(ConformanceError, match="1 generations for 2 requests"):
        check_policy(Dropping(lambda r, g: g), token_limit=None)
    with pytest.raises(ConformanceError, match="num_parameters is 0"):
        check_policy(Broken(lambda r, g: g, num_parameters=0), token_limit=None)
    with pytest.raises(ConformanceError, match="holds 4 tokens, the limit was 3"):
        check_policy(scripted_policy(), token_limit=3)  # the scripted policy ignores the limit
    with pytest.raises(ConformanceError, match="no generate"):
        check_policy(object())


def test_an_unreproducible_backend_can_say_so():
    check_policy(Broken(seed_ignored), token_limit=None, reproducible=False)


# =============================================================================================
# Scorers
# =============================================================================================


def test_scripted_and_oracle_scorers_conform():
    check_scorer(ScriptedScorer(lambda question, steps: len(steps) / 10))
    check_scorer(make_scorer("arith-oracle"))


class BrokenScorer:
    """A scripted scorer whose every result is passed through ``alter(results)``."""

    num_parameters = 10

    def __init__(self, alter):
        self.inner = ScriptedScorer(lambda question, steps: 0.25 + 0.1 * len(steps))
        self.alter = alter

    def score(self, requests):
        return self.alter(self.inner.score(requests))


def each(change):
    return lambda results: [change(r) for r in results]


@pytest.mark.parametrize(
    ("alter", "message"),
    [
        (each(lambda r: replace(r, scores=r.scores * 0 + 1.5)), "are not all probabilities"),
        (each(lambda r: replace(r, scores=r.scores * np.nan)), "are not all probabilities"),
        (each(lambda r: replace(r, scores=r.scores[:-1])), "shape (2,) for 3 step(s)"),
        (each(lambda r: replace(r, tokens_cached=-1)), "tokens_cached is -1"),
        (each(lambda r: replace(r, tokens_computed=2.5)), "tokens_computed is 2.5"),
        (each(lambda r: (r.scores, r.tokens_computed)), "is tuple"),
        (lambda results: results[::-1], "request 1 of the batch: scores of shape (2,) for 1 step(s)"),
        (lambda results: results[:-1], "3 results for 4 requests"),
        (lambda results: [replace(r, scores=r.scores / len(results)) for r in results], "alone"),
    ],
)
def test_check_scorer_fails_on_a_broken_scorer(alter, message):
    with pytest.raises(ConformanceError, match="check_scorer\\(BrokenScorer\\)") as caught:
        check_scorer(BrokenScorer(alter))
    assert message in str(caught.value)


def test_check_scorer_fails_on_a_stale_cache():
    class Stale(BrokenScorer):
        """Serves a batch it has seen before from a cache that went stale."""

        def __init__(self):
            super().__init__(None)
            self.seen = set()

        def score(self, requests):
            key = tuple(requests)
            factor = 0.5 if key in self.seen else 1.0
            self.seen.add(key)
            return [replace(r, scores=r.scores * factor) for r in self.inner.score(requests)]

    with pytest.raises(ConformanceError, match=r"then .* for the same batch"):
        check_scorer(Stale())


# =============================================================================================
# The embedded models
# =============================================================================================


@pytest.mark.slow
def test_the_embedded_policy_conforms():
    check_policy(resolve_policy(None))


@pytest.mark.slow
def test_the_embedded_prm_conforms():
    scorer = resolve_scorer(None)
    check_scorer(scorer)
    check_scorer(scorer, steps=("12 * 2 = 24", "24 - 5 = 18", "18 + 13 = 31. The answer is \\boxed{31}"))


@pytest.mark.slow
def test_the_policy_confidence_scorer_conforms():
    check_scorer(make_scorer("policy-confidence", model=str(default_policy_path())))


# =============================================================================================
# Datasets
# =============================================================================================


def test_the_arith_dataset_conforms():
    check_dataset("arith")
    check_dataset("arith", split="validation", limit=50)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["math500", "gsm8k", "aime24", "amc23"])
def test_the_benchmark_files_conform_where_they_are(name):
    spec = datasets_module.dataset_spec(name)
    folder = datasets_module.default_data_dir()
    if folder is None or not (folder / spec.filename).is_file():
        pytest.skip(f"no local copy of {spec.filename} (set {datasets_module.DATA_DIR_ENV})")
    check_dataset(name)


def test_jsonl_files_conform(tmp_path):
    rows = [{"question": "What is 2+3?", "answer": "5"}, {"question": "Half of 1?", "answer": "\\frac{1}{2}"}]
    check_dataset(write_jsonl(tmp_path / "mine.jsonl", rows))
    check_dataset(str(tmp_path / "mine.jsonl"))
    gsm = [{"question": "How many?", "answer": "3 + 4 = 7\n#### 7"}]
    check_dataset("gsm8k", path=write_jsonl(tmp_path / "gsm8k_test.jsonl", gsm))


def test_check_dataset_fails_on_a_blank_question_in_a_file(tmp_path):
    rows = [{"question": "What is 2+3?", "answer": "5"}, {"question": "  ", "answer": "4"}]
    with pytest.raises(ConformanceError, match=r"loading failed.*:2: field 'question': is empty"):
        check_dataset(write_jsonl(tmp_path / "blank.jsonl", rows))


@dataclass(frozen=True)
class Row:
    """A loader's row that skips Problem's own validation."""

    id: str
    question: str
    answer: str


def loader_of(rows):
    return lambda split, limit: list(rows)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([Row("a", "What is 1+1?", "2"), Row("b", " ", "3")], "problem 1 has a blank or missing question"),
        ([Row("a", "What is 1+1?", "")], "blank or missing answer"),
        ([Row("a", "What is 1+1?", "2"), Row("a", "And 1+2?", "3")], "repeats the id 'a'"),
        ([Problem("a", "What is 1+1?", "{2")], "is graded wrong"),
        ([Problem("a", "What is 1+1?", "1 + 1 = 2, so the answer is 2")], "holds its own final answer '2'"),
        ([Problem("a", "What is 1+1?", "1 + 1 = 2.\nFinal: 2")], "spans several lines"),
        ([], "it loaded no problem"),
    ],
)
def test_check_dataset_fails_on_a_broken_dataset(datasets, rows, message):
    register_dataset(DatasetSpec("broken", "broken on purpose", loader=loader_of(rows)))
    with pytest.raises(ConformanceError, match="check_dataset\\('broken'\\)") as caught:
        check_dataset("broken")
    assert message in str(caught.value)


def test_check_dataset_fails_on_a_loader_that_changes_between_loads(datasets):
    problems = [Problem("a", "What is 1+1?", "2"), Problem("b", "What is 1+2?", "3")]
    turns = itertools.count()
    def loader(split, limit):
        return problems if next(turns) % 2 == 0 else problems[::-1]

    register_dataset(DatasetSpec("moving", "order changes every load", loader=loader))
    with pytest.raises(ConformanceError, match="two loads gave different problems or orders"):
        check_dataset("moving")
    with pytest.raises(ConformanceError, match="neither a registered dataset"):
        check_dataset("no-such-dataset")

