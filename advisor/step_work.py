"""One micro-step's work by kind of kernel: what the roofline in ``advisor.throughput`` costs.

Each kind runs at its own achievable rate on the GPU (``advisor.throughput.gpu_seconds``):

* ``matmul_flops``: GEMMs (linear layers, bmm) at the dense peak of the matmul dtype; those with a
  model size that is not a multiple of 8 apart, ``matmul_unaligned_flops`` (BERT's 30522-word head),
  or odd, ``matmul_odd_flops`` (GPT-2's 50257-word head: 2-byte aligned rows in bf16);
* ``attn_flops``: fused scaled-dot-product attention (flash / memory-efficient / cuDNN);
* ``conv_flops``: convolutions (cuDNN; fp32 ones run TF32, ``torch.backends.cudnn.allow_tf32`` is
  True by default; channels not a multiple of 8, a 3-channel stem, apart: ``conv_unaligned_flops``), with ``conv_bytes``, the bytes their inputs and outputs move, for the layout
  transposes NCHW tensor-core convolutions add;
* ``dwconv_flops``: depthwise convolutions, direct stencils on CUDA cores, not GEMMs;
* ``bytes``: what every other kernel reads and writes (elementwise, norms, softmax, reductions,
  casts, copies): bandwidth-bound; of them, in traced models, LayerNorm's (``norm_bytes``) and those
  of ops on transposed tensors (``permuted_bytes``) run at rates of their own
  (``advisor.trace_counters``);
* ``bn_block_elems``: training batch norm on an NCHW input, by channel count, the element passes one
  channel's thread block makes (PyTorch's bf16 kernels and cuDNN's fp32/fp16 ones run one block per
  channel: fewer channels than SMs leave SMs idle; ``advisor.trace_counters._bn_block_elems``);
* ``kernels``: launches, each costing the host a dispatch and the GPU a minimum duration; of them
  ``light_kernels`` are pointwise ops and reductions, whose dispatch is cheaper
  (``advisor.trace_counters.light_op``).

Traced models carry this per sample (or per token) in ``TraceProfile.work`` (counted by
``advisor.trace_counters.OpCensus`` over forward, loss and backward). Closed-form transformers
(cardwise's own catalog implementations) get it from their architecture: matmul and attention FLOPs
exactly, bytes as the saved activations times ``Calibration.traffic_per_saved_byte`` and kernels
per layer kind as counted by the tracer on the zoo's layers.
"""

from pydantic import BaseModel, ConfigDict

from advisor.activations import activation_precision, compiled_attention_keeps_probs, shared_activation_profile
from advisor.calibration import Calibration
from advisor.setup.adapters import NF4_BYTES, lora_shapes, quantized_base_params
from advisor.setup.checkpointing import recomputed_share
from advisor.config import Precision, TrainConfig
from advisor.memo import Memo, config_key
from advisor.models import ModelSpec

# Kernels (aten ops that launch) per transformer layer per forward+backward, by layer kind (mlp,
# norm) and traced precision: counted by advisor.tracer on the zoo's layers, and re-counted by
# tests/test_estimator.py::test_kernel_counts_match_the_tracer. HF-style RMSNorm is op-for-op
# (upcast, pow, mean, rsqrt, muls), hence SwiGLU/RMSNorm layers launch about twice as many.
# Autocast's casts of weights and inputs are dispatches of their own: a GELU/LayerNorm layer
# launches 70 under bf16 autocast and 36 without (fp32, pure-bf16). On the H200 the CUDA kernels
# profiled per step agree in direction: vit-b-16 974 bf16 vs 613 fp32, mini-transformer 500 vs 358
# (the host-bound rows' cuda_kernels, benchmarks/calibration/rows.py).
KERNELS_PER_LAYER = {("gelu", "layernorm"): {"bf16": 70, "fp32": 36, "pure-bf16": 36},
                     ("swiglu", "rmsnorm"): {"bf16": 139, "fp32": 105, "pure-bf16": 113}}
