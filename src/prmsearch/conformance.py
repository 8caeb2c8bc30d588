"""Conformance checks: one call tells whether a new strategy, policy, scorer or dataset keeps the
contracts the engine relies on.

Each check runs the part the way the driver and the benchmarks use it and raises
:class:`ConformanceError` (an ``AssertionError``, so pytest shows it as a plain failure) naming what
broke and how to fix it. Use them in your own tests::

    from prmsearch.conformance import check_policy, check_strategy

    def test_my_strategy():
        check_strategy("my_strategy", n=8)

    def test_my_policy():
        check_policy(MyPolicy())

They check what the protocols promise (``prmsearch.search.protocol``, ``prmsearch.policies.base``,
``prmsearch.scorers.base``, ``prmsearch.benchmarks.datasets``), nothing about quality.

Why one module over 500 lines: it is the one import a plugin author's tests need; each check
is short and independent, and they share the error type and the scripted runs.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import FrozenInstanceError, dataclass, fields, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from prmsearch.answers import extract_answer
from prmsearch.backend_hooks import policy_hooks, scorer_hooks
from prmsearch.benchmarks.datasets import dataset_names, load_dataset
from prmsearch.benchmarks.grading import grade, is_equivalent
from prmsearch.policies.base import (
    Finish,
    Generation,
    GenerationRequest,
    Policy,
    SamplingParams,
    StepOutput,
)
from prmsearch.policies.scripted import ScriptedPolicy, ScriptedStep
from prmsearch.policies.step_end import find_step_end
from prmsearch.registry import UnknownNameError
from prmsearch.scorers.base import Scorer, ScoreRequest, StepScores
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search import strategies as _strategies  # noqa: F401  (registers the built-ins)
from prmsearch.search.driver import Driver, RunConfig, SearchResult
from prmsearch.search.protocol import BoundStrategy, strategy_spec
from prmsearch.seeding import problem_seed
from prmsearch.tree import ROOT

__all__ = ["ConformanceError", "check_dataset", "check_policy", "check_scorer", "check_strategy"]

#: A question every built-in backend can work on (the embedded models know only this domain).
DEFAULT_QUESTION = "Start with 12. Multiply by 2. Subtract 5. Add 13. What is the result?"
#: A right solution of :data:`DEFAULT_QUESTION`, one step per operation.
DEFAULT_STEPS = ("12 * 2 = 24", "24 - 5 = 19", "19 + 13 = 32. The answer is \\boxed{32}")


class ConformanceError(AssertionError):
    """A part broke a contract; the message says which check, what was seen and the fix."""


def _fail(check: str, what: str, fix: str) -> NoReturn:
    raise ConformanceError(f"{check}: {what}. Fix: {fix}")


# =============================================================================================
# Strategies
# =============================================================================================

#: The kit's problems: each names the fewest steps its solutions take before the answer step.
_KIT_QUESTIONS = (
    "kit problem A (1 step)",
    "kit problem B (2 steps)",
    "kit problem C (3 steps)",
    "kit problem D (4 steps)",
)
#: Steps after which the kit's run cuts a path off; the kit's solutions end well before it.
_KIT_MAX_DEPTH = 8


def _kit_step(question: str, steps: tuple[str, ...], index: int, seed: int) -> ScriptedStep:
    """The kit's policy: a seeded, endlessly branching step tree. A solution takes the steps its
    question says (sometimes one or two more), then boxes one of three answers; one path in ten
    gives up unanswered, one step in twenty is cut off by the token limit (a truncated leaf)."""
    depth = 1 + _KIT_QUESTIONS.index(question) if question in _KIT_QUESTIONS else 2
    rng = np.random.default_rng([seed, index, len(steps)])
    draw = rng.random()
    if len(steps) < depth or (len(steps) < depth + 2 and draw < 0.3):
        text = f"step {len(steps) + 1}: carry {int(rng.integers(10))}"
        return ScriptedStep(text, Finish.LENGTH if draw > 0.95 else Finish.STEP)
    if draw > 0.9:
        return ScriptedStep("no answer found", Finish.EOS)
    return ScriptedStep(f"so the answer is \\boxed{{{int(rng.integers(3))}}}")


def _kit_score(question: str, steps: tuple[str, ...]) -> float:
    """The kit's PRM: a fixed pseudo-random probability in [0.02, 0.98] per path."""
    digest = zlib.crc32("\x1f".join((question, *steps)).encode("utf-8"))
    return 0.02 + 0.96 * (digest % 1000) / 999


