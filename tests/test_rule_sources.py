"""Every rule and tree node cites a source that exists: a docs/design.md section by its heading, never
a DESIGN.md the repository does not have."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sources(node, where: str):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "source" and isinstance(value, str):
                yield where, value
            else:
                yield from _sources(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _sources(value, f"{where}[{i}]")


def test_rule_sources_cite_sections_of_docs_design_md():
    headings = {line[3:].strip() for line in (ROOT / "docs" / "design.md").read_text().splitlines()
                if line.startswith("## ")}
    found = []
    for path in sorted((ROOT / "rules" / "data").glob("*.toml")):
        text = path.read_text()
        assert not re.search(r"(?<!docs/design\.md)(?<![/\w])DESIGN\.md", text), f"{path.name} cites DESIGN.md"
        for where, source in _sources(tomllib.loads(text), path.name):
            for m in re.finditer(r"docs/design\.md, ([^(;:\"]+?)(?: \(|;|:|$)", source):
                found.append(m.group(1))
                assert m.group(1).strip() in headings, (where, source, sorted(headings))
    assert found  # the check saw the citations
