"""Dispatch-level counters for ``advisor.tracer``: kernels launched, the bytes autograd saves and
frees, and the largest pair of gradients produced in a row during backward (a transient on top of
the saved tensors still alive)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from advisor.step_work import BN_NCHW


class KernelCounter(TorchDispatchMode):
    """Counts aten ops that would launch a kernel (views and metadata ops do not)."""

    _FREE = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "reshape", "squeeze", "unsqueeze",
             "slice", "select", "alias", "as_strided", "detach", "split", "chunk", "unbind", "empty_like",
             "empty", "new_empty", "lift_fresh", "_to_copy_meta"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] not in self._FREE:
            self.count += 1
        return func(*args, **(kwargs or {}))


class SavedTensors:
    """``saved_tensors_hooks`` that measure what autograd saves for backward (parameters apart:
    model state) and, during backward, what it has freed: a node frees the saved tensors it was
    the last to use once it has run (``released``)."""

    def __init__(self, param_storages: set[int]):
        self.params = param_storages
        self.bytes: dict[int, int] = {}
        self.integral: set[int] = set()  # storages of integer or bool saved tensors (indices, masks)
        self.users: dict[int, int] = {}  # nodes that saved each storage and have not run their backward
        self._node, self._pending, self._done = None, 0, 0  # storages the running node uses last

    def total(self) -> int:
        return sum(self.bytes.values())

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st._cdata not in self.params:
            self.bytes[st._cdata] = st.nbytes()
            if not t.is_floating_point():
                self.integral.add(st._cdata)
            self.users[st._cdata] = self.users.get(st._cdata, 0) + 1
        return t

    def unpack(self, t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        if self.users.get(key):
            self.users[key] -= 1
            if not self.users[key]:  # its last user is running: freed once that node is done
                node = _running_node()
                if node is not self._node:
                    self._node, self._pending, self._done = node, 0, self.released()
                self._pending += self.bytes[key]
        return t

    def released(self) -> int:
        """Saved bytes freed so far."""
        return self._done + (self._pending if _running_node() is not self._node else 0)


_NO_NODE = object()


def _running_node():
    """The autograd node whose backward is running (torch._C._current_autograd_node); where torch
    lacks it, one object that stands for every node, so nothing counts as freed."""
    current = getattr(torch._C, "_current_autograd_node", None)
    return current() if current is not None else _NO_NODE


class BackwardPeak(TorchDispatchMode):
    """During backward, once the model's output has its gradient: the largest pair of consecutive
    ops' new outputs (a gradient being produced while the one it is made from is alive), the
    transient inside a layer's backward (an MLP's widest gradients), counted as what it adds to the
    saved tensors still alive at that moment: ``peak`` is the most bytes it puts above all of them.

    ``released()`` gives the saved bytes autograd has freed so far: those whose last user, a node
    that has finished, unpacked them. A CNN's widest gradients come last in backward (the stem's, at full resolution),
    when the saved activations of every later layer are gone: they add nothing to the peak."""

    def __init__(self, armed: bool, param_shapes: set, released=lambda: 0):
        super().__init__()
        self.armed = armed
        self.param_shapes = param_shapes  # weight gradients are model state, counted elsewhere
        self.released = released
        self.peak = 0
        self._last = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.armed:
            inputs = {a.untyped_storage()._cdata for a in args if isinstance(a, torch.Tensor)}
            outs = out if isinstance(out, (tuple, list)) else (out,)
            new = sum(o.untyped_storage().nbytes() for o in outs
                      if isinstance(o, torch.Tensor) and o.untyped_storage()._cdata not in inputs
                      and tuple(o.shape) not in self.param_shapes)
            if new:  # views and weight gradients do not break a pair
                self.peak = max(self.peak, self._last + new - self.released())
                self._last = new
        return out


# aten ops whose FLOPs run on tensor cores (or CUDA cores in fp32) as GEMMs, and convolutions.
_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm"}
_CONV = {"convolution", "_convolution", "cudnn_convolution", "convolution_overrideable", "convolution_backward"}
# Gathers read only the rows they return, not the whole table they index.
_GATHER = {"embedding", "index_select", "gather"}
# The compute-intensive ops: their own kinds of work, the dearer dispatch, and what a compiled step keeps.
_HEAVY_OPS = _MATMUL | _CONV | _GATHER
# Training batch norm, forward (statistics, then the transform) and backward, on NCHW inputs: both
# kernels that run it on CUDA reduce each channel in one thread block. bf16 inputs get PyTorch's own
# (at::native::_batch_norm_impl_index: use_cudnn requires non-bf16 input and weight), launched with
# one block per channel (Normalization.cuh, batch_norm_stats_cuda_template and
# batch_norm_backward_cuda_template: blocks(input.size(1))); fp32 and fp16 (with fp32 weights) get
# cuDNN's bn_fw_tr_1C11 / bn_bw_1C11 kernels, per channel as well (the H200 profiles,
# benchmarks/notebook/2026-12-04-kernel-profiles). A block streams its channel's N x H x W elements
# alone: with fewer channels than SMs most SMs idle. The census keeps, by channel count (key
# "bn_nchw|C"), the element passes one block makes: statistics read x once, backward reads x and dy
# and writes dx. Channels-last inputs run kernels spread over all SMs and are not kept.
_BN_FWD = {"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
           "_batch_norm_with_update", "_batch_norm_with_update_functional"}
_BN_BWD = {"native_batch_norm_backward", "batch_norm_backward"}


def _bn_block_elems(name: str, args) -> tuple[int, float] | None:
    """(channels, element passes one channel's block makes) of a training batch norm on an NCHW input,
    else None."""
    x = args[1] if name in _BN_BWD else args[0]
    if not isinstance(x, torch.Tensor) or x.dim() < 3 or not x.is_floating_point() or not x.is_contiguous():
        return None
    if name in _BN_FWD and not name.startswith("_batch_norm_with_update"):  # these always train
        if not any(a is True for a in args[3:6] if isinstance(a, bool)):  # the training flag: eval has no statistics
            return None
    passes = 3 if name in _BN_BWD else 1
    return x.shape[1], passes * x.numel() / x.shape[1]


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)


def _nbytes(x) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(x))


def _misaligned(dims) -> bool:
    """Sizes that are not multiples of 8 elements: tensor cores want 16-byte aligned rows (NVIDIA,
    "Matrix Multiplication Background User's Guide", "Tensor Core Requirements"; nanoGPT pads
    GPT-2's vocabulary 50257 to 50304 for this); cuBLAS and cuDNN fall back to slower kernels."""
    return any(d % 8 for d in dims)


# Ops whose dispatch costs the host more than a pointwise op's: GEMMs and convolutions (autocast's
# cached weight casts, cuBLAS/cuDNN heuristics and plan lookups), gathers, and the composite kernels
# of norms, softmax, dropout and losses; the rest (pointwise arithmetic, casts, copies, reductions)
# are "light". HF Llama-style layers are mostly light ops (RMSNorm and rotary embeddings written op
# by op): per layer they dispatch twice the ops of a GELU/LayerNorm layer but not twice its host time
# (the SwiGLU rows of benchmarks/calibration/fit.py's table).
_HEAVY_WORDS = ("norm", "softmax", "dropout", "loss", "nll", "attention", "embedding")


# LayerNorm's kernels, forward and backward: in the H200 profiles of the encoder classifier and HF BERT
# they moved the census's bytes at 0.26-0.34 of the datasheet bandwidth (1.2-1.6 TB/s), ConvNeXt's at
# 0.10-0.19, where the elementwise kernels reach 0.87 (benchmarks/notebook/2026-12-04-kernel-profiles/census_vs_profile.py), so their
# bytes are a kind of their own (``norm_bytes``).
_NORM_OPS = {"native_layer_norm", "native_layer_norm_backward"}


def _order(t: torch.Tensor) -> tuple[int, ...]:
    """The tensor's dimensions from outermost to innermost in memory (those it spans: size > 1)."""
    dims = [i for i, size in enumerate(t.shape) if size > 1]
    return tuple(sorted(dims, key=lambda i: -t.stride(i)))


def mixed_layouts(args, out) -> bool:
    """An op whose full-size operands lie in memory in different orders: a copy from a transposed tensor
    to a contiguous one (``.contiguous()``, a reshape that cannot view), an add of a transposed tensor
    and a contiguous one. PyTorch's TensorIterator cannot reorder such an iteration into a contiguous
    one, so it runs its legacy strided kernel (CUDALoops.cuh, launch_legacy_kernel with an
    OffsetCalculator: an offset computed per element through every dimension), at 0.26-0.27 of the
    bandwidth in the H200 profiles of the encoder classifier (nn.MultiheadAttention's head permutes:
    ``permuted_bytes``; benchmarks/notebook/2026-12-04-kernel-profiles/census_vs_profile.py). Operands
    that share one permuted order (an elementwise op on a transposed tensor, whose output follows its
    input's layout) iterate contiguously and are not counted; broadcast operands are not compared."""
    outs = list(_tensors(out))
    if not outs:
        return False
    shape = outs[0].shape
    orders = {_order(t) for t in _tensors([args, out]) if t.shape == shape and t.numel() > 1
              and all(st != 0 or size == 1 for size, st in zip(t.shape, t.stride()))}
    return len(orders) > 1


# What a compiled step launches between its GEMMs and convolutions (``fused_kernels``): inductor fuses
# the pointwise ops between two extern kernels (GEMMs, convolutions, fused attention: each its own
# launch, a fusion boundary) into one kernel, and gives a reduction over another shape a kernel of its
# own, with the pointwise ops around it fused in (torch/_inductor/scheduler.py: nodes fuse when one
# reads what the other writes and their loops match). So each run of ops between two extern ops costs
# max(1, its reductions' kernels); the kernels a reduction takes, by aten op: LayerNorm's backward
# reduces over rows (dx) and over columns (dweight, dbias); training batch norm reduces (statistics,
# or the two gradient sums) then transforms; an embedding's backward zeroes its table and scatters.
# The tracer's fused attention makes its outputs with metadata ops (advisor.sdpa.FusedAttention), so it
# closes no run here; a layer's ops around it are views on one side, so the count is the same.
_REDUCTION_KERNELS = {
    "native_layer_norm": 1, "native_layer_norm_backward": 2, "_softmax": 1, "_safe_softmax": 1,
    "_log_softmax": 1, "_softmax_backward_data": 1, "_log_softmax_backward_data": 1,
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "var": 1, "var_mean": 1, "std": 1,
    "norm": 1, "linalg_vector_norm": 1, "logsumexp": 1, "cumsum": 1, "nll_loss_forward": 1, "nll_loss_backward": 1,
    "embedding_dense_backward": 2, "max_pool2d_with_indices_backward": 1, "native_group_norm": 1,
    "native_group_norm_backward": 2, **dict.fromkeys(_BN_FWD | _BN_BWD, 2)}


def light_op(name: str) -> bool:
    """A pointwise or reduction op: its dispatch is the cheap kind (see _HEAVY_WORDS)."""
    return name not in _HEAVY_OPS and not any(w in name for w in _HEAVY_WORDS)


class OpCensus(TorchDispatchMode):
    """One step's work by kind of kernel, as a roofline needs it: GEMM FLOPs, convolution FLOPs
    (depthwise ones apart: they run as direct stencils on CUDA cores, not GEMMs) with the bytes their
    inputs and outputs move, and the bytes every other launching op reads and writes (its tensor
    arguments and results: elementwise, norms, softmax, reductions, copies, casts), and the launches:
    all of them, the light ones, and the GEMMs and convolution passes (each pays a wave's tail). FLOPs
    are torch.utils.flop_counter's formulas; fused SDPA kernels are counted by the tracer, not here."""

    KEYS = ("matmul_flops", "matmul_unaligned_flops", "matmul_odd_flops", "conv_flops", "conv_unaligned_flops", "conv_bytes",
            "dwconv_flops", "bytes", "norm_bytes", "permuted_bytes", "kernels", "light_kernels", "matmul_calls", "conv_calls",
            "dwconv_calls", "fused_kernels")

    def __init__(self, param_dims: set[int] = frozenset()):
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        # A GEMM is misaligned when a size it takes from the model (vocabulary, width, classes) is:
        # the batch sizes of a trace (2, 3) are not what a GPU runs, so they are not judged.
        self.param_dims = {d for d in param_dims if d % 8}
        self._flops = flop_registry
        self.work = dict.fromkeys(self.KEYS, 0.0)
        # Storages that GEMMs, convolutions and gathers read or write: what inductor's partitioner
        # keeps for backward when it compiles the step (it recomputes pointwise ops and norms from
        # them, never the compute-intensive ops: torch/_functorch/partitioners.py).
        # Kept by storage id with the storage itself: held, a freed temporary's id cannot come back as
        # another (saved) storage's, which made the sum depend on the allocator's reuse.
        self.heavy_io: dict[int, torch.UntypedStorage] = {}
        # the run of ops since the last extern one: (its reductions' kernels, the kernels counted for it)
        self._run: tuple[float, float] | None = None

    def _fuse(self, name: str) -> None:
        """Counts what inductor would launch for this op (``fused_kernels``, _REDUCTION_KERNELS)."""
        if name in _MATMUL or name in _CONV or "attention" in name:
            self._run = None  # an extern kernel: the run before it is closed
            return
        reductions, counted = self._run or (0.0, 0.0)
        reductions += _REDUCTION_KERNELS.get(name, 0)
        kernels = max(1.0, reductions)
        self.work["fused_kernels"] += kernels - counted
        self._run = (reductions, kernels)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.__name__.split(".")[0]
        if name in KernelCounter._FREE:
            return out
        w = self.work
        w["kernels"] += 1
        self._fuse(name)
        if light_op(name):
            w["light_kernels"] += 1
        packet = func._overloadpacket
        if name in _HEAVY_OPS:
            self.heavy_io.update((st._cdata, st) for st in (t.untyped_storage() for t in _tensors([args, out])))
        if name in _MATMUL:
            flops = self._flops[packet](*args, **kwargs, out_val=out)
            dims = {d for a in args if isinstance(a, torch.Tensor) and a.dim() >= 2 for d in a.shape[-2:]}
            bad = dims & self.param_dims
            # an odd size leaves 2-byte aligned rows in bf16, cuBLAS's slowest kernels; even ones 4+ bytes
            w["matmul_odd_flops" if any(d % 2 for d in bad) else "matmul_unaligned_flops" if bad else "matmul_flops"] += flops
            w["matmul_calls"] += 1
        elif name in _CONV:
            moved = _nbytes(args[:3]) + _nbytes(out)
            bwd = name == "convolution_backward"  # (grad_out, input, weight, ..., groups, output_mask)
            groups = (args[9] if bwd else args[8]) if len(args) > 8 else kwargs.get("groups", 1)
            weight = args[2] if bwd else args[1]
            if isinstance(groups, int) and groups > 1 and weight.shape[1] == 1:  # depthwise
                # 2 k^2 FLOPs per output element and pass (forward; input and weight gradients):
                # torch.utils.flop_counter's backward formula ignores groups (32x too many here).
                taps = 2 * weight[0].numel()
                w["dwconv_flops"] += taps * (args[0].numel() * sum(bool(m) for m in args[10][:2]) if bwd else out.numel())
                w["dwconv_calls"] += sum(bool(m) for m in args[10][:2]) if bwd else 1
            else:
                flops = self._flops[packet](*args, **kwargs, out_val=out)
                w["conv_unaligned_flops" if _misaligned(weight.shape[:2]) else "conv_flops"] += flops
                w["conv_bytes"] += moved
                # a backward runs one implicit GEMM per gradient it computes (input, weight)
                w["conv_calls"] += sum(bool(m) for m in args[10][:2]) if bwd else 1
        elif name in _GATHER:
            w["bytes"] += 2 * _nbytes(out) + _nbytes([a for a in args if isinstance(a, torch.Tensor)
                                                       and not a.is_floating_point()])
        else:
            moved = _nbytes(args) + _nbytes(list(kwargs.values())) + _nbytes(out)
            kind = "norm_bytes" if name in _NORM_OPS else \
                "permuted_bytes" if mixed_layouts(args, out) else "bytes"
            w[kind] += moved
            block = _bn_block_elems(name, args) if name in _BN_FWD or name in _BN_BWD else None
            if block is not None:  # its per-channel blocks besides its bytes
                key = f"{BN_NCHW}{block[0]}"
                w[key] = w.get(key, 0.0) + block[1]
        return out