KERNELS_BASE = 50  # embeddings, head and loss: 25-48 counted, rounded up
# Of those, the light ones (advisor.trace_counters.light_op: pointwise ops, casts, reductions), counted
# by the tracer on the same layers (test_light_kernel_counts_match_the_tracer): a GELU layer's 26 others
# are its GEMMs (3 per linear), fused attention, LayerNorms and dropouts; a Llama layer has 27 (GQA).
LIGHT_KERNELS_PER_LAYER = {("gelu", "layernorm"): {"bf16": 48, "fp32": 14, "pure-bf16": 14},
                           ("swiglu", "rmsnorm"): {"bf16": 112, "fp32": 78, "pure-bf16": 86}}
LIGHT_KERNELS_BASE = 30  # 12 (GPT-2) to 38 (Llama) counted
# GEMM launches per layer (forward, input gradient and weight gradient of each linear: q, k, v, o and
# the MLP's two or three), and of the head (3, plus 3 for an MLM transform or a pooler), counted by the
# tracer on the zoo's layers (tests/test_estimator.py::test_gemm_counts_match_the_tracer); a ViT's patch
# embedding is one convolution forward and its weight gradient.
GEMMS_PER_LAYER = {("gelu", "layernorm"): 18, ("swiglu", "rmsnorm"): 21}
# The kernels inductor would write between those GEMMs (advisor.trace_counters, _REDUCTION_KERNELS:
# a run of ops between two extern kernels fuses into max(1, its reductions' kernels)), per layer by
# traced precision, and for the embeddings, head and loss (9-13 counted): the tracer on the zoo's
# layers (tests/test_estimator.py::test_fused_kernel_counts_match_the_tracer). Under bf16 autocast
# each weight's cast sits between two GEMMs, a run of its own. On the H200, inductor launched 2.0-2.5x
# these counts in Triton kernels (split reductions, separate weight-gradient reductions), the same
# ratio for CNNs and transformers (benchmarks/notebook/2026-12-04-compiled-host).
FUSED_KERNELS_PER_LAYER = {("gelu", "layernorm"): {"bf16": 16, "fp32": 13, "pure-bf16": 13},
                           ("swiglu", "rmsnorm"): {"bf16": 17, "fp32": 15, "pure-bf16": 15}}