class _Metered:
    """The kit's policy behind a meter: samples asked per problem in every call. A call that would
    take a problem past ``limit`` samples in all is refused (the driver records it as that
    problem's error), so a strategy that never stops fails the check instead of hanging it."""

    def __init__(self, policy: ScriptedPolicy, limit: int) -> None:
        self.policy = policy
        self.limit = limit
        self.rounds: list[Counter[str]] = []
        self.totals: Counter[str] = Counter()
        self.refused: dict[str, int] = {}

    @property
    def num_parameters(self) -> int:
        return self.policy.num_parameters

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        asked: Counter[str] = Counter()
        for request in requests:
            asked[request.question] += request.n
        over = {q: self.totals[q] + k for q, k in asked.items() if self.totals[q] + k > self.limit}
        if over:
            self.refused.update(over)
            raise RuntimeError(f"conformance kit: budget exceeded by {sorted(over)}")
        self.rounds.append(asked)
        self.totals.update(asked)
        return self.policy.generate(requests)


@dataclass
class _KitRun:
    """One run of the kit: its results, its meter and its scorer."""

    results: list[SearchResult]
    meter: _Metered
    scorer: ScriptedScorer


def _kit_run(check: str, bound: BoundStrategy, questions: Sequence[str], limit: int) -> _KitRun:
    """Run ``bound`` on fresh kit backends over ``questions`` with their per-problem seeds."""
    meter = _Metered(ScriptedPolicy(_kit_step), limit)
    scorer = ScriptedScorer(_kit_score)
    driver = Driver(meter, scorer, RunConfig(max_depth=_KIT_MAX_DEPTH))
    seeds = [problem_seed(0, q) for q in questions]
    try:
        results = driver.run(list(questions), bound, seeds)
    except Exception as exc:
        _fail(
            check,
            f"the driver crashed building the results ({type(exc).__name__}: {exc})",
            "return Choice(node, candidates) where node and every candidate are ids of nodes of the "
            "tree the strategy was given (0 < id < len(tree))",
        )
    if len(results) != len(questions):
        _fail(check, f"{len(results)} results for {len(questions)} problems", "a strategy must finish")
    return _KitRun(results, meter, scorer)


def _config_checks(check: str, name: str, options: dict[str, Any]) -> BoundStrategy:
    """The strategy is registered, its config a frozen dataclass with a budget ``n`` that refuses
    bad values when built, and ``options`` build it."""
    try:
        spec = strategy_spec(name)
    except UnknownNameError as exc:
        _fail(check, str(exc), "register it with register_strategy(name, ConfigClass, algorithm)")
    if "n" not in {f.name for f in fields(spec.config_cls)}:
        _fail(check, f"{spec.config_cls.__name__} has no field n", "subclass SearchConfig (the budget n)")
    try:
        bound = spec.configure(**options)
    except (TypeError, ValueError) as exc:
        _fail(check, f"options {options} do not build its config ({exc})", "pass valid options")
    try:
        bound.config.n = bound.config.n + 1
    except FrozenInstanceError:
        pass
    else:
        _fail(check, f"{spec.config_cls.__name__} can be changed after it is built",
              "declare it with @dataclass(frozen=True)")
    try:
        spec.configure(**{**options, "n": 0})
    except ValueError:
        pass
    else:
        _fail(check, f"{spec.config_cls.__name__}(n=0) was accepted",
              "validate the config in __post_init__ (SearchConfig does: call super().__post_init__())")
    return bound


