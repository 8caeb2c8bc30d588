"""How strategies talk to the driver, and the strategy registry.

A strategy is a generator function ``algorithm(tree, config, rng)``: it yields :class:`Expand`
requests, receives for each requested ``(node, count)`` the ids of the new children (already
generated, written into the tree and scored), and finally returns a :class:`Choice`. It never
touches a backend, a tokenizer or I/O, so the driver is free to batch across problems.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.registry import Registry
from prmsearch.tree import SearchTree


@dataclass(frozen=True, slots=True)
class Expand:
    """Ask for children: ``count`` new samples below ``node`` for every ``(node, count)``.

    The same node may appear several times (independent requests, e.g. DVTS subtrees sharing
    the root). With ``full_solution`` each sample runs to the end of the solution and becomes a
    chain of step nodes; the strategy receives the last node of each chain. ``greedy`` asks for
    temperature-0 decoding instead of the run's sampling temperature.
    """

    requests: tuple[tuple[int, int], ...]
    full_solution: bool = False
    greedy: bool = False


@dataclass(frozen=True, slots=True)
class Choice:
    """A strategy's result: the chosen node and the candidates it was chosen from.

    ``report`` holds what the strategy wants a reader to know about how it got there, as
    ``(key, value)`` pairs of JSON scalars (e.g. the planner's difficulty bin and the arm it ran);
    it reaches :attr:`SearchResult.report` and a bench row's ``report``. Most strategies leave it
    empty.
    """

    node: int
    candidates: tuple[int, ...]
    report: tuple[tuple[str, Any], ...] = ()


SearchGenerator = Generator[Expand, list[list[int]], Choice]
Algorithm = Callable[[SearchTree, Any, np.random.Generator], SearchGenerator]


@dataclass(frozen=True)
class StrategySpec:
    """A registered strategy: its config class, its algorithm, a one-line summary and the options
    that may be given as a file (``file_options``: option name -> reader of that file)."""

    name: str
    config_cls: type
    algorithm: Algorithm
    summary: str
    file_options: Mapping[str, Callable[[Path], Any]] = dataclasses.field(default_factory=dict)

    def configure(self, **overrides: Any) -> BoundStrategy:
        """Build the config from defaults plus ``overrides``; unknown options are errors."""
        known = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"strategy {self.name!r} has no option(s) {', '.join(unknown)}; "
                f"its options are: {', '.join(sorted(known))}"
            )
        return BoundStrategy(self, self.config_cls(**overrides))

    @property
    def fixed_budget(self) -> int | None:
        """The one budget the strategy runs at (greedy: 1), or None when any budget is its ``n``."""
        return getattr(self.config_cls, "fixed_budget", None)

    @property
    def sample_family(self) -> str | None:
        """The strategy's sample family (see `SearchConfig.sample_family`), or None."""
        return getattr(self.config_cls, "sample_family", None)

    def budget_options(self, budget: int, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The options of this strategy at ``budget``: what the config's budget rule derives
        (``budget_options``; a config without one: ``n``), then ``options`` on top, except that
        the budget always decides ``n``."""
        rule = getattr(self.config_cls, "budget_options", None)
        derived = dict(rule(budget)) if rule is not None else {"n": budget}
        merged = {**derived, **dict(options or {})}
        if "n" in derived:
            merged["n"] = derived["n"]
        return merged

    def read_option(self, name: str, value: object) -> object:
        """An option as a user gives it (command line, recipe): one registered in
        ``file_options`` and given as a path is read here, at the boundary, and replaced by what
        its reader returns (the planner's ``plan`` file becomes the plan's data, so a run's
        manifest records the plan, not a path); every other value is returned unchanged (the
        config validates it). Strategies themselves never read files."""
        reader = self.file_options.get(name)
        if reader is None or not isinstance(value, (str, Path)):
            return value
        return reader(Path(value).expanduser())

    def at_budget(self, budget: int, **options: Any) -> BoundStrategy:
        """The strategy at ``budget`` with ``options`` (see `budget_options`), validated."""
        return self.configure(**self.budget_options(budget, options))

    def options(self) -> list[tuple[str, Any, str]]:
        """(name, default, type) of every config field, for listings."""
        rows = []
        for f in dataclasses.fields(self.config_cls):
            default = f.default if f.default is not dataclasses.MISSING else None
            if isinstance(default, str) and hasattr(default, "value"):
                default = default.value
            rows.append((f.name, default, str(f.type)))
        return rows


@dataclass(frozen=True)
class BoundStrategy:
    """A strategy with its validated config, ready to run on many trees."""

    spec: StrategySpec
    config: Any

    @property
    def name(self) -> str:
        return self.spec.name

    def options(self) -> dict[str, Any]:
        """Every option of the bound config by name (what ``spec.configure(**options)`` rebuilds)."""
        return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}

    @property
    def needs_scores(self) -> bool:
        """Whether the driver must score this strategy's steps (configs say so with a
        ``needs_scores`` property; one without it is assumed to read scores)."""
        return bool(getattr(self.config, "needs_scores", True))

    @property
    def needs_logprobs(self) -> bool:
        """Whether this strategy reads the policy's log-probabilities (configs say so with a
        ``reads_policy_logprobs`` property; one without it reads none). The driver asks the
        policy for them only when the strategy or the scorer reads them: they cost a server
        about a tenth of its tokens/s."""
        return config_reads_logprobs(self.config)

    def start(self, tree: SearchTree, rng: np.random.Generator) -> SearchGenerator:
        """A fresh search generator over ``tree``."""
        return self.spec.algorithm(tree, self.config, rng)


STRATEGIES: Registry[StrategySpec] = Registry("strategy")


def config_reads_logprobs(config: Any) -> bool:
    """Whether a strategy config reads the policy's log-probabilities (its
    ``reads_policy_logprobs`` attribute; False without one)."""
    return bool(getattr(config, "reads_policy_logprobs", False))


def register_strategy(
    name: str,
    config_cls: type,
    algorithm: Algorithm,
    summary: str = "",
    *,
    replace: bool = False,
    file_options: Mapping[str, Callable[[Path], Any]] | None = None,
) -> None:
    """Register a strategy under ``name`` (its config class must be a dataclass).
    ``file_options`` names options a user may give as a file path, each with the function that
    reads it into the option's value (see :meth:`StrategySpec.read_option`)."""
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"config_cls of strategy {name!r} must be a dataclass, got {config_cls!r}")
    summary = summary or (algorithm.__doc__ or "").strip()
    spec = StrategySpec(name, config_cls, algorithm, summary, dict(file_options or {}))
    STRATEGIES.register(name, spec, spec.summary.split("\n")[0], replace=replace)


def strategy_spec(name: str) -> StrategySpec:
    """The spec registered under ``name`` (an unknown name lists the known ones)."""
    spec: StrategySpec = STRATEGIES.get(name)
    return spec


def make_strategy(name: str, /, **options: Any) -> BoundStrategy:
    """A strategy by name with its options, e.g. ``make_strategy("beam", n=16, width=4)``."""
    return strategy_spec(name).configure(**options)


def strategy_names() -> list[str]:
    """Names of all registered strategies."""
    return STRATEGIES.names()


def as_strategy(strategy: str | BoundStrategy, options: Mapping[str, Any]) -> BoundStrategy:
    """Accept a name plus options or an already-bound strategy (then options must be empty)."""
    if isinstance(strategy, BoundStrategy):
        if options:
            raise ValueError("pass options either in make_strategy() or here, not both")
        return strategy
    return make_strategy(strategy, **options)
