"""What a sweep runs: the strategies, budgets, seeds, backends and options, and which cells run.

Kept apart from the sweep runner so that the best-of-N-family siblings (``siblings``) and the
runner (``sweep``) both read it without importing each other. ``family_runners`` lives here because
it decides which cells a sweep runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prmsearch.policies.base import SamplingParams
from prmsearch.search.protocol import BoundStrategy, strategy_spec

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


#: Backend arguments of how a server is reached, not of what it answers: a resume may change them
#: (a longer timeout for a slow server, another key), so the manifest leaves them out.
CONNECTION_ARGS = frozenset({"timeout", "max_retries", "backoff", "backoff_max", "max_concurrency",
                             "api_key_env"})


@dataclass(frozen=True)
class SweepConfig:
    """What a sweep runs; recorded in the manifest, so a resume must match it exactly.

    Attributes:
        dataset: dataset name (see ``prmsearch.benchmarks.datasets``), ``arith`` by default.
        dataset_path: a local file for the dataset (default: its standard location).
        question_field, answer_field, id_field: row fields of a JSONL dataset (None: the
            dataset's own names, e.g. ``question`` and ``answer``).
        split: dataset split where the dataset has several (``arith``: test).
        limit: use only the first ``limit`` problems (after the seeded shuffle, if any).
        shuffle_seed: shuffle the problems with this seed before ``limit``.
        strategies: strategy names.
        budgets: values of each strategy's ``n``; a strategy with a fixed budget (greedy) runs
            once, at that budget.
        seeds: run seeds; a problem's seed derives from the run seed and its question.
        policy, policy_backend, prm, prm_family: backends (None: the embedded defaults).
        prm_backend: where a PRM model path runs (None or ``hf``: transformers; ``vllm``).
        policy_args, prm_args: the backends' own keyword arguments (prompt format, dtype, engine
            settings, a scorer's aggregation...): they change the rows, so they are recorded.
        temperature, top_p, max_step_tokens, delimiter, max_depth: sampling and search limits.
        options: per-strategy options, e.g. ``{"beam": {"aggregation": "last"}}``, on top of what
            each strategy's budget rule derives (`StrategySpec.budget_options`: beam and DVTS
            ``width = gcd(n, 4)``, MCTS ``expansion_width = clip(n // 4, 1, 4)``).
        chunk: problems per batched driver run.
        share_bon_samples: best-of-N-family strategies whose configs differ only in the final
            selection draw the same samples: run one of them per budget and re-select the others'
            rows from its candidates (exact rows and costs; wall time not measured; see
            :mod:`prmsearch.benchmarks.sweeps.siblings`). Every budget is a real run.
        max_consecutive_failures: stop the sweep once this many problems in a row ended in a
            connection-type error or a dead in-process engine (the backend looks down; see
            :func:`prmsearch.benchmarks.sweeps.sweep.is_connection_error`) instead of spending the
            retries of every remaining problem; 0 never stops. Operational, so not recorded in
            the manifest: a resume may change it.
        overlap: problem groups that take turns between policy and PRM (``RunConfig.overlap``;
            1: one group). The rows are the same either way, so it is not recorded in the
            manifest either.
        schedule: how problems move through the backends (``RunConfig.schedule``: ``auto``,
            ``rounds`` or ``async``); operational like ``overlap``.
        save_trees: keep each searched problem's tree, gzip-compressed, beside the results
            (``trees/``, see :mod:`prmsearch.benchmarks.sweeps.trees`); operational like ``schedule``:
            the rows are the same either way, so a resume may turn it on or off.
        policy_logprobs: when the policy is asked for token log-probabilities
            (``RunConfig.policy_logprobs``: ``auto``, only for a strategy or scorer that reads
            them, or ``always``, so that saved trees keep them); operational like ``save_trees``.
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
    prm_backend: str | None = None
    policy_args: dict[str, Any] = field(default_factory=dict)
    prm_args: dict[str, Any] = field(default_factory=dict)
    temperature: float = 0.8
    top_p: float = 1.0
    max_step_tokens: int = 256
    delimiter: str = "\n\n"
    max_depth: int = 32
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunk: int = 64
    share_bon_samples: bool = False
    question_field: str | None = None
    answer_field: str | None = None
    id_field: str | None = None
    max_consecutive_failures: int = 8
    overlap: int = 1
    schedule: str = "auto"
    save_trees: bool = False
    policy_logprobs: str = "auto"

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
        failures = self.max_consecutive_failures
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
            raise ValueError(f"max_consecutive_failures must be an int >= 0 (0: no limit), got {failures!r}")
        if isinstance(self.overlap, bool) or not isinstance(self.overlap, int) or self.overlap < 1:
            raise ValueError(f"overlap must be an int >= 1 (1: lock step), got {self.overlap!r}")
        from prmsearch.search.driver import SCHEDULES

        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if not isinstance(self.save_trees, bool):
            raise ValueError(f"save_trees must be True or False, got {self.save_trees!r}")
        from prmsearch.search.driver import POLICY_LOGPROBS

        if self.policy_logprobs not in POLICY_LOGPROBS:
            raise ValueError(f"policy_logprobs must be one of {list(POLICY_LOGPROBS)} (auto: only when a "
                             f"strategy or the scorer reads them), got {self.policy_logprobs!r}")
        for name in ("question_field", "answer_field", "id_field"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
        SamplingParams(self.temperature, self.top_p, self.max_step_tokens, self.delimiter)
        for cell in self.cells():
            self.strategy_options(cell[0], cell[1])

    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.max_step_tokens, self.delimiter)

    def budgets_of(self, strategy: str) -> tuple[int, ...]:
        """The budgets ``strategy`` runs at: the sweep's, or its own fixed one (greedy: 1)."""
        fixed = strategy_spec(strategy).fixed_budget
        return (fixed,) if fixed is not None else self.budgets

    def cells(self) -> list[tuple[str, int, int]]:
        """Every (strategy, budget, seed) to run (a fixed-budget strategy at its budget only)."""
        cells = []
        runners = family_runners(self) if self.share_bon_samples else {}
        for strategy in self.strategies:
            if runners.get(strategy, strategy) != strategy:
                continue  # a sibling: every row is re-selected from its runner's run
            for budget in self.budgets_of(strategy):
                for seed in self.seeds:
                    cells.append((strategy, budget, seed))
        return cells

    def expected_cells(self) -> list[tuple[str, int, int]]:
        """Every (strategy, budget, seed) that must end with one row per problem: the cells that
        run plus the siblings derived from them (``share_bon_samples``)."""
        return [
            (strategy, budget, seed)
            for strategy in self.strategies
            for budget in self.budgets_of(strategy)
            for seed in self.seeds
        ]

    def strategy_options(self, strategy: str, budget: int) -> dict[str, Any]:
        """Options of ``strategy`` at budget ``budget``: its budget rule's, then the sweep's
        (validated by building the config)."""
        options = strategy_spec(strategy).budget_options(budget, self.options.get(strategy, {}))
        strategy_spec(strategy).configure(**options)
        return options

    def strategy_at(self, strategy: str, budget: int) -> BoundStrategy:
        """The bound strategy of one cell: what the sweep runs for (``strategy``, ``budget``)."""
        return strategy_spec(strategy).configure(**self.strategy_options(strategy, budget))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("strategies", "budgets", "seeds"):
            data[key] = list(data[key])
        if not self.share_bon_samples:  # manifests written before the option existed still resume
            del data["share_bon_samples"]
        for name in ("question_field", "answer_field", "id_field"):
            if data[name] is None:  # likewise for the field names
                del data[name]
        for name in ("policy_args", "prm_args"):
            data[name] = {k: v for k, v in data[name].items() if k not in CONNECTION_ARGS}
            if not data[name]:  # and for the backends' arguments
                del data[name]
        if data["prm_backend"] in (None, "hf"):  # manifests from before the field still resume
            del data["prm_backend"]
        del data["max_consecutive_failures"]  # operational: a resume may change it
        del data["overlap"]  # likewise: the rows do not depend on it
        del data["schedule"]
        del data["save_trees"]
        del data["policy_logprobs"]
        return data



def _sampling_key(strategy: str, options: Mapping[str, Any], budget: int) -> dict[str, Any]:
    """What decides a family strategy's samples: every config field but the final selection."""
    bound = strategy_spec(strategy).configure(**{**dict(options), "n": budget})
    fields = dataclasses.asdict(bound.config)
    fields.pop("selection", None)
    return fields


def family_runners(config: SweepConfig) -> dict[str, str]:
    """For each strategy of ``config`` in a sample family (the best-of-N family: best_of_n,
    self_consistency, weighted_vote), the strategy of its family whose run it reads.

    Strategies whose configs are equal but for the final selection draw the same samples: one of
    them runs (the runner) and the others' rows are re-selected from its candidates at the same
    budget (:mod:`prmsearch.benchmarks.sweeps.siblings`). The runner is the first that reads scores when
    any of them does (a PRM-free run has no scores to re-select by), else the first.
    """
    largest = max(config.budgets)
    groups: list[tuple[tuple[str, dict[str, Any]], list[str]]] = []
    for strategy in config.strategies:
        family = strategy_spec(strategy).sample_family
        if family is None or strategy_spec(strategy).fixed_budget is not None:
            continue
        key = (family, _sampling_key(strategy, config.strategy_options(strategy, largest), largest))
        group = next((members for other, members in groups if other == key), None)
        if group is None:
            groups.append((key, [strategy]))
        else:
            group.append(strategy)
    runners: dict[str, str] = {}
    for _, members in groups:
        scored = [s for s in members if strategy_spec(s).configure(
            **config.strategy_options(s, largest)).needs_scores]
        runner = (scored or members)[0]
        runners.update({s: runner for s in members})
    return runners
