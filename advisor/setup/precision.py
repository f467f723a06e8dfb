"""Number formats of the step: autocast (fp32 master weights, bf16/fp16 copies of the matmul weights
for the step) and pure bf16 (weights, gradients and optimizer states in bf16), whose AdamW step is
Kahan-compensated (``--pure-bf16-update kahan``, cardwise's KahanAdamW) or plain torch AdamW.

fp32 and tf32 are the standard terms (advisor.config.Precision's weight and compute bytes); autocast's
weight copies are counted with the saved activations (advisor.activations: ``fixed_bytes``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.compromise_cost import CompromiseCost
from advisor.config import Optimizer, Precision, PureBf16Update
from advisor.setup.base import UNMEASURED, Option, Setup

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger, StepLedger

GIB = float(2**30)

# KahanAdamW (launcher/compromises/kahan.py, pure-bf16) steps each tensor with 13 unfused elementwise
# kernels: m.mul_, m.add_; v.mul_, v.addcmul_; sqrt, div, add_(eps); comp.add_ (decay), comp.addcdiv_;
# clone, p.add_, sub_, comp.add_. No synchronisation: the host runs ahead of the GPU.
KAHAN_KERNELS_PER_TENSOR = 13
# Bytes those kernels read and write per bf16 parameter, in the same order: 4+6, 4+6, 4+4+4, 6+8,
# 4+6+6+6 (each kernel streams its operands: 2 bytes each).
KAHAN_BYTES_PER_PARAM = 68.0


class Autocast(Setup):
    name, flag, kind, family = "autocast", "--precision bf16|fp16", "precision", "precision"
    field = "precision"
    summary = "fp32 master weights; matmuls in bf16/fp16 on per-step copies of the weights"

    def on(self, config) -> bool:
        return config.precision.autocast


class PureBf16(Setup):
    name, flag, kind, family, tier = "pure-bf16", "--precision pure-bf16", "compromise", "precision", "close"
    field, value = "precision", Precision.pure_bf16
    summary = ("weights, gradients and optimizer states in bf16; the AdamW update Kahan-compensated "
               "(--pure-bf16-update kahan) or plain")
    variants = tuple(u.value for u in PureBf16Update)
    phrase = "pure-bf16"
    options = (Option("--pure-bf16-update", "pure_bf16_update", "choice",
                      "with --precision pure-bf16: kahan = cardwise's KahanAdamW (default), "
                      "plain = torch AdamW on bf16 weights (what model.to(torch.bfloat16) scripts run)", after="--optimizer"),)
    order, ladder_rank, lower_partner, numerical_risk = 10, 30, True, "compensated-bf16"
    gives_up = ("fp32 master weights: weights, gradients and AdamW states in bf16, the update compensated "
                "(Kahan summation, cardwise's KahanAdamW)")
    risk = "low-medium: Kahan-compensated bf16 updates track fp32 closely; plain bf16 would round small updates away"
    source = "Zamirai et al. 2020 (Revisiting BFloat16 Training)"

    def starting_notes(self, req, config) -> list[str]:
        if req.pure_bf16_update is None and config.optimizer is Optimizer.adamw:
            return ["pure-bf16 update kahan (cardwise's KahanAdamW; --pure-bf16-update plain for torch AdamW on bf16 weights)"]
        return []

    def pins(self, config) -> dict[str, object]:
        # only plain is written: kahan is the default, and the flag needs --precision pure-bf16
        plain = self.on(config) and config.pure_bf16_update is PureBf16Update.plain
        return {"pure_bf16_update": config.pure_bf16_update if plain else None}

    def ladder_blocked(self, req, base, model, gpu, refused) -> str | None:
        if req.precision is not None or not gpu.supports_bf16:
            return "the precision is pinned" if req.precision is not None else f"{gpu.name} has no bf16"
        return None

    def risk_class(self, config) -> str:
        # stepped by bitsandbytes' 8-bit AdamW or by --pure-bf16-update plain: uncompensated (what
        # launcher.compromises builds)
        if config.optimizer.eight_bit or config.pure_bf16_update is PureBf16Update.plain:
            return "uncompensated-bf16"
        return self.numerical_risk

    def gives_up_in(self, config) -> str:
        # Kahan-compensated only with cardwise's KahanAdamW; with bitsandbytes' 8-bit AdamW (what
        # launcher.compromises builds) or with --pure-bf16-update plain the bf16 weights take the update
        # uncompensated
        if config.optimizer.eight_bit:
            return ("fp32 master weights: weights and gradients in bf16, stepped by bitsandbytes' "
                    f"{'Paged' if config.optimizer is Optimizer.paged_adamw_8bit else ''}AdamW8bit without "
                    "compensation: updates below bf16's resolution round away")
        if config.pure_bf16_update is PureBf16Update.plain:
            return ("fp32 master weights: weights, gradients and AdamW states in bf16, plain torch AdamW "
                    "(--pure-bf16-update plain): updates below bf16's resolution round away")
        return self.gives_up

    def bytes_terms(self, led: MemoryLedger) -> None:
        led.gb = 2  # gradients in the weight dtype

    def describe(self, led: MemoryLedger) -> None:
        config = led.config
        led.notes.append(
            "pure-bf16: weights, gradients and optimizer states in bf16, updates compensated (Kahan summation)"
            if config.kahan else
            f"pure-bf16 with bitsandbytes' {config.optimizer.value}: bf16 weights and gradients, 8-bit states, "
            "no compensation (updates below bf16's resolution round away)" if config.optimizer.eight_bit else
            "pure-bf16 with SGD: weights, gradients and momentum in bf16, no compensation"
            if config.optimizer is Optimizer.sgd else
            "pure-bf16 with plain torch AdamW (--pure-bf16-update plain): weights, gradients and optimizer "
            "states in bf16, no compensation buffer (updates below bf16's resolution round away)")

    def optimizer_terms(self, step: StepLedger) -> None:
        step.opt_s *= 0.5  # the optimizer's streaming pass moves bf16, half the fp32 bytes
        step.grad_bytes = step.nt * 2

    def optimizer_cost(self, step: StepLedger, cost: CompromiseCost) -> None:
        config = step.config
        if config.kahan and not config.adapters:
            host, gpu = kahan_step_s(step.nt / step.shard, cost.tensors, step.bw, cost.launch_us, step.cal.gpu_kernel_us)
            cost.optimizer_s = max(host, gpu)
            cost.opt_host, cost.opt_gpu = host, gpu
            if cost.gpu_s is not None and cost.host_s is not None and not cost.in_backward:
                # Nothing synchronises between backward and the step (clip_grad_norm_ keeps the norm on the
                # device): the host launches the step's kernels while the GPU still works through backward.
                cost.optimizer_s = cost.with_unsynced(gpu, host) - step.compute_s
            cost.notes.append(f"KahanAdamW: {KAHAN_KERNELS_PER_TENSOR} unfused kernels per tensor x {cost.tensors} "
                              f"(~{gpu * 1e3:.0f} ms on the GPU, ~{host * 1e3:.0f} ms of launches)")
        elif config.optimizer is Optimizer.adamw and config.pure_bf16_update is PureBf16Update.plain:
            # --pure-bf16-update plain: torch's fused AdamW over bf16 weights, grads and moments, the one
            # streaming pass throughput.py already charges (half the fp32 bytes).
            cost.notes.append("pure-bf16 with plain torch AdamW (--pure-bf16-update plain): one fused pass over bf16, "
                              "no Kahan compensation")


def kahan_step_s(params: float, tensors: int, bw: float, launch_us: float, gpu_kernel_us: float) -> tuple[float, float]:
    """(host s, GPU s) of one KahanAdamW step; the slower sets the pace (no synchronisation)."""
    kernels = tensors * KAHAN_KERNELS_PER_TENSOR
    return kernels * launch_us * 1e-6, params * KAHAN_BYTES_PER_PARAM / bw + kernels * gpu_kernel_us * 1e-6



# --- fp8: torchao float8 Linears inside bf16 autocast -----------------------------------------------------
# What the runtime converts (launcher.model_setups): the Linear layers of the repeated blocks whose in and out
# features are multiples of 16 (torch._scaled_mm's requirement, torchao's _auto_filter_for_recipe); the head
# and embeddings stay bf16 under autocast, as torchtitan leaves its output projection.
FP8_DIM_MULTIPLE = 16
# torchao's tensorwise dynamic cast of one tensor, eager, op by op (torchao/float8/float8_utils.py tensor_to_amax,
# amax_to_scale; float8_training_tensor.py _ToFloat8ConstrFunc, to_fp8_saturated), bytes per element of a bf16
# input: abs (read 2, write 2), max (read 2), .to(float32) (read 2, write 4), * scale (read 4, write 4), clamp
# (read 4, write 4), .to(float8) (read 4, write 1) = 33. An fp32 weight skips the upcast and reads 4 in abs/max:
# 4+4+4 + 4+4 + 4+4 + 4+1 = 33 as well.
FP8_CAST_BYTES = 33.0
# Kernels of one eager cast: abs, max, .to(float32), mul, clamp, .to(float8), and amax_to_scale's float64 upcast,
# clamp, division and float32 downcast on the one-element amax.
FP8_CAST_KERNELS = 10
# Casts per Linear per micro-batch (float8_linear.py matmul_with_hp_or_float8_args): forward input and weight;
# backward grad_output twice (dim0 for grad_input, dim1 for grad_weight), the weight again and the input again.
# _scaled_mm wants its second operand column-major: grad_weight's two operands are transposed copies (1 byte
# read and written per element each, torchao float8_ops' `.t().contiguous().t()`).
FP8_CASTS_ACT, FP8_CASTS_WEIGHT, FP8_CASTS_GRAD = 2, 2, 2
FP8_TRANSPOSE_BYTES = 2.0


def fp8_linears(model) -> list[tuple[int, int]]:
    """(in, out) features of every Linear the runtime converts to float8, all layers (catalog transformers)."""
    a = model.arch
    if a is None:
        return []
    per = [(i, o) for i, o in a.linear_shapes() if i % FP8_DIM_MULTIPLE == 0 and o % FP8_DIM_MULTIPLE == 0]
    return per * a.n_layers


class Fp8(Setup):
    name, flag, kind, family = "fp8", "--precision fp8", "precision", "precision"
    field, value = "precision", Precision.fp8
    order = 5  # a precision: after autocast, before the compromises
    summary = ("bf16 autocast with fp32 master weights; the blocks' Linear layers run their three GEMMs in float8 "
               "(torchao convert_to_float8_training, tensorwise dynamic scaling; compute capability >= 8.9). Never "
               "chosen for the user: its numerical risk (e4m3/e5m2 casts of activations and gradients) is the user's "
               "call, `--precision fp8`")

    def activation_terms(self, led: MemoryLedger) -> None:
        # torchao's matmul_with_hp_or_float8_args saves the bf16 input and a view of the fp32 weight for backward
        # (ctx.save_for_backward(input_hp, weight_hp_t)), so a converted Linear keeps no bf16 weight copy; the
        # Linears left to autocast (head) keep theirs. The saved inputs are what autocast's F.linear saves.
        # Compiled, the partitioner may keep the 1-byte casts instead (torchao's prototype/float8nocompile README:
        # float8 + compile peaks 12% under bf16 eager on Llama3 8B); unmeasured here, counted as eager.
        a = led.model.arch
        if a is not None:
            converted = sum(i * o for i, o in fp8_linears(led.model))
            led.copies = 2.0 * max(0, a.matmul_params() - converted)

    def gradient_terms(self, led: MemoryLedger) -> None:
        # In backward one Linear at a time holds its casts: grad_output's two fp8 copies and its fp32 scaled
        # temporary (the largest operand, 4 bytes), the input's and the weight's fp8 copies.
        lin = fp8_linears(led.model)
        if not lin:
            return
        tokens = led.prof.tokens * led.config.micro_batch
        casts = max(tokens * (4 * max(i, o) + 2 * o + i) + i * o * 5 for i, o in lin)
        led.detail["fp8_casts_gib"] = casts / GIB
        led.temps = max(led.temps, casts)

    def describe(self, led: MemoryLedger) -> None:
        led.notes.append(f"fp8: {len(fp8_linears(led.model))} Linear layers in float8 (torchao, tensorwise); fp32 "
                         "master weights, no bf16 weight copies for them; the head stays bf16")

    def dispatch_terms(self, step: StepLedger) -> None:
        """The converted Linears' GEMMs at the float8 rate instead of bf16's, plus torchao's eager casts."""
        fp8_step = fp8_step_change(step.model, step.config, step.hw.gpu, step.cal)
        step.gpu_s += fp8_step.gpu_s
        step.host_s += fp8_step.host_s
        step.notes.extend(fp8_step.notes)


