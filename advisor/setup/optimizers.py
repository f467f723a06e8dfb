"""Optimizers that save memory: bitsandbytes' 8-bit AdamW, its paged variant, and the optimizer step
in backward; with the optimizer-state bytes of every optimizer (the standard AdamW and SGD too).

The semantics are the ones the runtime runs (launcher/compromises/):

* ``adamw``: two fp32 moments, 8 bytes (torch.optim.AdamW, fused); in pure-bf16 the moments are
  bf16 (4 bytes) plus, with the default ``--pure-bf16-update kahan``, one bf16 Kahan compensation
  buffer per parameter (``KahanAdamW``, 2 bytes: Zamirai et al. 2020, "Revisiting BFloat16
  Training", sec. 4); ``--pure-bf16-update plain`` (torch AdamW on bf16 weights) has no buffer.
* ``adamw-8bit``: bitsandbytes ``AdamW8bit``: two uint8 moments plus one fp32 absmax per
  256-element block and moment; tensors under ``min_8bit_size`` = 4096 elements keep fp32 moments
  (bitsandbytes/optim/optimizer.py, ``Optimizer2State.init_state``; Dettmers et al. 2022).
* ``sgd``: one momentum buffer in the weight dtype.
* ``paged-adamw-8bit``: bitsandbytes ``PagedAdamW8bit``: the same states as ``adamw-8bit``,
  allocated in CUDA unified memory (bitsandbytes/functional.py ``get_paged``, cudaMallocManaged),
  so torch's allocator never counts them and the driver pages them to host RAM when the GPU runs
  short (Dettmers et al. 2023, QLoRA, sec. 3 "Paged Optimizers").
* the step in backward: each parameter's optimizer step runs in its post-accumulate-grad hook and
  its gradient is freed at once (PyTorch tutorial "How to save memory by fusing the optimizer step
  into the backward pass"): about one parameter's gradient is alive, never a full buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.compromise_cost import CompromiseCost, compromise_rates
from advisor.config import Optimizer, TrainConfig
from advisor.models import ModelSpec
from advisor.setup.base import Option, Setup

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger, StepLedger

GIB = float(2**30)
# bitsandbytes Optimizer8bit defaults: block size of the blockwise quantisation and the smallest
# tensor that gets 8-bit states (bitsandbytes/optim/optimizer.py: blocks = n // 256 + bool(n % 256),
# min_8bit_size=4096).
BNB_BLOCK = 256
BNB_MIN_8BIT = 4096
# Kahan-compensated AdamW for pure-bf16: one bf16 compensation buffer per parameter
# (launcher/compromises/kahan.py; Zamirai et al. 2020).
KAHAN_BYTES = 2
# Optimizer streaming bytes per trainable parameter: read weight, grad and states, write weight
# and states (fused AdamW: 4+4+8 read, 4+8 write in fp32). 8-bit AdamW and pure-bf16's KahanAdamW do
# not run as one streaming pass: their setups' optimizer_cost models their steps and replaces this one.
STREAM_BYTES = {Optimizer.adamw: 28.0, Optimizer.sgd: 20.0, Optimizer.adamw_8bit: 16.0, Optimizer.paged_adamw_8bit: 16.0}

# --optimizer-in-backward (launcher/compromises/in_backward.py): every parameter has its own optimizer,
# stepped from its post-accumulate-grad hook. Per tensor that adds torch.optim.Optimizer.step's Python
# (profiling hook, _init_group, grouping tensors by device and dtype) and zero_grad, counted as op
# dispatches (rough) ...
IN_BACKWARD_CALL_OPS = 8
# ... plus, for fused AdamW/SGD, the kernels it launched once for all tensors and now launches per
# tensor: the step-count _foreach_add_ and _fused_adamw_ (torch/optim/adamw.py, _fused_adamw).
# KahanAdamW and bitsandbytes already loop per tensor: their own terms below count those launches.
FUSED_KERNELS_PER_CALL = 2

# bitsandbytes AdamW8bit (github.com/bitsandbytes-foundation/bitsandbytes @95f9af30):
# - Optimizer8bit.step (bitsandbytes/optim/optimizer.py) loops over the parameter tensors in Python
#   and calls sync_gpu(p) = torch.cuda.synchronize() after each one: host and GPU never overlap;
# - per tensor the host runs Optimizer2State.update_step: p.data.contiguous(), p.grad.contiguous(),
#   get_config, then torch.ops.bitsandbytes.optimizer_update_8bit_blockwise (a ctypes launch),
#   counted as BNB_HOST_OPS_PER_TENSOR op dispatches with the synchronisation (rough);
# - the kernel (csrc/kernels.cu, kOptimizerStatic8bit2StateBlockwise; csrc/ops.cu: BLOCKSIZE_2STATE
#   256, NUM_2STATE 1) runs one 256-thread block per 256 parameters, one parameter a thread: each
#   block copies both 256-entry quantile maps into shared memory, loads gradient, states and absmax,
#   dequantises by table lookup, updates both moments in fp32, max-reduces each block's new absmax
#   (two BlockReduce), writes the weight and requantises each moment by a 7-step binary search
#   (quantize_2D), ~10 __syncthreads in all. Short latency-bound blocks: it moves 16 bytes per
#   parameter (fp32 gradient and weight read, weight written, two uint8 states read and written)
#   at a small fraction of the memory bandwidth, fit in compromise_rates.json.
BNB_HOST_OPS_PER_TENSOR = 4
BNB_BYTES_PER_PARAM = 16.0



class AdamW8bit(Setup):
    name, flag, kind, family, tier = "adamw-8bit", "--optimizer adamw-8bit", "compromise", "optimizers", "close"
    field, value = "optimizer", Optimizer.adamw_8bit
    summary = "bitsandbytes AdamW8bit: AdamW moments quantized block-wise to 8 bits"
    order, ladder_rank, takes_partners, numerical_risk = 20, 40, True, "quantized-states"
    phrase = "8-bit AdamW"
    label_rank = 1

    def label(self, config, compromise=None, style="short") -> str:
        # the TUI's line names no optimizer but this one (the other lines name every optimizer)
        return f"optimizer {getattr(config.optimizer, 'value', config.optimizer)}" if style == "tui" else ""
    gives_up = ("32-bit optimizer states: AdamW moments quantized block-wise to 8 bits (bitsandbytes AdamW8bit; needs "
                "bitsandbytes; one GPU or DDP, not FSDP)")
    risk = "low-medium: reported at parity with 32-bit Adam (Dettmers et al. 2022); less tested on new recipes"
    source = "Dettmers et al. 2022 (8-bit Optimizers via Block-wise Quantization)"

    def ladder_blocked(self, req, base, model, gpu, refused) -> str | None:
        row = refused(("8bit.not-fsdp",))
        if row is not None:
            return row.why
        if req.optimizer is not None or base.optimizer is not Optimizer.adamw:
            return "the optimizer is pinned" if req.optimizer is not None else f"the family's optimizer is {base.optimizer.value}"
        return None

    paging_word = ""  # the note's first word (paged states)

    def packages(self, config) -> list[tuple[str, str]]:
        return [("bitsandbytes", self.flag)]

    def optimizer_cost(self, step: StepLedger, cost: CompromiseCost) -> None:
        host, kernel = adamw_8bit_step_s(step.nt / step.shard, cost.tensors, step.hw.gpu, cost.launch_us)
        cost.optimizer_s = host + kernel
        cost.notes.append(f"{self.paging_word}8-bit AdamW (bitsandbytes): {cost.tensors} per-tensor steps, each synchronised; "
                          f"~{kernel * 1e3:.0f} ms of blockwise (de)quantising kernels + ~{host * 1e3:.0f} ms on the host")


class PagedAdamW8bit(AdamW8bit):
    name, flag, value = "paged-adamw-8bit", "--optimizer paged-adamw-8bit", Optimizer.paged_adamw_8bit
    summary = "bitsandbytes PagedAdamW8bit: 8-bit moments in CUDA unified memory, paged to host RAM when short"
    order, ladder_rank, phrase = 50, 50, ""
    paging_word = "paged "
    gives_up = ("32-bit optimizer states on the GPU: AdamW moments quantized to 8 bits in CUDA unified memory, paged to "
                "host RAM when the GPU runs short (bitsandbytes PagedAdamW8bit; one GPU or DDP, not FSDP)")
    risk = "low-medium: 8-bit AdamW's arithmetic (Dettmers et al. 2022); paging costs PCIe time when states do not fit"
    source = "Dettmers et al. 2023 (QLoRA, sec. 3: paged optimizers)"

    def resident_terms(self, led: MemoryLedger) -> None:
        if not any(s.host_offload for s in led.setups):
            # Unified memory: not in torch's peak; resident as far as the GPU has room (after_fit).
            led.paged, led.states = led.states, 0.0

    def after_fit(self, led: MemoryLedger) -> None:
        paged = led.paged
        if paged:
            # Paged states fill the room left; the rest is paged out to host RAM while backward needs the GPU and
            # in again for the step (bitsandbytes prefetches each tensor's state before its update).
            resident = min(paged, max(0.0, led.usable_gib - led.device_gib) * GIB)
            led.paged_out = paged - resident
            led.device_gib += resident / GIB
            led.host += led.paged_out
            led.notes.append(f"paged 8-bit AdamW: {paged / GIB:.1f} GiB of optimizer states in CUDA unified memory "
                             f"(not in torch's max_memory_allocated)" + (
                                 f"; ~{led.paged_out / GIB:.1f} GiB of them paged to host RAM and back every step"
                                 if led.paged_out > 0 else ", all resident"))


class OptimizerInBackward(Setup):
    name, flag, kind, family, tier = ("optimizer-in-backward", "--optimizer-in-backward", "compromise", "optimizers",
                                      "close")
    field, value = "optimizer_in_backward", True
    summary = "each parameter steps in its gradient hook and its gradient is freed: no full gradient buffer"
    order, ladder_rank, accum1, single_only, takes_partners, numerical_risk = 30, 60, True, True, True, "no-global-clip"
    accum1_why = "it steps on every backward"
    phrase = "optimizer in backward"
    options = (Option("--optimizer-in-backward", "optimizer_in_backward", "toggle",
                      "step each parameter in its gradient hook (no full gradient buffer; no accumulation)", rank=3),)
    gives_up = ("gradient accumulation and clipping by the global gradient norm: each parameter steps in its "
                "gradient hook as soon as its gradient is ready, and the gradient is freed")
    risk = "medium: no global-norm clipping (per-parameter clipping only); same update otherwise"
    source = "PyTorch tutorial: optimizer step in backward (register_post_accumulate_grad_hook)"

    label_rank = 3

    def label(self, config, compromise=None, style="short") -> str:
        return "optimizer step in backward"

    def ends_grad_moment(self, led: MemoryLedger) -> bool:
        return True

    def gradient_terms(self, led: MemoryLedger) -> None:
        led.live_grads = led.grads = largest_tensor_params(led.model, led.config, led.setups) * led.gb / led.shard
        led.accum_grads = led.live_grads
        led.notes.append("optimizer step in backward: each gradient is freed right after its parameter's step")

    steps_in_backward = True

    def extra_cost(self, step: StepLedger, cost: CompromiseCost) -> None:
        config, opt_s = step.config, step.opt_s
        fused = cost.optimizer_s is None
        per_call = IN_BACKWARD_CALL_OPS + (FUSED_KERNELS_PER_CALL if fused else 0)
        launches = cost.tensors * per_call * cost.launch_us * 1e-6
        if fused:
            cost.opt_host, cost.opt_gpu = 0.0, opt_s
        if cost.opt_host is not None and cost.gpu_s is not None and cost.host_s is not None and config.grad_accum == 1:
            # The hooks run on autograd's thread while backward's kernels are still queued on the GPU, and
            # neither fused AdamW/SGD nor KahanAdamW synchronises (launcher/compromises/in_backward.py): their
            # host time joins the host pipeline that runs ahead of the GPU and their kernels the GPU's, the
            # two combined as any step's (CompromiseCost.with_unsynced). (bitsandbytes synchronises after every
            # tensor: its calls stay added after backward.)
            both = cost.with_unsynced(cost.opt_gpu, cost.opt_host + launches)
            cost.extra_s += both - step.compute_s - (opt_s if fused else cost.optimizer_s)
        else:
            cost.extra_s += launches
        cost.notes.append(f"optimizer step in backward: {cost.tensors} per-parameter optimizer calls "
                          f"(~{launches * 1e3:.0f} ms on the host per step, run while the GPU works through backward)"
                          if cost.opt_host is not None and cost.gpu_s is not None else
                          f"optimizer step in backward: {cost.tensors} per-parameter optimizer calls "
                          f"(~{launches * 1e3:.0f} ms on the host per step)")


OPTIMIZERS: tuple[Setup, ...] = (AdamW8bit(), OptimizerInBackward(), PagedAdamW8bit())


def small_tensor_params(model: ModelSpec, config: TrainConfig) -> int:
    """Trainable parameters in tensors under bitsandbytes' ``min_8bit_size`` (norms, biases)."""
    a = model.arch
    if a is None or config.adapters:
        # LoRA's A and B are r x in and out x r: r x 4096 or more for any model worth adapting.
        return 0
    h, f = a.d_model, a.d_ff
    kv = a.kv_heads * a.head_dim
    per_layer = [h] * (2 * (2 if a.norm == "layernorm" else 1))
    qkv_b = a.bias if a.qkv_bias is None else a.qkv_bias
    if qkv_b:
        per_layer += [h, kv, kv]
    if a.bias:
        per_layer += [h, h] + ([f, f] if a.mlp == "swiglu" else [f])
    small = sum(x for x in per_layer if x < BNB_MIN_8BIT) * a.n_layers
    final = h * (2 if a.norm == "layernorm" else 1)
    return small + (final if h < BNB_MIN_8BIT else 0)


