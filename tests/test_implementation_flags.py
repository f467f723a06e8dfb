"""The report and --json name the code estimated and the loss assumed; --loss and --implementation."""

from __future__ import annotations

import json

import pytest

from cli.main import main


def _estimate(capsys, *argv):
    rc = main(["estimate", "--gpu", "H200", "--micro-batch", "8", "--precision", "bf16", "--json", *argv])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def test_estimate_defaults_to_the_code_advise_estimates_and_says_so(capsys):
    rc, zoo, _ = _estimate(capsys, "--model", "gpt2")
    assert rc == 0 and zoo["model"]["implementation"] == "cardwise zoo" and zoo["model"]["loss"] == "ce"
    assert any("--implementation transformers" in d for d in zoo["defaults_applied"])
    rc, hf, _ = _estimate(capsys, "--model", "gpt2", "--implementation", "transformers")
    assert rc == 0 and hf["model"]["implementation"].startswith("transformers GPT2LMHeadModel")
    # HF's GPT-2 keeps dropout masks and a composed tanh-GELU: it needs more memory than the zoo's
    assert hf["memory"]["peak_gib"] > zoo["memory"]["peak_gib"]


def test_estimate_and_advise_agree_on_one_configuration(capsys):
    """Issue 40: GPT-2 at micro-batch 16 was 23.6 GiB and 127 samples/s in `estimate`, 16.6 and 197 in `advise`."""
    pins = ["--model", "gpt2", "--gpu", "H100", "--gpus", "1", "--micro-batch", "16", "--seq-len", "1024",
            "--precision", "bf16", "--grad-accum", "1"]
    assert main(["estimate", *pins, "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert main([*pins, "--batch-size", "16", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["estimate"]
    assert est["model"]["implementation"] == rec["model"]["implementation"]
    assert est["memory"]["peak_gib"] == pytest.approx(rec["memory"]["peak_gib"], rel=1e-9)
    assert est["throughput"]["samples_per_s"] == pytest.approx(rec["throughput"]["samples_per_s"], rel=1e-9)


def test_recommendation_names_the_code(capsys):
    assert main(["--model", "gpt2", "--gpu", "H200", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["estimate"]["model"]["implementation"] == "cardwise zoo"


@pytest.mark.parametrize("argv, fragment", [
    (["--model", "resnet50", "--implementation", "transformers"], "no transformers class"),
    (["--model", "gpt2", "--loss", "mse"], "--loss only applies to --module"),
    (["--hf-config", "x/config.json", "--implementation", "cardwise"], "--implementation only applies"),
])
def test_mistakes_are_one_line_and_exit_2(capsys, argv, fragment):
    rc, _, err = _estimate(capsys, *argv)
    assert rc == 2 and fragment in err and "Traceback" not in err


def test_module_loss_choice_changes_the_estimate(capsys):
    base = ["--module", "tests/data/tiny_net.py:build_mlp", "--input-shape", "64"]
    rc, ce, _ = _estimate(capsys, *base)
    rc2, none, _ = _estimate(capsys, *base, "--loss", "none")
    assert rc == rc2 == 0
    assert ce["model"]["loss"] == "ce" and none["model"]["loss"] == "none"