@dataclass
class Fp8Step:
    gpu_s: float = 0.0  # change of one micro-batch's GPU time (negative: faster)
    host_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def fp8_step_change(model, config, gpu, cal) -> Fp8Step:
    """One micro-batch's change under fp8: each converted Linear's 6 x tokens x in x out FLOPs (plus a recomputed
    forward's share) move from bf16's rate to float8's (the datasheet's dense fp8 peak times the GEMM efficiency
    fit by benchmarks/calibration/fit_fp8_selective.py), and its six eager casts stream their bytes and launch
    their kernels (compiled: inductor fuses each cast into one kernel, FP8_CAST_KERNELS -> 1, bytes read once and
    written once: 3 per element)."""
    from advisor.gpu_perf import work_kind
    from advisor.setup.checkpointing import recomputed_share

    lin = fp8_linears(model)
    if not lin:
        return Fp8Step()
    rates = fp8_rates()
    tokens = model.arch.tokens(config.seq_len or model.default_seq_len, config.image_size) * config.micro_batch
    gemm = (6.0 + 2.0 * recomputed_share(model, config)) * tokens * sum(i * o for i, o in lin)
    e = cal.rate_efficiency["matmul|tensor"]
    bf16 = gpu.matmul_flops("bf16") * gpu.fraction_vs_h200(work_kind(gpu, "bf16", conv=False)) * e
    fp8 = gpu.matmul_flops("fp8") * gpu.fraction_vs_h200(work_kind(gpu, "bf16", conv=False)) * e * rates["fp8_gemm_efficiency"]
    acts = sum((FP8_CASTS_ACT * i + FP8_CASTS_GRAD * o) * tokens for i, o in lin)
    weights = sum(FP8_CASTS_WEIGHT * i * o for i, o in lin)
    per_elem = 3.0 if config.compile else FP8_CAST_BYTES
    cast_bytes = per_elem * (acts + weights) + FP8_TRANSPOSE_BYTES * sum((i + o) * tokens for i, o in lin)
    kernels = len(lin) * (FP8_CASTS_ACT + FP8_CASTS_WEIGHT + FP8_CASTS_GRAD) * (1 if config.compile else FP8_CAST_KERNELS)
    bw = gpu.bandwidth_vs_h200 * cal.rate_efficiency["bytes"]
    # Eager, the casts' cost counted op by op times the factor fit on measured eager rows (1.0 before any)
    casts = 1.0 if config.compile else rates.get("fp8_eager_cast_factor", 1.0)
    gpu_s = gemm / fp8 - gemm / bf16 + casts * (cast_bytes / bw + kernels * cal.gpu_kernel_us * 1e-6)
    light_us = cal.launch_us if cal.light_launch_us is None else cal.light_launch_us
    host_s = 0.0 if config.compile else casts * kernels * light_us * 1e-6 * cal.host_factor
    notes = [] if config.compile else [
        f"fp8 eager: torchao's {kernels:,} cast kernels a micro-batch ({cast_bytes / 1e9:.0f} GB) cost "
        f"{casts * (cast_bytes / bw) * 1e3:.0f} ms against {(gemm / bf16 - gemm / fp8) * 1e3:.0f} ms the float8 GEMMs save; "
        "--compile fuses them"]
    if str(rates.get("source", "")).startswith("prior"):  # what the estimate rests on until a GPU has measured it
        notes.append(f"fp8 speed {UNMEASURED}: float8 GEMMs at the same share of their datasheet peak as "
                     "bf16's (advisor/data/fp8_rates.json's prior; benchmarks/gpu_checks/fp8_selective.py measures it)")
    return Fp8Step(gpu_s, host_s, notes)


