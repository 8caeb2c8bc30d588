"""Model ids of the search server: one per strategy and budget (``beam-16``), plus plain decoding.

A client picks a search the way it picks a model. ``GET /v1/models`` lists ``<strategy>-<budget>``
for every registered strategy and each configured budget, and the policy's own id (greedy decoding,
no search). Any budget works in an id (``beam-48``), and a bare strategy name (``beam``) means its
default budget. A budget means what it means in ``prmsearch bench``: the strategy's budget rule
(beam's ``width = gcd(n, 4)``, ...) with the server's ``-o`` options on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prmsearch.search.protocol import STRATEGIES, strategy_names, strategy_spec
from prmsearch.serve.errors import ApiError

#: The strategy behind the policy's own model id.
PLAIN_DECODING = "greedy"


@dataclass(frozen=True)
class ModelRoute:
    """What a model id asks for: a strategy name, the server's options for it, and the id's
    budget (None: the strategy's default). The budget becomes options through the strategy's
    own rule (`StrategySpec.at_budget`), as in `prmsearch bench`."""

    strategy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    budget: int | None = None


@dataclass(frozen=True)
class ModelCatalog:
    """The model ids one server offers.

    Attributes:
        policy_id: the id of plain decoding with the policy.
        budgets: the budgets listed for every strategy.
        defaults: options the server was started with (``-o width=4``), keyed by strategy name;
            an id naming that strategy gets them before its budget and the request's options.
    """

    policy_id: str
    budgets: tuple[int, ...]
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def ids(self) -> list[str]:
        """Every listed id: the policy's first, then each strategy at each budget it accepts."""
        ids = [self.policy_id]
        for name in strategy_names():
            if name == PLAIN_DECODING:
                continue
            ids.extend(f"{name}-{budget}" for budget in self.budgets if self._accepts(name, budget))
        return ids

    def _accepts(self, name: str, budget: int) -> bool:
        """Whether the strategy takes this budget with the server's options (a planner takes only
        its plan's levels, a beam only multiples of its width): only ids that work are listed."""
        try:
            strategy_spec(name).at_budget(budget, **self.defaults.get(name, {}))
        except (TypeError, ValueError):
            return False
        return True

    def resolve(self, model: str) -> ModelRoute:
        """The route of ``model``; an unknown id is a 404 that says where the list is."""
        if model == self.policy_id:
            return ModelRoute(PLAIN_DECODING, dict(self.defaults.get(PLAIN_DECODING, {})))
        name, budget = model, None
        head, sep, tail = model.rpartition("-")
        if sep and tail.isdigit():
            name, budget = head, int(tail)
        if name not in STRATEGIES:
            raise ApiError(
                404,
                f"The model {model!r} does not exist: ids are '<strategy>-<budget>' (e.g. 'beam-16') with "
                f"a strategy among {', '.join(strategy_names())}, or {self.policy_id!r} for plain "
                "decoding; GET /v1/models lists them",
                param="model",
                code="model_not_found",
            )
        if budget is not None and budget < 1:
            raise ApiError(404, f"The model {model!r} has budget {budget}; a budget is at least 1",
                           param="model", code="model_not_found")
        return ModelRoute(name, dict(self.defaults.get(name, {})), budget)
