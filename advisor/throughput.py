"""Steady-state step time and samples/s: a roofline per kind of kernel, a host pipeline, communication.

Per micro-batch on one GPU (the work by kind comes from advisor.step_work: traced for --module,
--hf-config and traced catalog models, closed form for cardwise's own transformers):
  GPU time  = matmul FLOPs / (matmul peak x e_matmul)      GEMMs: fp32 on CUDA cores, else tensor cores
            + attention FLOPs / (matmul peak x e_attn)     fused SDPA
            + conv FLOPs / (conv peak x e_conv)            cuDNN: fp32 runs TF32 (cudnn.allow_tf32)
            + conv bytes / min(H200 rate x SM cycles ratio,      NCHW vs channels_last; not DRAM-bound
                               bandwidth x e_bytes)                on the H200, capped by DRAM elsewhere
                                                           (fp16/bf16 in NCHW: channels_last kernels
                                                            + NHWC copies at the elementwise rate)
            + depthwise-conv FLOPs / (fp32 peak x e_dwconv[layout])   direct stencils, CUDA cores
            + other bytes / (bandwidth x e_bytes)          elementwise, norms, casts (x compile_traffic)
              (traced, eager: LayerNorm's and strided ops' bytes at e_norm, e_permuted)
            + sum over channel counts C of NCHW batch norms:      one thread block per channel
                block passes x max(1, C / SMs) / (rate x SM clock)  (eager; PyTorch's bf16 / cuDNN's)
            + GEMM launches x gemm_call_us[class]          a launch's last wave and pipeline fill (per
            + convolution launches x conv_call_us           SM rate on other GPUs)
            + kernels x gpu_kernel_us                      a launch's minimum duration on the GPU
  host time = other kernels x launch_us                    the CPU dispatches and launches each op;
            + light kernels x light_launch_us                   pointwise ones cost it less
              (compiled: step_us + GEMM/conv launches x call_us, per kind)
  micro-step = (GPU^p + host^p)^(1/p)                      launches run ahead of the GPU; the slower
                                                           side sets the pace (p -> inf is max)
Peaks and bandwidth are the GPU's (advisor.gpus); the e_* fractions, per-kernel times and compile
factors are fit on the H200 rows marked "fit" (benchmarks/calibration/fit.py); a CPU dispatching
slower or faster than that machine's moves the host constants.
Precision: ``fp32`` is PyTorch's default, fp32 matmuls but TF32 cuDNN convolutions
(torch.backends.cudnn.allow_tf32 defaults to True); ``tf32`` uses TF32 for matmuls too.
Compiled steps (inductor) run convolutions channels_last (layout_optimization, on by default).
Per optimizer step: micro-steps x grad_accum + the optimizer's streaming pass + exposed
communication and the wait for the slowest rank (advisor.comm: DDP's buckets, FSDP's/HSDP's per-unit
gathers, alpha-beta by link; the GPU-0 broadcast/reduce of DataParallel here). samples/s is then the
smaller of that and what the input pipeline delivers (advisor.loader), when the hardware states one.

Training FLOPs are 3x the forward (backward = 2x: Kaplan et al. 2020, sec. 2.1); checkpointing
adds one forward; attention's backward is 2.5x its forward (FlashAttention recomputes the
scores, Dao 2022). MFU counts model FLOPs only (PaLM, Chowdhery et al. 2022, appendix B).
"""

from pydantic import BaseModel, ConfigDict, Field

from advisor import host_speed
from advisor.calibration import Calibration, calibration_key
from advisor import setup
from advisor.comm import CommBreakdown, comm_constants
from advisor.compromise_cost import compromise_cost, overlap
from advisor.config import Precision, TrainConfig
from advisor.gpu_perf import work_kind
from advisor.gpus import GpuSpec, get_gpu
from advisor.hardware import HardwareSpec, threads_per_rank
from advisor.loader import LoaderEstimate, data_kind, loader_estimate
from advisor.memory import trainable_params
from advisor.models import ModelSpec
from advisor.setup.checkpointing import layer_count, recomputed_share
from advisor.setup.ledger import StepLedger
from advisor.setup.optimizers import STREAM_BYTES
from advisor.step_work import StepWork, shared_step_work, step_work

