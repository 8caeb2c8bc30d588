"""``prmsearch --plugin``: a user's own module registers a strategy that the command can then
name; a plugin that cannot be imported is one line naming the flag."""

from __future__ import annotations

import json
import textwrap

import pytest

from prmsearch.cli import main

PLUGIN = textwrap.dedent('''
    """A tiny plugin: best-of-N under another name."""
    from prmsearch import register_strategy
    from prmsearch.search.strategies.sampling import BestOfNConfig, sample_and_select

    register_strategy("plugin_best_of_n", BestOfNConfig, sample_and_select, "best-of-N from a plugin",
                      replace=True)
''')


def test_a_plugin_file_registers_a_strategy(tmp_path, capsys):
    plugin = tmp_path / "my_strategies.py"
    plugin.write_text(PLUGIN)
    assert main(["--plugin", str(plugin), "strategies", "--json"]) == 0
    names = [row["name"] for row in json.loads(capsys.readouterr().out)]
    assert "plugin_best_of_n" in names


def test_plugins_from_the_environment(tmp_path, capsys, monkeypatch):
    (tmp_path / "env_plugin.py").write_text(PLUGIN.replace("plugin_best_of_n", "env_best_of_n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PRMSEARCH_PLUGINS", "env_plugin")
    assert main(["strategies", "--json"]) == 0
    assert "env_best_of_n" in [row["name"] for row in json.loads(capsys.readouterr().out)]


@pytest.mark.parametrize(
    ("plugin", "named"),
    [
        ("no_such_module_here", "--plugin 'no_such_module_here': ModuleNotFoundError"),
        ("/no/such/plugin.py", "--plugin '/no/such/plugin.py': FileNotFoundError"),
    ],
)
def test_a_bad_plugin_is_one_line(capsys, plugin, named):
    assert main(["--plugin", plugin, "strategies"]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_plugin_that_raises_is_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('half-written plugin')\n")
    assert main(["--plugin", str(broken), "strategies"]) == 2
    assert "RuntimeError: half-written plugin" in capsys.readouterr().err
