"""Solve one question with PRM-guided search through the Python API.

Shows `prmsearch.solve`: the embedded arithmetic policy proposes steps, the embedded PRM scores
every step, and beam search keeps the best partial solutions. Prints the answer, the chosen steps
with their PRM scores, the answer votes and the compute ledger (tokens, PRM tokens, FLOPs).

Run (a few seconds on a CPU, no download; the second line asks your own question):

    HF_HUB_OFFLINE=1 .venv/bin/python examples/solve.py
    .venv/bin/python examples/solve.py "Start with 7. Add 5. Multiply by 3. Add 9. What is the result?"

The embedded models know only chains of 3 to 8 operations like the default question below.
"""

from __future__ import annotations

import sys

from prmsearch import SearchResult, solve

DEFAULT_QUESTION = "Start with 12. Multiply by 2. Subtract 5. Add 13. What is the result?"


def print_result(result: SearchResult) -> None:
    """The answer, the chosen path step by step with its PRM scores, the votes and the costs."""
    print(f"question: {result.question}")
    print(f"strategy: {result.strategy}")
    print(f"answer: {result.answer}")
    print(f"path score (min over steps): {result.score:.3f}")
    print("chosen steps (PRM score, step):")
    for step_score, step in zip(result.step_scores, result.steps, strict=True):
        print(f"  {step_score:.3f}  {step}")
    votes = ", ".join(f"{vote.answer} x{vote.count} (weight {vote.weight:.2f})" for vote in result.votes)
    print(f"votes among the final candidates: {votes}")
    for note in result.notes:
        print(f"note: {note}")
    if result.error:
        print(f"error: {result.error}")
    ledger = result.ledger
    print("cost ledger:")
    print(
        f"  policy: {ledger.policy_calls} calls, {ledger.generations} samples, "
        f"{ledger.generated_tokens} generated tokens, {ledger.prompt_tokens_computed} prompt tokens "
        f"computed, {ledger.prompt_tokens_cached} served from the prefix cache"
    )
    print(
        f"  PRM: {ledger.prm_calls} calls, {ledger.prm_tokens_computed} tokens computed, "
        f"{ledger.prm_tokens_cached} reused"
    )
    print(f"  FLOPs: {ledger.flops:.3e} (policy {ledger.policy_flops:.3e}, PRM {ledger.prm_flops:.3e})")
    print(f"  wall time: {ledger.wall_s:.2f} s")


def main() -> None:
    question = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_QUESTION
    # policy=None and scorer=None (the defaults) mean the embedded arithmetic models.
    # Strategy options pass through: beam search with 8 generations per step, 2 beams of width 4.
    result = solve(question, strategy="beam", n=8, width=4, seed=0)
    print_result(result)


if __name__ == "__main__":
    main()