# Ops of one optimizer step: fused AdamW/SGD launch one multi-tensor kernel per dtype group plus the
# step-count update (torch/optim/adamw.py, _fused_adamw); zero_grad(set_to_none) launches none.
OPTIMIZER_OPS = 4
# Kernels a compiled step launches over the eager step's aten ops: 747-813 compiled against 858-1039
# eager for resnet50 and vit-b-16 on the H200 (the host-bound rows' cuda_kernels, benchmarks/calibration/rows.py).
COMPILED_KERNELS = 0.85
# Half-precision (fp16, bf16) convolutions in NCHW: bytes cuDNN's NCHW<->NHWC conversions move per byte the convolutions read
# and write (each tensor converted once, read in one layout and written in the other: 2). cuDNN's
# half-precision tensor-core convolutions are NHWC kernels and it "may use ... NCHW-to-NHWC
# transformations to call the Tensor Core operations" (cuDNN developer guide, Legacy API, Convolution
# Functions, Data and Filter Formats; NVIDIA's Convolutional Layers User's Guide, "Tensor Layouts In
# Memory: NCHW vs NHWC": NHWC avoids the transposes).
NCHW_HALF_TRANSPOSES = 2.0
# The GPU the packaged calibration was fit on (benchmarks/calibration/fit.py): rates that are not
# fractions of a datasheet figure (convolution traffic, per-launch tails) carry to another GPU from it.
REFERENCE_GPU = get_gpu("H200")


class ThroughputEstimate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    samples_per_s: float = Field(description="steady state, summed over all GPUs, data on device")
    step_s: float = Field(description="one optimizer step (all micro-batches)")
    tokens_per_s: float | None = Field(None, description="samples/s x tokens per sample (text and ViT)")
    mfu: float = Field(description="model FLOPs utilisation against the GPUs' dense peak")
    tflops_per_gpu: float
    compute_s: float = Field(description="per optimizer step: GPU compute of all micro-batches")
    matmul_s: float = Field(0.0, description="per optimizer step: the matmul part of the GPU time")
    gpu_s: float = Field(0.0, description="per optimizer step: GPU time of all micro-batches (matmul + memory)")
    host_s: float = Field(0.0, description="per optimizer step: CPU time dispatching all micro-batches")
    crossing_s: float = Field(0.0, description="per optimizer step: the CPU's forward dispatch then the GPU's backward, "
                                               "the third path the step takes at least (0: not modelled)")
    comm_s: float = Field(description="per optimizer step: communication time (before overlap)")
    exposed_comm_s: float = Field(description="per optimizer step: communication not hidden by compute")
    optimizer_s: float
    host_bound: bool = Field(description="kernel launches, not the GPU, set the pace")
    host_speed: str = Field(host_speed.ASSUMED, description="whose dispatch speed host_s assumes: the benchmark "
                                                            "host's, or this machine's as `advise probe` measured it")
    scaling_efficiency: float = Field(1.0, description="samples/s over (GPUs x one-GPU samples/s)")
    sync_s: float = Field(0.0, description="per optimizer step: waiting for the slowest rank (grows with ranks)")
    comm: CommBreakdown | None = Field(None, description="collectives, buckets, exposure and the link assumed")
    gpu_samples_per_s: float | None = Field(None, description="what the GPUs do with the data already on the device")
    loader: LoaderEstimate | None = Field(None, description="what the input pipeline delivers per GPU")
    loader_bound: bool = Field(False, description="the input pipeline, not the GPUs, sets samples_per_s")
    conservative_samples_per_s: float | None = Field(
        None, description="samples/s without gains measured only on another GPU kind (compile's, fit on the H200); "
                          "what a deadline check counts on")
    transferred: list[str] = Field(default_factory=list, description="gains in samples_per_s measured on another GPU kind only")
    unmeasured_gpu: str = Field("", description="a GPU kind no row has measured: the error to expect (advisor.gpu_perf."
                                "unmeasured_gpu_note); empty for a measured kind")
    calibrated: bool = False
    notes: list[str] = Field(default_factory=list)


