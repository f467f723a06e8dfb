"""Efficiency constants of the estimator, and what a measured calibration changes.

Defaults come from the sources named per field. ``advisor/data/calibration.json``, written by
``python -m benchmarks.calibration.fit`` from the H200 reference measurements in
``benchmarks/calibration/``, overrides them; ``advise bench`` adds per-machine factors
(``measured``) that the CLI loads from the user's home and passes in. Pure data: loading files
happens in ``load_calibration`` only.
"""

import json
from functools import lru_cache
from pathlib import Path

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from advisor import host_speed
from advisor.comm import CommConstants
from advisor.loader import LoaderProbe, read_loader_probe
from advisor.probe_factors import ModelFactor, bench_model_factors, with_model_factors

PACKAGED = Path(__file__).with_name("data") / "calibration.json"


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Achieved fraction of the GPU's datasheet rate per kind of work (advisor.throughput.gpu_seconds):
    # GEMMs and fused attention against the dense peak of their dtype (fp32: CUDA cores, else tensor
    # cores), convolutions against the TF32/bf16 peak, and the bytes of convolutions (by layout),
    # depthwise convolutions (by layout) and all other kernels against memory bandwidth; NCHW batch
    # norm's per-channel blocks in element passes per SM cycle (advisor.throughput). Defaults:
    # Megatron-LM reaches ~0.5-0.6 of peak end to end on A100 (Narayanan et al. 2021, Table 1), the
    # GEMMs alone more; large streaming kernels ~0.9 of bandwidth (the copy test in the H200
    # measurement files' headers: 4.16 of 4.8 TB/s). Refit on the H200 fit rows by benchmarks/calibration/fit.py.
    rate_efficiency: dict[str, float] = Field(default_factory=lambda: {
        "matmul|fp32": 0.8, "matmul|tensor": 0.65, "matmul_unaligned": 0.3, "matmul_odd": 0.2, "attn|fp32": 0.5, "attn|tensor": 0.5,
        "conv": 0.5, "conv_unaligned": 0.1,
        "conv_bytes|nchw": 0.5, "conv_bytes|nhwc": 0.9, "dwconv|nchw": 0.5, "dwconv|nhwc": 0.5, "bytes": 0.75,
        "bn_nchw|native": 0.8, "bn_nchw|cudnn": 1.1,
        # traced eager steps: LayerNorm's kernels and ops on operands in mixed memory orders, 0.27 and
        # 0.26 of the bandwidth in the H200 profile of the encoder classifier (bf16, batch 128:
        # benchmarks/notebook/2026-12-04-kernel-profiles/census_vs_profile.py --only enc-bf16-128; advisor.trace_counters)
        "norm": 0.3, "permuted": 0.3})
    # GPU time per GEMM launch beyond its FLOPs at the class's rate, by class ("fp32": CUDA cores,
    # "tensor"), and per convolution launch (forward, input or weight gradient), microseconds: the
    # partly filled last wave of tiles and the pipeline's fill (advisor.throughput). 0 until fit by
    # benchmarks/calibration/fit.py on the H200 fit rows.
    gemm_call_us: dict[str, float] = Field(default_factory=lambda: {"fp32": 0.0, "tensor": 0.0})
    conv_call_us: float = 0.0
    # Minimum GPU time of one kernel launch, microseconds (launch latency and a partly idle GPU
    # between back-to-back small kernels: ~2-5 us on recent GPUs); fit with the rest.
    gpu_kernel_us: float = 3.0
    # Bytes of memory traffic per byte saved for backward, for closed-form transformers whose step is
    # not traced (advisor.step_work): Korthikanti et al. 2022 count ~3 passes; refit.
    traffic_per_saved_byte: float = 3.0
    # Host-side cost per dispatched aten op in eager mode, microseconds (PyTorch eager dispatch is
    # ~5-10 us per op on a fast bare-metal CPU); fit by benchmarks/calibration/fit.py on the
    # host-bound H200 fit rows (batch <= 8), whose virtual machine dispatches several times slower.
    launch_us: float = 6.0
    # The same per kind of step ("cnn", "transformer": advisor.throughput.compile_family), fit on the
    # host-bound fit rows: a cuDNN convolution's dispatch (its plan lookup) costs the host more than
    # an elementwise op or a cuBLAS call, and CNN steps are mostly convolutions and their BN/ReLU.
    # launch_us is the fallback for a kind with no row.
    launch_us_by_kind: dict[str, float] = Field(default_factory=dict)
    # Host cost of a light op's dispatch (pointwise, cast, reduction: advisor.trace_counters.light_op),
    # microseconds, for every kind of step (launch_us and launch_us_by_kind are the other ops'); fit on
    # the host-bound fit rows. None: as the others.
    light_launch_us: float | None = None
    # This machine's host as `advise probe` measured it (launcher.host_dispatch's reference step;
    # advisor.host_speed), None when not measured: host_factor and host_source derive from it.
    host: host_speed.HostSpeed | None = None
    # That reference step on the host whose rows fit launch_us, microseconds (the header of the
    # host-bound measurement file; benchmarks/calibration/fit.py writes it). None: no host factor.
    host_dispatch_ref_us: float | None = None
    # Host time of a compiled step (inductor, default mode), per kind ("cnn", "transformer"): a fixed
    # part (guards, the AOT runtime wrapper) plus a time per GEMM or convolution launch (each is an
    # extern kernel its Python wrapper launches, with the fused Triton kernels between it and the next).
    # benchmarks/notebook/2026-12-04-compiled-host/compiled_host_per_launch.py: the four host-bound compiled transformers measured on the
    # reference host took 0.102-0.118 ms per launch and 0.025-0.029 ms per eager op; compiled Mistral
    # at batch 8 (its step the host's; 1,751 eager ops, op-by-op RMSNorm and rotary) 0.107 ms per launch
    # but 0.016 per eager op at the reference host's speed. Microseconds; fit on the compiled fit rows
    # (both kinds have some).
    compile_step_us: dict[str, float] = Field(default_factory=lambda: {"cnn": 4000.0, "transformer": 3000.0})
    compile_call_us: dict[str, float] = Field(default_factory=lambda: {"cnn": 135.0, "transformer": 90.0})
    # And a time per kernel inductor writes between those launches (StepWork.fused_kernels), for every
    # kind: host time followed the Triton kernels more than the GEMM launches. On the H200
    # (benchmarks/notebook/2026-12-04-compiled-host: seven compiled users' models each in a
    # process of its own) the forward and backward's host time per GEMM/convolution launch ranged
    # 68-190 us at the reference host's speed (Mistral 68, VGG-BN 190), per kernel launched (Triton and
    # extern) 21-32 us.
    # Microseconds; fit on the compiled fit rows; 0 leaves the GEMM launches alone.
    compile_kernel_us: float = 0.0
    # Device and host time combine as the p-norm of their paths (compromise_cost.overlap); 0 = max. Fit on the
    # fit rows.
    host_combine_p: float = 0.0
    # The share of an eager / a compiled step's host dispatch spent in the forward (throughput.crossing_seconds):
    # the host's forward then the GPU's backward is a path of its own. Fit on the fit rows (H200 and H100);
    # 0 (or a mode missing): the two-path combination of the totals.
    host_forward_share: dict[str, float] = Field(default_factory=dict)
    # Host microseconds per checkpointed block in an eager step, beyond its recomputed ops' dispatch
    # (advisor.throughput.host_seconds); fit on the checkpointed fit rows (H200 and H100). 0: not charged.
    ckpt_block_us: float = 0.0
    # Compiled GELU MLPs: how many f-wide tensors inductor keeps per token (1 = recomputes GELU,
    # 2 = keeps both); fit on the compile rows.
    compile_gelu_kept: float = 1.0
    # torch.compile: fraction of the eager elementwise bytes left after fusion, per kind (fit on the
    # "fit" compile rows; CNNs fuse whole BN-ReLU chains, transformers keep their fp32 residual
    # stream and norms' passes), compile_traffic_factor for a kind with no row; and of saved activations of traced models (CNNs;
    # transformers have a compiled formula in advisor.activations).
    compile_traffic_factor: float = 0.5
    compile_traffic: dict[str, float] = Field(default_factory=dict, description='per kind ("cnn", "transformer"), fit')
    compile_activation_factor: float = 0.85
    # Compiled cardwise models' cross-entropy backward, bytes per logit above the saved logits (advisor.compiled;
    # fit on the compiled zoo transformers' peaks, H200 and H100 fit rows: benchmarks/calibration/fit.fit_memory).
    compile_loss_bytes: float = 6.0
    # Fraction of activations kept by per-stage checkpointing in models without layers (CNNs).
    ckpt_fraction: float = 0.5
    # CUDA context + cuBLAS/cuDNN handles, GiB: 0.61 GiB in use on the H200 before any tensor
    # (the H200 reference rows' header, "context_gib", benchmarks/calibration/rows.py; torch 2.11, CUDA 13).
    cuda_context_gib: float = 0.6
    # Caching-allocator reserve over the allocated peak (fragmentation), as a factor.
    allocator_reserve: float = 1.07
    # Fraction of memory that may be used before "fits" says no (leaves room for spikes).
    fit_fraction: float = 0.95
    # Achieved all-reduce bus bandwidth over the per-direction link bandwidth (nccl-tests on
    # DGX A100/H100 reach ~75-85% of NVLink; PCIe ~70%). Refit by the multi-GPU issue.
    link_efficiency: dict[str, float] = Field(default_factory=lambda: {"nvlink": 0.78, "pcie": 0.7, "network": 0.8})
    # Fraction of backward time that can hide DDP's bucketed all-reduce (Li et al. 2020, PyTorch DDP
    # paper, Fig. 9: most of communication overlaps except the last buckets).
    ddp_overlap: float = 0.8
    fsdp_overlap: float = 0.85
    # The communication model's constants (advisor.comm); None: the packaged advisor/data/multi_gpu.json.
    # Set by its fit (benchmarks/calibration/multi_gpu/fit.py) to try candidates.
    comm: CommConstants | None = None
    # This machine's loader rate on the user's files (`advise probe --data DIR`, advisor.loader.LoaderProbe).
    loader_probe: LoaderProbe | None = None
    # Per-machine factors measured by `advise bench`: key "gpu|family|precision|mode" -> measured /
    # estimated samples/s. Applied last.
    measured: dict[str, float] = Field(default_factory=dict)
    # Per-model factors measured by `advise probe` (advisor.probe_factors): key "model identity|
    # device|variant" -> measured/estimated peak memory and samples/s; applied in advisor.estimate.
    model_factors: dict[str, ModelFactor] = Field(default_factory=dict)
    source: str = "built-in defaults"

    @property
    def host_factor(self) -> float:
        """This host's dispatch time over the reference host's; 1.0 when either was not measured.
        Multiplies every host term (advisor.throughput.host_seconds)."""
        if self.host is None or not self.host_dispatch_ref_us:
            return 1.0
        return self.host.us_per_step / self.host_dispatch_ref_us

    @property
    def host_source(self) -> str:
        """Whose dispatch speed the host terms assume, in words (estimates' notes and JSON)."""
        if self.host is None or not self.host_dispatch_ref_us:
            return host_speed.ASSUMED
        return (f"measured by {self.host.source} ({self.host.date}): dispatch x{self.host_factor:.2f} the time of the "
                "H200 host that fit launch_us")

    @field_validator("rate_efficiency", mode="before")
    @classmethod
    def _every_rate(cls, v: dict) -> dict:
        """A calibration that names some kinds of work keeps the defaults for the others."""
        return {**cls.model_fields["rate_efficiency"].default_factory(), **(v or {})}



