"""What a sweep runs: the strategies, budgets, seeds, backends and options, and which cells run.

Kept apart from the sweep runner so that the best-of-N-family derivation (``subsample``) and the
runner (``sweep``) both read it without importing each other. ``family_sources`` lives here because
it decides which cells a sweep runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prmsearch.policies.base import SamplingParams
from prmsearch.search.protocol import strategy_spec

#: Strategies whose candidates are independent whole solutions from one round.
SUBSAMPLABLE = ("best_of_n", "self_consistency", "weighted_vote")

DEFAULT_STRATEGIES = (
    "greedy",
    "self_consistency",
    "best_of_n",
    "weighted_vote",
    "beam",
    "dvts",
    "mcts",
    "particle_filter",
    "rebase",
)
_WIDTH_OPTION = {"beam": "width", "dvts": "width", "mcts": "expansion_width"}


@dataclass(frozen=True)
class SweepConfig:
    """What a sweep runs; recorded in the manifest, so a resume must match it exactly.

    Attributes:
        dataset: dataset name (see ``prmsearch.benchmarks.datasets``), ``arith`` by default.
        dataset_path: a local file for the dataset (default: its standard location).
        split: dataset split where the dataset has several (``arith``: test).
        limit: use only the first ``limit`` problems (after the seeded shuffle, if any).
        shuffle_seed: shuffle the problems with this seed before ``limit``.
        strategies: strategy names.
        budgets: values of each strategy's ``n``; ``greedy`` runs once, at budget 1.
        seeds: run seeds; a problem's seed derives from the run seed and its question.
        policy, policy_backend, prm, prm_family: backends (None: the embedded defaults).
        temperature, top_p, max_step_tokens, delimiter, max_depth: sampling and search limits.
        options: per-strategy options, e.g. ``{"beam": {"aggregation": "last"}}``; beam and
            DVTS default to ``width = gcd(n, 4)``, MCTS to ``expansion_width = clip(n // 4, 1, 4)``.
        chunk: problems per batched driver run.
        subsample_bon: run the best-of-N family (best_of_n, self_consistency, weighted_vote)
            only at the largest budget and derive the smaller budgets by subsampling its
            candidates (rows marked ``subsampled``; see ``prmsearch.benchmarks.subsample``);
            family members that draw the same samples (configs equal but for the selection) run
            once, the others' rows at every budget are re-selected from its candidates.
    """

    dataset: str = "arith"
    dataset_path: str | None = None
    split: str | None = None
    limit: int | None = None
    shuffle_seed: int | None = None
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    budgets: tuple[int, ...] = (1, 4, 16)
    seeds: tuple[int, ...] = (0,)
    policy: str | None = None
    policy_backend: str | None = None
    prm: str | None = None
    prm_family: str | None = None
    temperature: float = 0.8
    top_p: float = 1.0
    max_step_tokens: int = 256
    delimiter: str = "\n\n"
    max_depth: int = 32
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunk: int = 64
    subsample_bon: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategies", tuple(self.strategies))
        object.__setattr__(self, "budgets", tuple(int(b) for b in self.budgets))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if not self.strategies:
            raise ValueError("strategies must name at least one strategy")
        for name in self.strategies:
            strategy_spec(name)  # unknown names list the known ones
        for name in self.options:
            if name not in self.strategies:
                raise ValueError(f"options given for strategy {name!r}, which is not in the sweep")
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"budgets must be ints >= 1, got {self.budgets}")
        if not self.seeds:
            raise ValueError("seeds must not be empty")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {self.chunk}")
        SamplingParams(self.temperature, self.top_p, self.max_step_tokens, self.delimiter)
        for cell in self.cells():
            self.strategy_options(cell[0], cell[1])

    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.max_step_tokens, self.delimiter)

    def cells(self) -> list[tuple[str, int, int]]:
        """Every (strategy, budget, seed) to run, greedy only at budget 1."""
        cells = []
        sources = family_sources(self) if self.subsample_bon else {}
        for strategy in self.strategies:
            budgets = (1,) if strategy == "greedy" else self.budgets
            if strategy in sources:
                if sources[strategy] != strategy:
                    continue  # a sibling: every budget is derived from its source's run
                budgets = (max(self.budgets),)  # the smaller budgets are derived from this one
            for budget in budgets:
                for seed in self.seeds:
                    cells.append((strategy, budget, seed))
        return cells

    def strategy_options(self, strategy: str, budget: int) -> dict[str, Any]:
        """Options of ``strategy`` at budget ``budget`` (validated by building the config)."""
        options = dict(self.options.get(strategy, {}))
        width_option = _WIDTH_OPTION.get(strategy)
        if width_option and width_option not in options:
            if strategy == "mcts":  # room for several expansions, each followed by a rollout
                options[width_option] = max(1, min(4, budget // 4))
            else:
                options[width_option] = math.gcd(budget, 4)
        if strategy != "greedy":
            options["n"] = budget
        strategy_spec(strategy).configure(**options)
        return options

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("strategies", "budgets", "seeds"):
            data[key] = list(data[key])
        if not self.subsample_bon:  # manifests written before the option existed still resume
            del data["subsample_bon"]
        return data



def _sampling_key(strategy: str, options: Mapping[str, Any], budget: int) -> dict[str, Any]:
    """What decides a family strategy's samples: every config field but the final selection."""
    bound = strategy_spec(strategy).configure(**{**dict(options), "n": budget})
    fields = dataclasses.asdict(bound.config)
    fields.pop("selection", None)
    return fields


def family_sources(config: SweepConfig) -> dict[str, str]:
    """For each best-of-N-family strategy of ``config``, the family strategy whose run it reads.

    A strategy whose config (all but ``selection``) equals an earlier family strategy's reads that
    one's rows; the others read their own.
    """
    largest = max(config.budgets)
    sources: dict[str, str] = {}
    runners: list[tuple[str, dict[str, Any]]] = []
    for strategy in (s for s in config.strategies if s in SUBSAMPLABLE):
        key = _sampling_key(strategy, config.strategy_options(strategy, largest), largest)
        source = next((name for name, other in runners if other == key), None)
        if source is None:
            runners.append((strategy, key))
            source = strategy
        sources[strategy] = source
    return sources
