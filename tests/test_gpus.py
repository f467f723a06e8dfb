"""The GPU table (forgiving names, complete rows) and NVML detection that never raises."""

from __future__ import annotations

import sys
import types

import pytest

from advisor import hardware
from advisor.errors import UserError
from advisor.gpus import GPU_TABLE, find_gpu, get_gpu


@pytest.mark.parametrize(
    "query, expected",
    [
        ("h100", "H100-SXM"),
        ("H100 PCIe", "H100-PCIE"),
        ("A100-80GB", "A100-SXM-80GB"),
        ("a100", "A100-SXM-80GB"),
        ("A100-40GB", "A100-SXM-40GB"),
        ("NVIDIA H200", "H200"),
        ("nvidia a100-sxm4-80gb", "A100-SXM-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),  # NVML names
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("a10", "A10"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("rtx 3090", "RTX-3090"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("l40s", "L40S"),
        ("L4", "L4"),
    ],
)
def test_forgiving_lookup(query, expected):
    assert get_gpu(query).name == expected
    assert find_gpu(query).name == expected


def test_issue_gpu_list_is_covered():
    wanted = ["V100-16GB", "V100-32GB", "T4", "A10", "A10G", "L4", "L40S", "RTX 3090", "RTX 4090", "A6000",
              "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-40GB", "A100-PCIe-80GB", "H100 SXM", "H100 PCIe", "H200"]
    found = {w: find_gpu(w) for w in wanted}
    assert all(found.values()), [w for w, s in found.items() if s is None]
    assert len({s.name for s in found.values()}) == len(wanted)  # each a different row


def test_unknown_gpu_lists_close_names():
    with pytest.raises(UserError) as info:
        get_gpu("H300")
    e = info.value
    assert "H300" in e.what and "advise gpus --list" in e.fix and "H200" in e.fix and "H100" in e.fix
    assert find_gpu("B300") is None and find_gpu("B200").name == "B200"  # B200 joined the table (issue 14)
    with pytest.raises(UserError):
        get_gpu("definitely-not-a-gpu")


@pytest.mark.parametrize("query, expected", [("L40", "L40S"), ("A100-90GB", None)])
def test_substring_fallback_does_not_pick_a_different_gpu(query, expected):
    # 'L40' is a prefix of L40S only (48 GB), never the L4; 'A100-90GB' is no GPU we know.
    spec = find_gpu(query)
    assert (spec.name if spec is not None else None) == expected


def test_every_row_complete_and_self_consistent():
    keys = set()
    for g in GPU_TABLE:
        d = g.model_dump()
        assert all(v is not None for v in d.values()), g.name
        assert g.source.strip() and g.memory_gib > 0 and g.bandwidth_gbps > 0 and g.pcie_gbps > 0
        assert g.fp32_tflops > 0 and g.tf32_tflops >= g.fp32_tflops and g.fp16_tflops >= g.tf32_tflops
        # bf16 tensor cores (compute capability >= 8.0) beat TF32; without them the table says 0
        assert g.bf16_tflops >= g.tf32_tflops if g.supports_bf16 else g.bf16_tflops == 0, g.name
        assert g.supports_bf16 == (g.compute_capability >= (8, 0))
        for n in (g.name, *g.aliases):  # every name finds its own row, never another's
            assert find_gpu(n) is g, n
        assert g.name not in keys
        keys.add(g.name)


def test_peak_by_precision():
    v100, h100 = get_gpu("V100"), get_gpu("H100")
    assert v100.peak_tflops("bf16") == v100.fp32_tflops  # no bf16 tensor cores before Ampere: emulated, fp32 rate
    assert h100.peak_tflops("pure-bf16") == h100.bf16_tflops
    assert h100.peak_tflops("tf32") == h100.tf32_tflops and h100.peak_tflops("fp32") == h100.fp32_tflops


# ------------------------------------------------------------------ detection
def test_detect_never_raises():
    m = hardware.detect_machine()
    assert isinstance(m, hardware.Machine)
    assert m.cpu_cores >= 1
    if not m.gpus:  # the CPU-only test machine
        assert m.nvml_error
        assert "no GPU detected" in m.summary()


def test_detect_without_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    m = hardware.detect_machine()
    assert m.gpus == [] and "not installed" in m.nvml_error


def _fake_nvml(n_gpus: int = 2, nvlinks: int = 18, fail_init: bool = False, fail_count: bool = False):
    nv = types.ModuleType("pynvml")
    nv.NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def count():
        if fail_count:
            raise NVMLError("Unknown Error")
        return n_gpus

    def link_state(h, link):
        if link >= nvlinks:
            raise NVMLError("Not Supported")
        return 1

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: None
    nv.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    nv.nvmlSystemGetCudaDriverVersion = lambda: 12040
    nv.nvmlDeviceGetCount = count
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 * 2**20, free=143000 * 2**20,
                                                                         used=771 * 2**20)
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=0)
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{h + 0x10:02X}:00.0".encode())
    nv.nvmlDeviceGetNvLinkState = link_state
    # An NVSwitch box: the remote end of every link is the switch, not a peer GPU.
    nv.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(busId=b"00000000:FF:00.0")
    return nv


def test_detect_with_fake_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(2))
    m = hardware.detect_machine()
    assert [g.name for g in m.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert m.gpus[0].spec == "H200" and m.gpus[0].compute_capability == (9, 0)
    assert round(m.gpus[0].memory_total_gib, 1) == 140.4
    assert m.driver == "550.54.15" and m.cuda_driver == "12.4" and m.nvml_error is None
    assert [(l.a, l.b, l.kind) for l in m.links] == [(0, 1, "nvlink")]


def test_detect_pcie_only(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(3, nvlinks=0))
    m = hardware.detect_machine()
    assert len(m.links) == 3 and {l.kind for l in m.links} == {"pcie"}


@pytest.mark.parametrize("kw, text", [({"fail_init": True}, "NVML unavailable"), ({"fail_count": True}, "query failed"),
                                      ({"n_gpus": 0}, "0 GPUs")])
def test_detect_failures_are_descriptions(monkeypatch, kw, text):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(**kw))
    m = hardware.detect_machine()
    assert m.gpus == [] and text in m.nvml_error
