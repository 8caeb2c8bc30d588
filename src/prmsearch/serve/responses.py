"""Search results as OpenAI response bodies and stream chunks, with the search's own facts attached.

Each choice is one finished solution: choice 0 is the one the strategy chose, the others are its
remaining finished candidates, best path score first. Every choice carries ``prmsearch`` (answer,
steps, step scores, path score); the response carries ``prmsearch`` (strategy, options, votes,
tree size, seeds, notes, what the strategy reported such as the planner's bin and arm, ignored
parameters) and ``usage`` counts every token the search spent:
``prompt_tokens`` all prompt tokens the policy read (cached ones too), ``completion_tokens`` all it
generated, ``usage.prmsearch`` the full ledger (PRM tokens, FLOPs, calls).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prmsearch.search.driver import SearchResult
from prmsearch.search.ledger import Ledger
from prmsearch.serve.requests import SearchRequest


@dataclass(frozen=True)
class Solution:
    """One finished solution of a search: its node, text, steps and scores."""

    node: int
    steps: tuple[str, ...]
    step_scores: tuple[float | None, ...]
    score: float | None
    answer: str | None
    finish_reason: str

    @property
    def text(self) -> str:
        return "\n\n".join(self.steps)

    def facts(self) -> dict[str, Any]:
        return {"answer": self.answer, "score": self.score, "steps": list(self.steps),
                "step_scores": list(self.step_scores), "node": self.node}


def best_solutions(result: SearchResult, count: int) -> list[Solution]:
    """Up to ``count`` distinct finished solutions: the chosen one first, then the other finished
    candidates by path score (unscored last, then tree order); a text sampled twice counts once."""
    tree = result.tree
    chosen = _solution(result, result.node, result.score)
    others = []
    seen = {result.node}
    for candidate in result.candidates:
        node = candidate.node
        if node in seen or not tree.terminal[node]:
            continue
        seen.add(node)
        others.append((candidate.score, node))
    others.sort(key=lambda item: (math.inf if math.isnan(item[0]) else -item[0], item[1]))  # NaN last
    solutions, texts = [chosen], {chosen.steps}
    for score, node in others:
        if len(solutions) == count:
            break
        solution = _solution(result, node, score)
        if solution.steps not in texts:  # the same text sampled twice is one solution
            texts.add(solution.steps)
            solutions.append(solution)
    return solutions[:count]


def _solution(result: SearchResult, node: int, score: float) -> Solution:
    tree = result.tree
    steps = tuple(tree.path_steps(node))
    scores = tuple(None if math.isnan(s) else float(s) for s in tree.step_scores(node))
    return Solution(
        node=node,
        steps=steps,
        step_scores=scores,
        score=None if math.isnan(score) else float(score),
        answer=tree.answer[node],
        finish_reason="length" if tree.truncated[node] or not tree.terminal[node] else "stop",
    )


def completion_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def usage(results: Sequence[SearchResult]) -> dict[str, Any]:
    """OpenAI ``usage`` for the searches, with the full ledger under ``prmsearch``."""
    ledger = Ledger.total(r.ledger for r in results)
    prompt = ledger.prompt_tokens_computed + ledger.prompt_tokens_cached
    return {
        "prompt_tokens": prompt,
        "completion_tokens": ledger.generated_tokens,
        "total_tokens": prompt + ledger.generated_tokens,
        "prmsearch": ledger.to_dict(),
    }


def search_facts(request: SearchRequest, results: Sequence[SearchResult]) -> dict[str, Any]:
    """The response's ``prmsearch`` object: how the search ran, per question."""
    options = {name: _plain(value) for name, value in request.strategy.options().items()}
    return {
        "strategy": request.strategy.name,
        "options": options,
        "ignored": list(request.ignored),
        "searches": [
            {
                "answer": r.answer,
                "votes": [{"answer": v.answer, "count": v.count, "weight": v.weight} for v in r.votes],
                "nodes": len(r.tree),
                "seed": r.seed,
                "notes": list(r.notes),
                **({"report": dict(r.report)} if r.report else {}),
            }
            for r in results
        ],
    }


def chat_response(request: SearchRequest, result: SearchResult, created: int | None = None) -> dict[str, Any]:
    """A ``chat.completion`` body for one searched question."""
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": s.text},
            "finish_reason": s.finish_reason,
            "logprobs": None,
            "prmsearch": s.facts(),
        }
        for i, s in enumerate(best_solutions(result, request.choices))
    ]
    return {
        "id": completion_id(chat=True),
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": usage([result]),
        "prmsearch": search_facts(request, [result]),
    }


def completion_response(
    request: SearchRequest, results: Sequence[SearchResult], created: int | None = None
) -> dict[str, Any]:
    """A ``text_completion`` body: prompt ``p``'s choices sit at indices ``p * n ...``."""
    choices = []
    for p, result in enumerate(results):
        for j, s in enumerate(best_solutions(result, request.choices)):
            choices.append({
                "index": p * request.choices + j,
                "text": s.text,
                "finish_reason": s.finish_reason,
                "logprobs": None,
                "prmsearch": s.facts(),
            })
    return {
        "id": completion_id(chat=False),
        "object": "text_completion",
        "created": created or int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": usage(results),
        "prmsearch": search_facts(request, results),
    }


def stream_chunks(
    request: SearchRequest, results: Sequence[SearchResult], chat: bool, stream_id: str, created: int
) -> list[dict[str, Any]]:
    """The chunks of a finished search, in order: per choice its role, then one chunk per step
    (with the step's score), then its finish; last, the usage when the client asked for it."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    chunks: list[dict[str, Any]] = []

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": stream_id, "object": kind, "created": created, "model": request.model,
                "choices": choices, **extra}

    for p, result in enumerate(results):
        for j, solution in enumerate(best_solutions(result, request.choices)):
            index = p * request.choices + j
            if chat:
                chunks.append(chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                                      "finish_reason": None, "logprobs": None}]))
            for k, (step, score) in enumerate(zip(solution.steps, solution.step_scores, strict=True)):
                text = step if k == 0 else "\n\n" + step
                body = {"delta": {"content": text}} if chat else {"text": text}
                chunks.append(chunk([{"index": index, **body, "finish_reason": None, "logprobs": None,
                                      "prmsearch": {"step": k, "step_score": score}}]))
            last: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
            chunks.append(chunk([{"index": index, **last, "finish_reason": solution.finish_reason,
                                  "logprobs": None, "prmsearch": solution.facts()}]))
    final: dict[str, Any] = {"prmsearch": search_facts(request, results)}
    if request.include_usage:
        final["usage"] = usage(results)
    chunks.append(chunk([], **final))
    return chunks


def _plain(value: Any) -> Any:
    """A config value as JSON: enums by value, a planner's plan as its JSON data."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return getattr(value, "value", value)
