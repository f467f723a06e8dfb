"""Every bad input of issue 13 ("refused too late, or not at all"), run through the real CLI.

Each row is (argv, words the message must contain). A refusal is exit 2 with one message (the
`error:` line and at most its `fix:`/`see` line), no traceback, and nothing started or recorded:
``subprocess.Popen`` raises if anything tries to start a process, and the isolated home
(tests/conftest.py) holds no run record afterwards. ``{d}`` in an argv is a folder of bad files.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import io
import os
import json
import re
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from cli.main import COMMANDS, build_parser, main
from tests.refusals import check_refusal, run_cli

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT / "tests" / "data" / "hf" / "gpt2" / "config.json"
GPT2_STR = str(GPT2)
MINI = ["--cpu", "--model", "mini-transformer"]
TEXT = [*MINI, "--recipe", "text-classification", "--data"]
BIG = str(10**40)


@functools.lru_cache
def _png(size: tuple[int, int], mode: str = "RGB") -> bytes:
    """A PNG of ``size`` (12,000 x 12,000 1-bit pixels: a decompression bomb of a few kB)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, size).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def d(tmp_path) -> Path:
    """A folder of bad inputs, named as the table uses them."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n  \n")
    (tmp_path / "notjson.jsonl").write_text('{"text": "good", "label": "a"}\nthis is not JSON\n')
    (tmp_path / "nolabel.jsonl").write_text('{"text": "a", "label": "x"}\n{"text": "b"}\n')
    (tmp_path / "onelabel.jsonl").write_text("".join(json.dumps({"text": f"t{i}", "label": "x"}) + "\n" for i in range(8)))
    (tmp_path / "few.jsonl").write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n')
    (tmp_path / "noheader.csv").write_text("great,pos\nawful,neg\n")
    (tmp_path / "emptylabel.csv").write_text("text,label\ngreat,pos\nawful,\n")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"text": "caf\xe9", "label": "x"}\n')
    (tmp_path / "adir").mkdir()
    (tmp_path / "train.py").write_text("print('never run')\n")
    cfg = json.loads(GPT2.read_text())
    for name, key, value in (("nan", "resid_pdrop", "NaN"), ("inf", "n_embd", "Infinity"),
                             ("ninf", "n_embd", "-Infinity"), ("huge", "n_embd", "1e308"),
                             ("digits", "vocab_size", "9" * 400)):
        text = json.dumps({**cfg, key: "@"}).replace('"@"', value)
        (tmp_path / f"{name}.json").write_text(text)
    (tmp_path / "deep.json").write_text('{"model_type": "gpt2", "x": ' + "[" * 50_000 + "]" * 50_000 + "}")
    (tmp_path / "deep40.json").write_text(json.dumps({**cfg, "x": json.loads("[" * 40 + "]" * 40)}))
    (tmp_path / "home-file").write_text("not a directory\n")
    # --module factories that misbehave (issue 31)
    (tmp_path / "factories.py").write_text(
        "import sys\nimport torch.nn as nn\n"
        "def exit0(): sys.exit(0)\ndef exit3(): sys.exit(3)\ndef kbd(): raise KeyboardInterrupt\n"
        "def base(): raise BaseException('boom\\nsecond line')\n"
        "class Fwd(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.l = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        raise BaseException()\n"
        "class Deep(Fwd):\n    def forward(self, x):\n        return self.forward(x)\n"
        "def fwd(): return Fwd()\ndef deep(): return Deep()\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\ndef build(): pass\n")
    # files that are not what they claim (issue 31)
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "badutf8.json").write_bytes(b'{"model": {"name": "mini-\xff\xfe"}}')
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deeprow.jsonl").write_text('{"text": "a", "label": "x"}\n{"text": ' + deep + ', "label": "y"}\n')
    (tmp_path / "deepchat.jsonl").write_text('{"text": "hello"}\n{"text": ' + deep + "}\n")
    os.mkfifo(tmp_path / "fifo.jsonl")
    for name in ("fifoimages", "truncimages", "bombimages"):
        for cls in ("cat", "dog"):
            (tmp_path / name / cls).mkdir(parents=True)
            (tmp_path / name / cls / "a.png").write_bytes(_png((8, 8)))
    os.mkfifo(tmp_path / "fifoimages" / "dog" / "x.jpg")
    (tmp_path / "truncimages" / "dog" / "b.png").write_bytes(_png((64, 64))[:60])
    (tmp_path / "bombimages" / "dog" / "b.png").write_bytes(_png((12_000, 12_000), "1"))
    (tmp_path / "calhome").mkdir()
    (tmp_path / "calhome" / "calibration.json").symlink_to("/etc/passwd")
    (tmp_path / "fifohome").mkdir()
    os.mkfifo(tmp_path / "fifohome" / "calibration.json")
    # --recipe causal-lm: example files and model folders
    chat = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
    (tmp_path / "chat.jsonl").write_text(chat * 4)
    (tmp_path / "noassistant.jsonl").write_text(chat + '{"messages": [{"role": "user", "content": "hi"}]}\n')
    (tmp_path / "nofields.jsonl").write_text(chat + '{"question": "hi", "answer": "hello"}\n')
    (tmp_path / "badrole.jsonl").write_text(chat + '{"messages": [{"role": "bot", "content": "x"}]}\n')
    (tmp_path / "oneexample.jsonl").write_text('{"text": "only one"}\n')
    for name, files in (("noconfig", {"tokenizer.json": "{}"}), ("notok", {"config.json": '{"model_type": "llama"}'}),
                        ("notemplate", {"config.json": '{"model_type": "llama"}', "tokenizer.json": "{}"}),
                        ("notype", {"config.json": '{"hidden_size": 8}', "tokenizer.json": "{}"})):
        (tmp_path / name).mkdir()
        for fn, text in files.items():
            (tmp_path / name / fn).write_text(text)
    # --recipe image-classification: folders
    (tmp_path / "noclasses").mkdir()
    (tmp_path / "oneclass" / "cat").mkdir(parents=True)
    (tmp_path / "oneclass" / "cat" / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"0" * 20)
    for cls in ("cat", "dog"):
        (tmp_path / "emptyclass" / cls).mkdir(parents=True)
        (tmp_path / "badimage" / cls).mkdir(parents=True)
        (tmp_path / "badimage" / cls / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"0" * 20)
    (tmp_path / "emptyclass" / "cat" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 20)
    (tmp_path / "badimage" / "dog" / "b.jpg").write_text("<html>not an image</html>")
    return tmp_path


@pytest.fixture
def no_process(monkeypatch):
    """Fail the test if anything starts a process; a machine with no GPU and 64 GiB available."""
    import psutil

    from advisor import hardware
    from advisor.hardware import Machine

    started: list = []

    class NoPopen:
        def __init__(self, *args, **kwargs):
            started.append(args)
            raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", NoPopen)
    monkeypatch.setattr(hardware, "detect_machine", lambda: Machine(nvml_error="no NVML in this test"))
    mem = namedtuple("mem", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: mem(64 * 2**30, 64 * 2**30))
    return started


def assert_nothing_recorded(home: Path) -> None:
    runs = home / "runs"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())
    if (home / "runs.sqlite").exists():
        from launcher.store import RunStore

        assert RunStore.open(home).list() == []


REFUSED = [
    # --- CPU launches this machine cannot hold (64 GiB available in the test, llama3-8b ~120 GiB a rank)
    (["launch", "--cpu", "--model", "llama3-8b", "--recipe", "synthetic"], "GiB of host RAM per CPU process"),
    (["launch", "--cpu", "--processes", "2", "--model", "llama3-8b", "--recipe", "synthetic", "--max-steps", "5"],
     "no number of CPU processes fits"),
    (["launch", *MINI, "--processes", "100000", "--recipe", "synthetic"], "more than 4 per core"),
    # --- refused before the run record exists (issue 31: they were refused by the attempt, after it)
    (["launch", *MINI, "--strategy", "fsdp", "--recipe", "synthetic"], "cannot launch FSDP on CPU processes"),
    (["launch", *MINI, "--strategy", "single", "--processes", "2", "--recipe", "synthetic"],
     "--strategy single but has 2 ranks"),
    (["submit", *MINI, "--strategy", "fsdp", "--recipe", "synthetic"], "cannot launch FSDP on CPU processes"),
    (["launch", *MINI, "--strategy", "fsdp", "--recipe", "synthetic", "--dry-run"], "cannot launch FSDP on CPU processes"),
    (["launch", *MINI, "--strategy", "fsdp-keep", "--recipe", "synthetic", "--dry-run"], "cannot launch FSDP on CPU processes"),
    # --- a dry run refuses what the launch would refuse (issue 31)
    (["launch", *MINI, "--processes", "100000", "--recipe", "synthetic", "--dry-run"], "more than 4 per core"),
    (["launch", "--cpu", "--model", "llama3-8b", "--recipe", "synthetic", "--dry-run"], "GiB of host RAM per CPU process"),
    (["submit", "--cpu", "--model", "llama3-8b", "--recipe", "synthetic"], "GiB of host RAM per CPU process"),
    (["submit", *MINI, "--processes", "100000", "--recipe", "synthetic"], "more than 4 per core"),
    (["bench", *MINI, "--processes", "1,100000"], "only wait on each other"),
    (["probe", "--cpu", "--model", "llama3-8b"], "GiB of host RAM per CPU process"),
    # --- --data files, read before any rank
    (["launch", *TEXT, "{d}/empty.jsonl"], "the file is empty"),
    (["launch", *TEXT, "{d}/blank.jsonl"], "the file is empty"),
    (["launch", *TEXT, "{d}/notjson.jsonl"], "notjson.jsonl:2: expected a JSON object"),
    (["launch", *TEXT, "{d}/nolabel.jsonl"], "nolabel.jsonl:2: a row without a label"),
    (["launch", *TEXT, "{d}/onelabel.jsonl"], "1 distinct label(s)"),
    (["launch", *TEXT, "{d}/few.jsonl"], "need at least 4"),
    (["launch", *TEXT, "{d}/noheader.csv"], "header with 'text' and 'label'"),
    (["launch", *TEXT, "{d}/emptylabel.csv"], "emptylabel.csv:3: a row without a label"),
    (["launch", *TEXT, "{d}/latin1.jsonl"], "not a UTF-8 text file"),
    (["launch", *TEXT, "{d}/missing.jsonl"], "data file not found"),
    (["launch", *TEXT, "{d}/adir"], "data file not found"),
    (["launch", *MINI, "--recipe", "text-classification", "--", "--data", "{d}/empty.jsonl"], "the file is empty"),
    (["submit", *TEXT, "{d}/empty.jsonl"], "the file is empty"),
    # --- causal-lm: examples and the model folder, before any rank (issue 15)
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/empty.jsonl"],
     "the file is empty"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/noassistant.jsonl"],
     "noassistant.jsonl:2: no assistant message"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/nofields.jsonl"],
     "nofields.jsonl:2: no 'messages'"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/badrole.jsonl"],
     "badrole.jsonl:2: a message needs a 'role'"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/notjson.jsonl"],
     "notjson.jsonl:2: not a JSON object"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/oneexample.jsonl"],
     "need at least 2"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/chat.jsonl"],
     "no chat template"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/noconfig", "--data", "{d}/chat.jsonl"],
     "no config.json"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-config", GPT2_STR, "--hf-model", "{d}/notok",
      "--data", "{d}/chat.jsonl"], "no tokenizer"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notype", "--data", "{d}/chat.jsonl"],
     "no 'model_type'"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-config", GPT2_STR, "--data", "{d}/chat.jsonl"],
     "needs the model and tokenizer"),
    (["launch", *MINI, "--recipe", "synthetic", "--hf-model", "{d}/notemplate"], "--hf-model is for --recipe causal-lm"),
    # --- image-classification: the folder, before any rank
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/noclasses"],
     "no class sub-folders"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/oneclass"],
     "at least 2"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/emptyclass"],
     "emptyclass/dog: no images"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/badimage"],
     "b.jpg: not an image file"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/missing"],
     "data folder not found"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification"], "needs an image folder"),
    (["launch", *MINI, "--recipe", "image-classification", "--data", "{d}/badimage"], "trains vision models"),
    (["launch", *MINI, "--recipe", "synthetic", "--data", "{d}/chat.jsonl"], "--data is for --recipe"),
    # --- --resume: the old run decides the plan; nothing to resume is said so
    (["launch", "--resume", "abc", *MINI], "cannot be combined with --resume"),
    (["submit", *MINI, "--recipe", "synthetic", "--resume", "abc"], "--resume is for `advise launch`"),
    # --- multi-node rendezvous flags, before the run is recorded
    (["launch", *MINI, "--nodes", "2", "--recipe", "synthetic", "--node-rank", "5", "--main-address", "10.0.0.1"],
     "--node-rank 5 is outside 0..1"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--node-rank", "1", "--save-plan", "{d}/written.json"],
     "are for multi-node launches"),  # and writes no plan file
    # --- a script after -- with a recipe
    (["launch", *MINI, "--recipe", "synthetic", "--", "{d}/train.py", "--lr", "{{lr}}"], "is not a recipe option"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--", "train.py"], "is not a recipe option"),
    # --- files written later, checked first
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--save-plan", "{d}/nope/plan.json"], "does not exist"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--save-plan", "{d}/adir"], "names a directory"),
    (["submit", *MINI, "--recipe", "synthetic", "--save-plan", "{d}/adir"], "names a directory"),
    (["--model", "gpt2", "--gpu", "h100", "--save-plan", "{d}/nope/plan.json"], "does not exist"),
    (["bench", *MINI, "--csv", "{d}/adir"], "--csv names a directory"),
    (["bench", *MINI, "--report", "{d}/nope/report.md"], "--report: the folder"),
    (["bench", *MINI, "--plot", "{d}/adir"], "--plot names a directory"),
    # --- a --module factory that misbehaves: one guard around the user's code, exit 2 (issue 31)
    (["estimate", "--module", "{d}/factories.py:exit0", "--input-shape", "4", "--gpu", "h100"],
     "calling exit0() called sys.exit(0)"),
    (["--module", "{d}/factories.py:exit3", "--input-shape", "4", "--gpu", "h100"], "calling exit3() called sys.exit(3)"),
    (["estimate", "--module", "{d}/factories.py:kbd", "--input-shape", "4", "--gpu", "h100"],
     "calling kbd() was interrupted (KeyboardInterrupt)"),
    (["estimate", "--module", "{d}/factories.py:base", "--input-shape", "4", "--gpu", "h100"],
     "calling base() failed: BaseException: boom second line"),
    (["estimate", "--module", "{d}/factories.py:fwd", "--input-shape", "4", "--gpu", "h100"],
     "tracing it on the meta device failed: BaseException"),
    (["estimate", "--module", "{d}/factories.py:deep", "--input-shape", "4", "--gpu", "h100"], "RecursionError"),
    (["estimate", "--module", "{d}/exits.py:build", "--input-shape", "4", "--gpu", "h100"], "importing it called sys.exit(3)"),
    (["launch", "--cpu", "--module", "{d}/exits.py:build", "--input-shape", "4", "--", "{d}/train.py"],
     "importing it called sys.exit(3)"),
    # --- files that are not what they claim: read with limits, images checked up front (issue 31)
    (["launch", "--plan", "{d}/zero.json", "--recipe", "synthetic", "--dry-run"], "a character device, not a regular file"),
    (["launch", "--plan", "{d}/badutf8.json", "--recipe", "synthetic", "--dry-run"], "not a UTF-8 text file"),
    (["estimate", "--hf-config", "{d}/zero.json", "--gpu", "h100"], "a character device, not a regular file"),
    (["launch", *TEXT, "{d}/deeprow.jsonl"], "deeprow.jsonl:2: JSON nested too deeply"),
    (["submit", *TEXT, "{d}/deeprow.jsonl"], "deeprow.jsonl:2: JSON nested too deeply"),
    (["launch", "--cpu", "--recipe", "causal-lm", "--hf-model", "{d}/notemplate", "--data", "{d}/deepchat.jsonl"],
     "deepchat.jsonl:2: JSON nested too deeply"),
    (["launch", *MINI, "--recipe", "text-classification", "--", "--data", "{d}/fifo.jsonl"], "a FIFO (named pipe), not a regular file"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/fifoimages"],
     "x.jpg: a FIFO (named pipe), not an image file"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/truncimages"],
     "b.png: cannot decode this image"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/bombimages"],
     "b.png: more than 89,478,485 pixels, a decompression bomb"),
    (["launch", "--cpu", "--model", "resnet18", "--recipe", "image-classification", "--data", "{d}/badimage",
      "--", "--bad-samples", "ignore"], "--bad-samples ignore: expected stop or skip"),
    (["calibrate", "--home", "/etc/passwd"], "the cardwise home is a file, not a directory"),
    (["calibrate", "--home", "{d}/calhome"], "cannot read the calibration file"),
    (["calibrate", "--home", "{d}/fifohome"], "a FIFO (named pipe), not a regular file"),
    # --- numbers: every one has a range, checked where it is parsed (issue 31: tracebacks, a hang, a spin)
    (["--model", "gpt2", "--gpu", "h100", "--batch-size", BIG], "must be at most 1_000_000_000"),
    (["--model", "gpt2", "--gpu", "h100", "--seq-len", BIG], "must be at most 100_000_000"),
    (["--model", "gpt2", "--gpu", "h100", "--micro-batch", BIG], "must be at most 1_000_000_000"),
    (["--model", "resnet50", "--gpu", "h100", "--image-size", BIG], "must be at most 65536"),
    (["estimate", "--model", "gpt2", "--gpu", "h100", "--seq-len", "1e30"], "expected a whole number, got '1e30'"),
    (["--model", "gpt2", "--gpu", "h100", "--dataset-size", "1000", "--epochs", "1e300"], "must be > 0 and <= 1_000_000"),
    (["--model", "gpt2", "--gpu", "h100", "--dataset-size", "1000", "--epochs", "1", "--deadline", "9" * 20 + "h"],
     "at most 876000 hours"),
    (["runs", "--limit", BIG], "must be at most 1_000_000_000_000"),
    (["serve", "--cpu", "--poll", "1e300"], "must be 0.05..3600"),
    (["serve", "--cpu", "--poll", "1e-9"], "must be 0.05..3600"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--num-workers", "100000"], "must be at most 256 (0..256)"),
    (["estimate", "--module", "x.py:f", "--input-shape", "100000,100000,100000", "--gpu", "h100"], "elements per sample"),
    # --- numbers: ports, infinities, config.json
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--main-port", "99999"], "1..65535"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--main-port", "0"], "must be at least 1 (1..65535)"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--base-lr", "inf"], "positive finite number"),
    (["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--base-lr", "nan"], "positive finite number"),
    (["--model", "gpt2", "--gpu", "h100", "--epochs", "inf"], "positive finite number"),
    (["estimate", "--model", "gpt2", "--gpu", "h100", "--cpus-per-gpu", "nan"], "positive finite number"),
    # --- the network between nodes: a unit always (Gb/s and GB/s differ 8x); the old GB/s flag points to it
    (["estimate", "--model", "gpt2", "--gpu", "h100", "--nodes", "2", "--network", "100"], "has no unit"),
    (["--model", "gpt2", "--gpu", "h100", "--nodes", "2", "--network", "fast"], "cannot read the network"),
    (["--model", "gpt2", "--gpu", "h100", "--nodes", "2", "--network", "0GbE"], "faster than 0"),
    (["estimate", "--model", "gpt2", "--gpu", "h100", "--network-gbps", "100"], "--network-gbps is gone"),
    (["--model", "gpt2", "--gpu", "h100", "--cpus-per-gpu", "0"], "must be > 0 and <= 4096"),
    (["--model", "resnet50", "--gpu", "h100", "--loader", "ffcv"], "invalid choice"),
    (["probe", "--data", "{d}/nope"], "--data: not a directory"),
    (["probe", "--data", "{d}/adir"], "--data: no image files"),
    (["serve", "--cpu", "--poll", "inf"], "must be a finite number (0.05..3600)"),
    (["serve", "--cpu", "--grace", "nan"], "must be a finite number (0.1..86400)"),
    (["submit", *MINI, "--recipe", "synthetic", "--need-gib", "inf"], "positive finite number"),
    (["estimate", "--hf-config", "{d}/nan.json", "--gpu", "h100"], "NaN is not a number"),
    (["estimate", "--hf-config", "{d}/inf.json", "--gpu", "h100"], "Infinity is not a number"),
    (["estimate", "--hf-config", "{d}/ninf.json", "--gpu", "h100"], "-Infinity is not a number"),
    (["estimate", "--hf-config", "{d}/huge.json", "--gpu", "h100"], "out of range"),
    (["estimate", "--hf-config", "{d}/digits.json", "--gpu", "h100"], "400 digits"),
    (["estimate", "--hf-config", "{d}/deep.json", "--gpu", "h100"], "nested more than 32 levels"),
    (["estimate", "--hf-config", "{d}/deep40.json", "--gpu", "h100"], "nested more than 32 levels"),
    (["launch", "--cpu", "--hf-config", "{d}/inf.json", "--", "{d}/train.py"], "Infinity is not a number"),
    # --- the wizard needs a terminal (stdin here is a StringIO)
    (["wizard"], "the wizard needs a terminal"),
    # --- a home that is a file
    (["runs", "--home", "{d}/home-file"], "is a file, not a directory"),
    (["show", "abc", "--home", "{d}/home-file"], "is a file, not a directory"),
    (["logs", "abc", "--home", "{d}/home-file"], "is a file, not a directory"),
    (["cancel", "abc", "--home", "{d}/home-file"], "is a file, not a directory"),
    # --- flags the messages name exist; --plan takes a run directory (without a plan.json: said so)
    (["--model", "gpt2", "--module", "x.py:f", "--gpu", "h100"], "got --model, --module"),
    (["launch", "--plan", "{d}/adir", "--recipe", "synthetic", "--dry-run"], "a directory without a plan.json"),
    (["submit", *MINI, "--recipe", "synthetic", "--dry-run"], "--dry-run is for `advise launch`"),
    (["submit", *MINI, "--recipe", "synthetic", "--probe"], "--probe is for `advise launch`"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a)[:60] for a, _ in REFUSED])
def test_refused_with_one_line_before_anything_starts(argv, words, d, no_process, capsys, monkeypatch, _isolated_home):
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    monkeypatch.chdir(d)
    rc, _, err = run_cli([a.replace("{d}", str(d)).replace("{{lr}}", "{lr}") for a in argv], capsys)
    check_refusal(rc, err, words)
    assert "--name" not in err
    assert no_process == []
    assert_nothing_recorded(_isolated_home)
    assert not (d / "written.json").exists()  # a refused command writes no --save-plan file


def test_an_unreadable_home_is_said_so(d, no_process, capsys, monkeypatch):
    import cli.flags

    home = d / "locked"
    home.mkdir()
    real = cli.flags.os.access
    # Tests may run as root, whom permissions do not stop: the check's own view is replaced.
    monkeypatch.setattr(cli.flags.os, "access", lambda p, mode: False if Path(p) == home else real(p, mode))
    rc, _, err = run_cli(["runs", "--home", str(home)], capsys)
    check_refusal(rc, err, "cannot read the cardwise home")


def test_the_wizard_screen_refuses_a_cpu_launch_that_does_not_fit(monkeypatch):
    import psutil

    from advisor.errors import UserError
    from advisor.plan import ModelRef
    from tui.launching import LaunchChoice, build_plan, check_fits
    from tui.state import WizardState

    mem = namedtuple("mem", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: mem(64 * 2**30, 64 * 2**30))
    state = WizardState()
    state.model = ModelRef(name="llama3-8b")
    plan, _ = build_plan(LaunchChoice(), state)  # the form's defaults: two CPU processes
    with pytest.raises(UserError, match="GiB of host RAM per CPU process"):
        check_fits(plan)
    state.model = ModelRef(name="mini-transformer")
    check_fits(build_plan(LaunchChoice(), state)[0])  # fits: no error


def test_recipe_options_after_the_separator_stay_allowed(d, no_process, capsys):
    rc, out, err = run_cli(["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--json", "--", "--log-every", "1"], capsys)
    assert rc == 0, err
    assert json.loads(out)["command"]["cmd"][-2:] == ["--log-every", "1"]


def test_plan_accepts_a_run_directory(d, no_process, capsys):
    rc, _, err = run_cli(["launch", *MINI, "--recipe", "synthetic", "--dry-run", "--save-plan", str(d / "adir" / "plan.json")], capsys)
    assert rc == 0, err
    rc, out, err = run_cli(["launch", "--plan", str(d / "adir"), "--recipe", "synthetic", "--dry-run", "--json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["plan"]["model"]["name"] == "mini-transformer"


def test_submit_help_lists_no_flag_submit_refuses(capsys):
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    text = capsys.readouterr().out
    for flag in ("--dry-run", "--emit", "--probe", "--node-rank", "--main-address"):
        assert flag not in text
    assert "--save-plan" in text and "--recipe" in text


def test_no_flag_parses_bare_float_or_int():
    """Every number flag goes through advisor.units (finite, positive, in range), never float()/int()."""
    for name in COMMANDS:
        for action in build_parser(name)._actions:
            assert action.type not in (float, int), f"advise {name} {action.option_strings}: type={action.type}"


def _prefixes(parser) -> list[str]:
    """Each long flag of ``parser`` less its last letter, where that is no flag itself (``--cpu-offloa``)."""
    flags = {f for action in parser._actions for f in action.option_strings}
    return sorted({f[:-1] for f in flags if f.startswith("--") and len(f) > 4 and f[:-1] not in flags})


@pytest.mark.parametrize("name", COMMANDS)
def test_no_command_takes_an_abbreviated_flag(name, capsys, no_process):
    """argparse's prefix matching made `advise estimate --cpu` mean --cpu-offload (issue 31): every parser
    refuses every prefix of its long flags, exit 2, one line, before running anything."""
    needs_id = [] if name not in ("show", "cancel", "logs") else ["abc"]
    prefixes = _prefixes(build_parser(name))
    assert prefixes, name
    for prefix in prefixes:
        rc, out, err = run_cli([name, *needs_id, prefix], capsys)
        check_refusal(rc, err, f"unrecognized arguments: {prefix}")
    # the recipes' own parsers (options after `--`) too
    if name == "launch":
        from launcher import recipes

        for module in recipes.RECIPES.values():
            with pytest.raises(SystemExit) as exc:
                importlib.import_module(module).main(["--log-ever", "1"])
            assert exc.value.code == 2, module


@pytest.mark.parametrize("name", COMMANDS)
def test_every_number_flag_states_its_range_and_refuses_a_huge_value(name, capsys, no_process):
    """Issue 31: 10**40 hung or ended in a traceback. Every typed number flag carries its range (advisor.units),
    --help states it, and 10**40 is refused where it is parsed."""
    needs_id = [] if name not in ("show", "cancel", "logs") else ["abc"]
    for action in build_parser(name)._actions:
        shown = getattr(action.type, "range", None)
        if (not action.option_strings or action.type in (None, Path, str) or action.help == argparse.SUPPRESS
                or getattr(action.type, "__name__", "") in ("shape", "_gpu_list", "duration_hours", "network", "_show_list",
                                                            "host_ram_gib")):
            continue
        assert shown and f"[{shown}]" in action.help, (name, action.option_strings)
        flag = action.option_strings[-1]
        rc, out, err = run_cli([name, *needs_id, flag, str(10**40)], capsys)
        check_refusal(rc, err, f"argument {flag}: ")
        assert f"{shown}" in err, err


def test_the_top_of_every_request_range_is_estimated_without_a_traceback(capsys, no_process):
    """The largest value each Request field allows reaches the estimate and comes back (exit 0 or 2), no overflow."""
    import annotated_types as at

    from advisor.request import FLAGS, Request

    for field, (flag, kind) in FLAGS.items():
        high = next((m.le for m in Request.model_fields[field].metadata if isinstance(m, at.Le)), None)
        if high is None or kind != "value":
            continue
        extra = ["--dataset-size", "1000", "--epochs", "1"] if field == "deadline_h" else []
        extra += ["--epochs", "1"] if field == "dataset_size" else ["--dataset-size", "1000"] if field == "epochs" else []
        value = str(int(high)) if float(high).is_integer() else str(high)
        for command in (["--model", "gpt2"], ["estimate", "--model", "gpt2"], ["--model", "resnet50"]):
            rc, out, err = run_cli([*command, "--gpu", "h100", flag, value, *extra], capsys)
            assert rc in (0, 2) and "Traceback" not in err, (command, flag, value, err)


def _flags_in_messages() -> set[tuple[str, str]]:
    """(file, --flag) for every flag written in a UserError's text or fix under advisor/, cli/, launcher/, tui/."""
    found = set()
    for folder in ("advisor", "cli", "launcher", "tui"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "UserError":
                    for part in ast.walk(node):
                        if isinstance(part, ast.Constant) and isinstance(part.value, str):
                            # after a lone `--` or a script name come the script's own flags (`-- train.py --lr {lr}`)
                            ours = re.split(r"(?:^|[\s`])--(?:\s|$)|\.py\s", part.value)[0]
                            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", ours):
                                found.add((str(path.relative_to(ROOT)), flag))
    return found


def test_every_flag_an_error_names_exists():
    known = {"--help", "--log-every", "--pool", "--steps", "--eval-fraction", "--data", "--bad-samples",  # recipes' own options
             "--time", "--partition",  # sbatch's, in `--emit slurm` messages
             "--shm-size"}  # docker run's, in the shared-memory fixes
    for name in COMMANDS:
        for action in build_parser(name)._actions:
            known.update(action.option_strings)
    known.update("--no-" + f[2:] for f in list(known))  # BooleanOptionalAction's negatives
    missing = {(where, flag) for where, flag in _flags_in_messages() if flag not in known}
    assert not missing, missing


def test_argparse_and_units_agree_on_ports():
    from advisor import units

    assert units.port("65535") == 65535
    for bad in ("0", "65536", "99999", "-1", "http"):
        with pytest.raises(ValueError):
            units.port(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        from cli import flags

        flags.port("99999")


# --- advise launch --resume: what a launch of the old run's plan checks, checked again
def _old_run(home: Path, *, nodes: int = 1, status: str = "failed", step: int | None = 2, max_steps: int = 4,
             target=None, env: dict | None = None) -> str:
    """A terminal run of mini-transformer on CPU with a complete checkpoint at ``step`` (nothing ran)."""
    from advisor.request import ModelRef, Request
    from launcher.command import ENV_CHECKPOINT_EVERY, ENV_MAX_STEPS, Target
    from plans import cpu_plan_for
    from launcher.home import new_run
    from launcher.checkpoints import META_NAME, step_dir
    from launcher.store import RunStore

    plan, _ = cpu_plan_for(Request(model=ModelRef(name="mini-transformer"), seq_len=32, micro_batch=4, nodes=nodes), processes=1)
    store = RunStore.open(home)
    rec, rdir = new_run(store, home, plan, target or Target(kind="recipe", name="synthetic"))
    store.update(rec.id, command={"cmd": ["x"], "env": {ENV_MAX_STEPS: str(max_steps), ENV_CHECKPOINT_EVERY: "2",
                                                        **(env or {})}})
    store.transition(rec.id, "running", expect=["queued"])
    store.transition(rec.id, status, expect=["running"])
    assert store.get(rec.id).status == status
    if step is not None:
        ckpt = step_dir(rdir, step)
        ckpt.mkdir(parents=True)
        (ckpt / META_NAME).write_text(json.dumps({"step": step}))
    return rec.id


@pytest.fixture
def resumed(monkeypatch):
    """What `advise launch --resume` would execute: (plan, options) instead of running it."""
    import cli.launch_cmd

    calls: list = []
    monkeypatch.setattr(cli.launch_cmd, "_run_recorded",
                        lambda args, plan, target, options, resumed_from=None: calls.append((plan, options)) or 0)
    return calls


@pytest.mark.parametrize("case, extra, words", [
    ("two nodes", [], "needs this machine's rank and node 0's address"),
    ("two nodes", ["--node-rank", "2", "--main-address", "10.0.0.1"], "--node-rank 2 is outside 0..1"),
    ("one node", ["--node-rank", "1", "--main-address", "10.0.0.1"], "are for multi-node launches"),
    ("done", [], "already trained all its 4 steps"),
])
def test_resume_refuses_what_a_launch_of_its_plan_refuses(case, extra, words, tmp_path, no_process, resumed, capsys):
    home = tmp_path / "home"
    run_id = _old_run(home, nodes=2 if case == "two nodes" else 1, status="succeeded" if case == "done" else "failed",
                      step=4 if case == "done" else 2)
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home), *extra], capsys)
    check_refusal(rc, err, words)
    assert resumed == [] and no_process == []
    from launcher.store import RunStore

    assert [r.id for r in RunStore.open(home).list()] == [run_id]  # nothing new recorded


