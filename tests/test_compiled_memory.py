"""Compiled memory: what AOTAutograd's partition keeps for SDPA's math path, and the estimator's use of it."""

from __future__ import annotations

import torch
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import FakeTensorMode

from advisor.activations import compiled_math_attention_bytes, transformer_layer_bytes
from advisor.config import Precision
from advisor.models import TransformerArch


def _saved_square_bytes(dropout_p: float, b=1, h=2, s=32, d=8) -> float:
    """Bytes of s x s tensors the min-cut partition saves for backward, per probability element (fp32)."""
    saved = []

    def bw(gm, _):
        for n in gm.graph.nodes:
            v = n.meta.get("val")
            if n.op == "placeholder" and not n.name.startswith("tangents") and isinstance(v, torch.Tensor) \
                    and v.numel() % (s * s) == 0 and v.numel() >= b * h * s * s:
                saved.append(v.numel() * v.element_size())
        return gm

    def f(q, k, v):
        return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, None, dropout_p, False)[0]

    with FakeTensorMode():
        q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
        out = aot_function(f, fw_compiler=lambda gm, _: gm, bw_compiler=bw,
                           partition_fn=min_cut_rematerialization_partition)(q, k, v)
        out.sum().backward()
    return sum(saved) / (b * h * s * s)


def test_partition_keeps_probs_dropped_probs_and_mask_with_dropout():
    assert _saved_square_bytes(0.0) == 4  # the softmax output only
    assert _saved_square_bytes(0.1) == compiled_math_attention_bytes(4) == 9


def test_compiled_bidirectional_dropout_layer_counts_the_square_term():
    bert = TransformerArch(n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab=30522, causal=False,
                           attn_dropout=0.1, head="cls")
    seq = 512
    base = transformer_layer_bytes(bert, Precision.bf16, compiled=True)
    with_probs = transformer_layer_bytes(bert, Precision.bf16, compiled=True, seq=seq)
    assert with_probs - base == 12 * seq * 5
    # eager (fused kernels), no dropout, or causal: nothing quadratic
    assert transformer_layer_bytes(bert, Precision.bf16, seq=seq) == transformer_layer_bytes(bert, Precision.bf16)
    for arch in (bert.model_copy(update={"attn_dropout": 0.0}), bert.model_copy(update={"causal": True})):
        assert transformer_layer_bytes(arch, Precision.bf16, compiled=True, seq=seq) == \
            transformer_layer_bytes(arch, Precision.bf16, compiled=True)


def test_hf_configs_carry_attention_dropout():
    from pathlib import Path

    from advisor.hf_config import spec_from_hf_config

    root = Path(__file__).resolve().parents[1] / "benchmarks/calibration/models/hf"
    assert spec_from_hf_config(root / "bert-cls/config.json").arch.attn_dropout == 0.1
    assert spec_from_hf_config(root / "gpt2/config.json").arch.attn_dropout == 0.1


def test_compiled_transformers_vit_keeps_the_math_paths_fp32_tensors():
    """transformers' bidirectional attention, compiled, runs the math path even without dropout (HF ViT
    on the H200): fp32 probabilities and fp32 q, k, v per layer; the zoo's ViT keeps none of them."""
    from advisor.activations import MATH_PROBS_BYTES, MATH_QKV_BYTES

    vit = TransformerArch(n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab=0, causal=False, head="image-cls",
                          patch_size=16, image_size=224)
    seq = 197
    zoo = transformer_layer_bytes(vit, Precision.bf16, compiled=True, seq=seq)
    assert zoo == transformer_layer_bytes(vit, Precision.bf16, compiled=True)
    hf = transformer_layer_bytes(vit, Precision.bf16, compiled=True, seq=seq, transformers=True)
    assert hf - zoo == 12 * seq * MATH_PROBS_BYTES + 3 * (MATH_QKV_BYTES - 2) * 768
    # causal transformers models keep the fused path (measured: compiled HF GPT-2, Qwen2)
    gpt = vit.model_copy(update={"causal": True, "patch_size": 0, "head": "lm", "vocab": 50257})
    assert transformer_layer_bytes(gpt, Precision.bf16, compiled=True, seq=1024, transformers=True) == \
        transformer_layer_bytes(gpt, Precision.bf16, compiled=True, seq=1024)