def _budget_checks(check: str, n: int, run: _KitRun) -> None:
    """No round asks more than ``n`` samples for a problem, no problem more than
    ``n x max_depth`` in all, no strategy chooses among more than ``n`` candidates."""
    if run.meter.refused:
        question, total = next(iter(run.meter.refused.items()))
        _fail(check, f"{question!r} asked for {total} samples in all, more than n x max_depth = "
                     f"{n} x {_KIT_MAX_DEPTH}", "stop when the budget n is spent (or no node is left)")
    for number, asked in enumerate(run.meter.rounds, start=1):
        for question, count in asked.items():
            if count > n:
                _fail(check, f"round {number} asked for {count} samples for {question!r}, more than "
                             f"n={n}", "spend at most n generations per round")
    for result in run.results:
        if len(result.candidates) > n:
            _fail(check, f"{len(result.candidates)} candidates for {result.question!r} with n={n}",
                  "choose among at most n finished paths")
        if result.ledger.generations != run.meter.totals[result.question]:
            _fail(check, f"ledger says {result.ledger.generations} generations, the policy made "
                         f"{run.meter.totals[result.question]}",
                  "this is a driver bug, not the strategy's: report it")


def _choice_checks(check: str, run: _KitRun) -> None:
    """Every problem finished without error on a real node that is one of its candidates."""
    for result in run.results:
        if result.error is not None:
            _fail(check, f"the search of {result.question!r} failed: {result.error}",
                  "the strategy must run to a Choice on any tree the driver builds")
        size = len(result.tree)
        if not ROOT < result.node < size:
            _fail(check, f"chose node {result.node} of a tree of {size} nodes",
                  "return Choice(node, ...) with a node the search generated (not the root)")
        candidates = [c.node for c in result.candidates]
        if result.node not in candidates:
            _fail(check, f"chose node {result.node}, not among its candidates {candidates}",
                  "choose from the candidates you return (Choice(select(tree, c, ...), tuple(c)))")
        for node in candidates:
            if not ROOT < node < size:
                _fail(check, f"candidate {node} is not a node of the tree ({size} nodes)",
                      "list only generated nodes as candidates")


def _scoring_checks(check: str, bound: BoundStrategy, run: _KitRun) -> None:
    """A strategy that reads no score is never scored and pays no PRM; one that does is scored."""
    prm = ("prm_calls", "prm_tokens_computed", "prm_tokens_cached", "prm_flops")
    if bound.needs_scores:
        if not run.scorer.calls:
            _fail(check, "needs_scores is True but the PRM was never called", "report it: driver bug")
        return
    if run.scorer.calls:
        _fail(check, f"needs_scores is False but the PRM was called {len(run.scorer.calls)} times",
              "report it: the driver must skip scoring for such strategies")
    for result in run.results:
        paid = {name: getattr(result.ledger, name) for name in prm if getattr(result.ledger, name)}
        if paid:
            _fail(check, f"needs_scores is False but the ledger charged {paid}", "report it: driver bug")
        scored = [i for i in range(1, len(result.tree)) if not math.isnan(result.tree.score[i])]
        if scored:
            _fail(check, f"needs_scores is False but nodes {scored[:5]} carry scores",
                  "report it: driver bug")


def _same(a: SearchResult, b: SearchResult) -> bool:
    return (a.node, a.answer, a.tree, [c.node for c in a.candidates]) == (
        b.node, b.answer, b.tree, [c.node for c in b.candidates]
    )


def check_strategy(name: str, **options: Any) -> None:
    """Check the registered strategy ``name`` built with ``options`` (defaults otherwise).

    Verifies that its config is a frozen, validated dataclass with a budget ``n``; that it runs to
    a Choice on four problems of a deterministic scripted policy and PRM (with unanswered paths
    among them), choosing a generated node among its candidates; that it stays within the budget
    every built-in honours (at most ``n`` samples per round and problem, at most
    ``n x max_depth`` in all, at most ``n`` candidates; ``n`` is the config's ``max_budget``
    where it has one, the worst case of a strategy whose ``n`` is a mean, as the planner's);
    that the same seeds give the same trees and choices twice and alone as in a batch; and that
    a strategy whose config says ``needs_scores=False`` is never scored (0 PRM calls, tokens and
    FLOPs, NaN scores).

    Raises:
        ConformanceError: naming the broken rule and the fix.
    """
    check = f"check_strategy({name!r})"
    bound = _config_checks(check, name, options)
    n = int(getattr(bound.config, "max_budget", bound.config.n))  # the planner's n is a mean
    limit = n * _KIT_MAX_DEPTH
    first = _kit_run(check, bound, _KIT_QUESTIONS, limit)
    _budget_checks(check, n, first)
    _choice_checks(check, first)
    _scoring_checks(check, bound, first)
    second = _kit_run(check, bound, _KIT_QUESTIONS, limit)
    for a, b in zip(first.results, second.results):
        if not _same(a, b):
            _fail(check, f"two runs with the same seeds differ on {a.question!r} (nodes {a.node} vs "
                         f"{b.node})", "draw randomness only from the rng argument, keep no state "
                                       "between searches")
    for a in first.results:
        alone = _kit_run(check, bound, [a.question], limit).results[0]
        if not _same(a, alone):
            _fail(check, f"{a.question!r} searched alone differs from the same problem in a batch",
                  "keep no state shared between the trees of one run (module globals, class "
                  "attributes); use only the tree, the config and the rng")


