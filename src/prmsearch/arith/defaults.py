"""The embedded default backends: the shipped arithmetic policy and PRM, made by name ``arith``.

They run anywhere in seconds on a CPU. They know only the arithmetic domain of
``prmsearch.arith.problems``: other questions still get an answer attempt, with a note saying so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prmsearch.arith.models import check_shipped_folder, default_policy_path

PRM_RETRAIN_COMMAND = "python scripts/train_arith_prm.py --out runs/prm-final --ship"
_PRM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
#: The trained domain: a start value and 3 to 8 operations (``ProblemConfig``'s defaults); the
#: policy never saw shorter or longer chains and answers them confidently wrong.
_DOMAIN = re.compile(
    r"^Start with \d+\.(?: (?:Add|Subtract|Multiply by|Divide by) \d+\.){3,8} What is the result\?$"
)


def default_prm_path() -> Path:
    """The folder of the shipped arithmetic PRM, checked for completeness."""
    folder = default_policy_path().parent / "prm"
    return check_shipped_folder(folder, "PRM", _PRM_FILES, PRM_RETRAIN_COMMAND)


def arith_policy(**kwargs: Any):
    """The shipped policy through the transformers backend (CPU, fp32 by default)."""
    from prmsearch.policies.hf import HFPolicy

    kwargs.setdefault("device", "cpu")
    policy = HFPolicy(model=str(default_policy_path()), **kwargs)
    policy.domain_note = domain_note  # the Searcher adds it to out-of-domain results
    return policy


def arith_prm(**kwargs: Any):
    """The shipped PRM through the ``qwen-prm`` transformers scorer."""
    from prmsearch.scorers.hf import HFPRMScorer

    kwargs.setdefault("device", "cpu")
    return HFPRMScorer(default_prm_path(), "qwen-prm", **kwargs)


def domain_note(question: str) -> str | None:
    """A note for questions outside the embedded models' domain (None when inside it)."""
    if _DOMAIN.match(question.strip()):
        return None
    return (
        "the embedded default models know only arithmetic chains of 3 to 8 operations such as 'Start "
        "with 12. Add 5. Multiply by 3. Subtract 4. What is the result?'; this question is outside that "
        "domain, so the answer "
        "is an attempt, not a solution. Pass --policy/--prm (or policy=/scorer=) for real models."
    )