FUSED_KERNELS_BASE = 12
GEMMS_HEAD = {"mlm": 6, "cls": 6, "qa": 3}  # qa: its one projection, forward and two backward GEMMs
# A math-path attention's GEMMs per layer (torch's SDPA math decomposition, compiled): forward QK^T and
# PV, backward dV, dP, dQ and dK. The compiled HF BERT profile (benchmarks/notebook/2026-12-04-kernel-profiles,
# u10-hfbertcls-bf16-compile-64-s256) has 294 GEMMs per step: 342 in its "gemm" group and the 24 fp32
# ones profile_users_rows.py groups as "conv", less 72 cuBLAS splitKreduce kernels; 222 are its linear
# layers' (12 x 6 x 3, pooler and classifier 3 each), 72 = 6 x 12 layers of attention.
MATH_ATTENTION_GEMMS = 6
# and its fused kernels: the scale-mask-softmax-dropout forward and its backward (one each in the same
# profile: triton_per_fused__safe_softmax_..._native_dropout_..., 11-12 calls per step for 12 layers)
MATH_ATTENTION_FUSED = 2
# Fused attention's training FLOPs in forwards' worth: the forward, and a backward that recomputes the
# scores, 2.5x the forward (FlashAttention, Dao 2022).
FLASH_PASSES = 3.5
# bitsandbytes' 4-bit dequantization with double quantization (functional.dequantize_4bit): the nested
# absmax is dequantized first, then the NF4 weights: two launches per projection and pass.
DEQUANT_KERNELS = 2
# peft's LoRA Linear (peft 0.21 tuners/lora/layer.py, Linear.forward), per adapted projection and token, with
# the frozen base in bf16 under bf16 autocast and fp32 adapters (launcher/compromises/lora.py):
#   x = self._cast_input_dtype(x, lora_A.weight.dtype)   bf16 -> fp32 copy of the input: read 2, write 4 per in
#   lora_A(x) under autocast                              fp32 -> bf16 cast: read 4, write 2; the GEMM reads 2
#   lora_B(...)                                           writes the bf16 output: 2 per out
#   * scaling; result + ...                               read 2 write 2; read 4 write 2 per out
# forward: 14 bytes per input element, 12 per output element. Backward: the scaling's mul (4/out), lora_B's
# two GEMMs read the output gradient (4/out), lora_A's weight GEMM reads x and its input-gradient GEMM writes
# it (4/in), the two casts' backward (6/in each), the sum into x's gradient with the base layer's (6/in):
# 22 per input, 8 per output. Checkpointing runs the forward again. Rank-16 GEMMs are this thin: they
# stream their operands like the elementwise ops (the FLOPs are negligible).
LORA_FWD_BYTES_IN, LORA_FWD_BYTES_OUT = 14.0, 12.0
LORA_BWD_BYTES_IN, LORA_BWD_BYTES_OUT = 22.0, 8.0
# Kernels per adapted projection: forward 2 input casts, 2 GEMMs, mul, add, 2 weight casts (autocast, fp32
# adapters); backward mul, 4 GEMMs, 2 casts, the gradient sum, 2 weight-gradient casts back to fp32.
LORA_FWD_KERNELS, LORA_BWD_KERNELS = 8, 10
LORA_LIGHT_KERNELS = 12  # all but the 6 GEMMs: the casts, the mul, the add and the gradient sum
# Prefix of a trace's per-channel batch-norm keys ("bn_nchw|64": element passes per block of 64-channel layers).
BN_NCHW = "bn_nchw|"


class StepWork(BaseModel):
    """Work of one forward + loss + backward on one micro-batch (no optimizer step)."""

    model_config = ConfigDict(extra="forbid")

    matmul_flops: float = 0.0
    matmul_unaligned_flops: float = 0.0
    matmul_odd_flops: float = 0.0
    attn_flops: float = 0.0
    conv_flops: float = 0.0
    conv_unaligned_flops: float = 0.0
    conv_bytes: float = 0.0
    dwconv_flops: float = 0.0
    bytes: float = 0.0
    norm_bytes: float = 0.0  # LayerNorm's kernels (traced): slower than other memory-bound ones
    permuted_bytes: float = 0.0  # elementwise work on transposed tensors (traced): PyTorch's strided kernel
    attn_bytes: float = 0.0  # compiled math-path attention: already fused, not scaled by compile
    matmul_fp32_flops: float = 0.0  # GEMMs on CUDA cores in fp32 whatever the precision (below)
    bn_block_elems: dict[int, float] = {}  # channels -> element passes of a channel's block (NCHW)
    kernels: float = 0.0
    light_kernels: float = 0.0  # of kernels: pointwise ops and reductions (cheaper to dispatch)
    matmul_calls: float = 0.0  # GEMM launches (each leaves a partly idle last wave: advisor.throughput)
    conv_calls: float = 0.0  # implicit-GEMM convolution launches (forward, input and weight gradients)
    dwconv_calls: float = 0.0  # depthwise convolution launches (a compiled step launches them as GEMMs)
    fused_kernels: float = 0.0  # what inductor would launch between the GEMMs/convolutions (advisor.trace_counters)
    traced: bool = False


