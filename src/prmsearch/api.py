"""The public entry points: ``solve`` for one question and ``Searcher`` as a decoding layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from prmsearch.answers import AnswerMatcher
from prmsearch.backend_hooks import policy_hooks
from prmsearch.engines.backend_pair import close_together
from prmsearch.policies.base import POLICIES, Policy, SamplingParams, make_policy
from prmsearch.scorers import backend_scorer
from prmsearch.scorers.base import SCORERS, NoScorer, Scorer, make_scorer
from prmsearch.search.driver import Driver, RunConfig, RunStats, SearchResult
from prmsearch.search.ledger import Ledger
from prmsearch.search.protocol import BoundStrategy, as_strategy, strategy_spec
from prmsearch.search.session import DriverSession, Progress
from prmsearch.seeding import problem_seed


def _looks_local(name: str) -> bool:
    """Whether a model name is meant as a local folder (a Hub id is ``owner/name``)."""
    return name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1


def _check_model_path(name: str, kind: str, names: Sequence[str]) -> None:
    """Refuse a model ``name`` that is a local path which does not exist, before any loader
    (which would import torch and fail with a Hub error about repo ids)."""
    if _looks_local(name) and not Path(name).expanduser().exists():
        raise ValueError(
            f"{kind} {name!r} is neither a registered {kind} name ({', '.join(names)}) nor an existing "
            "model folder; give one of those names, a model folder, or a Hub id such as 'owner/model'"
        )


class MissingModelError(ValueError):
    """A registered backend (``kind`` "policy" or "scorer") named ``name`` needs a model path."""

    def __init__(self, message: str, *, kind: str, name: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name


def _needs_model(exc: TypeError) -> bool:
    """Whether a factory's TypeError says a required ``model`` argument was not given."""
    return "required" in str(exc) and "'model'" in str(exc)


def resolve_policy(policy: Policy | str | None, backend: str | None = None, **kwargs: Any) -> Policy:
    """A policy object as is; a registered backend name; otherwise a model path for ``backend``
    (``hf`` by default).

    ``None`` means the embedded default (the project's tiny arithmetic policy). A local path
    that does not exist, and a backend name without the model it needs, are ValueErrors. This is
    the one place policies are built from names: `solve`, the command line, sweeps and recipes
    all come here.
    """
    if backend is not None and isinstance(policy, str):
        POLICIES.entry(backend)  # an unknown backend lists the known ones
        return make_policy(backend, model=policy, **kwargs)
    if policy is None:
        return make_policy("arith", **kwargs)
    if isinstance(policy, str):
        if policy in POLICIES:
            try:
                return make_policy(policy, **kwargs)
            except TypeError as exc:
                if "model" in kwargs or not _needs_model(exc):
                    raise
                raise MissingModelError(
                    f"policy backend {policy!r} needs a model: pass resolve_policy({policy!r}, model=...)",
                    kind="policy",
                    name=policy,
                ) from exc
        _check_model_path(policy, "policy", POLICIES.names())
        return make_policy("hf", model=policy, **kwargs)
    return policy


def resolve_scorer(scorer: Scorer | str | None, family: str | None = None, backend: str | None = None,
                   **kwargs: Any) -> Scorer:
    """A scorer object as is; a registered name; otherwise a model path for PRM ``family`` on
    ``backend`` (``hf`` by default; ``vllm`` or ``vllm-server`` for the families they run).

    ``None`` means the embedded default PRM, or with a ``family`` that scorer without a model
    (e.g. ``policy-confidence``). A model path needs ``family`` (e.g. "qwen-prm"): the family is
    never guessed from the model's name. The one place scorers are built from names.
    """
    if backend not in (None, "hf"):
        if family is None:
            raise ValueError(f"a PRM on the {backend} backend needs its family (e.g. qwen-prm)")
        name = backend_scorer(backend, family)
        if backend == "vllm-server":
            kwargs = {**kwargs, "family": family}
        return make_scorer(name, **kwargs) if scorer is None else make_scorer(name, model=scorer, **kwargs)
    if scorer is None and family is not None:
        scorer, family = family, None  # a scorer named by its family alone (it may need no model)
    if scorer is None:
        return make_scorer("arith", **kwargs)
    if isinstance(scorer, str):
        if scorer in SCORERS:
            try:
                return make_scorer(scorer, **kwargs)
            except TypeError as exc:
                if "model" in kwargs or not _needs_model(exc):
                    raise
                raise MissingModelError(
                    f"scorer {scorer!r} needs a model: pass the PRM model with its family, "
                    f"resolve_scorer(<model path or Hub id>, family={scorer!r})",
                    kind="scorer",
                    name=scorer,
                ) from exc
        if family is None:
            raise ValueError(
                f"scorer {scorer!r} is not a registered scorer name; to load it as a model, "
                f"also give its PRM family (one of {', '.join(SCORERS.names())})"
            )
        SCORERS.entry(family)  # an unknown family lists the known ones
        _check_model_path(scorer, "scorer", SCORERS.names())
        return make_scorer(family, model=scorer, **kwargs)
    return scorer


