"""The embedded default domain: step-checkable arithmetic problems and their tiny trained models.

- `problems`: seeded problem generator and the fixed, disjoint train / validation / test splits.
- `checker`: exact step checker (first wrong step, final answer).
- `tokenizer`: the small Qwen2-style BPE tokenizer shared by the policy and the PRM.
- `train`, `evaluate`: training and measuring the policy (import torch lazily).
- `models`: `default_policy_path()`, the shipped policy folder.

Importing this package, `problems` or `checker` never imports torch.
"""

from prmsearch.arith.checker import CheckResult, check_solution
from prmsearch.arith.models import default_policy_path
from prmsearch.arith.problems import ArithProblem, Op, ProblemConfig, load_split

__all__ = [
    "ArithProblem",
    "CheckResult",
    "Op",
    "ProblemConfig",
    "check_solution",
    "default_policy_path",
    "load_split",
]