def test_resume_of_a_multi_node_run_takes_this_node_s_rank(tmp_path, no_process, resumed, capsys):
    home = tmp_path / "home"
    run_id = _old_run(home, nodes=2)
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home), "--node-rank", "1",
                          "--main-address", "10.0.0.1", "--main-port", "29511"], capsys)
    assert rc == 0, err
    [(plan, options)] = resumed
    assert (options.machine_rank, options.main_address, options.main_port) == (1, "10.0.0.1", 29511)
    assert options.max_steps == 4 and options.extra_env["CARDWISE_CHECKPOINT_EVERY"] == "2"
    assert options.extra_env["CARDWISE_RESUME"].endswith("step-00000002")


def test_resume_with_force_launches_what_does_not_fit_as_a_launch_would(tmp_path, no_process, resumed, capsys,
                                                                        monkeypatch):
    import launcher.host_fit

    home = tmp_path / "home"
    run_id = _old_run(home)
    monkeypatch.setattr(launcher.host_fit, "rank_state_gib", lambda plan: 1000.0)  # more than the 64 GiB here
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home)], capsys)
    check_refusal(rc, err, "GiB of host RAM per CPU process")
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home), "--force"], capsys)
    assert rc == 0 and "forced (--force)" in err, err
    [(plan, _)] = resumed
    assert plan.forced and "host RAM" in plan.forced


