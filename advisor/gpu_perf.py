"""Per-GPU performance model: datasheet peaks (advisor/gpus.py) times the fraction of them each
architecture achieves on training work, with the source of every figure.

Work kinds (what a step's time is made of, ``work_kind``):
  matmul     linear layers / attention on tensor cores in half precision (bf16, fp16, fp8)
  matmul_tf32  the same in TF32 (--precision tf32, Ampere on): a rate of its own, as TF32 GEMMs need
             not reach the fraction of their (half-as-high) peak that half precision does; stated
             against the H200's bf16 fraction, since no H200 fit row runs TF32 matmuls (Hopper's
             own: the fitted architectures' TF32-to-half ratio, see ``arch_perf``)
  conv       cuDNN convolutions on tensor cores (half precision, or TF32: fp32 included from Ampere
             on, cuDNN's TF32 default), their FLOPs
  simt       fp32 matmuls on CUDA cores (fp32 everywhere; tf32 before Ampere)
  conv_simt  fp32 convolutions on CUDA cores (before Ampere): cuDNN picks Winograd/FFT algorithms for
             3x3 convolutions, so their FLOP rate differs from a GEMM's (Lavin & Gray 2016)
  bandwidth  memory-bound work against datasheet GB/s: elementwise kernels, normalisation, the
             optimizer pass, and the bytes convolutions move (advisor.throughput.conv_traffic_rate:
             the H200 fit's rate per layout, NCHW or channels_last, scaled by the GPU's SM cycles up
             to its DRAM ceiling; an NCHW layout's transposes are traffic, no kind of their own)

The estimator's family efficiencies (``advisor/data/calibration.json``) are fractions of the
H200's peaks, fit on H200 measurements. A GPU of another architecture reaches
``achievable(arch, kind) / achievable(Hopper, kind)`` times that fraction of *its own* datasheet
peak: ``GpuSpec.fraction_vs_h200(kind)``. Hopper's fractions are the H200's measured ceilings;
the other architectures' (stored as multiples of Hopper's) are fit by ``python -m benchmarks.calibration.cross_gpu.fit``
on the published training throughputs of one source, Lambda's (every GPU kind it publishes, one GPU; the split is by
source, issue 39: NVIDIA's DeepLearningExamples tables are held out), with each source's harness apart (the DLE SQuAD
script's efficiency, fit on the Hopper rows, where the fractions are the H200's), and stored in
``advisor/data/gpu_perf.json`` with the rows they came from. An architecture with no fit row keeps Hopper's
fractions and says so; what a GPU kind never measured should expect is in that file too ("unmeasured": each kind
of the fit source predicted with its own rows left out of the fit).

Pure data: no torch, no CUDA.
"""

import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from advisor.memo import Memo

FITTED = Path(__file__).with_name("data") / "gpu_perf.json"
WORK_KINDS = ("matmul", "matmul_tf32", "conv", "simt", "conv_simt", "bandwidth")
REFERENCE_ARCH = "Hopper"  # the architecture of the H200 every calibration constant was fit on

# (architecture, first compute capability), newest last; a GPU belongs to the last one at or below
# its capability (CUDA C Programming Guide, "Compute Capabilities" table). Ampere's two SM designs are two
# entries: GA100 (8.0: A100; 64 FP32 lanes, 1,024 dense FP16 tensor FMA per SM per clock, 40 MB L2) and
# GA10x (8.6: RTX 3090, A10, A40, RTX A6000; 128 FP32 lanes, half the tensor FMA per SM, 6 MB L2; NVIDIA
# Ampere GA102 whitepaper, "GA10x SM"): one fraction for both had the A100's ResNet-50 rows and the GA10x
# cards' pulling it apart (benchmarks/calibration/cross_gpu/notes.md, issue 39).
ARCHES: tuple[tuple[str, tuple[int, int]], ...] = (
    ("Volta", (7, 0)), ("Turing", (7, 5)), ("Ampere", (8, 0)), ("Ampere-GA10x", (8, 6)), ("Ada", (8, 9)),
    ("Hopper", (9, 0)), ("Blackwell", (10, 0)),
)


class Fraction(BaseModel):
    """One architecture's achievable fraction for a work kind, as a multiple of Hopper's, with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vs_h200: float = Field(gt=0, description="this architecture's achievable fraction / Hopper's (H200's)")
    source: str


class ArchPerf(BaseModel):
    """Achievable fractions of datasheet peak for one architecture, by work kind, relative to Hopper."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arch: str
    matmul: Fraction
    matmul_tf32: Fraction
    conv: Fraction
    simt: Fraction
    conv_simt: Fraction
    bandwidth: Fraction

    def get(self, kind: str) -> Fraction:
        return getattr(self, kind)


def hopper_fractions() -> dict[str, tuple[float, str]]:
    """Hopper's (the H200's) absolute achievable fraction per work kind, with how it is known.

    matmul, conv and simt: the H200 fit's rates for that work (advisor/data/calibration.json,
    rate_efficiency: fractions of the datasheet peak fit by benchmarks/calibration/fit.py on H200
    runs). bandwidth: the fit's elementwise-bytes rate (its convolution-traffic rates per layout,
    conv_bytes|nchw and conv_bytes|nhwc, scale with the same fraction). Other architectures are
    stated relative to these (``Fraction.vs_h200``).
    """
    from advisor.calibration import default_calibration

    e = default_calibration().rate_efficiency
    src = "rate_efficiency of the H200 fit (advisor/data/calibration.json, benchmarks/calibration/fit.py)"
    return {"matmul": (e["matmul|tensor"], f"matmul|tensor, {src}"),
            "matmul_tf32": (e["matmul|tensor"], f"matmul|tensor (no H200 fit row runs TF32 matmuls: stated against bf16's), {src}"),
            "conv": (e["conv"], f"conv, {src}"),
            "simt": (e["matmul|fp32"], f"matmul|fp32, {src}"),
            "conv_simt": (e["conv"], f"conv (Hopper runs fp32 convolutions as TF32), {src}"),
            "bandwidth": (e["bytes"], f"bytes, {src}")}


