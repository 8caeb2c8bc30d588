"""YAML recipes: one file names the policy, the PRM, the strategies, sampling, dataset, budgets
and seeds of a benchmark, and maps onto the frozen configs.

A recipe resolves to a :class:`Recipe`: a :class:`~prmsearch.benchmarks.sweeps.sweep.SweepConfig` (what
runs, recorded in the results manifest) plus one :class:`BackendSpec` for the policy and one for
the PRM (how to build them, with their engine arguments). Loading validates everything and
builds nothing, so a recipe can be checked on a laptop without downloading any model::

    recipe = load_recipe("recipes/qwen25-math-1.5b_qwen-prm-7b_math500.yaml")
    policy, scorer = recipe.build_backends()      # loads the models (GPU machine)
    run_sweep(recipe.sweep, problems, out, policy=policy, scorer=scorer)

Schema (unknown keys are errors that name the key)::

    name: str                     # required
    description: str
    policy: {backend: vllm|hf|openai|sglang|<registered>, model: str, args: {...}}
    prm: {backend: vllm|hf|vllm-server, family: qwen-prm|verifier|rlhflow|...|policy-confidence,
          model: str, args: {...}}
                                  # vllm-server: model = the served name, args.base_url = the server
                                  # policy-confidence: no model (the policy's own log-probabilities)
    sampling: {temperature, top_p, max_step_tokens, delimiter}
    search: {max_depth, chunk, share_bon_samples, policy_logprobs}
                                  # share: best-of-N-family siblings reuse samples
                                  # policy_logprobs: auto (default) | always (RunConfig.policy_logprobs)
    dataset: {name, path, split, limit, shuffle_seed}
    strategies: {<strategy>: {<option>: value}}   # e.g. beam: {aggregation: last}
    budgets: [4, 16, 64, 256]
    seeds: [0, 1, 2]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from prmsearch.benchmarks.sweeps.config import SweepConfig

POLICY_BACKENDS = ("hf", "vllm", "openai", "sglang", "arith")
PRM_BACKENDS = ("hf", "vllm", "vllm-server")
#: PRM families each scorer backend can run, and the scorer name that builds them.
#: Scorers that are not a PRM family and need no model (they may take one): given as ``prm.family``.
MODEL_FREE_SCORERS = ("policy-confidence",)
_TOP_KEYS = {"name", "description", "policy", "prm", "sampling", "search", "dataset", "strategies",
             "budgets", "seeds"}
_SECTION_KEYS = {
    "policy": {"backend", "model", "args"},
    "prm": {"backend", "family", "model", "args"},
    "sampling": {"temperature", "top_p", "max_step_tokens", "delimiter"},
    "search": {"max_depth", "chunk", "share_bon_samples", "policy_logprobs"},
    "dataset": {"name", "path", "split", "limit", "shuffle_seed"},
}


class RecipeError(ValueError):
    """A recipe that does not parse or does not map onto a valid configuration."""


def _known_args(kind: str, backend: str) -> set[str] | None:
    """Keyword arguments a backend accepts (None: not checked here, e.g. transformers, which
    would import torch; its own config validates them when it is built)."""
    if backend == "vllm":
        from prmsearch.engines.vllm_engine import VLLMEngineConfig

        engine = set(VLLMEngineConfig.__dataclass_fields__) - {"model"}
        extra = {"prompt_format", "tokenizer"} if kind == "policy" else \
            {"tokenizer", "format_options", "score_cache_entries"}
        return engine | extra
    if kind == "prm" and backend == "vllm-server":
        from prmsearch.scorers.vllm_server import VLLMServerPRMConfig

        return set(VLLMServerPRMConfig.__dataclass_fields__) - {"model", "family"}
    if kind == "policy" and backend == "openai":
        from prmsearch.policies.openai import OpenAIPolicyConfig

        return set(OpenAIPolicyConfig.__dataclass_fields__) - {"model"}
    return None


@dataclass(frozen=True)
class BackendSpec:
    """How to build one backend.

    Attributes:
        backend: policy backend (``hf``, ``vllm``, ``openai``, ``sglang``, ...) or PRM backend
            (``hf``, ``vllm``, ``vllm-server``).
        model: model folder or Hub id (for ``openai`` and ``vllm-server``: the served model name;
            None for a model-free scorer such as ``policy-confidence``).
        family: PRM family (PRM specs only), never guessed from the model name.
        args: keyword arguments of the backend (engine arguments, prompt format, base URL...).
    """

    backend: str
    model: str | None
    family: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)

    def scorer_name(self) -> str:
        """The registered scorer that runs this PRM spec (`prmsearch.scorers.backend_scorer`)."""
        from prmsearch.scorers import backend_scorer

        return backend_scorer(self.backend, str(self.family))


@dataclass(frozen=True)
class Recipe:
    """A parsed recipe: the sweep to run and how to build its two backends."""

    name: str
    description: str
    sweep: SweepConfig
    policy: BackendSpec
    prm: BackendSpec
    path: Path | None = None

    def build_policy(self, args: Mapping[str, Any] | None = None):
        """Load the policy (this is where models are loaded), through `resolve_policy`, with the
        recipe's backend arguments (or ``args``)."""
        from prmsearch.api import resolve_policy

        args = self.policy.args if args is None else args
        if self.policy.backend == "arith":
            return resolve_policy(None, **args)
        return resolve_policy(self.policy.model, self.policy.backend, **args)

    def build_scorer(self, args: Mapping[str, Any] | None = None):
        """Load the PRM scorer, through `resolve_scorer`, with the recipe's backend arguments (or
        ``args``)."""
        from prmsearch.api import resolve_scorer

        args = self.prm.args if args is None else args
        return resolve_scorer(self.prm.model, self.prm.family, self.prm.backend, **args)

    def build_backends(self):
        """``(policy, scorer)``, loaded at the same time on a CPU (two vLLM engines start in about
        the time of one); on a GPU the policy first, each engine with its share of the device."""
        from prmsearch.engines.backend_pair import load_together, share_one_gpu, start_together

        policy_args, prm_args = share_one_gpu(self.policy.backend, self.prm.backend, self.policy.model,
                                              self.prm.model, self.policy.args, self.prm.args)
        together = start_together(self.policy.backend, self.prm.backend)
        return load_together(lambda: self.build_policy(policy_args), lambda: self.build_scorer(prm_args),
                             concurrent=together)