def forward_flops(model: ModelSpec, config: TrainConfig) -> tuple[float, float]:
    """(matmul-class forward FLOPs, attention forward FLOPs) per sample."""
    a = model.arch
    if a is not None:
        tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size)
        head = a.head_matmul_params()  # on head_tokens only (NVIDIA's BERT pre-training: the masked ones)
        dense = 2.0 * ((a.matmul_params() - head) * tokens + head * a.head_tokens(tokens))
        attn = 4.0 * a.n_layers * a.d_model * tokens * tokens * (0.5 if a.causal else 1.0)
        return dense, attn
    t = model.trace
    scale = 1.0
    if t.scales_with == "pixels" and config.image_size and t.ref_input:
        scale = (config.image_size / t.ref_input[-1]) ** 2
    return t.fwd_flops * scale, 0.0


def model_flops_per_sample(model: ModelSpec, config: TrainConfig) -> float:
    """The training FLOPs MFU counts for one sample: the work the step needs, not the work it does.

    PaLM's definition (Chowdhery et al. 2022, Appendix B): 6N per token for the weights (forward 2N,
    backward 4N: input and weight gradients) plus the attention's 12 L d s^2 (here halved when causal),
    and never the recomputed forward of activation checkpointing. LoRA trains no base weight, so
    its step needs no base weight gradient: the base costs 4N (forward and input gradients), the
    adapters 6 per adapter parameter; counting 6N would show a LoRA run's MFU a third too high."""
    dense, attn = forward_flops(model, config)
    if not config.adapters or model.arch is None:
        return 3.0 * dense + 3.0 * attn
    tokens = model.arch.tokens(config.seq_len or model.default_seq_len, config.image_size)
    return 2.0 * dense + 3.0 * attn + 6.0 * trainable_params(model, config) * tokens


def conv_dominated(model: ModelSpec) -> bool:
    """Convolutions carry the FLOPs: CNNs, and traced modules whose step does more convolution than
    GEMM work (a U-Net); a ViT's patch convolution is under 1% of its FLOPs."""
    t = model.trace
    if t is not None and t.work:
        w = next(iter(t.work.values()))
        return w.get("conv_flops", 0.0) > w.get("matmul_flops", 0.0)
    return model.family == "cnn"


def peak_flops(model: ModelSpec, config: TrainConfig, hw: HardwareSpec) -> float:
    """Dense datasheet peak the step's main work runs at, FLOP/s (DESIGN.md's precision names:
    fp32 convolutions run TF32 where the GPU has it, cudnn.allow_tf32 being True by default)."""
    p = config.precision.runs_as.value  # MFU against the peak of what the rest of the step runs in (runs_as)
    return hw.gpu.conv_flops(p) if conv_dominated(model) else hw.gpu.matmul_flops(p)


def channels_last(config: TrainConfig) -> bool:
    """Convolutions run NHWC: asked for, or compiled (inductor's layout_optimization, on by default,
    converts convolutions to channels_last: torch._inductor.config.layout_optimization)."""
    return config.channels_last or config.compile