def _scales(model: ModelSpec, config: TrainConfig) -> tuple[float, float]:
    """(linear, attention) scale of a trace's per-sample figures to this configuration's input:
    pixels scale everything by area; tokens scale linear work by tokens and attention by tokens^2
    (per sample: tokens x keys per query)."""
    t = model.trace
    if t.scales_with == "pixels" and config.image_size and t.ref_input:
        s = (config.image_size / t.ref_input[-1]) ** 2
        return s, s
    if t.scales_with == "tokens" and t.ref_input:
        seq = config.seq_len or model.default_seq_len
        tokens = model.arch.tokens(seq, config.image_size) if model.arch is not None else seq or t.ref_input[0]
        lin = tokens / t.ref_input[0]  # the trace is per sample of ref_input[0] tokens
        return lin, lin * lin
    return 1.0, 1.0


_WORK = Memo()


def shared_step_work(model: ModelSpec, config: TrainConfig, cal: Calibration) -> StepWork:
    """``step_work``, memoised for the estimator (``advisor.memo``): shared, so read-only. The work is one
    micro-batch's on one GPU: the accumulation is not in it, and the strategy only through the
    activations' precision (``advisor.activations.activation_precision``), so the same micro-batch on
    2, 4 or 8 GPUs, with any accumulation, is computed once."""
    key = (activation_precision(config),) + config_key(config, ("grad_accum", "strategy"))
    return _WORK.get((model, cal), key, lambda: step_work(model, config, cal))