def test_resume_of_a_resumed_run_that_saved_no_checkpoint_starts_where_it_did(tmp_path, no_process, resumed, capsys):
    from launcher.checkpoints import step_dir
    from launcher.store import RunStore

    home = tmp_path / "home"
    first = _old_run(home)
    ckpt = step_dir(RunStore.open(home).get(first).run_dir, 2)
    second = _old_run(home, step=None, env={"CARDWISE_RESUME": str(ckpt)})  # failed before its own checkpoint
    rc, _, err = run_cli(["launch", "--resume", second, "--home", str(home)], capsys)
    assert rc == 0, err
    [(_, options)] = resumed
    assert options.extra_env["CARDWISE_RESUME"] == str(ckpt)
    (ckpt / "cardwise.json").unlink()  # no longer a complete checkpoint: not trusted
    rc, _, err = run_cli(["launch", "--resume", second, "--home", str(home)], capsys)
    check_refusal(rc, err, "has no checkpoint to resume from")


def test_resume_refuses_a_run_whose_script_is_gone(tmp_path, no_process, resumed, capsys):
    from launcher.command import Target

    home = tmp_path / "home"
    run_id = _old_run(home, target=Target(kind="script", name=str(tmp_path / "gone.py")))
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home)], capsys)
    check_refusal(rc, err, "training script is gone")
    assert resumed == []