@lru_cache(maxsize=1)
def fp8_rates() -> dict:
    """The float8 GEMM efficiency (benchmarks/calibration/fit_fp8_selective.py writes advisor/data/fp8_rates.json)."""
    return json.loads(FP8_RATES.read_text())


FP8_RATES = Path(__file__).resolve().parents[1] / "data" / "fp8_rates.json"
PRECISIONS: tuple[Setup, ...] = (Autocast(), PureBf16(), Fp8())


def precision_text(config) -> str:
    """The configuration's number formats in words (the decision tree's answers)."""
    return {
        Precision.bf16: "bf16 autocast with fp32 master weights",
        Precision.fp16: "fp16 autocast + GradScaler with fp32 master weights",
        Precision.pure_bf16: ("pure bf16 (weights and states in bf16, "
                              + ("plain AdamW update)" if config.pure_bf16_update is PureBf16Update.plain
                                 # bitsandbytes steps the bf16 weights itself: no compensation (PureBf16.risk_class)
                                 else "uncompensated 8-bit update)" if config.optimizer.eight_bit
                                 else "Kahan-compensated update)")),
        Precision.fp32: "fp32",
        Precision.tf32: "tf32 matmuls, fp32 storage",
        Precision.fp8: "fp8 Linears (torchao float8) in bf16 autocast with fp32 master weights",
    }[config.precision]