def step_work(model: ModelSpec, config: TrainConfig, cal: Calibration) -> StepWork:
    """The micro-step's work (config.micro_batch samples) by kind; checkpointing adds one forward
    (a third of the step's FLOPs and bytes), LoRA drops the frozen weights' gradients (a third of
    the matmul FLOPs)."""
    mb = config.micro_batch
    t = model.trace
    key = config.precision.trace_key
    if t is not None and t.work.get(key):
        w, fixed = t.work[key], t.work_fixed.get(key, {})
        lin, quad = _scales(model, config)
        per = {k: v * (quad if k == "attn_flops" else lin) for k, v in w.items()}
        if model.arch is not None:  # attention FLOPs in closed form (exact at any length)
            per["attn_flops"] = _attention_flops(model, config)
        got = {k: per.get(k, 0.0) * mb + fixed.get(k, 0.0) for k in StepWork.model_fields
               if k not in ("traced", "bn_block_elems")}
        for k in _LAUNCHES:  # launches do not grow with the input
            got[k] = w.get(k, 0.0) * mb + fixed.get(k, 0.0)
        bn = {int(k[len(BN_NCHW):]): v * mb for k, v in per.items() if k.startswith(BN_NCHW)}
        work = StepWork(**got, bn_block_elems=bn, traced=True)
    elif model.arch is not None:
        a = model.arch
        tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size)
        prof = shared_activation_profile(model, config.model_copy(update={"compile": False, "grad_ckpt": False}))
        layer = (a.mlp, a.norm) if (a.mlp, a.norm) in GEMMS_PER_LAYER else ("swiglu", "rmsnorm")  # counted kinds
        head_all = a.head_matmul_params()  # runs on head_tokens of the tokens (all but NVIDIA's BERT pre-training)
        head = a.vocab * a.d_model if a.head in ("lm", "mlm") and a.vocab % 8 else 0  # misaligned LM head
        odd = a.vocab % 2 == 1
        ht = a.head_tokens(tokens)
        aligned = ((a.matmul_params() - head_all) * tokens + (head_all - head) * ht) * mb
        work = StepWork(matmul_flops=6.0 * aligned,
                        matmul_unaligned_flops=0.0 if odd else 6.0 * head * ht * mb,
                        matmul_odd_flops=6.0 * head * ht * mb if odd else 0.0, attn_flops=_attention_flops(model, config) * mb,
                        bytes=prof.per_sample_bytes * mb * cal.traffic_per_saved_byte,
                        kernels=KERNELS_PER_LAYER[layer][key] * a.n_layers + KERNELS_BASE,
                        light_kernels=LIGHT_KERNELS_PER_LAYER[layer][key] * a.n_layers + LIGHT_KERNELS_BASE,
                        fused_kernels=FUSED_KERNELS_PER_LAYER[layer][key] * a.n_layers + FUSED_KERNELS_BASE,
                        matmul_calls=GEMMS_PER_LAYER[layer] * a.n_layers + GEMMS_HEAD.get(a.head, 3),
                        conv_calls=2.0 if a.patch_size else 0.0)
    else:
        raise ValueError(f"model {model.name} has neither an architecture nor a traced step")
    # Compiled, this attention runs the math path (advisor.activations): its work is GEMMs and s x s
    # tensors, added after LoRA's and checkpointing's scalings below, which are for weight GEMMs.
    math_path = config.compile and model.arch is not None and compiled_attention_keeps_probs(model.arch,
                                                                                             model.is_transformers)
    attn_forward = work.attn_flops / FLASH_PASSES if math_path else 0.0  # the forward's QK^T and PV
    if math_path:
        work.attn_flops = 0.0
    lora = config.adapters
    if lora:  # frozen weights: no weight gradients (LoRA's own are tiny)
        _scale(work, _GEMM_WORK, 2.0 / 3.0)
    # The share of the forward backward recomputes: 1 with --grad-ckpt, the checkpointed blocks' share with
    # selective checkpointing (advisor.setup.checkpointing).
    again = recomputed_share(model, config)
    if again:
        fwd = 1.0 / 3.0  # recompute one forward: a third of forward + backward
        # With LoRA the frozen matmuls' backward is the input gradient alone (one forward's FLOPs), so the
        # recomputed forward is half of what is left, not a third.
        _scale(work, _GEMM_WORK, 1 + again * (1.0 / 2.0 if lora else fwd))
        _scale(work, _FORWARD_SHARE_WORK, 1 + again * fwd)
        work.attn_flops *= 1 + again / FLASH_PASSES  # its forward once more
        # the statistics' pass again: one of the four passes a block makes (1 forward, 3 backward)
        work.bn_block_elems = {c: v * (1 + 0.25 * again) for c, v in work.bn_block_elems.items()}
    if lora and model.arch is not None:
        a = model.arch
        tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size) * mb
        shapes = lora_shapes(model)
        fwds = 1 + again
        per_tok = sum(fwds * (LORA_FWD_BYTES_IN * i + LORA_FWD_BYTES_OUT * o) + LORA_BWD_BYTES_IN * i + LORA_BWD_BYTES_OUT * o
                      for i, o in shapes)
        work.bytes += a.n_layers * per_tok * tokens
        work.kernels += a.n_layers * len(shapes) * (fwds * LORA_FWD_KERNELS + LORA_BWD_KERNELS)
        work.light_kernels += a.n_layers * len(shapes) * LORA_LIGHT_KERNELS * (fwds + 1) / 2
        if config.quantize_base:
            # QLoRA: bitsandbytes' MatMul4Bit dequantizes each frozen projection to bf16 before its GEMM, in
            # the forward, the input-gradient backward and a recomputed forward: it reads the NF4 weights and
            # constants and writes the bf16 copy (DEQUANT_KERNELS launches: the nested absmax, then the weights).
            passes = fwds + 1
            work.bytes += quantized_base_params(model) * (NF4_BYTES + 2.0) * passes
            work.kernels += a.n_layers * len(shapes) * DEQUANT_KERNELS * passes
    if math_path:
        _add_math_attention(work, model, config, attn_forward)
    return work


