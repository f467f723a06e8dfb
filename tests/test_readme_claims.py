"""Issue 31: the README said every command takes `--json` (`logs`, `serve`, `wizard` do not). The sentence
now names the exceptions; this holds it to the parsers. Issue 40: every `$ advise` example of README.md and
docs/usage.md parses, names files that ship, and each recommendation example does what its comment says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


# ---------------------------------------------------------------- issue 40: the docs' examples, checked

DOCS = [README, README.parent / "docs" / "usage.md"]


def _doc_commands(path: Path) -> list[tuple[str, list[str], str]]:
    """(document, argv after `advise`, comment) of every `$ advise ...` line of its text blocks."""
    import shlex

    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith("$ advise"):
            continue
        while line.rstrip().endswith("\\") and i < len(lines):  # continued lines
            line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        command, _, comment = line[2:].partition("   #")
        for part in re.split(r"\s[&|]\s?", command):
            words = shlex.split(part.strip().rstrip("&"))
            if words and words[0] == "advise":
                out.append((path.name, words[1:], comment.strip()))
    return out


COMMANDS_IN_DOCS = [c for doc in DOCS for c in _doc_commands(doc)]


def test_the_docs_have_examples():
    assert len(COMMANDS_IN_DOCS) > 20 and {d for d, _, _ in COMMANDS_IN_DOCS} == {"README.md", "usage.md"}


@pytest.mark.parametrize("doc,argv,comment", COMMANDS_IN_DOCS, ids=[" ".join(a[:4]) for _, a, _ in COMMANDS_IN_DOCS])
def test_every_example_parses_and_names_files_that_exist(doc, argv, comment):
    """Each example is a command the CLI takes, and a script or module file it names ships (the README used
    `train.py` and `net.py`, which did not exist)."""
    name = argv[0] if argv and argv[0] in COMMANDS else "recommend"
    args = argv[1:] if argv and argv[0] in COMMANDS else argv
    build_parser(name).parse_args(args)  # SystemExit(2) on a flag the command does not take
    root = README.parent
    for word in args:
        path = word.split(":")[0]
        if path.endswith(".py"):
            assert (root / path).is_file(), f"{doc}: `advise {' '.join(argv)}` names {path}, which does not exist"


def _recommend(argv):
    from advisor.hardware import Machine
    from cli.flags import request_from_namespace
    from rules.api import recommend

    return recommend(request_from_namespace(build_parser("recommend").parse_args(argv)),
                     machine=Machine(cpu_cores=16), assume_if_none=True)


# What each recommendation example's comment says, as a check on its answer. A new example must add its claim.
CLAIMS = {
    "--model llama3-8b": lambda r: r.recommendation.fits and r.recommendation.strategy == "fsdp",
    "--model llama3-8b --full": lambda r: r.recommendation.fits and r.recommendation.strategy == "fsdp",
    "--model llama3-8b --gpu H200 --gpus 1":  # "does not fit: why, and ... compromise (here: FSDP CPU offload)"
        lambda r: r.recommendation.standard_verdict and r.recommendation.compromise == "cpu-offload",
    "--model llama3-8b --gpu A100-PCIE-80GB --gpus 8 --dataset-size 52000 --epochs 3 --deadline 8.5h --margin 0.15":
        lambda r: r.policy.kind == "deadline" and r.recommendation.time_to_train_h <= 8.5 * 0.85,
    "--model resnet50 --gpu H100 --gpus 8 --cpus-per-gpu 4 --dataset-size 1281167 --epochs 90":  # "loader-bound"
        lambda r: r.estimate.throughput.loader_bound and any("input pipeline limits" in w for w in r.warnings),
    "--model llama3-8b --gpu H100 --gpus 8 --nodes 2 --network 400G-IB":  # "two nodes (FSDP, HSDP compared), network"
        lambda r: r.recommendation.nodes == 2 and r.recommendation.strategy.startswith("fsdp")
        and r.estimate.hardware.network and any(c.strategy.value == "hsdp" for c in r.candidates),
    "--model vit-h-14 --gpu A100-80GB --gpus 8 --image-size 512 --batch-size 256 --dataset-size 1281167 --epochs 10 "
    "--deadline 48h":  # "DDP on as many GPUs as the deadline needs"
        lambda r: r.recommendation.strategy == "ddp" and r.policy.kind == "deadline",
}


def test_every_recommendation_example_has_its_claim_checked():
    shown = {" ".join(a) for _, a, _ in COMMANDS_IN_DOCS if a and a[0] == "--model"}
    assert shown == set(CLAIMS), shown ^ set(CLAIMS)


@pytest.mark.parametrize("argv", list(CLAIMS))
def test_each_recommendation_example_says_what_the_docs_say(argv):
    rec = _recommend(argv.split())
    assert CLAIMS[argv](rec), f"`advise {argv}` no longer does what the docs say"


def test_usage_md_names_exactly_the_commands_without_json():
    text = " ".join((README.parent / "docs" / "usage.md").read_text().split())
    assert "Every command takes `--json`" not in text
    m = re.search(r"Every command whose output is data takes `--json` \(all but ([^)]*)\)", text)
    assert m, "docs/usage.md's --json sentence moved: update this test with it"
    named = set(re.findall(r"`([a-z]+)`", m.group(1)))
    without = {name for name in COMMANDS
               if not any("--json" in a.option_strings for a in build_parser(name)._actions)}
    assert named == without, (named, without)
