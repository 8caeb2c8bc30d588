"""Generator determinism, split sizes and disjointness, problem shape."""

import random
import re

import pytest

from prmsearch.arith.problems import (
    SPLIT_SIZES,
    ProblemConfig,
    apply_op,
    generate_problem,
    load_split,
    solution_text,
)


def test_seed_reproducibility():
    a = [generate_problem(random.Random(7), ProblemConfig(), f"x{i}") for i in range(3)]
    b = [generate_problem(random.Random(7), ProblemConfig(), f"x{i}") for i in range(3)]
    assert a == b
    assert load_split("test", 5) == load_split("test", 5)


def test_fixed_split_sizes():
    assert len(load_split("test")) == SPLIT_SIZES["test"] == 200
    assert len(load_split("validation")) == 200
    with pytest.raises(ValueError, match="n must be"):
        load_split("test", 201)
    with pytest.raises(ValueError, match="split must be one of"):
        load_split("dev")


def test_splits_are_disjoint():
    test = {p.question for p in load_split("test")}
    val = {p.question for p in load_split("validation")}
    train = {p.question for p in load_split("train", 3000)}
    assert len(test) == 200 and len(val) == 200
    assert not test & val
    assert not train & (test | val)


def test_problem_shape_and_ranges():
    cfg = ProblemConfig()
    for p in load_split("validation"):
        assert cfg.min_ops <= len(p.ops) == len(p.gold_steps) <= cfg.max_ops
        assert 1 <= p.start <= cfg.max_start
        value = p.start
        for op in p.ops:
            value = apply_op(value, op)
            assert value is not None and 1 <= value <= cfg.max_value
        assert value == p.answer
        assert p.gold_steps[-1].endswith(f"\\boxed{{{p.answer}}}")
        assert all("\\boxed" not in s for s in p.gold_steps[:-1])
        assert "\n\n" not in "".join(p.gold_steps)
        assert re.fullmatch(r"Start with \d+\.( [A-Z][a-z ]+ \d+\.)+ What is the result\?", p.question)
        assert solution_text(p.gold_steps).count("\n\n") == len(p.ops) - 1


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="max_ops"):
        ProblemConfig(min_ops=4, max_ops=3)
    with pytest.raises(ValueError, match="min_factor"):
        ProblemConfig(min_factor=1)


def test_import_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, prmsearch.arith, prmsearch.arith.problems, prmsearch.arith.checker; "
        "sys.exit(int('torch' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
