"""`advise gpus` and `advise models`: output, --json shapes, exit codes (no torch import: test_import_hygiene.py)."""

from __future__ import annotations

import json
from pathlib import Path

from advisor import hardware
from advisor.catalog import catalog_names
from advisor.gpus import GPU_TABLE
from cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def _machine_two_h200() -> hardware.Machine:
    gpus = [hardware.DetectedGpu(index=i, name="NVIDIA H200", memory_total_gib=140.4, memory_free_gib=139.9,
                                 compute_capability=(9, 0), spec="H200") for i in range(2)]
    return hardware.Machine(gpus=gpus, links=[hardware.GpuLink(a=0, b=1, kind="nvlink", nvlinks=18)],
                            driver="550.54.15", cuda_driver="12.4", cpu_cores=32, ram_gib=251.5)


def _no_gpu() -> hardware.Machine:
    return hardware.Machine(cpu_cores=2, ram_gib=8.0, nvml_error="NVML unavailable: NVML Shared Library Not Found")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ advise gpus
def test_gpus_without_gpu(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    rc, out, _ = run_cli(capsys, "gpus")
    assert rc == 0
    assert "no GPU detected (NVML unavailable: NVML Shared Library Not Found)" in out and "--gpu NAME" in out
    assert "2 cores" in out


def test_gpus_on_this_machine_exits_0(capsys):
    rc, out, err = run_cli(capsys, "gpus")
    assert rc == 0 and out and "Traceback" not in err


def test_gpus_detected_table(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "detect_machine", _machine_two_h200)
    rc, out, _ = run_cli(capsys, "gpus")
    assert rc == 0
    assert out.count("NVIDIA H200") == 2 and "140.4 GiB" in out and "9.0" in out
    assert "NV18" in out and "550.54.15" in out and "32 cores" in out


def test_gpus_json(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "detect_machine", _machine_two_h200)
    rc, out, _ = run_cli(capsys, "gpus", "--json")
    d = json.loads(out)
    assert rc == 0 and d["has_gpu"] is True
    assert {"gpus", "links", "driver", "cpu_cores", "ram_gib", "nvml_error", "summary", "links_matrix"} <= set(d)
    g = d["gpus"][0]
    assert {"index", "name", "memory_total_gib", "memory_free_gib", "compute_capability", "spec"} <= set(g)
    assert d["links_matrix"] == [["X", "NV18"], ["NV18", "X"]]

    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    rc, out, _ = run_cli(capsys, "gpus", "--json")
    d = json.loads(out)
    assert rc == 0 and d["has_gpu"] is False and d["gpus"] == [] and "NVML" in d["nvml_error"]


def test_gpus_list(capsys):
    rc, out, _ = run_cli(capsys, "gpus", "--list")
    assert rc == 0
    for g in GPU_TABLE:
        assert g.name in out
    rc, out, _ = run_cli(capsys, "gpus", "--list", "--json")
    rows = json.loads(out)
    assert rc == 0 and [r["name"] for r in rows] == [g.name for g in GPU_TABLE]
    for r in rows:
        assert {"memory_gib", "bandwidth_gbps", "fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops",
                "nvlink_gbps", "pcie_gbps", "compute_capability", "source", "aliases", "supports_bf16"} <= set(r)
        assert r["source"]


# ------------------------------------------------------------------ advise models
def test_models_json(capsys):
    rc, out, _ = run_cli(capsys, "models", "--json")
    d = json.loads(out)
    assert rc == 0 and "masked-LM" in d["semantics"] and "1000-class" in d["semantics"] and "LM head" in d["semantics"]
    assert [m["name"] for m in d["models"]] == catalog_names()
    by = {m["name"]: m for m in d["models"]}
    assert by["llama3-8b"]["params"] == 8_030_261_248 and by["llama3-8b"]["params_human"] == "8.03B"
    assert by["gpt2"]["params_human"] == "124M" and by["bert-base"]["head"] == "mlm"
    assert by["vit-b-16"]["default_image_size"] == 224 and by["llama3-8b"]["default_seq_len"] == 2048
    for m in d["models"]:
        assert {"name", "params", "params_human", "family", "head", "task", "default_seq_len", "default_image_size"} <= set(m)


def test_models_table_lists_every_name(capsys):
    rc, out, _ = run_cli(capsys, "models")
    assert rc == 0
    for name in catalog_names():
        assert name in out
    assert "8,030,261,248" in out and "Catalog semantics" in out


def test_models_hf_config(capsys):
    path = ROOT / "tests" / "data" / "hf" / "bert-base-uncased-sst2" / "config.json"
    rc, out, _ = run_cli(capsys, "models", "--hf-config", str(path), "--json")
    d = json.loads(out)
    assert rc == 0 and d["params"] == 109_483_778 and d["head"] == "cls" and d["arch"]["num_labels"] == 2
    rc, out, _ = run_cli(capsys, "models", "--hf-config", str(path))
    assert rc == 0 and "109,483,778" in out


def test_models_hf_config_errors_exit_2(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "models", "--hf-config", str(tmp_path / "missing.json"))
    assert rc == 2 and "missing.json" in err and "not found" in err and "Traceback" not in err
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    rc, _, err = run_cli(capsys, "models", "--hf-config", str(bad))
    assert rc == 2 and "missing field 'hidden_size'" in err and str(bad) in err and "fix:" in err
