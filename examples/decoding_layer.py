"""prmsearch as a decoding layer inside your own loop.

Shows the `Searcher`: build it once (backends loaded once, strategy and options fixed), then call
`searcher.run(questions, on_result=...)` on batches. Every round of the search over a batch is one
batched policy call and one batched PRM call; `on_result` streams each problem as it finishes. The
results go into the user's own code: here each answer is graded against the gold answer with the
package's grader (`prmsearch.benchmarks.is_equivalent`, the one sweeps use: "32.0" = "32",
"\\frac{1}{2}" = "0.5"), and accuracy and total FLOPs are printed.

Run (about ten seconds on a CPU, no download):

    HF_HUB_OFFLINE=1 .venv/bin/python examples/decoding_layer.py
"""

from __future__ import annotations

from collections.abc import Callable

from prmsearch import Ledger, Searcher, SearchResult, resolve_policy, resolve_scorer
from prmsearch.arith import ArithProblem, load_split
from prmsearch.benchmarks import is_equivalent

BATCH_SIZE = 4
PROBLEM_COUNT = 8


def reporter(batch: list[ArithProblem]) -> Callable[[int, SearchResult], None]:
    """An ``on_result`` callback for one batch: the searcher calls it as each problem finishes
    (in finishing order, with the problem's index in the batch)."""

    def report(index: int, result: SearchResult) -> None:
        problem = batch[index]
        verdict = "right" if is_equivalent(result.answer, str(problem.answer)) else "wrong"
        print(
            f"  {problem.id}: answer {result.answer} (gold {problem.answer}, {verdict}), "
            f"{result.ledger.flops:.2e} FLOPs"
        )

    return report


def main() -> None:
    problems: list[ArithProblem] = load_split("test", PROBLEM_COUNT)  # questions with gold answers
    # Load the embedded policy and PRM once; None means the embedded defaults.
    searcher = Searcher(resolve_policy(None), resolve_scorer(None), "beam", n=4, width=2, seed=0)

    correct_count = 0
    run_ledgers: list[Ledger] = []
    for batch_start in range(0, len(problems), BATCH_SIZE):
        batch = problems[batch_start : batch_start + BATCH_SIZE]
        print(f"batch {batch_start // BATCH_SIZE + 1}: {len(batch)} questions searched together")
        results = searcher.run([problem.question for problem in batch], on_result=reporter(batch))
        # The user's own code: results come back in input order.
        for result, problem in zip(results, batch, strict=True):
            correct_count += is_equivalent(result.answer, str(problem.answer))
        assert searcher.last_ledger is not None  # the run's total (its wall_s is the run's wall clock)
        run_ledgers.append(searcher.last_ledger)

    total = Ledger.total(run_ledgers)
    print(f"accuracy: {correct_count}/{len(problems)} = {correct_count / len(problems):.1%}")
    print(f"total FLOPs: {total.flops:.3e} (policy {total.policy_flops:.3e}, PRM {total.prm_flops:.3e})")
    print(f"total tokens: {total.generated_tokens} generated, {total.prm_tokens_computed} PRM computed")


if __name__ == "__main__":
    main()
