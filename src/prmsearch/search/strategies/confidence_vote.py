"""Confidence-filtered voting: the policy's own certainty, not a PRM, decides whose vote counts.

After Fu, Wang, Tian and Zhao, 2025, "Deep Think with Confidence" (DeepConf). A trace whose policy
was unsure somewhere along the way is more often wrong, so DeepConf ranks sampled traces by their
*lowest group confidence* (the least confident sliding window of tokens) and either keeps only the
most confident ones before a majority vote or weights every vote by its confidence. It runs
online, too: sample, and stop once the vote of the confident traces reaches a consensus.

A trace's confidence here is DeepConf's lowest group confidence: the token log-probabilities of
its path (each step's ``token_logprobs``, root first) are averaged over every window of
``window`` consecutive tokens, and the lowest window mean is the trace's (higher is more
confident; a trace shorter than the window is one group, its overall mean). DeepConf's token
confidence is the negative mean of the top-k candidates' log-probabilities; every backend here
returns only the sampled token's log-probability, so that is the token's value.

When a step of the path holds tokens but no per-token values (a backend that cannot give them,
such as the scripted test policy by default) the trace falls back to step granularity: a step's
confidence is its mean token log-probability and the trace's the lowest over its steps (steps
without tokens carry no evidence and are skipped). No PRM is ever called.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import numpy as np

from prmsearch.search.aggregation import parse_enum
from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Ballot, Selection, choose
from prmsearch.search.strategies.common import SearchConfig
from prmsearch.search.strategies.early_stop import (
    StopRule,
    round_sizes,
    validate_vote_stop,
    vote_is_settled,
)
from prmsearch.tree import NO_GROUP, ROOT, SearchTree

#: Tokens per confidence group by default: whole solutions of the embedded arithmetic model are
#: 30-100 tokens long (DeepConf uses 2048 for long reasoning traces).
DEFAULT_WINDOW = 16

#: A running confidence this close to the online bar keeps its trace: window means are sums of
#: floats, so a trace exactly as confident as the warm-up's quantile must not fall by rounding.
_BAR_SLACK = 1e-9


class ConfidenceMode(str, enum.Enum):
    """How confidence enters the vote: keep only the most confident traces, or weight every vote."""

    FILTER = "filter"
    WEIGHT = "weight"


@dataclass(frozen=True)
class ConfidenceVoteConfig(SearchConfig):
    """Confidence-filtered or confidence-weighted voting (DeepConf's lowest group confidence).

    Attributes:
        n: the most whole solutions sampled.
        mode: ``filter``: majority vote among the ``keep`` most confident answered traces;
            ``weight``: every answered trace votes with weight ``exp(confidence)``, the geometric
            mean token probability of its least confident window of tokens.
        keep: the fraction of answered traces that vote in ``filter`` mode (at least one).
        rule: when sampling stops: ``beta`` (the Beta rule of Aggarwal et al., 2023, on the
            confident vote), ``majority`` (the leader's share, DeepConf's consensus test) or
            ``none`` (one round of ``n``, DeepConf's offline mode).
        threshold: ``beta``: posterior probability; ``majority``: the leader's vote share.
        first: samples in the first round (at most ``n``).
        growth: the running total of samples is multiplied by ``growth`` after each round.
        window: tokens per confidence group: a trace's confidence is its lowest mean token
            log-probability over ``window`` consecutive tokens. Small by default because the
            embedded model's solutions are short; raise it (DeepConf: 2048) for long traces.
        online_keep: None (default): every trace runs to its end. A fraction in (0, 1]:
            DeepConf's online mode. The first round (``first`` whole solutions) is the warm-up;
            the stop threshold is the ``1 - online_keep`` quantile of their confidences
            (DeepConf-low keeps 0.1, DeepConf-high 0.9); every later trace is generated step by
            step and abandoned as soon as one full window of its tokens falls below the
            threshold. Abandoned traces do not vote; the tokens they used are charged.
        aggregation, selection: unused (no PRM; ``mode`` decides the vote).
    """

    mode: ConfidenceMode = ConfidenceMode.FILTER
    keep: float = 0.5
    rule: StopRule = StopRule.BETA
    threshold: float = 0.95
    first: int = 4
    growth: float = 2.0
    window: int = DEFAULT_WINDOW
    online_keep: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "mode", parse_enum(ConfidenceMode, self.mode, "mode"))
        object.__setattr__(self, "rule", StopRule.parse(self.rule))
        if isinstance(self.keep, bool) or not isinstance(self.keep, (int, float)) or not 0 < self.keep <= 1:
            raise ValueError(
                f"keep must be a fraction in (0, 1] (0.5 keeps the more confident half), got {self.keep!r}"
            )
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(
                f"window must be an int >= 1 (tokens per confidence group), got {self.window!r}"
            )
        online = self.online_keep
        if online is not None and (isinstance(online, bool) or not isinstance(online, (int, float))
                                   or not 0 < online <= 1):
            raise ValueError(
                f"online_keep must be None (traces run to their end) or a fraction in (0, 1] of warm-up "
                f"confidence to keep (DeepConf-low 0.1, DeepConf-high 0.9), got {online!r}"
            )
        validate_vote_stop(self.rule, self.threshold, self.first, self.growth)

    @property
    def needs_scores(self) -> bool:
        """Never: the policy's log-probabilities are the only signal."""
        return False

    @property
    def reads_policy_logprobs(self) -> bool:
        """Always: its confidence is made of them."""
        return True

    def rounds(self) -> list[int]:
        """Samples drawn in each round when the vote never settles (they sum to ``n``); online,
        the first round is the warm-up even when the vote never stops early."""
        if self.rule is StopRule.NONE:
            warm_up = min(self.first, self.n)
            online = self.online_keep is not None and self.n > warm_up
            return [warm_up, self.n - warm_up] if online else [self.n]
        return round_sizes(self.n, self.first, self.growth)


def step_confidence(tree: SearchTree, node: int) -> float:
    """Mean token log-probability of one step (NaN when the step holds no tokens)."""
    tokens = len(tree.token_ids[node])
    return tree.logprob[node] / tokens if tokens else math.nan


def path_token_logprobs(tree: SearchTree, node: int) -> list[float] | None:
    """The token log-probabilities along the path to ``node``, root first; None when a step holds
    tokens without them (the policy gave none), so that the caller can fall back."""
    values: list[float] = []
    for step in tree.path(node):
        lps = tree.token_logprobs[step]
        if len(lps) != len(tree.token_ids[step]):
            return None
        values.extend(lps)
    return values


def group_confidence(logprobs: Sequence[float], window: int) -> float:
    """The lowest mean over every ``window`` consecutive values (DeepConf's lowest group
    confidence); fewer values than ``window`` make one group, their mean. ``-inf`` when empty."""
    if not logprobs:
        return -math.inf
    values = np.asarray(logprobs, dtype=np.float64)
    if np.isneginf(values).any():  # every window over it is -inf; cumulative sums would give NaN
        return -math.inf
    size = min(window, len(values))
    sums = np.concatenate(([0.0], np.cumsum(values)))
    return float(np.min(sums[size:] - sums[:-size]) / size)


def trace_confidence(tree: SearchTree, node: int, window: int = DEFAULT_WINDOW) -> float:
    """The confidence of the path to ``node``: its lowest group confidence over windows of
    ``window`` tokens; the lowest step confidence when a step lacks per-token values (``-inf``
    when no step holds tokens)."""
    logprobs = path_token_logprobs(tree, node)
    if logprobs is not None:
        return group_confidence(logprobs, window)
    values = [c for c in (step_confidence(tree, s) for s in tree.path(node)) if not math.isnan(c)]
    return min(values) if values else -math.inf


def confident_votes(tree: SearchTree, leaves: list[int], cfg: ConfidenceVoteConfig) -> list[Ballot]:
    """The traces that vote, as selection candidates whose score is the vote weight: in ``filter``
    mode the ``keep`` most confident answered traces (ties: the earlier sample), in ``weight`` mode
    every answered trace. Empty when no trace has an answer."""
    answered = [node for node in leaves if tree.answer_group[node] != NO_GROUP]
    confidence = {node: trace_confidence(tree, node, cfg.window) for node in answered}
    if cfg.mode is ConfidenceMode.FILTER:
        ranked = sorted(answered, key=lambda node: (-confidence[node], node))
        answered = sorted(ranked[: max(1, math.ceil(cfg.keep * len(ranked)))]) if ranked else []
    return [Ballot(int(tree.answer_group[node]), math.exp(confidence[node]), node) for node in answered]


def confidence_settled(votes: list[Ballot], cfg: ConfidenceVoteConfig) -> bool:
    """Whether the confident vote is settled by ``cfg.rule`` (counts in ``filter`` mode, weights
    in ``weight`` mode)."""
    return vote_is_settled(votes, cfg.mode is ConfidenceMode.WEIGHT, cfg.rule, cfg.threshold)


def running_confidence(tree: SearchTree, node: int, window: int) -> float:
    """The lowest mean over the full windows of ``window`` tokens of a partial trace (``inf`` while
    it has fewer tokens: no evidence yet); the lowest step confidence so far when a step lacks
    per-token values (the same fallback as :func:`trace_confidence`)."""
    logprobs = path_token_logprobs(tree, node)
    if logprobs is None:
        return trace_confidence(tree, node, window)
    return group_confidence(logprobs, window) if len(logprobs) >= window else math.inf


def warm_up_threshold(tree: SearchTree, leaves: list[int], cfg: ConfidenceVoteConfig) -> float:
    """DeepConf's online stop threshold: the ``1 - online_keep`` quantile of the warm-up traces'
    confidences (``-inf``, stop nothing, when no warm-up trace has a finite confidence)."""
    assert cfg.online_keep is not None
    values = [c for c in (trace_confidence(tree, node, cfg.window) for node in leaves) if math.isfinite(c)]
    if not values:
        return -math.inf
    return float(np.quantile(values, 1 - cfg.online_keep))


def grow_online(tree: SearchTree, size: int, bar: float,
                window: int) -> Generator[Expand, list[list[int]], tuple[list[int], list[int]]]:
    """``size`` new traces, one step per round; a trace whose running confidence falls below
    ``bar`` is abandoned. Returns (the finished traces' last nodes, the abandoned ones')."""
    (live,) = yield Expand(((ROOT, size),))
    finished: list[int] = []
    abandoned: list[int] = []
    while live:
        growing = []
        for node in live:  # a trace's last step counts too: one below the bar drops it
            if running_confidence(tree, node, window) < bar - _BAR_SLACK:
                abandoned.append(node)
            elif tree.terminal[node]:
                finished.append(node)
            else:
                growing.append(node)
        if not growing:
            break
        children = yield Expand(tuple((node, 1) for node in growing))
        live = [kids[0] for kids in children if kids]
    return finished, abandoned


def confidence_vote(tree: SearchTree, cfg: ConfidenceVoteConfig, rng: np.random.Generator) -> SearchGenerator:
    """Sample whole solutions in rounds until the confident traces' vote is settled; vote among
    them. Online (``online_keep``), the rounds after the warm-up grow step by step and drop the
    traces whose confidence falls below the warm-up's threshold."""
    leaves: list[int] = []
    bar = -math.inf
    abandoned = 0
    for i, size in enumerate(cfg.rounds()):
        if i == 0 or cfg.online_keep is None:
            (new,) = yield Expand(((ROOT, size),), full_solution=True)
        else:
            new, dropped = yield from grow_online(tree, size, bar, cfg.window)
            abandoned += len(dropped)
        leaves.extend(new)
        if i == 0 and cfg.online_keep is not None:
            bar = warm_up_threshold(tree, leaves, cfg)
        if confidence_settled(confident_votes(tree, leaves, cfg), cfg):
            break
    report = () if cfg.online_keep is None else (("threshold", round(bar, 6) if math.isfinite(bar) else None),
                                                 ("abandoned", abandoned))
    votes = confident_votes(tree, leaves, cfg)
    if not votes:  # no trace has an answer: return the most confident one
        best = max(leaves, key=lambda node: (trace_confidence(tree, node, cfg.window), -node))
        return Choice(best, tuple(leaves), report)
    selection = Selection.WEIGHTED if cfg.mode is ConfidenceMode.WEIGHT else Selection.MAJORITY
    voters = tuple(v.order for v in votes)
    return Choice(voters[choose(votes, selection)], voters, report)


register_strategy(
    "confidence_vote",
    ConfidenceVoteConfig,
    confidence_vote,
    "whole solutions voted by the policy's own token confidence, no PRM (DeepConf)",
)