def state_bytes(model: ModelSpec, config: TrainConfig, trainable: int) -> float:
    """Optimizer state bytes over all ``trainable`` parameters (unsharded)."""
    p, opt = config.precision, config.optimizer
    lora = config.adapters
    if opt.eight_bit:
        small = min(trainable, small_tensor_params(model, config))
        big = trainable - small
        return big * (2 + 2 * 4 / BNB_BLOCK) + small * 8
    pure = p.casts_model and not lora  # LoRA adapters stay fp32
    if opt is Optimizer.sgd:
        return trainable * (2 if pure else 4)
    return trainable * ((4 + (KAHAN_BYTES if config.kahan else 0)) if pure else 8)


def largest_tensor_params(model: ModelSpec, config: TrainConfig | None = None, setups: list[Setup] = ()) -> int:
    """Elements of the largest trainable tensor: the one gradient alive when each parameter steps in
    its own hook (the embedding or the LM head of an LLM, an MLP projection otherwise; with adapters,
    the largest adapter matrix: ``Setup.largest_trainable``; ``setups``: the config's active ones)."""
    a = model.arch
    for s in setups:
        n = s.largest_trainable(model, config)
        if n is not None:
            return n
    if a is not None:
        biggest = max(a.d_model * a.d_ff, a.d_model * a.d_model)
        if a.vocab:
            biggest = max(biggest, a.vocab * a.d_model)
        return biggest
    if model.trace is not None and model.trace.largest_unit_params:
        return model.trace.largest_unit_params
    return model.params


def adamw_8bit_kernel_s(params: float, gpu: Any, fraction: float | None = None) -> float:
    """GPU time of bitsandbytes' blockwise 8-bit AdamW kernel over ``params`` parameters: 16 bytes each
    at ``fraction`` of the datasheet bandwidth (scaled per architecture like any bandwidth-bound work;
    the blocks are latency-bound, so this transfer is an assumption). Per parameter, whatever the
    weights' dtype: a bf16 weight takes the same one-thread path through the same block."""
    f = compromise_rates()["bnb_8bit_bandwidth_fraction"] if fraction is None else fraction
    return params * BNB_BYTES_PER_PARAM / (gpu.bandwidth_vs_h200 * f)


def adamw_8bit_step_s(params: float, tensors: int, gpu: Any, launch_us: float) -> tuple[float, float]:
    """(host s, kernel s) of one AdamW8bit step; they add up (a synchronisation after every tensor)."""
    return tensors * BNB_HOST_OPS_PER_TENSOR * launch_us * 1e-6, adamw_8bit_kernel_s(params, gpu)
