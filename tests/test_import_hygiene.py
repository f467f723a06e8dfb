"""What each entry point never imports, checked in a fresh interpreter (``sys.modules`` after the fact).

Import-linter (test_layers.py) holds which of our packages import which; this holds the heavy
third-party ones: a catalog answer must not pay for torch (seconds to import), the CLI must not
load textual unless the wizard runs, and advisor/rules never load textual or accelerate at all.
Each case is (what to run, modules that must not be loaded afterwards); the code may assert too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(argv: list[str], check: str = "") -> str:
    """Run ``advise ARGV`` in-process, its output kept out of the report line; ``check`` may read ``out``."""
    return textwrap.dedent(f"""
        import contextlib, io, json
        from cli.main import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main({argv!r})
        assert rc == 0, rc
        out = buf.getvalue()
        {check}
    """)


def _walk(packages: tuple[str, ...], skip: tuple[str, ...] = ()) -> str:
    """Import every module of ``packages`` (but ``skip``)."""
    return textwrap.dedent(f"""
        import importlib, pkgutil
        for pkg in {packages!r}:
            mod = importlib.import_module(pkg)
            for m in pkgutil.walk_packages(mod.__path__, pkg + "."):
                if m.name.rsplit(".", 1)[-1] not in {skip!r}:
                    importlib.import_module(m.name)
    """)


FIRST_SCREEN = textwrap.dedent("""
    import tempfile
    from pathlib import Path
    from advisor.hardware import detect_machine
    from launcher.store import RunStore
    from tui.app import make_app
    app = make_app(detect_machine(), RunStore.open(Path(tempfile.mkdtemp())))
    seen = {}
    async def auto(pilot):
        await pilot.pause()
        seen["screen"] = type(pilot.app.screen).__name__
        pilot.app.exit(0)
    app.run(headless=True, auto_pilot=auto, size=(80, 24))
    assert seen["screen"] == "HardwareScreen", seen
""")

CATALOG = textwrap.dedent("""
    from advisor.catalog import catalog_model, catalog_names
    from advisor.hf_config import spec_from_hf_config
    [catalog_model(n) for n in catalog_names()]
    spec_from_hf_config('tests/data/hf/gpt2/config.json')
    spec_from_hf_config('tests/data/hf/t5-large/config.json')  # an encoder-decoder: checked and counted, no trace
""")

ESTIMATE = textwrap.dedent("""
    from advisor.catalog import catalog_model
    from advisor.config import TrainConfig
    from advisor.estimate import estimate
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    estimate(catalog_model('llama3-8b'), TrainConfig(micro_batch=1, seq_len=2048), HardwareSpec(gpu=get_gpu('H100'), gpus_per_node=8))
    estimate(catalog_model('resnet50'), TrainConfig(micro_batch=64), HardwareSpec(gpu=get_gpu('H100')))
    estimate(catalog_model('t5-large'), TrainConfig(micro_batch=8, seq_len=512), HardwareSpec(gpu=get_gpu('H100')))
""")

ADVISE = _walk(("advisor", "rules"), skip=("tracer", "zoo", "sdpa", "trace_counters", "hf_trace")) + textwrap.dedent("""
    from rules import advise
    advise('llama3-8b', gpu='A100-80GB', gpus=8, seq_len=2048)
    advise('resnet50', gpu='V100', dataset_size=1000, epochs=1)
""")

NO_TORCH_CLI = ("torch", "transformers", "accelerate", "textual")

CASES = [
    pytest.param(CATALOG, ("torch", "transformers", "accelerate"), id="catalog and hf-config lookups"),
    pytest.param(ESTIMATE, ("torch", "textual", "accelerate"), id="catalog estimate"),
    *[pytest.param(_cli(argv), NO_TORCH_CLI, id="advise " + " ".join(argv)) for argv in (
        ["models", "--json"], ["models"], ["gpus", "--json"], ["gpus", "--list"],
        ["models", "--hf-config", "tests/data/hf/Meta-Llama-3-8B/config.json", "--json"])],
    pytest.param(_cli(["--model", "llama3-8b", "--gpu", "H100", "--gpus", "8", "--json"],
                      check="assert json.loads(out)['recommendation']['strategy'] == 'fsdp'"),
                 ("torch",), id="advise --model llama3-8b (catalog recommendation)"),
    # tracer, zoo, sdpa, trace_counters and hf_trace build or trace torch modules by design; everything else stays light
    pytest.param(ADVISE, ("textual", "accelerate", "torch"), id="advisor and rules, advising"),
    pytest.param(_walk(("advisor", "rules")), ("textual", "tui"), id="every advisor and rules module"),
    pytest.param(FIRST_SCREEN, ("torch", "accelerate"), id="wizard first screen"),  # they load only when launching
    pytest.param("import cli.wizard_cmd", ("textual",), id="cli.wizard_cmd"),
    pytest.param("import launcher.bench, launcher.bench.report, launcher.service, launcher.procs, advisor.sampling",
                 ("torch", "textual"), id="bench, service and samplers"),
]


@pytest.mark.parametrize("code, forbidden", CASES)
def test_entry_point_never_imports(code, forbidden):
    report = f"\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})))\n"
    out = subprocess.run([sys.executable, "-c", code + report], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
