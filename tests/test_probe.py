"""``advise probe`` and ``advise launch --probe``: real child processes on CPU, and the factors they store.

The probes run tiny configurations (mini-transformer at sequence length 16-32, small MLPs) with one
warm-up and two timed steps and OMP_NUM_THREADS=1 (the shared 2-core machine). No timing asserts:
only that what was measured is there, is positive, and reaches later estimates as stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import hardware
from advisor.calibration import default_calibration, load_calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.hardware import Machine, resolve_hardware
from advisor.plan import ModelRef
from advisor.probe_factors import ModelFactor, factor_key, read_model_factors, save_model_factor
from advisor.request import Request
from cli.main import main
from waiting import reaped, stop_and_collect, wait_for

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).with_name("data")
QUICK = ["--probe-steps", "2", "--probe-warmup", "1"]
TINY = ["--model", "mini-transformer", "--seq-len", "32", "--micro-batch", "4"]


def advise(*argv: str, home: Path) -> subprocess.CompletedProcess:
    """``advise ARGV --home HOME`` as a user runs it: a process of its own (stdout JSON, progress on stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cli.main", *argv, "--home", str(home)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=280)


def _no_gpu() -> Machine:
    return Machine(cpu_cores=2, ram_gib=8.0, nvml_error="NVML Shared Library Not Found")


def _cpu_hardware(model: str = "mini-transformer"):
    from plans import cpu_plan_for
    from launcher.probe import probe_target

    plan, _ = cpu_plan_for(Request(model=ModelRef(name=model), micro_batch=4, seq_len=32))
    return probe_target(plan, _no_gpu()).hardware


# ==================================================================== real probes on CPU
@pytest.fixture(scope="module")
def cpu_probe(tmp_path_factory):
    home = tmp_path_factory.mktemp("probe-home")
    proc = advise("probe", "--cpu", *TINY, *QUICK, "--json", home=home)
    return proc, home


@pytest.mark.slow
def test_cpu_probe_measures_rss_and_samples_per_s(cpu_probe):
    proc, home = cpu_probe
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # stdout is the JSON alone: progress went to stderr
    assert "advise: probe: attempt 1: mini-transformer at micro-batch 4" in proc.stderr
    assert "probe: timing 2 steps" in proc.stderr
    m = out["measured"]
    assert out["status"] == "ok" and out["device"] == "cpu" and out["identity"] == "model:mini-transformer"
    assert m["peak_rss_gib"] > m["baseline_rss_gib"] > 0 and m["peak_gib"] > 0
    assert m["reserved_gib"] is None and m["gpu_util_pct"] is None
    assert m["samples_per_s"] > 0 and m["steps"] == 2 and m["warmup_steps"] == 1
    assert m["implementation"] == "cardwise mini-transformer"
    assert out["config"]["micro_batch"] == 4 and out["config"]["seq_len"] == 32
    est = out["estimate"]
    assert out["memory_ratio"] == pytest.approx(m["peak_gib"] / est["memory"]["peak_gib"])
    assert out["throughput_ratio"] == pytest.approx(m["samples_per_s"] / est["throughput"]["samples_per_s"])
    assert [a["status"] for a in out["attempts"]] == ["ok"]
    assert Path(out["stored"]) == home / "probe-factors.json" and out["factor_key"] == "model:mini-transformer|cpu|fp32"


@pytest.mark.slow
def test_a_later_cpu_estimate_uses_the_factor_and_gpu_estimates_do_not(cpu_probe, tmp_path, capsys):
    proc, home = cpu_probe
    out = json.loads(proc.stdout)
    spec = catalog_model("mini-transformer")
    config = TrainConfig(micro_batch=8, seq_len=64, precision=Precision.fp32)  # another shape of the same model
    hw = _cpu_hardware()
    before = estimate(spec, config, hw, calibration=default_calibration())
    after = estimate(spec, config, hw, calibration=load_calibration(home))
    assert after.memory.peak_gib == pytest.approx(before.memory.peak_gib * out["memory_ratio"])
    assert after.throughput.samples_per_s == pytest.approx(before.throughput.samples_per_s * out["throughput_ratio"])
    assert any(n.startswith(f"memory x{out['memory_ratio']:.2f} from advise probe on 20") for n in after.notes)
    assert any(n.startswith("throughput x") and "advise probe" in n for n in after.notes)

    gpu = ["estimate", "--model", "mini-transformer", "--gpu", "h200", "--seq-len", "32", "--micro-batch", "4",
           "--precision", "fp32", "--json"]
    assert main([*gpu, "--home", str(home)]) == 0
    with_cpu_factor = json.loads(capsys.readouterr().out)
    assert main([*gpu, "--home", str(tmp_path)]) == 0
    assert with_cpu_factor == json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_module_probe_keys_the_resolved_file(tmp_path):
    proc = advise("probe", "--cpu", "--module", "tests/data/tiny_net.py:build_cnn", "--input-shape", "3,16,16",
                  "--micro-batch", "4", "--channels-last", *QUICK, "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["identity"] == f"module:{DATA / 'tiny_net.py'}:build_cnn"
    assert out["factor_key"] == f"module:{DATA / 'tiny_net.py'}:build_cnn|cpu|fp32+channels-last"
    assert out["measured"]["implementation"] == "Sequential from tests/data/tiny_net.py:build_cnn"
    assert out["measured"]["samples_per_s"] > 0 and out["measured"]["peak_rss_gib"] > 0
    assert out["factor_key"] in read_model_factors(tmp_path)


@pytest.mark.slow
def test_oom_halves_the_micro_batch_and_reports_each_attempt(tmp_path):
    proc = advise("probe", "--cpu", "--module", "tests/data/oom_net.py:fits_two", "--input-shape", "16",
                  "--micro-batch", "8", *QUICK, "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(a["micro_batch"], a["status"]) for a in out["attempts"]] == [(8, "oom"), (4, "oom"), (2, "ok")]
    assert out["config"]["micro_batch"] == 2
    assert "out of GPU memory at micro-batch 8; trying 4" in proc.stderr
    assert any("planned micro-batch 8 ran out of memory" in n for n in out["notes"])


@pytest.mark.slow
def test_launch_probe_refuses_when_every_micro_batch_runs_out(tmp_path):
    # From micro-batch 1: one attempt (a child process each) shows the refusal; the halving down to
    # it is test_oom_halves_the_micro_batch_and_reports_each_attempt's.
    proc = advise("launch", "--probe", "--cpu", "--module", "tests/data/oom_net.py:never_fits", "--input-shape", "16",
                  "--micro-batch", "1", *QUICK, "--", "tests/scripts/oom_train.py", home=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "advise: error: the probe ran out of GPU memory at every micro-batch down to 1" in proc.stderr
    assert "--grad-ckpt" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs.sqlite").exists()  # nothing launched, nothing recorded


@pytest.mark.slow
def test_launch_probe_then_launches(tmp_path):
    proc = advise("launch", "--probe", "--cpu", "--model", "mini-transformer", "--seq-len", "16", "--micro-batch", "2",
                  "--recipe", "synthetic", "--max-steps", "2", *QUICK, "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "succeeded"
    assert "measured/estimated" in proc.stderr and "samples/s" in proc.stderr
    assert "model:mini-transformer|cpu|fp32" in read_model_factors(tmp_path)


@pytest.mark.slow
def test_ctrl_c_stops_and_reaps_the_child(tmp_path):
    import signal
    import time

    import psutil

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "probe", "--cpu", *TINY, "--probe-steps", "100000",
                             "--home", str(tmp_path), "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with reaped(proc):
        # the child exists once the attempt started
        children = wait_for(lambda: psutil.Process(proc.pid).children(recursive=True), 300, "the probe's child")
        time.sleep(2)
        out, err = stop_and_collect(proc, signal.SIGINT)
    assert proc.returncode == 130, err
    assert json.loads(out)["status"] == "cancelled"
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


# ==================================================================== mistakes: one line, exit 2, no process
@pytest.mark.parametrize("argv, words", [
    (["probe", "--model", "mini-transformer"], "no GPU detected to probe on"),
    (["probe", "--cpu"], "no model given"),
    (["probe", "--cpu", "--model", "mini-transfomer"], "unknown model 'mini-transfomer'"),
    (["probe", "--cpu", "--model", "mini-transformer", "--precision", "fp16"], "fp16 autocast needs a GPU"),
    (["probe", "--cpu", "--module", "tests/data/tiny_net.py:build_cnn"], "--module needs --input-shape"),
    (["probe", "--cpu", "--module", "tests/data/tiny_net.py:NOT_A_FACTORY", "--input-shape", "3,8,8"],
     "no callable 'NOT_A_FACTORY'"),
    (["launch", "--probe", "--dry-run", "--cpu", "--model", "mini-transformer", "--recipe", "synthetic"],
     "--probe runs the model, --dry-run/--emit run nothing"),
])
def test_mistakes_exit_2_before_any_process(monkeypatch, capsys, tmp_path, argv, words):
    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    monkeypatch.chdir(ROOT)
    assert main([*argv, "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("advise: error: ") and words in err and "Traceback" not in err
    assert err.count("advise: error:") == 1
    assert not (tmp_path / "probes").exists()


def test_fsdp_plans_are_refused():
    from plans import cpu_plan_for
    from launcher.probe import probe_target

    plan, _ = cpu_plan_for(Request(model=ModelRef(name="mini-transformer"), strategy=Strategy.fsdp), processes=2)
    with pytest.raises(UserError, match="FSDP; a probe runs one device"):
        probe_target(plan, _no_gpu())


# ==================================================================== the factor arithmetic (no process)
def _factor(key: str, memory: float, throughput: float) -> ModelFactor:
    return ModelFactor(key=key, model=key.split("|")[0], device=key.split("|")[1], variant=key.split("|")[2],
                       memory=memory, throughput=throughput, micro_batch=8, when=1_800_000_000.0)


def test_a_gpu_factor_changes_that_model_on_that_gpu_only(tmp_path):
    spec = catalog_model("gpt2")
    config = TrainConfig(micro_batch=8, seq_len=1024, precision=Precision.bf16)
    h200 = resolve_hardware(_no_gpu(), gpu="h200")
    save_model_factor(tmp_path, _factor(factor_key("model:gpt2", "H200", config), 1.5, 0.5))
    cal = load_calibration(tmp_path)
    raw = estimate(spec, config, h200, calibration=default_calibration())
    got = estimate(spec, config, h200, calibration=cal)
    assert got.memory.peak_gib == pytest.approx(raw.memory.peak_gib * 1.5)
    assert got.memory.device_gib == pytest.approx(got.memory.peak_gib * cal.allocator_reserve + cal.cuda_context_gib)
    assert got.throughput.samples_per_s == pytest.approx(raw.throughput.samples_per_s * 0.5)
    assert got.throughput.step_s == pytest.approx(raw.throughput.step_s * 2)
    assert "memory x1.50 from advise probe on 2027-01-15" in got.notes
    assert "throughput x0.50 from advise probe on 2027-01-15" in got.notes
    # another GPU kind: the model's factor transfers (issue 14), and says so; another model or variant: untouched
    h100 = resolve_hardware(_no_gpu(), gpu="h100")
    moved = estimate(spec, config, h100, calibration=cal)
    plain = estimate(spec, config, h100, calibration=default_calibration())
    assert moved.throughput.samples_per_s == pytest.approx(plain.throughput.samples_per_s * 0.5)
    assert [(c.how, c.measured_on, c.applied_to) for c in moved.calibration] == [("transferred", "H200", "H100-SXM")]
    other = catalog_model("mini-transformer")
    assert estimate(other, config, h200, calibration=cal) == estimate(other, config, h200, calibration=default_calibration())
    compiled = config.model_copy(update={"compile": True})
    assert not any("from advise probe" in n for n in estimate(spec, compiled, h200, calibration=cal).notes)
    # FSDP shards what the probe ran whole: named, not applied
    fsdp = resolve_hardware(_no_gpu(), gpu="h200", gpus=8)
    sharded = config.model_copy(update={"strategy": Strategy.fsdp})
    est = estimate(spec, sharded, fsdp, calibration=cal)
    assert est.memory == estimate(spec, sharded, fsdp, calibration=default_calibration()).memory
    assert any("not applied" in n for n in est.notes)


def test_a_zoo_factor_is_not_applied_to_the_transformers_class_of_the_same_name(tmp_path):
    # Seen on the H200: `advise probe --model gpt2` ran the zoo, and `advise estimate --model gpt2`
    # (which estimates transformers' GPT2LMHeadModel) took its factor.
    from advisor.catalog import transformers_model
    from advisor.probe_factors import model_identity

    zoo, hf = catalog_model("gpt2"), transformers_model("gpt2")
    assert model_identity(zoo) != model_identity(hf)
    config = TrainConfig(micro_batch=8, seq_len=1024, precision=Precision.bf16)
    h200 = resolve_hardware(_no_gpu(), gpu="h200")
    save_model_factor(tmp_path, _factor(factor_key(model_identity(zoo), "H200", config), 1.5, 0.5))
    cal = load_calibration(tmp_path)
    assert estimate(hf, config, h200, calibration=cal) == estimate(hf, config, h200, calibration=default_calibration())
    assert estimate(zoo, config, h200, calibration=cal) != estimate(zoo, config, h200, calibration=default_calibration())


def test_probe_factor_replaces_the_bench_factor(tmp_path):
    from launcher import calibrate

    spec = catalog_model("gpt2")
    config = TrainConfig(micro_batch=8, seq_len=1024, precision=Precision.bf16)
    hw = resolve_hardware(_no_gpu(), gpu="h200")
    raw = estimate(spec, config, hw, calibration=default_calibration()).throughput.samples_per_s
    calibrate.update_calibration(tmp_path, [calibrate.CalibrationSample(
        key=calibrate.calibration_key("H200", "decoder", "bf16", "single"), sample_id="gpt2|bf16|1", model="gpt2",
        variant="bf16", devices=1, measured_samples_per_s=raw * 0.8, estimated_samples_per_s=raw, ratio=0.8)])
    save_model_factor(tmp_path, _factor(factor_key("model:gpt2", "H200", config), 1.0, 1.1))
    got = estimate(spec, config, hw, calibration=load_calibration(tmp_path))
    assert got.throughput.samples_per_s == pytest.approx(raw * 1.1)  # not raw * 0.8 * 1.1
    assert any("replaces the advise bench factor" in n for n in got.notes)


def test_probe_trains_transformers_question_answering_on_span_labels(tmp_path):
    """`advise probe --hf-config` of a BertForQuestionAnswering config builds transformers' class and feeds the
    synthetic pool's spans as start and end positions (its loss: the mean of two cross-entropies over the positions,
    near ln(seq) at random init; an MLM loss would be near ln(vocab))."""
    pytest.importorskip("transformers")
    import math
    from types import SimpleNamespace

    from advisor.hf_config import spec_from_hf_config
    from launcher.recipes.probe import _hf

    cfg = {"model_type": "bert", "architectures": ["BertForQuestionAnswering"], "num_hidden_layers": 2,
           "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 512,
           "max_position_embeddings": 128, "type_vocab_size": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = spec_from_hf_config(path)
    plan = SimpleNamespace(model=SimpleNamespace(hf_config=str(path)), config=TrainConfig(micro_batch=4, seq_len=64))
    model, pool, loss_fn, what = _hf(plan, spec, "cpu")
    assert what == "transformers BertForQuestionAnswering"
    loss = loss_fn(model, pool[0])
    loss.backward()
    assert abs(loss.item() - math.log(64)) < 1.0
