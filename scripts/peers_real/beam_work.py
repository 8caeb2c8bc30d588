"""How many steps each library's own beam search generates on one synthetic step model: why
its_hub's beam rows generate fewer tokens than prmsearch's at the same settings.

No model and no server: a stand-in policy draws each step's length (20-90 tokens) and whether it
holds a ``\\boxed{}`` answer (likelier with depth) from a hash of (question, steps so far, draw
number), and the zero-cost verifier of the side-by-side harness (``sbs_common.instant_score``)
scores every path. Each library runs its own beam search over it (budget 16, width 4, at most 16
steps, the last step's score), so the counts differ only by the algorithms:

    $S/venv-itshub/bin/python scripts/peers_real/beam_work.py --lib itshub --problems 300
    .venv/bin/python scripts/peers_real/beam_work.py --lib prmsearch --problems 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import threading
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sbs_common as C

#: probability that step d (1-based) of a path gives the answer
ANSWER_HAZARD = (0.0, 0.05, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.0)


def draw_step(question: str, steps: list[str], draw: int) -> tuple[str, int]:
    """The ``draw``-th step drawn after ``steps``: its text and its length in tokens."""
    rnd = random.Random(zlib.crc32(("\x01".join([question, *steps]) + f"#{draw}").encode()))
    depth = len(steps) + 1
    length = rnd.randint(20, 90)
    answers = rnd.random() < ANSWER_HAZARD[min(depth, len(ANSWER_HAZARD) - 1)]
    text = f"step {depth} v{rnd.randrange(10**6)}" + (f" \\boxed{{{rnd.randrange(4)}}}" if answers else "")
    return text, length


class Counts:
    """Steps and tokens drawn so far."""

    def __init__(self) -> None:
        self.steps = 0
        self.tokens = 0
        self.draws = 0

    def next(self, question: str, steps: list[str]) -> str:
        text, length = draw_step(question, steps, self.draws)
        self.draws += 1
        self.steps += 1
        self.tokens += length
        return text


def run_itshub(problems: int, budget: int, width: int, max_steps: int) -> tuple[Counts, float]:
    """its_hub 1.2.0's BeamSearch with a stand-in LM and the zero-cost PRM."""
    from its_hub.api import AbstractLanguageModel
    from its_hub.api.reward_models.prm import AbstractProcessRewardModel
    from its_hub.core.algorithms.beam_search import BeamSearch
    from its_hub.core.lms.step_generation import StepGeneration

    counts = Counts()

    class StandInLM(AbstractLanguageModel):
        async def agenerate(self, messages, stop=None, **kw):
            single = not isinstance(messages[0], list)
            replies = []
            for conv in [messages] if single else messages:
                question = conv[0].content
                done = [s for s in conv[1].content.split(C.STEP_SEP) if s] if len(conv) > 1 else []
                replies.append({"role": "assistant", "content": counts.next(question, done)})
            return replies[0] if single else replies

    class InstantPRM(AbstractProcessRewardModel):
        lock = threading.Lock()

        def score(self, prompt, steps):
            answers = [steps] if isinstance(steps, str) else list(steps)
            question = prompt if isinstance(prompt, str) else prompt[0].content
            out = [C.instant_score(question, C.split_steps(a)) for a in answers]
            return out[0] if isinstance(steps, str) else out

        async def ascore(self, prompt, steps):
            return self.score(prompt, steps)

    # its_hub checks "steps so far >= max_steps" before appending: max_steps - 1 allows max_steps
    sg = StepGeneration(step_token=C.STEP_SEP, max_steps=max_steps - 1, stop_token="\\boxed")
    beam = BeamSearch(sg, InstantPRM(), beam_width=width)
    chosen = 0
    for i in range(problems):
        search = beam.ainfer(StandInLM(), f"question {i}", budget=budget, return_response_only=False)
        result = asyncio.run(search)
        chosen += result.steps_used[result.selected_index]
    return counts, chosen / problems


def run_prmsearch(problems: int, budget: int, width: int, max_steps: int) -> tuple[Counts, float]:
    """prmsearch's beam strategy with a stand-in policy and the zero-cost scorer."""
    from prmsearch.api import Searcher
    from prmsearch.policies.base import Finish, Generation, StepOutput
    from prmsearch.scorers.scripted import ScriptedScorer

    counts = Counts()

    class StandInPolicy:
        num_parameters = 1_000_000

        def generate(self, requests):
            out = []
            for request in requests:
                samples = []
                for _ in range(request.n):
                    text = counts.next(request.question, list(request.steps))
                    samples.append(StepOutput(text, tuple(range(len(text))), -1.0, Finish.STEP))
                out.append(Generation(tuple(samples), prompt_tokens_computed=1))
            return out

    searcher = Searcher(StandInPolicy(), ScriptedScorer(C.instant_score), "beam", n=budget, width=width,
                        max_depth=max_steps, aggregation="last")
    results = searcher.run([f"question {i}" for i in range(problems)])
    failed = [r.error for r in results if r.error]
    if failed:
        raise SystemExit(f"{len(failed)} searches failed, first: {failed[0]}")
    return counts, sum(len(r.steps) for r in results) / problems


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lib", required=True, choices=["itshub", "prmsearch"])
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=16)
    a = parser.parse_args()
    run = run_itshub if a.lib == "itshub" else run_prmsearch
    counts, chosen_steps = run(a.problems, a.budget, a.width, a.max_steps)
    print(json.dumps({
        "lib": a.lib, "problems": a.problems, "budget": a.budget, "width": a.width,
        "steps_per_problem": round(counts.steps / a.problems, 2),
        "tokens_per_problem": round(counts.tokens / a.problems, 1),
        "chosen_path_steps": round(chosen_steps, 2),
    }))


if __name__ == "__main__":
    main()
