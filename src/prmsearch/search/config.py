"""The settings every problem of a run shares (`RunConfig`), validated when made."""

from __future__ import annotations

from dataclasses import dataclass, field

from prmsearch.policies.base import SamplingParams

__all__ = ["POLICY_LOGPROBS", "SCHEDULES", "RunConfig"]

#: how problems move through the backends (see `RunConfig.schedule`)
SCHEDULES = ("auto", "rounds", "async")
#: When the policy is asked for log-probabilities (`RunConfig.policy_logprobs`).
POLICY_LOGPROBS = ("auto", "always")


@dataclass(frozen=True)
class RunConfig:
    """Settings shared by every problem of a run.

    Attributes:
        sampling: temperature, top-p, per-step token limit and step delimiter.
        max_depth: steps after which a path is cut off (marked terminal and truncated).
        solution_max_tokens: token limit for whole-solution requests (best-of-N family).
        stop_on_answer: a step containing a final ``\\boxed{}`` answer ends the path.
        schedule: how problems move through the backends. ``"rounds"``: in rounds, every
            problem waiting for the whole round's generation and then its scoring (lock step).
            ``"async"``: each problem advances as soon as its own steps come back; its requests
            are their own policy call when the policy takes parallel calls (the HTTP server
            backends), else they join whatever else waits whenever the policy is free, and the
            PRM scores whatever waits whenever it is free, so the two backends work at once.
            ``"auto"`` (default): async when the policy takes parallel calls, else rounds; also
            rounds when the policy and the PRM both compute on this machine's CPU (their
            ``computes_on_host_cpu``), where working at once only slows both.
        overlap: start the problems in ``overlap`` groups that take turns, so that the PRM scores
            one group's new steps while the policy generates another's (1: one group; more than
            1 implies the async schedule for batching backends).
        max_batch: most samples in one policy call and paths in one PRM call (None: a call takes
            everything waiting). Larger rounds go in pieces and the problems waiting take turns
            in each call, so a small problem never waits for a large one's whole round, and a
            cancelled problem's pieces not yet sent are never computed (a server's fairness;
            implies the async schedule). A request of more than ``max_batch // 4`` samples is cut
            in pieces with seeds of their own, so its samples differ from an unbounded run's.
        policy_logprobs: when the policy is asked for token log-probabilities. ``"auto"``
            (default): only for a strategy or scorer that reads them (MCTS with the policy prior,
            confidence voting, the confidence scorer); elsewhere the vLLM and OpenAI-compatible
            backends skip them (they cost a server about a tenth of its tokens/s) and the trees
            hold ``logprob`` NaN where the backend skipped them. ``"always"``: on every request,
            so that every tree keeps them (for exports and the tree viewer). The samples are the
            same either way.

    Each problem's search stays the same for its seed under every schedule when the backends'
    samples do not depend on batch composition (the scripted and transformers backends, vLLM
    with per-request seeds); see `Driver`.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_depth: int = 32
    solution_max_tokens: int = 2048
    stop_on_answer: bool = True
    overlap: int = 1
    schedule: str = "auto"
    max_batch: int | None = None
    policy_logprobs: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, SamplingParams):
            raise ValueError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if self.policy_logprobs not in POLICY_LOGPROBS:
            raise ValueError(f"policy_logprobs must be one of {list(POLICY_LOGPROBS)} (auto: only when the "
                             f"strategy or scorer reads them), got {self.policy_logprobs!r}")
        for name in ("max_depth", "solution_max_tokens", "overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.max_batch is not None and (
            isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int) or self.max_batch < 1
        ):
            raise ValueError(f"max_batch must be an int >= 1 or None, got {self.max_batch!r}")