def gpu_seconds(work: StepWork, config: TrainConfig, gpu: GpuSpec, cal: Calibration) -> tuple[float, float]:
    """(matmul-class seconds, all GPU seconds) of one micro-step: each kind of work at its rate, in the precision
    the step runs as (``Precision.runs_as``; what a precision setup runs otherwise is its ``dispatch_terms``)."""
    p = config.precision.runs_as
    e = cal.rate_efficiency
    cls = "fp32" if p is Precision.fp32 else "tensor"  # fp32 GEMMs and attention run on CUDA cores
    layout = "nhwc" if channels_last(config) else "nchw"
    # The rates are fractions of the H200's peaks, fit there; another GPU reaches its own datasheet
    # peak times its architecture's achievable fraction over Hopper's (advisor.gpu_perf), by work kind.
    mm_kind, conv_kind = work_kind(gpu, p.value, conv=False), work_kind(gpu, p.value, conv=True)
    mm_peak = gpu.matmul_flops(p.value) * gpu.fraction_vs_h200(mm_kind)
    conv_peak = gpu.conv_flops(p.value) * gpu.fraction_vs_h200(conv_kind)  # cuDNN TF32 default
    # Memory traffic, the convolutions' included: the layout's cost (NCHW transposes around cuDNN's
    # NHWC tensor-core kernels) is the H200 fit's rate per layout, at this GPU's bandwidth fraction.
    bw = gpu.bandwidth_vs_h200
    conv_bytes = work.conv_bytes
    conv_layout, transposes = layout, 0.0
    half = p.compute_bytes == 2
    if layout == "nchw" and half and gpu.tensor_work(p.value, conv=True):
        # Half-precision (fp16, bf16) tensor-core convolutions are NHWC kernels: for NCHW tensors cuDNN
        # converts them to NHWC (nchwToNhwcKernel) and back (nhwcToNchwKernel) and runs the channels_last
        # kernel, at the channels_last traffic rate; the conversions are copies, memory-bound: the
        # elementwise rate on this GPU's DRAM. The H200 profiles of a bf16 U-Net and EfficientNet-B0 in
        # NCHW show exactly that: sm90_xmma_*_bf16bf16_bf16f32_*_nhwc kernels between bf16 nchwToNhwc /
        # nhwcToNchw ones (benchmarks/notebook/2026-12-04-kernel-profiles); the rest of their NCHW
        # cost is batch norm's per-channel kernels (batch_norm_blocks_seconds).
        conv_layout = "nhwc"
        transposes = NCHW_HALF_TRANSPOSES * conv_bytes / (bw * e["bytes"])
    mm = work.matmul_flops / (mm_peak * e[f"matmul|{cls}"]) + work.attn_flops / (mm_peak * e[f"attn|{cls}"])
    unaligned, odd = ("matmul_unaligned", "matmul_odd")
    if p is Precision.fp32 or config.compile:  # CUDA cores need no alignment; inductor pads GEMM sizes to
        unaligned = odd = f"matmul|{cls}"  # aligned ones (torch._inductor.config.shape_padding, default on)
    mm += work.matmul_unaligned_flops / (mm_peak * e[unaligned]) + work.matmul_odd_flops / (mm_peak * e[odd])
    if work.matmul_fp32_flops:  # fp32 GEMMs inside a half-precision step (advisor.step_work): CUDA cores
        fp32_peak = gpu.matmul_flops("fp32") * gpu.fraction_vs_h200(work_kind(gpu, "fp32", conv=False))
        mm += work.matmul_fp32_flops / (fp32_peak * e["matmul|fp32"])
    conv = work.conv_flops / (conv_peak * e["conv"]) + conv_bytes / conv_traffic_rate(gpu, e, conv_layout) + transposes
    conv += work.conv_unaligned_flops / (conv_peak * e["conv_unaligned"])
    # Depthwise convolutions are direct stencils on CUDA cores with fp32 accumulation whatever the
    # dtype (PyTorch's conv_depthwise2d kernels for NCHW, cuDNN's for NHWC): the fp32 peak.
    conv += work.dwconv_flops / (gpu.matmul_flops("fp32") * gpu.fraction_vs_h200("simt") * e[f"dwconv|{layout}"])
    # Each GEMM and convolution launch ends in a partly filled last wave of tiles and fills its
    # pipeline first: a time per launch, by class, fit on the H200 (gemm_call_us, conv_call_us). It is
    # what makes a moderate-size GEMM slower per FLOP than a large one: on the H200 an fp32 BERT-base
    # step at 2,048 tokens ran its 270 GEMM kernels in 25.5 ms, 42 TFLOP/s
    # (benchmarks/notebook/2026-12-04-kernel-profiles, u2-hfbertcls-fp32-16-s128), and with one rate
    # per class the fit had that row 17% too fast and the 16,384-token bert-fp32-32 7% too slow
    # (the same notebook entry). Another GPU's tiles run at its own per-SM rate.
    mm += work.matmul_calls * cal.gemm_call_us.get(cls, 0.0) * 1e-6 * _per_sm_slowdown(
        gpu, mm_peak, REFERENCE_GPU.matmul_flops(p.value))
    conv += work.conv_calls * cal.conv_call_us * 1e-6 * _per_sm_slowdown(gpu, conv_peak, REFERENCE_GPU.conv_flops(p.value))
    kernels = work.kernels
    if config.compile:  # fusion removes memory-bound passes and their launches, not GEMM/conv work
        # inductor writes its own kernels for norms and for ops on transposed tensors: one rate for all
        other = (work.bytes + work.norm_bytes + work.permuted_bytes) / (bw * e["bytes"])
        other *= cal.compile_traffic.get(compile_family(work), cal.compile_traffic_factor)
        kernels *= COMPILED_KERNELS
    else:  # eager: LayerNorm's kernels and PyTorch's strided kernel run slower than the rest
        other = (work.bytes / e["bytes"] + work.norm_bytes / e["norm"] + work.permuted_bytes / e["permuted"]) / bw
    other += work.attn_bytes / (bw * e["bytes"])
    if layout == "nchw" and not config.compile:  # inductor writes its own BN kernels; NHWC runs channels-last ones
        # bf16 (autocast or pure) runs PyTorch's own kernels, fp32 and fp16 (fp32 weights) cuDNN's
        path = "native" if p.bf16_matmuls else "cudnn"
        other += batch_norm_blocks_seconds(work.bn_block_elems, gpu, e[f"bn_nchw|{path}"])
    return mm + conv, mm + conv + other + kernels * cal.gpu_kernel_us * 1e-6


