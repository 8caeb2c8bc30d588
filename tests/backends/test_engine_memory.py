"""The memory an engine is given: a CPU engine's KV cache from the memory free at its start, the
split of one GPU between a policy and a PRM engine, and what is read from a model folder.

Pure arithmetic (bytes in, bytes out); the engines that start with these sizes are in
tests/vllm/test_j_engine_lifetime.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from prmsearch.engines import memory_fit
from prmsearch.engines.errors import EngineMemoryError
from prmsearch.engines.memory_fit import (
    CPU_ENGINE_RUNTIME_BYTES,
    CPU_KV_CAP_BYTES,
    GIB,
    ModelMemory,
    cpu_engine_start,
    gpu_memory_shares,
    model_memory,
    plan_cpu_kv_cache,
)

# Qwen2.5-0.5B in bfloat16: 494M parameters, 24 layers x 2 KV heads x 64 dims.
QWEN05 = ModelMemory(weights_bytes=988_000_000, kv_bytes_per_token=2 * 24 * 2 * 64 * 2, max_tokens=32768)
QWEN15 = ModelMemory(weights_bytes=3_087_000_000, kv_bytes_per_token=2 * 28 * 2 * 128 * 2, max_tokens=32768)


def test_an_idle_24_gb_machine_gives_the_engine_the_cap():
    plan = plan_cpu_kv_cache(QWEN05, 22 * GIB)
    assert plan.kv_bytes == CPU_KV_CAP_BYTES
    assert plan.engine_bytes == QWEN05.weights_bytes + CPU_ENGINE_RUNTIME_BYTES


def test_a_busy_machine_gets_half_of_what_is_left_after_the_engine():
    available = 6 * GIB
    plan = plan_cpu_kv_cache(QWEN05, available)
    left = available - QWEN05.weights_bytes - CPU_ENGINE_RUNTIME_BYTES
    assert plan.kv_bytes <= left // 2 and left // 2 - plan.kv_bytes < 1 << 20  # whole MiB
    assert plan.kv_bytes % (1 << 20) == 0


def test_the_kv_cache_never_goes_below_one_full_length_sequence():
    # 4 GiB free: half of what is left after the engine is below one 32k-token sequence (384 MiB)
    plan = plan_cpu_kv_cache(QWEN05, 4 * GIB)
    assert plan.kv_bytes == QWEN05.one_sequence_kv_bytes == 384 * (1 << 20)


def test_too_little_memory_is_one_line_that_names_the_fix():
    with pytest.raises(EngineMemoryError) as caught:
        plan_cpu_kv_cache(QWEN15, 4 * GIB, name="qwen2.5-coder-1.5b-instruct")
    message = str(caught.value)
    assert "\n" not in message
    needed = QWEN15.weights_bytes + CPU_ENGINE_RUNTIME_BYTES + QWEN15.one_sequence_kv_bytes
    assert f"qwen2.5-coder-1.5b-instruct needs {needed / GIB:.1f} GiB free" in message
    assert "but 4.0 GiB is free" in message
    assert "max_model_len=4096" in message
    # a shorter context needs less, and then fits
    short = ModelMemory(QWEN15.weights_bytes, QWEN15.kv_bytes_per_token, 4096)
    assert plan_cpu_kv_cache(short, 6 * GIB).kv_bytes >= short.one_sequence_kv_bytes


def test_an_engine_starting_beside_another_plans_with_what_the_first_leaves():
    alone = plan_cpu_kv_cache(QWEN15, 16 * GIB)
    first = plan_cpu_kv_cache(QWEN05, 16 * GIB)
    beside = plan_cpu_kv_cache(QWEN15, 16 * GIB, reserved_bytes=first.engine_bytes + first.kv_bytes)
    assert beside.kv_bytes < alone.kv_bytes
    total = first.engine_bytes + first.kv_bytes + beside.engine_bytes + beside.kv_bytes
    assert total < 16 * GIB  # both fit, with room left for the rest of the run
    assert "kept for an engine starting beside it" in beside.describe("m")


def test_engines_starting_together_count_each_other(monkeypatch):
    monkeypatch.setattr(memory_fit, "available_memory_bytes", lambda: 16 * GIB)
    plans, inside = [], threading.Barrier(2)

    def start(model):
        with cpu_engine_start(model, "m") as plan:
            plans.append(plan)
            inside.wait(5)  # both engines are starting at once

    first = threading.Thread(target=start, args=(QWEN05,))
    first.start()
    deadline = time.monotonic() + 5
    while not memory_fit._starting and time.monotonic() < deadline:
        time.sleep(0.01)
    second = threading.Thread(target=start, args=(QWEN15,))
    second.start()
    first.join(10)
    second.join(10)
    assert plans[0].reserved_bytes == 0
    assert plans[1].reserved_bytes == plans[0].engine_bytes + plans[0].kv_bytes
    assert not memory_fit._starting  # released once started


def test_the_one_line_says_the_size_where_it_came_from_and_how_to_choose():
    line = plan_cpu_kv_cache(QWEN05, 22 * GIB).describe("/models/qwen2.5-coder-0.5b-instruct")
    assert line == ("vLLM KV cache for qwen2.5-coder-0.5b-instruct: 4.0 GiB (22.0 GiB free at its start; "
                    "set VLLM_CPU_KVCACHE_SPACE=GIB to choose)")


def test_one_gpu_is_split_so_both_engines_fit():
    total = 80 * GIB
    policy_share, prm_share = gpu_memory_shares(total, QWEN15, QWEN05)
    assert policy_share + prm_share == pytest.approx(memory_fit.GPU_TOTAL_SHARE, abs=0.002)
    prm_bytes = QWEN05.weights_bytes + memory_fit.GPU_PRM_KV_BYTES + memory_fit.GPU_ENGINE_RUNTIME_BYTES
    assert prm_share == pytest.approx(prm_bytes / total, abs=0.001)
    assert policy_share * total > QWEN15.weights_bytes + QWEN15.one_sequence_kv_bytes


def test_a_gpu_too_small_for_both_is_refused_with_the_fix():
    with pytest.raises(EngineMemoryError, match=r"do not fit on one GPU of 6.0 GiB.*--prm-url"):
        gpu_memory_shares(6 * GIB, QWEN15, QWEN15)


def test_model_memory_reads_the_folder(tmp_path):
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32,
              "max_position_embeddings": 1024, "dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [10, 32], "data_offsets": [0, 640]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(640))
    half = model_memory(tmp_path, "bfloat16")
    assert half == ModelMemory(weights_bytes=640, kv_bytes_per_token=2 * 2 * 2 * 8 * 2, max_tokens=1024)
    full = model_memory(tmp_path, "float32", max_model_len=256)
    assert full.weights_bytes == 1280 and full.kv_bytes_per_token == 2 * half.kv_bytes_per_token
    assert full.max_tokens == 256


def test_available_memory_is_read_from_the_machine():
    assert 0 < memory_fit.available_memory_bytes() < 1 << 50


def write_folder(folder, layers: int, hidden: int, parameters: int):
    folder.mkdir()
    config = {"num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
              "hidden_size": hidden, "max_position_embeddings": 4096, "dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(config))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [parameters], "data_offsets": [0, 2 * parameters]}})
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header.encode())
    return str(folder)


def test_two_vllm_engines_on_one_gpu_get_the_split_unless_a_share_is_given(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from prmsearch.engines import backend_pair

    policy = write_folder(tmp_path / "policy", 28, 1536, 1_500_000_000)
    prm = write_folder(tmp_path / "prm", 24, 896, 500_000_000)
    monkeypatch.setattr(backend_pair, "on_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (70 * GIB, 80 * GIB))
    policy_args, prm_args = backend_pair.share_one_gpu("vllm", "vllm", policy, prm, {"dtype": "bfloat16"}, {})
    expected = gpu_memory_shares(80 * GIB, model_memory(tmp_path / "policy", "bfloat16"),
                                 model_memory(tmp_path / "prm", "bfloat16"))
    assert (policy_args["gpu_memory_utilization"], prm_args["gpu_memory_utilization"]) == expected
    assert policy_args["dtype"] == "bfloat16"  # the other arguments are kept
    given = backend_pair.share_one_gpu("vllm", "vllm", policy, prm, {"gpu_memory_utilization": 0.5}, {})
    assert given == ({"gpu_memory_utilization": 0.5}, {"gpu_memory_utilization": 0.4})  # the rest of 0.9
    both = ({"gpu_memory_utilization": 0.6}, {"gpu_memory_utilization": 0.2})
    assert backend_pair.share_one_gpu("vllm", "vllm", policy, prm, *both) == both
    assert backend_pair.share_one_gpu("vllm", "hf", policy, prm, {}, {}) == ({}, {})  # one engine only
    monkeypatch.setattr(backend_pair, "on_gpu", lambda: False)
    assert backend_pair.share_one_gpu("vllm", "vllm", policy, prm, {}, {}) == ({}, {})  # a CPU: KV sizes