# =============================================================================================
# Policies
# =============================================================================================


def _check_generation(check: str, label: str, request: GenerationRequest, gen: object) -> None:
    """One Generation against its request: n samples, well-typed, counts consistent, limits kept."""
    if not isinstance(gen, Generation):
        _fail(check, f"{label} returned {type(gen).__name__}", "return a prmsearch Generation per request")
    if len(gen.samples) != request.n:
        _fail(check, f"{label} asked for n={request.n} samples and got {len(gen.samples)}",
              "return exactly request.n samples per request")
    for name in ("prompt_tokens_computed", "prompt_tokens_cached", "prompt_tokens_recomputed"):
        value = getattr(gen, name)
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(check, f"{label}: {name} is {value!r}",
                  "count tokens as Python ints (the ledger is saved as JSON)")
    if gen.prompt_tokens_computed + gen.prompt_tokens_cached < 1:
        _fail(check, f"{label}: prompt_tokens_computed + prompt_tokens_cached is 0",
              "report the prompt length (computed + served from a cache)")
    decoded = 0
    delimiter = request.sampling.delimiter
    for i, sample in enumerate(gen.samples):
        where = f"{label} sample {i}"
        if not isinstance(sample, StepOutput):
            _fail(check, f"{where} is {type(sample).__name__}", "return StepOutput samples")
        if not isinstance(sample.finish, Finish):
            _fail(check, f"{where}: finish is {sample.finish!r}", "use Finish.STEP, EOS or LENGTH")
        if not isinstance(sample.text, str):
            _fail(check, f"{where}: text is {type(sample.text).__name__}", "return the text as a str")
        if not isinstance(sample.token_ids, tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in sample.token_ids
        ):
            _fail(check, f"{where}: token_ids is {sample.token_ids!r:.80}",
                  "return a tuple of Python ints (trees are saved as JSON)")
        skipped = not request.logprobs and isinstance(sample.logprob, float) and math.isnan(sample.logprob)
        if skipped and sample.token_logprobs:
            _fail(check, f"{where}: logprob is NaN but token_logprobs holds "
                         f"{len(sample.token_logprobs)} values",
                  "a sample without log-probabilities has logprob NaN and no token_logprobs")
        if not skipped and (not isinstance(sample.logprob, (int, float, np.floating))
                            or not math.isfinite(sample.logprob) or sample.logprob > 1e-6):
            _fail(check, f"{where}: logprob is {sample.logprob!r}",
                  "sum the sampled tokens' log-probabilities (a finite number <= 0; NaN only when "
                  "the request set logprobs=False)")
        _check_token_logprobs(check, where, sample)
        if len(sample.token_ids) > request.sampling.max_new_tokens:
            _fail(check, f"{where} holds {len(sample.token_ids)} tokens, the limit was "
                         f"{request.sampling.max_new_tokens}",
                  "stop at max_new_tokens with finish=Finish.LENGTH")
        decoded += len(sample.token_ids)
        if request.stop_at_step and find_step_end(sample.text, delimiter) >= 0:
            _fail(check, f"{where} runs past the step delimiter {delimiter!r}: {sample.text!r:.120}",
                  "with stop_at_step, cut the sample at the first delimiter after non-blank text "
                  "and leave the delimiter out of the text")
        if not request.stop_at_step and sample.finish is Finish.STEP:
            _fail(check, f"{where}: a whole solution finished with 'step'",
                  "without stop_at_step, run to end-of-sequence (EOS) or the token limit (LENGTH)")
    if gen.generated_tokens is not None and gen.generated_tokens < decoded:
        _fail(check, f"{label}: generated_tokens={gen.generated_tokens} but the samples hold {decoded}",
              "count every decoded token (delimiter and EOS included) or leave it None")


