"""Greedy accuracy, pass@k and majority@k of a policy folder on an arithmetic split.

Why here and not in the project's backends: this is the yardstick used to pick the shipped
checkpoint, so it must not depend on code that is still being written. It uses plain transformers
``generate`` on full solutions in the "plain" prompt format (prompt = question + "\\n\\n"; the
model writes the steps separated by "\\n\\n" and stops at ``<|im_end|>``), then splits the text on
the delimiter and grades it with the exact checker. Torch runs on one thread.

CLI: ``python -m training.arith eval-policy FOLDER --split validation --k 16 --temperature 1.0``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prmsearch.arith.checker import check_solution
from prmsearch.arith.phrasing import BANKS, phrased_problem
from prmsearch.arith.problems import SPLIT_SIZES, ArithProblem, load_split

__all__ = ["EvalConfig", "EvalReport", "evaluate_policy", "generate_solutions", "load_policy"]

DELIMITER = "\n\n"
PHRASINGS = ("canonical", *BANKS)


@dataclass(frozen=True)
class EvalConfig:
    """What to measure.

    Attributes:
        split / n_problems: the problems (the first ``n_problems`` of ``split``; None = all).
        k: samples per problem for pass@k and majority@k (0 = greedy only).
        temperature / top_p: sampling settings for the k samples.
        seed: torch seed for sampling.
        batch_size: sequences per ``generate`` call.
        max_new_tokens: cap on solution length.
        phrasing: ``canonical`` questions, or those of a phrase bank of `prmsearch.arith.phrasing`
            (``train``: the phrasings the policy learned from; ``heldout``: ones it never saw).
    """

    split: str = "validation"
    n_problems: int | None = None
    k: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 64
    max_new_tokens: int = 160
    phrasing: str = "canonical"

    def __post_init__(self) -> None:
        if self.phrasing not in PHRASINGS:
            raise ValueError(f"phrasing must be one of {list(PHRASINGS)}, got {self.phrasing!r}")
        if self.split not in SPLIT_SIZES:
            raise ValueError(f"split must be one of {sorted(SPLIT_SIZES)}, got {self.split!r}")
        if self.n_problems is not None and self.n_problems < 1:
            raise ValueError(f"n_problems must be >= 1 or None, got {self.n_problems}")
        if self.split == "train" and self.n_problems is None:
            raise ValueError("n_problems must be given for split 'train', got None")
        if self.k < 0:
            raise ValueError(f"k must be >= 0, got {self.k}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class EvalReport:
    """Accuracies in [0, 1] over ``n_problems`` problems.

    ``greedy_steps_ok`` counts greedy solutions with no wrong step (a stricter figure than the
    answer); ``sample_accuracy`` is the mean accuracy of single samples.
    """

    n_problems: int
    greedy: float
    greedy_steps_ok: float
    k: int
    temperature: float
    pass_at_k: float | None
    majority_at_k: float | None
    sample_accuracy: float | None
    seconds: float


def load_policy(folder: str | Path):
    """Model (eval mode, fp32) and tokenizer of a policy folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return model, tok


def generate_solutions(
    model,
    tok,
    problems: Sequence[ArithProblem],
    n: int = 1,
    temperature: float | None = None,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
    max_new_tokens: int = 160,
) -> list[list[list[str]]]:
    """``n`` solutions per problem, each a list of steps; greedy when ``temperature`` is None."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    per_call = max(1, batch_size // n)
    out: list[list[list[str]]] = []
    for start in range(0, len(problems), per_call):
        chunk = problems[start : start + per_call]
        enc = tok(
            [p.question + DELIMITER for p in chunk],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        kwargs = (
            {"do_sample": False}
            if temperature is None
            else {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
        )
        with torch.no_grad():
            ids = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
                **kwargs,
            )
        texts = tok.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for i in range(len(chunk)):
            out.append([t.split(DELIMITER) for t in texts[i * n : (i + 1) * n]])
    return out


def evaluate_policy(folder: str | Path, cfg: EvalConfig) -> EvalReport:
    """Greedy accuracy and (when ``cfg.k`` > 0) pass@k, majority@k, mean single-sample accuracy."""
    started = time.time()
    model, tok = load_policy(folder)
    problems = load_split(cfg.split, cfg.n_problems)
    if cfg.phrasing != "canonical":
        problems = [phrased_problem(p, BANKS[cfg.phrasing]) for p in problems]
    greedy = generate_solutions(
        model, tok, problems, n=1, batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens
    )
    g_checks = [check_solution(p, sols[0]) for p, sols in zip(problems, greedy, strict=True)]
    n = len(problems)
    pass_k = maj_k = sample_acc = None
    if cfg.k:
        samples = generate_solutions(
            model,
            tok,
            problems,
            n=cfg.k,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            max_new_tokens=cfg.max_new_tokens,
        )
        n_pass = n_maj = n_correct = 0
        for p, sols in zip(problems, samples, strict=True):
            checks = [check_solution(p, s) for s in sols]
            n_correct += sum(c.answer_correct for c in checks)
            n_pass += any(c.answer_correct for c in checks)
            votes = Counter(c.answer for c in checks if c.answer is not None)
            # ties: the answer seen first wins (Counter keeps insertion order)
            n_maj += bool(votes) and votes.most_common(1)[0][0] == p.answer
        pass_k, maj_k, sample_acc = n_pass / n, n_maj / n, n_correct / (n * cfg.k)
    return EvalReport(
        n_problems=n,
        greedy=sum(c.answer_correct for c in g_checks) / n,
        greedy_steps_ok=sum(c.answer_correct and c.first_error == -1 for c in g_checks) / n,
        k=cfg.k,
        temperature=cfg.temperature,
        pass_at_k=pass_k,
        majority_at_k=maj_k,
        sample_accuracy=sample_acc,
        seconds=round(time.time() - started, 1),
    )
