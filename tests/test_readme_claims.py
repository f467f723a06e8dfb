"""Issue 31: the README said every command takes `--json` (`logs`, `serve`, `wizard` do not). The sentence
now names the exceptions; this holds it to the parsers."""

from __future__ import annotations

import re
from pathlib import Path

from cli.main import COMMANDS, build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_names_exactly_the_commands_without_json():
    text = " ".join(README.read_text().split())
    m = re.search(r"every command whose output is data takes `--json` \(all but ([^)]*)\)", text)
    assert m, "the README's --json sentence moved: update this test with it"
    named = set(re.findall(r"`([a-z]+)`", m.group(1)))
    without = {name for name in COMMANDS
               if not any("--json" in a.option_strings for a in build_parser(name)._actions)}
    assert named == without, (named, without)