def _check_token_logprobs(check: str, where: str, sample: StepOutput) -> None:
    """A sample's per-token log-probabilities, when it has any: a tuple of floats, one per token,
    summing to its ``logprob`` (confidence strategies read them in place of the sum)."""
    lps = sample.token_logprobs
    if not lps:
        return
    if not isinstance(lps, tuple) or len(lps) != len(sample.token_ids) or not all(
        isinstance(v, float) for v in lps
    ):
        _fail(check, f"{where}: token_logprobs is {lps!r:.80} for {len(sample.token_ids)} tokens",
              "return a tuple of Python floats, one per token of token_ids, or an empty tuple")
    total = math.fsum(lps)
    if not math.isclose(total, sample.logprob, rel_tol=1e-6, abs_tol=1e-6):
        _fail(check, f"{where}: token_logprobs sum to {total!r}, logprob is {sample.logprob!r}",
              "give the log-probabilities of exactly the tokens whose sum is logprob")


def _batch_call(check: str, method: str, call: Callable[[list], Any], requests: list, what: str,
                item: str, noun: str) -> Any:
    """``call(requests)``, which must not raise and must return one ``item`` per request."""
    try:
        out = call(requests)
    except Exception as exc:
        _fail(check, f"{method}() raised on {what}: {type(exc).__name__}: {exc}",
              f"{method}() must serve these requests")
    try:
        count = len(out)
    except TypeError:
        _fail(check, f"{method}() returned {type(out).__name__}", f"return a list of {item}")
    if count != len(requests):
        _fail(check, f"{count} {noun} for {len(requests)} requests ({what})",
              f"return one {item} per request, in the requests' order")
    return out


def _generate(check: str, policy: Policy, requests: list[GenerationRequest], what: str
              ) -> list[Generation]:
    gens = _batch_call(check, "generate", policy.generate, requests, what, "Generation", "generations")
    for i, (request, gen) in enumerate(zip(requests, gens)):
        _check_generation(check, f"request {i} of {what}", request, gen)
    return list(gens)


def _sample_key(sample: StepOutput) -> tuple[str, tuple[int, ...], Finish]:
    return sample.text, tuple(int(t) for t in sample.token_ids), sample.finish


def _same_samples(check: str, a: Generation, b: Generation, label: str, tolerance: float, fix: str
                  ) -> None:
    keys_a = [_sample_key(s) for s in a.samples]
    keys_b = [_sample_key(s) for s in b.samples]
    if keys_a != keys_b:
        _fail(check, f"{label}: {[k[0] for k in keys_a]!r:.160} vs {[k[0] for k in keys_b]!r:.160}", fix)
    for x, y in zip(a.samples, b.samples):
        if abs(x.logprob - y.logprob) > tolerance:
            _fail(check, f"{label}: logprob {x.logprob} vs {y.logprob}", fix)