def reads_no_scores(strategies: Sequence[BoundStrategy], *named: object) -> bool:
    """Whether a search needs no scorer at all: nothing in ``named`` (the scorer, family or
    server the caller was given) is set, and no strategy reads step scores (greedy,
    self-consistency), so no PRM is loaded and :class:`NoScorer` stands in."""
    return all(value is None for value in named) and not any(s.needs_scores for s in strategies)


def check_questions(questions: Sequence[str]) -> None:
    """Refuse a question that is not a string, holds nothing but whitespace or is not text (a lone
    surrogate, which no tokenizer encodes), by its index."""
    for index, question in enumerate(questions):
        if not isinstance(question, str):
            raise ValueError(f"question {index} must be a string, got {type(question).__name__}")
        if not question.strip():
            what = "empty" if not question else f"blank ({question!r:.40})"
            raise ValueError(f"question {index} is {what}; give the question text")
        try:
            question.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no tokenizer can encode it
            raise ValueError(
                f"question {index} holds a lone surrogate ({question[exc.start]!r} at character "
                f"{exc.start}), which is not text; decode the input as UTF-8 (errors='replace' keeps "
                "the rest of it)"
            ) from None


class Searcher:
    """One strategy over batched backends, reusable across calls: a decoding layer.

    ``annotate(question)`` may return a note that is added to a result's ``notes``; by default it
    is the policy's own ``domain_note`` when the backend has one (the embedded models do).

    Example::

        with Searcher(policy, scorer, "beam", n=16, width=4) as searcher:
            results = searcher.run(["What is 2+3?", "What is 7*6?"])   # one batched search

    The ``with`` block (or :meth:`close`) closes the policy and the scorer at its end, however it
    ends: an engine's processes never outlive the searcher that was closed.
    """

    def __init__(
        self,
        policy: Policy,
        scorer: Scorer,
        strategy: str | BoundStrategy = "beam",
        *,
        sampling: SamplingParams | None = None,
        max_depth: int = 32,
        solution_max_tokens: int = 2048,
        stop_on_answer: bool = True,
        overlap: int = 1,
        schedule: str = "auto",
        max_batch: int | None = None,
        policy_logprobs: str = "auto",
        seed: int = 0,
        matcher: AnswerMatcher | None = None,
        annotate: Callable[[str], str | None] | None = None,
        **options: Any,
    ) -> None:
        self.policy = policy
        self.scorer = scorer
        self.strategy = as_strategy(strategy, options)
        self.config = RunConfig(
            sampling=sampling or SamplingParams(),
            max_depth=max_depth,
            solution_max_tokens=solution_max_tokens,
            stop_on_answer=stop_on_answer,
            overlap=overlap,
            schedule=schedule,
            max_batch=max_batch,
            policy_logprobs=policy_logprobs,
        )
        self.seed = seed
        self.matcher = matcher or AnswerMatcher()
        # A backend may carry its own note for questions outside what its models know.
        self.annotate = annotate if annotate is not None else policy_hooks(policy).domain_note
        self.last_stats: RunStats | None = None
        self.last_ledger: Ledger | None = None

    def run(
        self,
        questions: Sequence[str],
        *,
        seeds: Sequence[int] | None = None,
        on_result: Callable[[int, SearchResult], None] | None = None,
    ) -> list[SearchResult]:
        """Search all ``questions`` together (one batched backend call per round).

        An empty or blank question is a ValueError naming its index (its search would only
        fail much later, in the PRM).
        """
        questions = list(questions)
        check_questions(questions)
        if seeds is None:
            seeds = [problem_seed(self.seed, q) for q in questions]
        driver = Driver(self.policy, self.scorer, self.config, self.matcher)
        notify = on_result
        annotate = self.annotate
        if annotate is not None:

            def notify(index: int, result: SearchResult) -> None:
                note = annotate(result.question)
                if note:
                    result.notes.append(note)
                if on_result is not None:
                    on_result(index, result)

        results = driver.run(questions, self.strategy, seeds, on_result=notify)
        self.last_stats = driver.stats
        self.last_ledger = Ledger.total((r.ledger for r in results), wall_s=driver.stats.wall_s)
        return results

    def __call__(self, question: str) -> SearchResult:
        """Search one question."""
        return self.run([question])[0]

    def close(self) -> None:
        """Close the policy and the scorer (their engines' processes, their HTTP pools), both at
        once; the searcher cannot search afterwards."""
        close_together(self.policy, self.scorer)

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self) -> SearchSession:
        """An open search that questions join as they come (a server's, or a caller's that gets
        questions one at a time): concurrent questions share the backends' batches.

        Example::

            with searcher.session() as session:
                futures = [session.submit(q) for q in questions]   # from any threads
                answers = [f.result().answer for f in futures]
        """
        return SearchSession(self)


