"""What machine a sweep ran on, for its manifest: the parts that change a run's numbers.

On the vLLM CPU engine the same seeded run gives other samples on another CPU: a half-precision
model runs in bfloat16 only where the CPU has bf16 instructions (float32 elsewhere), and with
several threads the engine's sums depend on which requests share a batch. Greedy decoding of the
real 0.5B on 100 GSM8K problems agreed on only 63 answers between two such machines. A sweep
resumed elsewhere therefore mixes rows of two machines; the manifest records each one, and a
resume on a different one says so (a warning: the rows are still valid, just not one machine's).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

#: CPU flags that decide the dtype and kernels of CPU inference
DECISIVE_FLAGS = ("avx512_bf16", "amx_bf16", "avx512f", "avx2")
#: environment variables that change what an engine computes or how many threads it has
DECISIVE_ENV = ("VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_KVCACHE_SPACE", "OMP_NUM_THREADS",
                "CUDA_VISIBLE_DEVICES")
#: the fields of a machine record that are compared (the time it was first seen is not)
COMPARED = ("cpu", "cpu_flags", "cores", "gpus", "env")


def _cpu() -> tuple[str, list[str]]:
    """The CPU's model name and which of :data:`DECISIVE_FLAGS` it has (Linux; else the
    platform's processor string and no flags)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read(200_000)
    except OSError:
        return platform.processor() or platform.machine(), []
    lines = text.splitlines()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.machine())
    flags = set(next((line for line in lines if line.startswith("flags")), "").split(":", 1)[-1].split())
    return name, [flag for flag in DECISIVE_FLAGS if flag in flags]


def _gpus() -> list[str]:
    """Models of the NVIDIA GPUs the driver lists (read from /proc, so torch need not be
    imported: the folder is opened before the backends are built); none elsewhere."""
    root = Path("/proc/driver/nvidia/gpus")
    names = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            text = (entry / "information").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                      if line.startswith("Model:")), entry.name)
        names.append(model)
    return names


def machine_info() -> dict[str, Any]:
    """This machine as the manifest records it: CPU model and decisive flags, cores, GPUs and
    the decisive environment variables that are set."""
    name, flags = _cpu()
    return {
        "cpu": name,
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "gpus": _gpus(),
        "env": {key: os.environ[key] for key in DECISIVE_ENV if key in os.environ},
    }


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two records describe machines that compute alike (the time they ran aside)."""
    return all(a.get(key) == b.get(key) for key in COMPARED)


def record_machine(manifest: dict[str, Any]) -> tuple[bool, str | None]:
    """Add this machine to ``manifest["machines"]`` when it is not the last one recorded.
    Returns whether it was added, and a warning naming the difference when an earlier machine
    was recorded (None for the first record or the same machine)."""
    here = machine_info()
    machines = manifest.setdefault("machines", [])
    previous = machines[-1] if machines else None
    if previous is not None and same_machine(previous, here):
        return False, None
    machines.append({**here, "from": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    if previous is None:
        return True, None
    changed = [key for key in COMPARED if previous.get(key) != here.get(key)]
    return True, (
        f"resuming on another machine ({', '.join(changed)} differ from the last one recorded): the "
        "rows written here may differ from the earlier ones for the same seeds (a CPU's bf16 "
        "support decides the vLLM dtype); both machines are in the manifest's 'machines'"
    )