def _per_sm_slowdown(gpu: GpuSpec, peak: float, ref_peak: float) -> float:
    """A tile's time on this GPU over the H200's: the H200's per-SM rate for this work (``ref_peak``
    over its SMs) over this GPU's (``peak`` over its SMs); a wave's tail is one tile on each SM."""
    if gpu.name == REFERENCE_GPU.name:
        return 1.0
    return (ref_peak / REFERENCE_GPU.sm_count) / max(peak / gpu.sm_count, 1.0)


def batch_norm_blocks_seconds(block_elems: dict[int, float], gpu: GpuSpec, per_cycle: float) -> float:
    """NCHW batch norm's kernels reduce one channel per thread block, so a layer of C channels takes
    max(1, C / SMs) rounds of one block's time. A block makes ``per_cycle`` element passes per SM clock
    cycle, fit on the H200 (benchmarks/calibration/fit.py; the profiles of EfficientNet-B0 and a U-Net
    in benchmarks/notebook/2026-12-04-kernel-profiles give 0.8 for PyTorch's bf16 kernels and 1.1
    for cuDNN's fp32 ones, the same in both models): a block is bound by its own latency, not by
    DRAM, so another GPU's runs at its SM clock."""
    if not block_elems:
        return 0.0
    sms = gpu.sm_count
    return sum(n * max(1.0, c / sms) for c, n in block_elems.items()) / (per_cycle * gpu.sm_clock)


