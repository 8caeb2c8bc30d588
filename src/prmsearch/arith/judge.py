"""A judge for the arithmetic domain: a model re-derives every step and names the first one it
would have written differently.

"The Lessons of Developing PRMs" compares Monte Carlo labels with an LLM judge. The embedded
policy cannot read a critique prompt (256-token context), so the study's judge analogue is a
stronger model of the same domain (the PRM's base, trained longer: greedy 99% on validation)
used the way a judge model would be: shown the problem and the numbered solution
(:data:`~prmsearch.prm.labelling.JUDGE_PROMPT`), it re-derives each step from the steps before
it and reports the index of the first step whose equation ("a OP b = c") differs from its own,
or -1, in ``\\boxed{}``. Its errors are the model's own (a wrong re-derivation flags a right step;
the exact checker stays the human-annotation analogue), which is what makes it a judge and not
an oracle.

It is a :class:`~prmsearch.policies.base.Policy`, so ``prmsearch label --judge MODEL
--judge-backend arith-judge`` uses it like any other judge; the re-derivations of every request
of a call go to the model in one batched call (greedy at temperature 0; sampled with the
request's temperature and seeds otherwise, so ``judge_samples`` can disagree).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prmsearch.arith.checker import _OP_STEP, _SYMBOLS
from prmsearch.backend_hooks import PolicyBackend
from prmsearch.policies.base import (
    Finish,
    Generation,
    GenerationRequest,
    SamplingParams,
    StepOutput,
)
from prmsearch.seeding import mix_seed

_PROBLEM = re.compile(r"Problem:\n(?P<question>.*?)\n\nSolution:\n", re.DOTALL)
_PARAGRAPH = re.compile(r"<paragraph_(\d+)>\n(.*?)\n</paragraph_\1>", re.DOTALL)


def parse_judge_prompt(prompt: str) -> tuple[str, list[str]] | None:
    """The question and the steps of a critique prompt, or None when it is not one."""
    problem = _PROBLEM.search(prompt)
    steps = [text for _, text in _PARAGRAPH.findall(prompt)]
    if problem is None or not steps:
        return None
    return problem.group("question").strip(), steps


def equation(step: str) -> tuple[int, str, int, int] | str:
    """A step's ``(a, OP, b, c)``, or its whitespace-normalised text when it has no equation."""
    match = _OP_STEP.match(step)
    if match is None:
        return " ".join(step.split())
    return int(match.group("a")), _SYMBOLS[match.group("op")], int(match.group("b")), int(match.group("c"))


def first_difference(written: Sequence[str], derived: Sequence[str]) -> int:
    """The first step whose equation differs from the re-derived one, or -1."""
    return next((i for i, (w, d) in enumerate(zip(written, derived)) if equation(w) != equation(d)), -1)


class ArithRederiveJudge(PolicyBackend):
    """A judge policy that re-derives each step with ``model`` (an arithmetic causal LM folder)."""

    def __init__(self, model: str | Path, *, max_step_tokens: int = 48, **policy_args: Any) -> None:
        from prmsearch.policies.hf import HFPolicy

        policy_args.setdefault("device", "cpu")
        self.policy = HFPolicy(model=str(model), **policy_args)
        self.max_step_tokens = max_step_tokens
        self.cost = getattr(self.policy, "cost", None)

    @property
    def num_parameters(self) -> int:
        return self.policy.num_parameters

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One verdict per sample of every request: ``\\boxed{i}`` for the first step the model
        would have written differently, ``\\boxed{-1}`` for none; a prompt that is not a
        critique prompt gets an answer without a box (an unparsable verdict)."""
        parsed = [parse_judge_prompt(r.question) for r in requests]
        derivations: list[GenerationRequest] = []
        for request, item in zip(requests, parsed):
            if item is None:
                continue
            question, steps = item
            sampling = SamplingParams(temperature=request.sampling.temperature,
                                      max_new_tokens=self.max_step_tokens, delimiter="\n\n")  # fmt: skip
            for sample in range(request.n):
                for i in range(len(steps)):
                    seed = mix_seed(request.seed or 0, sample, i)
                    derivations.append(GenerationRequest(question, tuple(steps[:i]), 1, sampling, seed))
        outputs = iter(self.policy.generate(derivations)) if derivations else iter(())
        results = []
        for request, item in zip(requests, parsed):
            if item is None:
                text = "This is not a numbered solution I can check."
                unparsable = tuple(StepOutput(text, (), 0.0, Finish.EOS) for _ in range(request.n))
                results.append(Generation(unparsable, prompt_tokens_computed=0))
                continue
            _, steps = item
            samples, computed, generated = [], 0, 0
            for _ in range(request.n):
                gens = [next(outputs) for _ in steps]
                derived = [g.samples[0].text for g in gens]
                computed += sum(g.prompt_tokens_computed for g in gens)
                generated += sum(g.tokens_generated for g in gens)
                first = first_difference(steps, derived)
                why = f"paragraph {first} should read {derived[first]!r}" if first >= 0 else "all steps check"
                samples.append(StepOutput(f"{why}. \\boxed{{{first}}}", (), 0.0, Finish.EOS))
            results.append(
                Generation(tuple(samples), prompt_tokens_computed=computed, generated_tokens=generated)
            )
        return results


def arith_judge(model: str | Path, **kwargs: Any) -> ArithRederiveJudge:
    """The ``arith-judge`` policy backend (``model``: an arithmetic base model folder)."""
    return ArithRederiveJudge(model, **kwargs)