class CalibrationUsed(BaseModel):
    """Which measured calibration an estimate applied, in its report (``Estimate.calibration``).

    A factor measured on one GPU kind reaches another through its model-specific part: the
    measuring GPU kind's own error (``gpu_factor_removed``: ``advise bench`` factors of other model
    families on that GPU kind, 1.0 when none) is divided out, and this GPU kind's multiplied in
    (``gpu_factor_applied``)."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["advise probe", "advise bench"]
    scope: Literal["model", "family"] = Field(description="this very model, or its family on this GPU kind")
    model: str = Field(description="model identity (model:NAME, hf-config:PATH, module:SPEC) or family")
    variant: str = Field(description="precision[+compile][+channels-last]")
    measured_on: str = Field(description="GPU kind the factor was measured on")
    applied_to: str = Field(description="GPU kind of this estimate")
    how: Literal["direct", "transferred"]
    throughput_factor: float | None = Field(None, description="what samples/s was multiplied by")
    memory_factor: float | None = Field(None, description="what the peak memory was multiplied by")
    gpu_factor_removed: float = 1.0
    gpu_factor_applied: float = 1.0
    date: str | None = None

    def summary(self) -> str:
        """One line for the text reports: what, measured where, direct or transferred."""
        what = f"{self.source} ({self.scope} {self.model}, {self.variant})"
        where = (f"measured on {self.measured_on}" if self.how == "direct"
                 else f"measured on {self.measured_on}, transferred to {self.applied_to}")
        f = []
        if self.throughput_factor:
            f.append(f"throughput x{self.throughput_factor:.2f}")
        if self.memory_factor:
            f.append(f"memory x{self.memory_factor:.2f}")
        return f"{what}: {where}" + (f"; {', '.join(f)}" if f else "") + (f" ({self.date})" if self.date else "")


def calibration_key(gpu: str, family: str, precision: str, mode: str, *, compile: bool = False,
                    channels_last: bool = False) -> str:
    """Key of a measured factor: GPU kind, model family, precision with its variant, mode.

    compile and channels_last change speed by 1.2-2.8x on their own (`advise bench` on one
    H200: benchmarks/gpu_checks/h200_bench.sh), so they key factors of their own instead of sharing the plain precision's.
    """
    variant = precision + ("+compile" if compile else "") + ("+channels-last" if channels_last else "")
    return f"{gpu}|{family}|{variant}|{mode}"


@lru_cache(maxsize=1)
def default_calibration() -> Calibration:
    """Packaged calibration (refit on the H200 reference set) or the built-in defaults."""
    if PACKAGED.exists():
        data = json.loads(PACKAGED.read_text())
        return Calibration(**data)
    return Calibration()


def load_calibration(home: Path | None) -> Calibration:
    """Packaged constants plus what `advise bench` and `advise probe` measured on this machine, if any."""
    cal = default_calibration()
    if home is None:
        return cal
    path = Path(home) / "calibration.json"
    data = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
    if not isinstance(data, dict):
        data = {}
    # `advise bench`'s per-model samples first: another GPU kind can take their model-specific part;
    # `advise probe`'s per-model factors (more specific) override the same key.
    cal = cal.model_copy(update={"model_factors": {**cal.model_factors, **bench_model_factors(data.get("samples"))}})
    cal = with_model_factors(cal, Path(home))
    cal = host_speed.with_host_speed(cal, host_speed.read_host_speed(Path(home)))
    probe = read_loader_probe(Path(home))
    if probe is not None:
        cal = cal.model_copy(update={"loader_probe": probe})
    measured = data.get("measured", {})
    if not measured or not isinstance(measured, dict):
        return cal
    return cal.model_copy(update={"measured": {**cal.measured, **measured},
                                  "source": f"{cal.source} + measured on this machine ({path})"})
