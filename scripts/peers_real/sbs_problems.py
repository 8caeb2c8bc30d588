"""Write the GSM8K problems of the side-by-side to a JSON file OUTSIDE the repository (the data
set's text never goes into the repo), so the its_hub and ThinkBooster venvs (no prmsearch) read
exactly the problems and prompts the prmsearch side uses.

Problems: prmsearch's own loader, the headline's fixed sample (GSM8K test, ``shuffle_seed=0``,
the first N; the file comes from ../shared/data or $PRMSEARCH_DATA_DIR). Each entry holds the
question, the gold answer as prmsearch's grader reads it, and ``prompt``: the exact text
prmsearch's OpenAI policy sends before the first step (the policy folder's chat template with the
``step-by-step`` system prompt, ``prompt_format="auto"``), the reference of every render check.

    $PRMSEARCH_VENV/bin/python sbs_problems.py --n 8 --out /work/runs/peers-real/results/problems.json
"""
import argparse
import json
import os

from prmsearch.benchmarks.datasets import load_dataset
from prmsearch.engines.loading import load_tokenizer
from prmsearch.engines.prompt_formats import PromptBuilder, resolve_prompt_format

DEFAULT_POLICY = os.path.expanduser("~/.cache/prmsearch/models/qwen2.5-coder-0.5b-instruct")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--shuffle-seed", type=int, default=0)
    ap.add_argument("--policy-dir", default=DEFAULT_POLICY)
    ap.add_argument("--prompt-format", default="auto")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if os.path.abspath(a.out).startswith(repo + os.sep):
        raise SystemExit("--out must lie outside the repository (GSM8K text stays out of it)")
    probs = list(load_dataset("gsm8k", split="test", shuffle_seed=a.shuffle_seed, limit=a.n))
    tok = load_tokenizer(a.policy_dir)
    fmt = resolve_prompt_format(a.prompt_format, tok, a.policy_dir)
    builder = PromptBuilder(fmt, tok)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    data = {"dataset": "gsm8k", "split": "test", "shuffle_seed": a.shuffle_seed,
               "source": "prmsearch.benchmarks.datasets.load_dataset",
               "policy_dir": a.policy_dir, "prompt_format": fmt.name, "system": fmt.system,
               "step_delimiter": "\n\n",
               "problems": [{"id": p.id, "question": p.question, "gold": p.answer,
                             "prompt": builder.text(p.question, [])} for p in probs]}
    with open(a.out, "w") as f:
        json.dump(data, f, indent=1)
    print(f"{len(probs)} problems -> {a.out}; prompt format {fmt.name!r}; first id {probs[0].id}")


if __name__ == "__main__":
    main()
