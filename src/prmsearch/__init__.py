"""prmsearch: test-time search for reasoning guided by process reward models.

One search tree, every strategy (best-of-N, voting, beam, DVTS, MCTS, particle filtering,
REBASE), any backend. Importing this package never imports torch, transformers, vLLM or SGLang:
backends load their engines when they are made.
"""

from prmsearch.answers import AnswerMatcher, canonical_answer, extract_answer
from prmsearch.api import Searcher, SearchSession, resolve_policy, resolve_scorer, solve
from prmsearch.policies.base import (
    Finish,
    Generation,
    GenerationRequest,
    Policy,
    SamplingParams,
    StepOutput,
    make_policy,
    register_policy,
)
from prmsearch.scorers.base import Scorer, ScoreRequest, StepScores, make_scorer, register_scorer
from prmsearch.search import strategies as _strategies  # noqa: F401  (registers built-ins)
from prmsearch.search.aggregation import Aggregation, aggregate_scores
from prmsearch.search.driver import Driver, RunConfig, SearchResult
from prmsearch.search.ledger import Ledger
from prmsearch.search.protocol import (
    BoundStrategy,
    Choice,
    Expand,
    make_strategy,
    register_strategy,
    strategy_names,
)
from prmsearch.search.selection import Selection
from prmsearch.search.session import DriverSession, SessionClosed
from prmsearch.search.strategies.common import SearchConfig
from prmsearch.seeding import mix_seed, problem_seed
from prmsearch.tree import NO_GROUP, NO_PARENT, ROOT, SearchTree

__version__ = "0.1.0"

__all__ = [
    "NO_GROUP",
    "NO_PARENT",
    "ROOT",
    "Aggregation",
    "AnswerMatcher",
    "BoundStrategy",
    "Choice",
    "Driver",
    "DriverSession",
    "Expand",
    "Finish",
    "Generation",
    "GenerationRequest",
    "Ledger",
    "Policy",
    "RunConfig",
    "SamplingParams",
    "ScoreRequest",
    "Scorer",
    "SearchConfig",
    "SearchResult",
    "SearchSession",
    "SearchTree",
    "Searcher",
    "Selection",
    "SessionClosed",
    "StepOutput",
    "StepScores",
    "aggregate_scores",
    "canonical_answer",
    "extract_answer",
    "make_policy",
    "make_scorer",
    "make_strategy",
    "mix_seed",
    "problem_seed",
    "register_policy",
    "register_scorer",
    "register_strategy",
    "resolve_policy",
    "resolve_scorer",
    "solve",
    "strategy_names",
]
