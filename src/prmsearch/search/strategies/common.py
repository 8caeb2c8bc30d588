"""Config pieces shared by every strategy: the budget ``n``, aggregation and final selection."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prmsearch.search.aggregation import Aggregation
from prmsearch.search.protocol import StrategyConfig
from prmsearch.search.selection import Selection


def require_int(name: str, value: object, minimum: int) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def parse_bool(name: str, value: object) -> bool:
    """``value`` as a bool: a bool, or true/false/yes/no/on/off/1/0 in any case (a command line
    passes ``-o rollout=False`` as text); anything else is a ValueError naming ``name``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).strip().lower() in _TRUE | _FALSE:
        return str(value).strip().lower() in _TRUE
    raise ValueError(f"{name} must be true or false, got {value!r}")


def require_positive(name: str, value: object) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    if value == float("inf"):
        raise ValueError(f"{name} must be finite, got {value!r}")


@dataclass(frozen=True)
class SearchConfig(StrategyConfig):
    """Fields every strategy has.

    Attributes:
        n: the compute budget in generations (its exact meaning is documented per strategy).
        aggregation: how step scores combine into a path score (min, last, prod, mean).
        selection: how the final answer is chosen (argmax, majority, weighted).
    """

    n: int = 16
    aggregation: Aggregation = Aggregation.MIN
    selection: Selection = Selection.ARGMAX

    def __post_init__(self) -> None:
        require_int("n", self.n, 1)
        object.__setattr__(self, "aggregation", Aggregation.parse(self.aggregation))
        object.__setattr__(self, "selection", Selection.parse(self.selection))

    @property
    def max_budget(self) -> int:
        """The most one problem's search may spend per round and per depth level: ``n`` for every
        strategy whose ``n`` is a cap (the conformance kit holds a strategy to it). A strategy whose
        ``n`` names a mean compute instead (the planner's plan level) returns its worst case."""
        return self.n

    @property
    def path_aggregation(self) -> Aggregation:
        """How a result's path score combines its step scores: the ``aggregation`` option."""
        return self.aggregation


def require_divides(config: SearchConfig, width: int) -> None:
    """Validate a beam-style width against the budget: 1 <= width <= n and n % width == 0."""
    require_int("width", width, 1)
    if width > config.n:
        raise ValueError(f"width must be <= n ({config.n}), got {width}")
    if config.n % width:
        raise ValueError(f"n must be a multiple of width ({width}), got n={config.n}")


def width_for_budget(budget: int) -> int:
    """The beam-style width a budget gets when none is given: ``gcd(budget, 4)``, so that every
    budget is valid (it divides ``n``) and budgets that allow it keep the usual width 4."""
    return math.gcd(budget, 4)