_HOPPER = ArchPerf(arch="Hopper", **{k: Fraction(vs_h200=1.0, source="the reference: every efficiency was fit on the H200")
                                     for k in WORK_KINDS})


def arch_of(capability: tuple[int, int]) -> str:
    name = ARCHES[0][0]
    for arch, first in ARCHES:
        if tuple(capability) >= first:
            name = arch
    return name


@lru_cache(maxsize=1)
def _fitted() -> dict[str, ArchPerf]:
    if not FITTED.exists():
        return {}
    data = json.loads(FITTED.read_text())
    return {a: ArchPerf(arch=a, **v) for a, v in data.get("arches", {}).items()}


@lru_cache(maxsize=1)
def _unmeasured() -> dict | None:
    return json.loads(FITTED.read_text()).get("unmeasured") if FITTED.exists() else None


def unmeasured_gpu_note(gpu_name: str) -> str | None:
    """What to expect of the samples/s on a GPU kind no published row and no call of this project has measured
    (``advisor/data/gpu_perf.json`` "unmeasured", written by benchmarks/calibration/cross_gpu/fit.py): the
    errors of the fit source's rows of each GPU kind predicted with that kind left out of the fit. None for a
    measured kind."""
    u = _unmeasured()
    if u is None or gpu_name in u["measured_kinds"]:
        return None
    return (f"{gpu_name}: no measured or published row; samples/s carry the error of GPU kinds the fractions were "
            f"transferred to: median {u['median'] * 100:.0f}%, 9 in 10 within {u['p90'] * 100:.0f}%, worst "
            f"{u['worst'] * 100:.0f}% ({u['rows']} held-out published rows, signed median {u['signed_median'] * 100:+.0f}%)")


def arch_perf(arch: str) -> ArchPerf:
    """The architecture's fractions: Hopper's measured ones, a fitted entry, or Hopper's as a stated prior.

    Hopper's are 1.0 (the H200 the efficiencies were fit on) except where the H200 fit has no row:
    TF32 matmuls, which the packaged fit gives the share of the half-precision fraction the fitted
    architectures' TF32 matmuls reach (benchmarks/calibration/cross_gpu/fit.py writes it as the Hopper entry)."""
    fitted = _fitted().get(arch)
    if arch == REFERENCE_ARCH:
        return fitted or _HOPPER
    if fitted is not None:
        return fitted
    hopper = arch_perf(REFERENCE_ARCH)
    prior = "no published training result of this architecture in the fit set: Hopper's fraction assumed"
    return ArchPerf(arch=arch, **{k: Fraction(vs_h200=hopper.get(k).vs_h200, source=f"{prior} ({hopper.get(k).source})")
                                  for k in WORK_KINDS})


_FRACTIONS = Memo()


def fraction_vs_reference(capability: tuple[int, int], kind: str) -> float:
    """How much more (or less) of its own datasheet peak this architecture reaches than Hopper.

    Memoised per fit table (``advisor.memo``: the estimator asks ~6 times per estimate)."""
    return _FRACTIONS.get((_fitted(),), (tuple(capability), kind),
                          lambda: arch_perf(arch_of(capability)).get(kind).vs_h200)


def work_kind(gpu, precision: str, conv: bool) -> str:
    """The work kind a precision's matmuls (conv=False) or convolutions' FLOPs (conv=True) are on
    this GPU: tensor cores or CUDA cores. (Their layout's cost is traffic: ``bandwidth``.)"""
    if not gpu.tensor_work(precision, conv):
        return "conv_simt" if conv else "simt"
    if conv:
        return "conv"
    return _MATMUL_KIND.get(precision, "matmul")


_MATMUL_KIND = {"tf32": "matmul_tf32"}  # TF32 tensor cores reach their own share of peak


class GpuPerf(BaseModel):
    """One GPU's performance model as ``advise gpus --json`` can show it."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    arch: str
    peak_tflops: dict[str, float] = Field(description="dense datasheet peak by dtype (fp32, tf32, bf16, fp16, fp8)")
    bandwidth_gbps: float
    achievable: dict[str, float] = Field(description="fraction of datasheet peak reached, by work kind")
    vs_h200: dict[str, float] = Field(description="achievable / Hopper's: what scales the H200-fit efficiencies "
                                      "(the architecture's fraction times the GPU's sustained-clock factor)")
    sources: dict[str, str]


def performance_model(gpu) -> GpuPerf:
    ap = arch_perf(gpu.arch)
    hop = hopper_fractions()
    peaks = {"fp32": gpu.fp32_tflops, "tf32": gpu.peak_tflops("tf32"), "bf16": gpu.bf16_tflops,
             "fp16": gpu.fp16_tflops, "fp8": gpu.fp8_tflops}
    return GpuPerf(
        gpu=gpu.name, arch=ap.arch, peak_tflops=peaks, bandwidth_gbps=gpu.bandwidth_gbps,
        achievable={k: round(hop[k][0] * gpu.fraction_vs_h200(k), 4) for k in WORK_KINDS},
        vs_h200={k: gpu.fraction_vs_h200(k) for k in WORK_KINDS},
        sources={"datasheet": gpu.source, "sustained": f"{gpu.sustained} on compute kinds: {gpu.sustained_source}",
                 **{k: f"{ap.get(k).source}; Hopper's: {hop[k][1]}" for k in WORK_KINDS}},
    )