def check_policy(
    policy: Policy,
    *,
    question: str = DEFAULT_QUESTION,
    steps: Sequence[str] = (),
    sampling: SamplingParams | None = None,
    solution_tokens: int = 256,
    token_limit: int | None = 4,
    reproducible: bool = True,
    logprob_tolerance: float = 1e-3,
) -> None:
    """Check a policy backend against the ``Policy`` contract of ``prmsearch.policies.base``,
    and its hooks (`prmsearch.backend_hooks.PolicyBackend`: bools; plain attributes of a backend
    that does not subclass it give a DeprecationWarning).

    Sends a batch of step requests (n=2, and with ``token_limit`` one request limited to that
    many tokens), whole-solution requests (n=3, ``solution_tokens`` each) and, in a second call,
    a request one step deeper. Verifies ``num_parameters > 0``; one ``Generation`` per request,
    in order, with exactly ``n`` samples; well-typed samples (``Finish`` reasons, a tuple of int
    token ids, a finite logprob <= 0); at most ``max_new_tokens`` tokens per sample; step
    samples cut before the delimiter (none holds it after its text); whole solutions ending with
    EOS or LENGTH; prompt counts that add up to a prompt (and the same one each time it is
    asked) and ``generated_tokens`` no smaller than the samples; temperature 0 giving the same
    samples whatever the seed. With ``reproducible`` (the contract's "same request, same seed,
    same samples"; pass False for a server that ignores seeds) the same requests give the same
    samples again, in another batch, one at a time and without log-probabilities
    (``logprobs=False``, whose samples carry ``logprob`` NaN or the same values).

    Raises:
        ConformanceError: naming the broken rule and the fix.
    """
    check = f"check_policy({type(policy).__name__})"
    hooks = policy_hooks(policy)  # an old-style backend's plain attributes warn here
    for name in ("parallel_calls", "computes_on_host_cpu"):
        if not isinstance(getattr(hooks, name), bool):
            _fail(check, f"{name} is {getattr(hooks, name)!r}",
                  "declare the hooks by subclassing prmsearch.backend_hooks.PolicyBackend (bool properties)")
    if not isinstance(policy, Policy):
        _fail(check, "the object has no generate() or no num_parameters", "implement the Policy protocol")
    params = policy.num_parameters
    if isinstance(params, bool) or not isinstance(params, (int, np.integer)) or params <= 0:
        _fail(check, f"num_parameters is {params!r}", "return the model's parameter count (an int > 0)")
    sampling = sampling or SamplingParams(temperature=0.8, max_new_tokens=64)
    whole = replace(sampling, max_new_tokens=solution_tokens)
    steps = tuple(steps)
    batch = [
        GenerationRequest(question, steps, 2, sampling, seed=11),
        GenerationRequest(question, steps, 3, whole, seed=12, stop_at_step=False),
    ]
    if token_limit is not None:
        batch.append(GenerationRequest(question, steps, 1, replace(sampling, max_new_tokens=token_limit),
                                       seed=13))
    first = _generate(check, policy, batch, "the first batch")
    follow = [s.text for s in first[0].samples if s.text.strip() and s.finish is Finish.STEP]
    second_batch = [batch[0]]
    if follow:
        second_batch.insert(0, GenerationRequest(question, (*steps, follow[0]), 1, sampling, seed=14))
    second = _generate(check, policy, second_batch, "the second batch")
    again = second[-1]
    length = first[0].prompt_tokens_computed + first[0].prompt_tokens_cached
    if again.prompt_tokens_computed + again.prompt_tokens_cached != length:
        _fail(check, f"the same prompt counted {length} tokens, then "
                     f"{again.prompt_tokens_computed + again.prompt_tokens_cached}",
              "report the prompt length once per request as computed + cached")
    greedy = replace(sampling, temperature=0.0)
    pair = [GenerationRequest(question, steps, 1, greedy, seed=s) for s in (21, 22)]
    g1, g2 = _generate(check, policy, pair, "two temperature-0 requests")
    _same_samples(check, g1, g2, "temperature 0 with seeds 21 and 22", logprob_tolerance,
                  "at temperature 0 decode greedily: the seed must not matter")
    if not reproducible:
        return
    fix = ("a sample must depend only on its request, its seed and its index (not on the batch or "
           "earlier calls); if the backend cannot promise that, pass reproducible=False")
    _same_samples(check, first[0], again, "request 0 asked again in another batch", logprob_tolerance, fix)
    (bare,) = _generate(check, policy, [replace(batch[0], logprobs=False)], "request 0 without logprobs")
    keys = [_sample_key(s) for s in first[0].samples]
    if [_sample_key(s) for s in bare.samples] != keys:
        _fail(check, "request 0 asked without log-probabilities (logprobs=False) gave other samples",
              "logprobs=False may only skip the log-probabilities; the samples must stay the same")
    for i, request in enumerate(batch):
        (alone,) = _generate(check, policy, [request], f"request {i} alone")
        _same_samples(check, first[i], alone, f"request {i} alone vs in the batch", logprob_tolerance, fix)


# =============================================================================================
# Scorers
# =============================================================================================