@pytest.mark.parametrize("meta, words", [
    ({"step": 10**30}, "says step 100000000000000000000000, not a step from 1 to 1,000,000,000,000"),
    ({"step": True}, "step True"),
    ({"step": 4, "grad_accum": -1}, "grad_accum -1"),
    ("[" * 100_000 + "]" * 100_000, "not readable JSON (RecursionError)"),
])
def test_resume_does_not_trust_a_checkpoint_whose_metadata_is_out_of_range(meta, words, tmp_path, no_process,
                                                                            resumed, capsys):
    """A cardwise.json saying step 10**30 was resumed: the ranks started past the run's end and it
    "succeeded" with 0 steps; one nested 100,000 deep gave a RecursionError traceback. The newest
    checkpoint is reported damaged and the one before it used; with none left, refused."""
    from launcher.checkpoints import META_NAME, newest_usable, step_dir
    from launcher.store import RunStore

    home = tmp_path / "home"
    run_id = _old_run(home, step=2)
    rdir = RunStore.open(home).get(run_id).run_dir
    bad = step_dir(rdir, 4)
    bad.mkdir(parents=True)
    (bad / META_NAME).write_text(meta if isinstance(meta, str) else json.dumps(meta))
    assert newest_usable(rdir)[0] == step_dir(rdir, 2)
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home)], capsys)
    assert rc == 0 and f"step-00000004 is damaged ({META_NAME}" in err and words in err, err
    [(_, options)] = resumed
    assert options.extra_env["CARDWISE_RESUME"].endswith("step-00000002")
    (step_dir(rdir, 2) / META_NAME).unlink()
    rc, _, err = run_cli(["launch", "--resume", run_id, "--home", str(home)], capsys)
    check_refusal(rc, err, "checkpoints are all damaged")
    assert words in err and len(resumed) == 1


def test_a_factory_that_calls_os_exit_is_refused_not_a_silent_exit_0(tmp_path):
    """os._exit(0) in a --module factory ended `advise` at once with exit 0 and no output, past every guard.
    Run in a child process: before the guard, the call would have ended this test process."""
    (tmp_path / "quits.py").write_text("import os\nimport torch.nn as nn\n"
                                       "def build():\n    os._exit(0)\n    return nn.Linear(4, 4)\n")
    (tmp_path / "quits_on_import.py").write_text("import os\nos._exit(0)\ndef build(): pass\n")
    for argv, said in ((["--module", f"{tmp_path}/quits.py:build"], "calling build() called os._exit(0)"),
                       (["--module", f"{tmp_path}/quits_on_import.py:build"], "importing it called os._exit(0)")):
        res = subprocess.run([sys.executable, "-m", "cli.main", *argv, "--input-shape", "4", "--gpu", "h100"],
                             capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
        check_refusal(res.returncode, res.stderr, said)
