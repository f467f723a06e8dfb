"""The ``advise`` console script's one-shot shortcuts (``cli.main.console``): same output, less startup.

Timings live in benchmarks/speed/startup.py; these tests check what the shortcuts must not change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]

# A tracer makes console() exit normally (it keeps os._exit for untraced runs), so the child can report.
CHILD = """
import json, sys
sys.settrace(lambda *a: None)
sys.argv = ["advise", *json.loads(sys.argv[1])]
import cli.main
try:
    cli.main.console()
except SystemExit:
    pass
print(json.dumps({"metadata": "importlib.metadata" in sys.modules,
                  "loader": type(sys.modules.get("pydantic.plugin._loader")).__name__}), file=sys.stderr)
"""


def _console(argv: list[str], env_extra: dict | None = None) -> tuple[str, dict]:
    env = dict(os.environ)
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # a hang guard
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(proc.stderr.strip().splitlines()[-1])


def test_catalog_recommendation_skips_plugin_discovery_and_prints_what_main_prints(capsys):
    out, seen = _console(["--model", "llama3-8b", "--json"])
    assert seen == {"metadata": False, "loader": "_PluginsOff"}
    assert cli_main.main(["--model", "llama3-8b", "--json"]) == 0
    assert out == capsys.readouterr().out


def test_plugins_chosen_by_the_user_are_left_to_pydantic():
    _, seen = _console(["--model", "llama3-8b", "--json"], {"PYDANTIC_DISABLE_PLUGINS": "some_plugin"})
    assert seen["loader"] == "module"  # pydantic's own loader, which reads the entry points


def test_the_stand_in_hands_any_other_name_to_the_real_loader(monkeypatch):
    name = cli_main._PluginsOff.NAME
    stand_in = cli_main._PluginsOff(name)
    monkeypatch.setitem(sys.modules, name, stand_in)
    assert stand_in.get_plugins() == ()
    with pytest.raises(AttributeError):
        stand_in.__path__  # the import system's question: a plain module, not a package
    assert stand_in.PYDANTIC_ENTRY_POINT_GROUP == "pydantic"  # loaded the real module for it
    assert type(sys.modules[name]).__name__ == "module"