def conv_traffic_rate(gpu: GpuSpec, e: dict[str, float], layout: str) -> float:
    """Bytes/s of the convolutions' traffic: the H200 fit runs it at 15% (NCHW) to 38% (channels_last)
    of its bandwidth, far below the elementwise kernels' 77%, so it is not DRAM-bound there: another
    GPU runs it at the H200's rate scaled by its SM cycles, up to its own DRAM ceiling (the
    elementwise rate on its bandwidth); both at its architecture's bandwidth fraction. On the H200
    it is the fit's rate whatever the fit tries (the ceiling is never below it there)."""
    fraction = e[f"conv_bytes|{layout}"]
    sm_rate = fraction * REFERENCE_GPU.mem_bw * gpu.sm_cycles / REFERENCE_GPU.sm_cycles
    return min(sm_rate, max(e["bytes"], fraction) * gpu.mem_bw) * gpu.fraction_vs_h200("bandwidth")


def compile_family(work: StepWork) -> str:
    """"cnn" when convolutions carry the step's FLOPs, else "transformer" (keys of the compile factors)."""
    return "cnn" if work.conv_flops + work.conv_unaligned_flops > work.matmul_flops + work.matmul_unaligned_flops \
        else "transformer"


def host_seconds(model: ModelSpec, config: TrainConfig, cal: Calibration, work: StepWork | None = None) -> float:
    """CPU time to dispatch one micro-step: eager, ops x launch_us (light ones at light_launch_us);
    compiled, a fixed part plus a time per GEMM/convolution launch (Calibration.compile_call_us) and per
    kernel inductor writes between them (StepWork.fused_kernels, Calibration.compile_kernel_us).

    torch.compile (inductor, default mode) still launches one kernel per matmul/convolution and
    per fused group, through its own Python wrapper: on the H200 it launched 747-813 kernels per
    step for resnet50 and vit-b-16 against 858-1039 eager (the host-bound rows'
    cuda_kernels, benchmarks/calibration/rows.py). The eager op count does not predict it: a factor on it had compiled Mistral at
    batch 8 (host-bound) 24% too slow (u8-mistral-bf16-compile-8-s512 in
    the notebook entry benchmarks/notebook/2026-12-04-compiled-host; -2% with launches; the figures per
    launch: benchmarks/notebook/2026-12-04-compiled-host/compiled_host_per_launch.py). The fused kernels are the census's count of what
    inductor writes between the GEMMs (advisor.trace_counters), which inductor's own Triton launches
    followed at 2.0-2.5x across seven models where the GEMM launches' ratio ran 1.6-3.3
    (benchmarks/notebook/2026-12-04-compiled-host/compiled_kernels_vs_census.py).
    """
    work = work or step_work(model, config, cal)
    family = compile_family(work)
    launch_us = cal.launch_us_by_kind.get(family, cal.launch_us)
    optimizer = OPTIMIZER_OPS / max(1, config.grad_accum) * launch_us  # eager, compiled or not
    if config.compile:
        # inductor's wrapper launches each GEMM/convolution and the fused kernels between them (a Llama
        # layer's op-by-op RMSNorm and rotary fuse away: the eager op count does not enter)
        calls = work.matmul_calls + work.conv_calls + work.dwconv_calls
        return (cal.compile_step_us[family] + calls * cal.compile_call_us[family]
                + work.fused_kernels * cal.compile_kernel_us + optimizer) * 1e-6 * cal.host_factor
    # A light op (pointwise, cast, reduction) dispatches faster than the others (GEMMs, convolutions,
    # norms, attention: autocast's weight casts, library heuristics, more Python): light_launch_us.
    light_us = launch_us if cal.light_launch_us is None else cal.light_launch_us
    heavy = work.kernels - work.light_kernels
    # A checkpointed block costs the host Python beyond its recomputed ops: torch.utils.checkpoint's
    # non-reentrant frame, a pack hook per saved tensor in the forward, the unpack and recompute hooks in the
    # backward (Calibration.ckpt_block_us, fit; blocks of a model with a layer count: its layers' share).
    blocks = layer_count(model) * recomputed_share(model, config)
    return (heavy * launch_us + work.light_kernels * light_us + optimizer
            + blocks * cal.ckpt_block_us) * 1e-6 * cal.host_factor