def _score(check: str, scorer: Scorer, requests: list[ScoreRequest], what: str) -> list[np.ndarray]:
    """Score ``requests``, check every result, and return the score arrays."""
    results = _batch_call(check, "score", scorer.score, requests, what, "StepScores", "results")
    arrays = []
    for i, (request, result) in enumerate(zip(requests, results)):
        label = f"request {i} of {what}"
        if not isinstance(result, StepScores):
            _fail(check, f"{label} is {type(result).__name__}", "return StepScores")
        values = np.asarray(result.scores, dtype=np.float64)
        if values.shape != (len(request.steps),):
            _fail(check, f"{label}: scores of shape {values.shape} for {len(request.steps)} step(s)",
                  "return one score per step (a 1-D array)")
        if not np.all(np.isfinite(values)) or np.any(values < 0) or np.any(values > 1):
            _fail(check, f"{label}: scores {values.tolist()} are not all probabilities",
                  "map the PRM's outputs to a probability in [0, 1] per step")
        for name in ("tokens_computed", "tokens_cached"):
            value = getattr(result, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                _fail(check, f"{label}: {name} is {value!r}",
                      "count tokens as Python ints >= 0 (the ledger is saved as JSON)")
        arrays.append(values)
    return arrays


def _clear(scorer: object) -> None:
    clear = getattr(scorer, "clear_caches", None)
    if callable(clear):
        clear()


def check_scorer(
    scorer: Scorer,
    *,
    question: str = DEFAULT_QUESTION,
    steps: Sequence[str] = DEFAULT_STEPS,
    tolerance: float = 1e-4,
) -> None:
    """Check a scorer against the ``Scorer`` contract of ``prmsearch.scorers.base``, and its
    hooks (`prmsearch.backend_hooks.ScorerBackend`, as `check_policy` does).

    Scores every prefix of ``steps`` plus the full path twice, in one batch of mixed lengths.
    Verifies ``num_parameters`` is an int >= 0; one ``StepScores`` per request, in order, with
    one finite score in [0, 1] per step and token counts that are ints >= 0; and that the batch
    gives the same scores (within ``tolerance``) as the requests one at a time and as the batch
    again. A ``clear_caches()`` method, when the scorer has one, is called before each of the
    first two, so both are computed rather than served from a cache.

    Raises:
        ConformanceError: naming the broken rule and the fix.
    """
    check = f"check_scorer({type(scorer).__name__})"
    hooks = scorer_hooks(scorer)  # an old-style backend's plain attributes warn here
    for name in ("reads_policy_logprobs", "computes_on_host_cpu"):
        if not isinstance(getattr(hooks, name), bool):
            _fail(check, f"{name} is {getattr(hooks, name)!r}",
                  "declare the hooks by subclassing prmsearch.backend_hooks.ScorerBackend (bool properties)")
    if not isinstance(scorer, Scorer):
        _fail(check, "the object has no score() or no num_parameters", "implement the Scorer protocol")
    params = scorer.num_parameters
    if isinstance(params, bool) or not isinstance(params, (int, np.integer)) or params < 0:
        _fail(check, f"num_parameters is {params!r}", "return the parameter count (an int >= 0)")
    steps = tuple(steps)
    if not steps:
        raise ValueError("check_scorer needs at least one step")
    paths = [steps, *(steps[:k] for k in range(1, len(steps))), steps]
    requests = [ScoreRequest(question, path) for path in paths]
    _clear(scorer)
    batched = _score(check, scorer, requests, "the batch")
    _clear(scorer)
    alone = [_score(check, scorer, [r], f"request {i} alone")[0] for i, r in enumerate(requests)]
    warm = _score(check, scorer, requests, "the batch again")
    for i, (a, b, c) in enumerate(zip(batched, alone, warm)):
        if np.max(np.abs(a - b)) > tolerance:
            _fail(check, f"request {i}: {a.tolist()} in the batch, {b.tolist()} alone",
                  "a request's scores must not depend on the other requests of its batch")
        if np.max(np.abs(a - c)) > tolerance:
            _fail(check, f"request {i}: {a.tolist()}, then {c.tolist()} for the same batch",
                  "scores must not change between calls (check what a cache returns)")


# =============================================================================================
# Datasets
# =============================================================================================


def _dataset_source(check: str, name_or_path: str | Path, path: str | Path | None
                    ) -> tuple[str, str | Path | None]:
    """(registered name, path) for a dataset name or a JSONL file."""
    known = dataset_names()
    if isinstance(name_or_path, str) and name_or_path in known:
        return name_or_path, path
    candidate = Path(name_or_path)
    if candidate.suffix == ".jsonl" or candidate.is_file():
        return "jsonl", candidate
    _fail(check, f"{str(name_or_path)!r} is neither a registered dataset ({', '.join(known)}) "
                 "nor a JSONL file", "register it with register_dataset(DatasetSpec(...)) or give a path")


def _check_gold(check: str, label: str, gold: str, timeout_s: float) -> None:
    """The gold is an answer (not a solution) that the grader reads back from a boxed response."""
    if "\n" in gold.strip():
        _fail(check, f"{label}: the gold {gold!r:.120} spans several lines, like a worked solution",
              "store the final answer only (a DatasetSpec's parse_answer can cut it out of a solution)")
    inside = extract_answer(gold)
    if inside is not None and not is_equivalent(inside, gold, timeout_s=timeout_s):
        _fail(check, f"{label}: the gold {gold!r:.120} holds its own final answer {inside!r:.60}",
              "store the final answer only (a DatasetSpec's parse_answer can cut it out of a solution)")
    if not grade(f"The answer is \\boxed{{{gold}}}.", gold, timeout_s=timeout_s):
        _fail(check, f"{label}: a response boxing the gold {gold!r:.120} is graded wrong",
              "store the answer as LaTeX the grader reads back (balanced braces)")


def check_dataset(
    name_or_path: str | Path,
    *,
    path: str | Path | None = None,
    split: str | None = None,
    limit: int | None = None,
    question_field: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
    timeout_s: float = 5.0,
) -> None:
    """Check a registered dataset (by name, with ``path`` where its file lives) or a JSONL file.

    Loads it twice through ``prmsearch.benchmarks.load_dataset`` and verifies that it loads, holds
    at least one problem, gives the same problems in the same order both times, and that every
    problem has a unique non-blank ``id``, a non-blank ``question`` and a gold ``answer`` that
    is an answer rather than a worked solution (one line, not holding a different final answer of
    its own) and that the grader marks right when a response boxes it
    (``grade("The answer is \\boxed{<gold>}.", gold)``).

    Raises:
        ConformanceError: naming the broken rule (and the row) and the fix.
    """
    check = f"check_dataset({str(name_or_path)!r})"
    name, source = _dataset_source(check, name_or_path, path)
    kwargs: dict[str, Any] = {"split": split, "limit": limit, "question_field": question_field,
              "answer_field": answer_field, "id_field": id_field}
    loads: list[list[Any]] = []
    for _ in range(2):
        try:
            loads.append(list(load_dataset(name, source, **kwargs)))
        except Exception as exc:
            _fail(check, f"loading failed: {type(exc).__name__}: {exc}",
                  "fix the rows or the loader named in the message")
    problems = loads[0]
    if not problems:
        _fail(check, "it loaded no problem", "point it at a file with rows (or drop the filters)")
    seen: dict[str, int] = {}
    for i, problem in enumerate(problems):
        label = f"problem {i}"
        for attr in ("id", "question", "answer"):
            value = getattr(problem, attr, None)
            if not isinstance(value, str) or not value.strip():
                _fail(check, f"{label} has a blank or missing {attr} ({value!r:.60})",
                      f"give every row a non-empty {attr} (build rows as prmsearch.benchmarks.Problem)")
        if problem.id in seen:
            _fail(check, f"{label} repeats the id {problem.id!r} of problem {seen[problem.id]}",
                  "ids key the results files: make them unique")
        seen[problem.id] = i
        _check_gold(check, f"{label} ({problem.id})", problem.answer, timeout_s)
    ids = [(p.id, p.question, p.answer) for p in problems]
    if ids != [(p.id, p.question, p.answer) for p in loads[1]]:
        _fail(check, "two loads gave different problems or orders",
              "load deterministically (a seeded shuffle at most): resumed runs match rows by id")