def _add_math_attention(work: StepWork, model: ModelSpec, config: TrainConfig, forward_flops: float) -> None:
    """A compiled math-path attention's work: its GEMMs (forward QK^T and PV, backward dV, dP, dQ and
    dK, no recompute; checkpointing runs the forward's two again) and its s x s tensors' bytes.

    Under autocast the softmax's gradient dS is fp32, so the two GEMMs that read it (dQ, dK: as many
    FLOPs as the forward's two) run fp32 on CUDA cores: the H200 profile of compiled HF BERT (bf16
    autocast, 64 x 256 tokens) shows 24 sm80_xmma_gemm_f32f32_..._ffma kernels per step, two per layer,
    4.63 ms for 24 GEMMs of 2 x 256^2 x 768 x 64 FLOPs, 33 TFLOP/s (benchmarks/notebook/2026-12-04-kernel-profiles,
    u10-hfbertcls-bf16-compile-64-s256). The eager trace counted the attention as one call; compiled, it
    is MATH_ATTENTION_GEMMS launches per layer."""
    a = model.arch
    tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size)
    probs = a.n_layers * a.n_heads * tokens * tokens * config.micro_batch
    forwards = 1.0 + recomputed_share(model, config)
    fp32 = config.precision.autocast
    work.matmul_flops += forward_flops * (forwards + (1.0 if fp32 else 2.0))  # forward(s), dV + dP (+ dQ + dK)
    work.matmul_fp32_flops += forward_flops if fp32 else 0.0  # dQ + dK
    work.matmul_calls += (MATH_ATTENTION_GEMMS + 2 * (forwards - 1)) * a.n_layers
    work.fused_kernels += (MATH_ATTENTION_FUSED + (forwards - 1)) * a.n_layers
    work.attn_bytes += probs * math_attention_bytes(config.precision, forwards)


# GEMM work (LoRA drops a third of it; checkpointing adds the recomputed forward's share), and the other
# work a recomputed forward adds a third of (one forward of forward + backward).
_GEMM_WORK = ("matmul_flops", "matmul_unaligned_flops", "matmul_odd_flops", "matmul_calls")
# Kernel launches of any kind: a traced step's are counted, not scaled with the input's size.
_LAUNCHES = ("kernels", "light_kernels", "matmul_calls", "conv_calls", "dwconv_calls", "fused_kernels")
_FORWARD_SHARE_WORK = ("conv_flops", "conv_unaligned_flops", "bytes", "norm_bytes", "permuted_bytes", "conv_bytes",
                       "dwconv_flops", "kernels", "light_kernels", "conv_calls", "dwconv_calls", "fused_kernels")


def _scale(work: StepWork, fields: tuple[str, ...], factor: float) -> None:
    for f in fields:
        setattr(work, f, getattr(work, f) * factor)


def _attention_flops(model: ModelSpec, config: TrainConfig) -> float:
    """Training FLOPs of attention per sample: 4 s^2 d per layer forward (QK^T and PV), halved when
    causal; backward recomputes the scores, 2.5x the forward (FlashAttention, Dao 2022)."""
    a = model.arch
    tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size)
    return FLASH_PASSES * 4.0 * a.n_layers * a.d_model * tokens * tokens * (0.5 if a.causal else 1.0)


def math_attention_bytes(p: Precision, forwards: float = 1.0) -> float:
    """Bytes a compiled math-path attention moves per probability element (per head, query, key),
    kernel by kernel as inductor fuses them: forward (5c + 1, ``forwards`` times: checkpointing runs it
    twice), the QK^T GEMM writes the scores (c), one fused scale-mask-softmax-dropout kernel reads them
    (c) and writes the probabilities (c), the dropped ones (c) and the bool mask (1), the PV GEMM reads
    the dropped ones (c); backward (7c + 1), the dV GEMM reads them again (c), the dP GEMM writes dP
    (c), one fused dropout-softmax backward reads dP, the mask and the probabilities (2c + 1) and
    writes dS (c), and the dQ and dK GEMMs read dS (2c). Softmax runs in fp32 under autocast
    (torch.amp's fp32 list), so c = 4 there; 2 in pure-bf16."""
    c = p.weight_bytes
    return forwards * (5 * c + 1) + 7 * c + 1