def crossing_seconds(gpu_s: float, host_s: float, config: TrainConfig, recomputed: float, cal: Calibration) -> float:
    """One micro-batch's host forward followed by its GPU backward (``compromise_cost.overlap``'s third path),
    0 when the calibration has no forward share for this mode.

    The GPU's forward is a third of forward + backward (the backward's two GEMMs per forward GEMM: Narayanan et
    al. 2021's 2N + 4N FLOPs per token); a recomputed forward (``recomputed``: the share checkpointing runs again)
    runs inside the backward: 1 / (3 + recomputed). The host's forward share (``Calibration.host_forward_share``,
    fit) is of a step without recompute; the recomputed forward is dispatched again, from Python, in backward."""
    a = cal.host_forward_share.get("compiled" if config.compile else "eager", 0.0)
    if a <= 0:
        return 0.0
    host_fwd = a * host_s / (1.0 + a * recomputed)
    return host_fwd + gpu_s * (1.0 - 1.0 / (3.0 + recomputed))


def estimate_throughput(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, cal: Calibration) -> ThroughputEstimate:
    """The standard step (compute, the optimizer's pass), then the active setups' terms (advisor.setup)."""
    gpu = hw.gpu
    strategy = setup.strategy_of(config)
    step = StepLedger(model, config, hw, cal, setup.active(config), world=strategy.world(hw))
    if config.precision is Precision.fp32 and gpu.compute_capability >= (8, 0):
        step.notes.append("fp32 convolutions run TF32 on tensor cores (cuDNN's default)" if conv_dominated(model)
                          else "fp32 matmuls run on CUDA cores; --precision tf32 or bf16 uses tensor cores")
    if cal.host is not None and cal.host.device != gpu.name:
        # A CUDA host's, of the machine with that GPU kind (advisor.host_speed): not a CPU's nor another machine's.
        cal = step.cal = cal.model_copy(update={"host": None})
    work = shared_step_work(model, config, cal)
    mm_s, step.gpu_s = gpu_seconds(work, config, gpu, cal)
    step.host_s = host_seconds(model, config, cal, work)
    step.bw = gpu.bandwidth_vs_h200 * cal.rate_efficiency["bytes"]
    step.each("dispatch_terms")  # DataParallel: one Python thread per replica
    gpu_s, host_s = step.gpu_s, step.host_s
    step.crossing_s = crossing_seconds(gpu_s, host_s, config, recomputed_share(model, config), cal)
    step.micro_s = overlap(gpu_s, host_s, cal.host_combine_p, step.crossing_s)
    compute_s = step.compute_s = step.micro_s * config.grad_accum
    if step.crossing_s > max(gpu_s, host_s) and gpu.name != "cpu":
        # The third path is the longest: neither total explains the step, so say which path does.
        step.notes.append(f"host and GPU cross: the CPU's forward dispatch then the GPU's backward set the pace "
                          f"({step.crossing_s * 1e3:.1f} ms a micro-batch; GPU {gpu_s * 1e3:.1f} ms, host "
                          f"{host_s * 1e3:.1f} ms in all); host speed {cal.host_source}")
    elif host_s > gpu_s and gpu.name != "cpu":
        # Host speed varies by machine far more than GPU speed does (advisor.host_speed): say whose was used.
        step.notes.append(f"host-bound: the CPU's kernel dispatch ({host_s * 1e3:.1f} ms a micro-batch) sets the pace, "
                          f"not the GPU ({gpu_s * 1e3:.1f} ms); host speed {cal.host_source}"
                          + ("; `advise probe` measures this machine's" if cal.host is None else ""))
    nt = step.nt = trainable_params(model, config, step.setups)
    shard = step.shard = strategy.shard(step.world, hw)
    step.opt_s = nt * STREAM_BYTES[config.optimizer] * 1.0 / shard / step.bw
    step.grad_bytes = nt * 4
    step.each("optimizer_terms")  # pure-bf16: bf16 bytes
    step.decoded = hw.input is not None and data_kind(hw.input, model.is_vision, config.image_size) in ("jpeg", "decoded")
    step.each("step_terms")  # the strategy's collectives
    # The memory compromises' own costs (host copies, CPU step, per-parameter steps): each setup's hooks.
    step.host_threads = offload_threads(hw, config)
    extra = compromise_cost(step)
    opt_s = 0.0 if extra.replaces_optimizer_s else step.opt_s if extra.optimizer_s is None else extra.optimizer_s
    step.notes += extra.notes
    exposed, sync = step.exposed, step.sync
    step_s = compute_s + opt_s + exposed + sync + extra.extra_s
    samples = config.micro_batch * config.grad_accum * step.world
    sps = gpu_sps = samples / step_s
    loader = None
    if hw.input is not None and gpu.name != "cpu":
        loader = loader_estimate(hw.input, is_vision=model.is_vision, image_size=config.image_size,
                                 gpu_rate_per_gpu=sps / step.world,
                                 dali_cpu_per_core=(cal.comm or comm_constants()).dali_cpu_per_core, probe=cal.loader_probe)
        if loader.bound and loader.samples_per_s_per_gpu:
            # the GPUs wait for data; the step's exposed collectives and the straggler wait still follow
            step_s = max(step_s, config.micro_batch * config.grad_accum / loader.samples_per_s_per_gpu + exposed + sync)
            sps = samples / step_s
            step.notes.append(f"input-bound: the loader delivers {loader.samples_per_s_per_gpu:,.0f} samples/s per GPU "
                              f"({loader.workers:g} cores x {loader.per_core_samples_per_s:,.0f}/s), the GPUs would "
                              f"take {gpu_sps / step.world:,.0f}; samples/s is the loader's")
    factor = cal.measured.get(calibration_key(gpu.name, model.family, config.precision.value, config.strategy.value,
                                              compile=config.compile, channels_last=config.channels_last))
    if factor:
        sps *= factor
        step_s = samples / sps
        step.notes.append("calibrated on this machine (advise bench)")
    model_flops = model_flops_per_sample(model, config) * sps  # PaLM's: no recompute, LoRA's work only
    tokens = tokens_per_sample(model, config)
    return ThroughputEstimate(
        samples_per_s=sps, step_s=step_s, tokens_per_s=sps * tokens if tokens else None,
        mfu=model_flops / (peak_flops(model, config, hw) * step.world), tflops_per_gpu=model_flops / step.world / 1e12,
        compute_s=compute_s, matmul_s=mm_s * config.grad_accum, gpu_s=gpu_s * config.grad_accum,
        host_s=host_s * config.grad_accum, crossing_s=step.crossing_s * config.grad_accum, comm_s=step.comm, exposed_comm_s=exposed, optimizer_s=opt_s,
        host_bound=host_s > gpu_s, host_speed=cal.host_source, calibrated=bool(factor), notes=step.notes,
        sync_s=sync, comm=step.breakdown, gpu_samples_per_s=gpu_sps if loader is not None else None, loader=loader,
        loader_bound=bool(loader and loader.bound),
    )


def offload_threads(hw: HardwareSpec, config: TrainConfig) -> int:
    """Host threads per rank as launcher.command gives a plan's ranks (advisor.hardware.threads_per_rank): a
    node's cores shared out among the ranks it runs (what CPU offload's host step runs on)."""
    return threads_per_rank(min(setup.strategy_of(config).world(hw), hw.gpus_per_node), hw.cpu_cores)


def tokens_per_sample(model: ModelSpec, config: TrainConfig) -> int | None:
    """Tokens a sample carries (text and ViT; None for others)."""
    if model.is_text or model.family == "vit":
        return model.arch.tokens(config.seq_len or model.default_seq_len, config.image_size) if model.arch else \
            (config.seq_len or model.default_seq_len)
    return None
