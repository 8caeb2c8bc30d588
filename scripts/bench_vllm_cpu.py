"""Raw vLLM CPU engine throughput on a real model, under several engine settings, side by side.

Each setting runs in its own process (one engine at a time, back to back, so they never share the
cores): the same GSM8K prompts in the model's chat template, one batched ``generate`` call, and
the generated tokens per second are printed per setting. It shows what the defaults of
``prmsearch.engines.vllm_engine`` are based on (the dtype and the reserved core on small CPUs):

    python scripts/bench_vllm_cpu.py --model ~/.cache/prmsearch/models/qwen2.5-coder-0.5b-instruct \
        --settings reserved=default,reserved=0 --prompts 32 --max-tokens 256
    python scripts/bench_vllm_cpu.py --model DIR --settings dtype=float32,dtype=bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k_train.jsonl"


def child(model: str, dtype: str, prompts: int, max_tokens: int, data: Path) -> None:
    """Run one engine and print one JSON line with its throughput."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, enforce_eager=True, block_size=32, enable_prefix_caching=True,
              max_model_len=2048, enable_chunked_prefill=False)
    tok = llm.get_tokenizer()
    with data.open(encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for _, line in zip(range(prompts), f)]
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                     add_generation_prompt=True) for q in questions]
    start = time.perf_counter()
    outs = llm.generate(texts, SamplingParams(temperature=0.8, max_tokens=max_tokens, seed=0))
    seconds = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    print("RESULT " + json.dumps({"tokens": tokens, "seconds": round(seconds, 1),
                                  "tokens_per_s": round(tokens / seconds, 1)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model folder (e.g. from fetch_real_models.py)")
    parser.add_argument("--settings", default="reserved=default,reserved=0",
                        help="comma-separated settings, each reserved=N|default or dtype=NAME")
    parser.add_argument("--dtype", default="float32", help="dtype where a setting does not say")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--data", default=str(DATA), help="a GSM8K-style JSONL file with questions")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.model, args.dtype, args.prompts, args.max_tokens, Path(args.data))
        return 0
    for setting in args.settings.split(","):
        key, _, value = setting.partition("=")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        dtype = args.dtype
        if key == "reserved":
            env.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
            if value != "default":
                env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = value
        elif key == "dtype":
            dtype = value
        else:
            parser.error(f"unknown setting {setting!r}; use reserved=N|default or dtype=NAME")
        command = [sys.executable, __file__, "--child", "--model", args.model, "--dtype", dtype,
                   "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens), "--data", args.data]
        out = subprocess.run(command, env=env, capture_output=True, text=True)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        figure = json.loads(lines[-1][7:]) if lines else {"error": out.stderr[-400:]}
        print(f"{setting:>20} (dtype {dtype}): {json.dumps(figure)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