class SearchSession:
    """A `Searcher`'s open search (see `Searcher.session`); close it, or use it in ``with``: a block
    that ends normally waits for the questions submitted in it, one left by an error (Ctrl-C,
    SIGTERM) drops them."""

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher
        driver = Driver(searcher.policy, searcher.scorer, searcher.config, searcher.matcher)
        self._session = DriverSession(driver, annotate=searcher.annotate)

    def __enter__(self) -> SearchSession:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._session.__exit__(exc_type, *exc)  # on an error, the submitted questions are dropped

    @property
    def pending(self) -> int:
        """Questions submitted and not finished yet."""
        return self._session.pending

    def submit(
        self,
        question: str,
        *,
        seed: int | None = None,
        strategy: str | BoundStrategy | None = None,
        **options: Any,
    ) -> Future[SearchResult]:
        """Add a question to the running search; a ``Future`` of its `SearchResult`.

        ``strategy`` and ``options`` (``n=8``, ``width=2``...) override the searcher's for this
        question only; ``seed`` defaults to the searcher's seed mixed with the question, as in
        `Searcher.run`. Cancelling the future drops the question's remaining work.
        """
        check_questions([question])
        bound = self.searcher.strategy
        if strategy is not None:
            bound = as_strategy(strategy, options)
        elif options:  # the searcher's strategy and options, these ones changed
            bound = bound.spec.configure(**{**bound.options(), **options})
        if seed is None:
            seed = problem_seed(self.searcher.seed, question)
        return self._session.submit(question, bound, seed)

    def progress(self, future: Future[SearchResult]) -> Progress | None:
        """How far a submitted question's search has come (None once finished)."""
        return self._session.progress(future)

    def solve(self, question: str, **kwargs: Any) -> SearchResult:
        """Submit one question and wait for its result."""
        return self.submit(question, **kwargs).result()

    def close(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Take no more questions; with ``wait``, return once the submitted ones have finished (or
        after ``timeout`` seconds); True when nothing is left running."""
        return self._session.close(wait, timeout)


def solve(
    question: str,
    policy: Policy | str | None = None,
    scorer: Scorer | str | None = None,
    strategy: str | BoundStrategy = "beam",
    n: int | None = None,
    *,
    prm_family: str | None = None,
    sampling: SamplingParams | None = None,
    max_depth: int = 32,
    seed: int = 0,
    **options: Any,
) -> SearchResult:
    """Solve one question with search and return the answer, path, step scores, tree and ledger.

    ``policy`` and ``scorer`` default to the embedded arithmetic models (no scorer at all for a
    strategy that reads no scores, such as greedy); a policy or scorer named here (a model path,
    a backend name) is loaded for this question and closed before it returns, one passed as an
    object is left open for the caller. ``n`` is the budget, read by the strategy's
    budget rule as ``prmsearch bench`` reads it (beam and DVTS: ``width = gcd(n, 4)``; None: the
    strategy's own default, 16 for the searches and 1 for greedy); strategy options
    (``width=4``, ``aggregation="min"``, ...) pass through ``options``.
    """
    if not isinstance(strategy, BoundStrategy):
        if n is None or "n" in options:
            strategy = as_strategy(strategy, options)
        else:  # a budget, through the strategy's own rule (as bench and serve read it)
            strategy = strategy_spec(strategy).at_budget(n, **options)
    bound = strategy
    built: list[object] = []  # the backends loaded here, closed here
    try:
        policy_object = resolve_policy(policy)
        if policy_object is not policy:
            built.append(policy_object)
        scorer_object = NoScorer() if reads_no_scores([bound], scorer, prm_family) \
            else resolve_scorer(scorer, prm_family)
        if scorer_object is not scorer:
            built.append(scorer_object)
        searcher = Searcher(policy_object, scorer_object, bound, sampling=sampling, max_depth=max_depth,
                            seed=seed)
        return searcher(question)
    finally:
        close_together(*built)
