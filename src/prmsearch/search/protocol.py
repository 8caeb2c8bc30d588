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
from typing import Any, ClassVar

import numpy as np

from prmsearch.registry import Registry
from prmsearch.search.aggregation import Aggregation
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


class StrategyConfig:
    """Every hook the driver, the sweeps and the server read from a strategy's options, each with
    its default; a config class overrides the ones that differ. `SearchConfig` (``n``,
    ``aggregation``, ``selection``) is the usual base; a plain dataclass registered as a config
    gets these defaults mixed in (`register_strategy`)."""

    #: the one budget the strategy runs at (greedy: 1), or None when any budget is its ``n``
    fixed_budget: ClassVar[int | None] = None
    #: strategies of one sample family whose configs differ only in ``selection`` draw the same
    #: samples, so a sweep runs one of them and re-selects the others' rows (None: no family)
    sample_family: ClassVar[str | None] = None

    @classmethod
    def budget_options(cls, budget: int) -> dict[str, Any]:
        """The options a budget of ``budget`` generations sets: ``n`` here; beam, DVTS and MCTS
        also derive their width. `bench`, `serve` and the API all build a strategy at a budget
        through this rule (`StrategySpec.at_budget`), so one id means one search everywhere."""
        if cls.fixed_budget is not None:
            if budget != cls.fixed_budget:
                raise ValueError(f"this strategy runs at budget {cls.fixed_budget} only, got {budget}")
            return {}
        return {"n": budget}

    @property
    def needs_scores(self) -> bool:
        """Whether the strategy reads step scores. The driver asks the PRM only when it does, so a
        PRM-free strategy is charged no PRM compute."""
        return True

    @property
    def reads_policy_logprobs(self) -> bool:
        """Whether the strategy reads the policy's log-probabilities. The driver asks the policy
        for them only when the strategy or the scorer reads them: they cost a server about a
        tenth of its tokens/s."""
        return False

    @property
    def path_aggregation(self) -> Aggregation:
        """How a result's path score combines its step scores."""
        return Aggregation.MIN


def with_hooks(config_cls: type) -> type[StrategyConfig]:
    """``config_cls`` itself when it is a `StrategyConfig`, else the same dataclass with the
    hooks' defaults mixed in (what it defines itself still wins)."""
    if issubclass(config_cls, StrategyConfig):
        return config_cls
    names = {"__module__": config_cls.__module__, "__qualname__": config_cls.__qualname__,
             "__doc__": config_cls.__doc__}
    return type(config_cls.__name__, (config_cls, StrategyConfig), names)


SearchGenerator = Generator[Expand, list[list[int]], Choice]
Algorithm = Callable[[SearchTree, Any, np.random.Generator], SearchGenerator]


@dataclass(frozen=True)
class StrategySpec:
    """A registered strategy: its config class, its algorithm, a one-line summary and the options
    that may be given as a file (``file_options``: option name -> reader of that file)."""

    name: str
    config_cls: type[Any]
    algorithm: Algorithm
    summary: str
    file_options: Mapping[str, Callable[[Path], Any]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_cls", with_hooks(self.config_cls))

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
        budget: int | None = self.config_cls.fixed_budget
        return budget

    @property
    def sample_family(self) -> str | None:
        """The strategy's sample family (see `StrategyConfig.sample_family`), or None."""
        family: str | None = self.config_cls.sample_family
        return family

    def budget_options(self, budget: int, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The options of this strategy at ``budget``: what the config's budget rule derives
        (`StrategyConfig.budget_options`), then ``options`` on top, except that the budget
        always decides ``n``."""
        derived = dict(self.config_cls.budget_options(budget))
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
    config: Any  # a dataclass with the `StrategyConfig` hooks (each strategy's own fields)

    @property
    def name(self) -> str:
        return self.spec.name

    def options(self) -> dict[str, Any]:
        """Every option of the bound config by name (what ``spec.configure(**options)`` rebuilds)."""
        return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}

    @property
    def needs_scores(self) -> bool:
        """Whether the driver must score this strategy's steps (`StrategyConfig.needs_scores`)."""
        return bool(self.config.needs_scores)

    @property
    def needs_logprobs(self) -> bool:
        """Whether this strategy reads the policy's log-probabilities
        (`StrategyConfig.reads_policy_logprobs`)."""
        return bool(self.config.reads_policy_logprobs)

    def start(self, tree: SearchTree, rng: np.random.Generator) -> SearchGenerator:
        """A fresh search generator over ``tree``."""
        return self.spec.algorithm(tree, self.config, rng)


STRATEGIES: Registry[StrategySpec] = Registry("strategy")


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
