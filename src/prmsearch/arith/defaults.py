"""The embedded default backends: the shipped arithmetic policy and PRM, made by name ``arith``.

They run anywhere in seconds on a CPU. They know only the arithmetic domain of
``prmsearch.arith.problems``: other questions still get an answer attempt, with a note saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from prmsearch.arith.models import check_shipped_folder, default_policy_path
from prmsearch.arith.phrasing import parse_phrased
from prmsearch.arith.problems import ProblemConfig
from prmsearch.backend_hooks import ScorerBackend, scorer_hooks
from prmsearch.scorers.base import ScoreRequest, StepScores

PRM_RETRAIN_COMMAND = "python -m training.train_arith_prm --out runs/prm-final --ship"
_PRM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
#: The trained domain: a start value and 3 to 8 operations (``ProblemConfig``'s defaults), in any
#: phrasing `prmsearch.arith.phrasing` knows; the policy never saw shorter or longer chains and
#: answers them confidently wrong.
_MIN_OPS, _MAX_OPS = ProblemConfig.min_ops, ProblemConfig.max_ops


def default_prm_path() -> Path:
    """The folder of the shipped arithmetic PRM, checked for completeness."""
    folder = default_policy_path().parent / "prm"
    return check_shipped_folder(folder, "PRM", _PRM_FILES, PRM_RETRAIN_COMMAND)


def arith_policy(**kwargs: Any):
    """The shipped policy through the transformers backend (CPU, fp32 by default)."""
    from prmsearch.policies.hf import HFPolicy

    kwargs.setdefault("device", "cpu")
    policy = HFPolicy(model=str(default_policy_path()), **kwargs)
    cast(Any, policy).domain_note = domain_note  # the Searcher adds it to out-of-domain results
    return policy


def arith_prm(**kwargs: Any):
    """The shipped PRM through the ``qwen-prm`` transformers scorer, reading every question in the
    canonical phrasing it was trained on (see `CanonicalQuestions`)."""
    from prmsearch.scorers.hf import HFPRMScorer

    kwargs.setdefault("device", "cpu")
    return CanonicalQuestions(HFPRMScorer(default_prm_path(), "qwen-prm", **kwargs))


class CanonicalQuestions(ScorerBackend):
    """A scorer behind a question normaliser: a question in any phrasing `parse_phrased` reads
    reaches the scorer in the canonical form ("Start with 12. Multiply by 2. ..."); others pass
    unchanged. The shipped PRM was trained on canonical questions only (with the v1 tokenizer, which
    lacks letters such as "k" and "g"), so without this it would judge "12 * 2 = 24" against
    "Then double it." as a question it cannot read. Every other attribute is the wrapped scorer's.
    """

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer
        self._canonical: dict[str, str] = {}

    @property
    def num_parameters(self) -> int:
        return self.scorer.num_parameters

    @property
    def reads_policy_logprobs(self) -> bool:
        return scorer_hooks(self.scorer).reads_policy_logprobs

    @property
    def computes_on_host_cpu(self) -> bool:
        return scorer_hooks(self.scorer).computes_on_host_cpu

    def __getattr__(self, name: str) -> Any:
        if name == "scorer":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.scorer, name)

    def canonical(self, question: str) -> str:
        """The canonical form of ``question`` (itself when it is not a known phrasing)."""
        known = self._canonical.get(question)
        if known is None:
            parsed = parse_phrased(question)
            known = parsed.canonical if parsed is not None else question
            self._canonical[question] = known
        return known

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        return self.scorer.score([replace(r, question=self.canonical(r.question)) for r in requests])


def domain_note(question: str) -> str | None:
    """A note for questions outside the embedded models' domain (None when inside it)."""
    parsed = parse_phrased(question, read_extra=False)
    if parsed is not None and _MIN_OPS <= len(parsed.ops) <= _MAX_OPS:
        return None
    parsed = parse_phrased(question)
    if parsed is not None and _MIN_OPS <= len(parsed.ops) <= _MAX_OPS:
        return (
            "the embedded policy never trained on this way of phrasing its arithmetic problems (it "
            f"reads it as '{parsed.canonical}'), so the answer may be off; the canonical form "
            "'Start with 12. Add 5. ... What is the result?' is the one it reads best."
        )
    return (
        "the embedded default models know only arithmetic chains of 3 to 8 operations such as 'Start "
        "with 12. Add 5. Multiply by 3. Subtract 4. What is the result?' (or 'Begin with 12. Then "
        "double it. Take away 5. Then add 3. What do you get?'); this question is outside that domain, "
        "so the answer is an attempt, not a solution. Pass --policy/--prm (or policy=/scorer=) for real "
        "models."
    )