def _section(data: Mapping[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise RecipeError(f"{source}: {key} must be a mapping, got {type(value).__name__}")
    unknown = sorted(set(value) - _SECTION_KEYS[key])
    if unknown:
        raise RecipeError(f"{source}: unknown {key} keys {unknown}; known: {sorted(_SECTION_KEYS[key])}")
    return dict(value)


def _backend(data: dict[str, Any], what: str, source: str) -> BackendSpec:
    backend, model = data.get("backend"), data.get("model")
    if isinstance(model, str) and model.startswith(("~", "$")):  # a folder under the home or a variable
        model = os.path.expandvars(os.path.expanduser(model))
    args = data.get("args") or {}
    if not isinstance(args, Mapping):
        raise RecipeError(f"{source}: {what}.args must be a mapping, got {type(args).__name__}")
    if what == "prm" and data.get("family") in MODEL_FREE_SCORERS:
        if backend not in (None, "hf"):
            raise RecipeError(f"{source}: prm.family {data['family']!r} runs in process; drop prm.backend "
                              f"(or say hf), got {backend!r}")
        given = model if isinstance(model, str) and model else None
        return BackendSpec("hf", given, data["family"], dict(args))
    if not isinstance(model, str) or not model:
        raise RecipeError(f"{source}: {what}.model must be a model folder or Hub id, got {model!r}")
    known = _known_args(what, str(backend)) if backend in POLICY_BACKENDS + PRM_BACKENDS else None
    if known is not None and set(args) - known:
        raise RecipeError(f"{source}: unknown {what}.args {sorted(set(args) - known)} for backend "
                          f"{backend!r}; known: {sorted(known)}")
    if what == "policy":
        from prmsearch.policies import POLICIES

        if backend not in POLICY_BACKENDS and backend not in POLICIES:
            raise RecipeError(f"{source}: policy.backend must be a registered policy backend "
                              f"({', '.join(POLICIES.names())}), got {backend!r}")
        if backend == "openai" and "base_url" not in args:
            raise RecipeError(f"{source}: the openai policy needs policy.args.base_url")
        if "prompt_format" in args:
            from prmsearch.engines.prompt_formats import get_prompt_format

            if args["prompt_format"] != "auto":
                try:
                    get_prompt_format(args["prompt_format"])
                except ValueError as exc:
                    raise RecipeError(f"{source}: policy.args.prompt_format: {exc}") from None
        return BackendSpec(cast(str, backend), model, None, dict(args))  # a policy name, checked above
    family = data.get("family")
    from prmsearch.scorers.formats import PRM_FORMATS

    if family not in PRM_FORMATS:
        raise RecipeError(f"{source}: prm.family must be one of {sorted(PRM_FORMATS)}, got {family!r}")
    if backend not in PRM_BACKENDS:
        raise RecipeError(f"{source}: prm.backend must be one of {list(PRM_BACKENDS)}, got {backend!r}")
    from prmsearch.scorers import SCORER_BACKENDS

    if backend == "vllm" and family not in SCORER_BACKENDS["vllm"]:
        raise RecipeError(f"{source}: the vllm PRM backend runs families {sorted(SCORER_BACKENDS['vllm'])}, "
                          f"got {family!r}; use prm.backend: hf")
    if backend == "vllm-server":
        if family not in SCORER_BACKENDS["vllm-server"]:
            raise RecipeError(f"{source}: the vllm-server PRM backend runs families "
                              f"{sorted(SCORER_BACKENDS['vllm-server'])}, got {family!r}; "
                              "use prm.backend: hf")
        if "base_url" not in args:
            raise RecipeError(f"{source}: the vllm-server PRM needs prm.args.base_url (the server, "
                              "e.g. http://10.0.0.2:8001/v1)")
    return BackendSpec(backend, model, family, dict(args))


def _read_file_options(options: dict[str, dict], source: str, base_dir: Path | None) -> None:
    """Options a strategy registered as files (the planner's ``plan``), given as a path relative to
    the recipe's folder, are read and validated here, at the recipe boundary, as ``-o
    planner.plan=FILE`` is on the command line."""
    from prmsearch.search.protocol import strategy_spec

    for strategy, values in options.items():
        try:
            spec = strategy_spec(strategy)
        except (KeyError, ValueError):
            continue  # an unknown strategy: the sweep's config names it, with the known ones
        for name in [n for n in spec.file_options if isinstance(values.get(n), str)]:
            path = Path(values[name]).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            try:
                values[name] = spec.read_option(name, path)
            except (OSError, ValueError) as exc:
                fix = ("give the file as a path relative to the recipe's folder (a plan: one written "
                       "by `prmsearch plan fit`)")
                raise RecipeError(f"{source}: strategies.{strategy}.{name}: {exc}; {fix}") from None


def parse_recipe(data: Any, source: str = "<recipe>", base_dir: Path | None = None) -> Recipe:
    """Validate a recipe's parsed YAML and map it onto the frozen configs; a planner's plan file
    is read relative to ``base_dir`` (the recipe's folder)."""
    if not isinstance(data, Mapping):
        raise RecipeError(f"{source}: a recipe is a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise RecipeError(f"{source}: unknown keys {unknown}; known: {sorted(_TOP_KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise RecipeError(f"{source}: name must be a non-empty string, got {name!r}")
    policy = _backend(_section(data, "policy", source), "policy", source)
    prm = _backend(_section(data, "prm", source), "prm", source)
    sampling = _section(data, "sampling", source)
    search = _section(data, "search", source)
    dataset = _section(data, "dataset", source)
    strategies = data.get("strategies")
    if not isinstance(strategies, Mapping) or not strategies:
        raise RecipeError(f"{source}: strategies must map strategy names to options, got {strategies!r}")
    options = {k: dict(v or {}) for k, v in strategies.items() if v}
    _read_file_options(options, source, base_dir)
    for key in ("budgets", "seeds"):
        if key in data and not isinstance(data[key], list):
            raise RecipeError(f"{source}: {key} must be a list of ints, got {data[key]!r}")
    kwargs: dict[str, Any] = {
        "dataset": dataset.get("name", "arith"),
        "dataset_path": dataset.get("path"),
        "split": dataset.get("split"),
        "limit": dataset.get("limit"),
        "shuffle_seed": dataset.get("shuffle_seed"),
        "strategies": tuple(strategies),
        "policy": policy.model,
        "policy_backend": policy.backend,
        "prm": prm.model,
        "prm_family": prm.family,
        "prm_backend": prm.backend,
        "policy_args": dict(policy.args),
        "prm_args": dict(prm.args),
        "options": options,
        **{k: v for k, v in sampling.items()},
        **({"max_depth": search["max_depth"]} if "max_depth" in search else {}),
        **({"chunk": search["chunk"]} if "chunk" in search else {}),
        **({"share_bon_samples": search["share_bon_samples"]} if "share_bon_samples" in search else {}),
        **({"policy_logprobs": search["policy_logprobs"]} if "policy_logprobs" in search else {}),
    }
    if "budgets" in data:
        kwargs["budgets"] = tuple(data["budgets"])
    if "seeds" in data:
        kwargs["seeds"] = tuple(data["seeds"])
    try:
        sweep = SweepConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"{source}: {exc}") from None
    from prmsearch.benchmarks.datasets import dataset_spec

    try:
        dataset_spec(sweep.dataset)
    except ValueError as exc:
        raise RecipeError(f"{source}: dataset.name: {exc}") from None
    return Recipe(name, str(data.get("description", "")), sweep, policy, prm)


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a YAML recipe (builds no backend, downloads nothing)."""
    try:
        import yaml
    except ImportError as exc:
        raise ImportError("recipes need PyYAML: pip install 'prmsearch[bench]'") from exc
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise RecipeError(f"{path}: not valid YAML: {exc}") from None
    recipe = parse_recipe(data, str(path), path.parent)
    return Recipe(recipe.name, recipe.description, recipe.sweep, recipe.policy, recipe.prm, path)
