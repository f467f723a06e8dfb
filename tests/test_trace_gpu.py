"""The meta trace keeps what a CUDA training step keeps: fused SDPA, bool dropout masks, composed
activations, the loss. Checked by hand counts and against real CPU autograd runs (same GPU-kernel
stand-ins, real tensors), so that meta-only behaviour cannot hide in the numbers."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from advisor import sdpa  # noqa: E402
from advisor.errors import UserError  # noqa: E402
from advisor.tracer import trace_step  # noqa: E402


def per_sample(model_factory, make_inputs, precision="fp32", loss="none", device="meta"):
    with torch.device(device):
        m = model_factory()
    t1 = trace_step(m, lambda b: make_inputs(b, device), 2, precision, loss=loss)
    t2 = trace_step(m, lambda b: make_inputs(b, device), 3, precision, loss=loss)
    loss = (t2.loss_temp_bytes + t2.held_bytes) - (t1.loss_temp_bytes + t1.held_bytes)
    return t2.saved_bytes - t1.saved_bytes, loss, t2


@pytest.mark.parametrize("dtype,mask,dropout,head_dim,expected", [
    (torch.bfloat16, False, 0.0, 64, "cudnn"),       # sm90 prefers cuDNN (check_prefer_cudnn_attention)
    (torch.bfloat16, False, 0.1, 64, "flash"),       # cuDNN dropout must be a multiple of 1/16
    (torch.bfloat16, True, 0.1, 64, "efficient"),    # flash takes no mask
    (torch.bfloat16, False, 0.0, 256, "flash"),      # cuDNN head dim <= 128 here
    (torch.float32, False, 0.0, 64, "efficient"),    # flash and cuDNN are half only
    (torch.float32, True, 0.1, 6, "math"),           # efficient needs head dim % 4 in fp32
    (torch.float64, False, 0.0, 64, "math"),
])
def test_sdpa_backend_rule(dtype, mask, dropout, head_dim, expected):
    assert sdpa.sdpa_backend(dtype, head_dim, head_dim, mask, dropout, False, 128, 128) == expected


def test_grouped_query_attention_in_fp32_falls_back_to_math():
    """torch 2.11's memory-efficient kernel refuses enable_gqa: fp32 Qwen2 keeps probabilities."""
    assert sdpa.sdpa_backend(torch.float32, 64, 64, False, 0.0, True, 128, 128, gqa=True) == "math"
    assert sdpa.sdpa_backend(torch.bfloat16, 64, 64, False, 0.0, True, 128, 128, gqa=True) == "cudnn"


def test_fused_stand_in_computes_attention_on_cpu():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.randn(2, 1, 16, 16, generator=g)
    out, backend = sdpa.attention(q, k, v, attn_mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert backend == "efficient" and torch.allclose(out, ref, atol=1e-5)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    refs = torch.autograd.grad(ref.sum(), (q, k, v))
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(grads, refs))


E, H, FF, S = 64, 4, 256, 64


def encoder_layer():
    return nn.TransformerEncoderLayer(E, H, FF, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)


def floats(b, device):
    return (torch.randn(b, S, E, device=device),)


def test_encoder_layer_keeps_the_fused_kernels_tensors_by_hand():
    """nn.TransformerEncoderLayer in training, fp32 (memory-efficient SDPA), per token:
    norm1 input 4E + mean/rstd 8; in_proj input 4E; the packed q,k,v copy 12E; SDPA out 4E and
    fp32 lse 4H; out_proj input (the permuted copy) 4E; dropout1 mask E; norm2 input 4E + 8;
    linear1 input 4E; GELU input 4F; dropout mask F; linear2 input 4F; dropout2 mask E.
    The math path would add the s x s probabilities (and a float dropout noise of their size)."""
    saved, _, t = per_sample(encoder_layer, floats)
    assert t.backends == {"efficient"}
    assert saved == S * (38 * E + 9 * FF + 16 + 4 * H)
    bf16, _, t = per_sample(encoder_layer, floats, "bf16")
    assert t.backends == {"flash"}  # dropout 0.1: not cuDNN
    assert bf16 < saved * 0.65


def test_plain_multihead_attention_with_weights_keeps_probabilities():
    """need_weights=True (nn.MultiheadAttention's default) computes the probabilities in Python:
    PyTorch keeps them, and so does the trace: bytes grow with seq squared."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(E, H, dropout=0.1, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x)[0]

    def at(seq):
        return per_sample(Net, lambda b, d: (torch.randn(b, seq, E, device=d),))[0]

    assert at(2 * S) - 2 * at(S) == pytest.approx(H * (2 * S) ** 2 * (4 + 1 + 4) - 2 * H * S**2 * (4 + 1 + 4), rel=0.02)


def test_dropout_keeps_a_bool_mask():
    def net():
        return nn.Sequential(nn.Linear(E, FF), nn.Dropout(0.1), nn.Linear(FF, E))

    with_drop, _, _ = per_sample(net, floats)
    without, _, _ = per_sample(lambda: nn.Sequential(nn.Linear(E, FF), nn.Linear(FF, E)), floats)
    assert with_drop - without == S * FF  # one byte per element; the second linear's input is the dropped copy


class NewGELU(nn.Module):  # transformers' NewGELUActivation (GPT-2's gelu_new), op for op
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def test_composed_tanh_gelu_counts_each_saved_op_under_autocast():
    """bf16 autocast: pow runs in fp32 (keeps the fp32 copy of x, 4), tanh keeps its output (4),
    the last mul keeps 0.5x (bf16, 2) and 1 + tanh (fp32, 4), linear2 keeps its bf16 cast input (2):
    16 bytes per element, against 4 for nn.GELU (its bf16 input and linear2's bf16 input)."""
    def net(act):
        return lambda: nn.Sequential(nn.Linear(E, FF), act(), nn.Linear(FF, E))

    composed, _, _ = per_sample(net(NewGELU), floats, "bf16")
    fused, _, _ = per_sample(net(nn.GELU), floats, "bf16")
    assert composed - fused == S * FF * (16 - 4)


class TinyGPT(nn.Module):
    """nanoGPT-shaped: SDPA(is_causal), tied head, dropout, GELU MLP."""

    def __init__(self, vocab=96, d=32, heads=4, layers=2, dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(64, d)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
                                                       ln2=nn.LayerNorm(d), fc=nn.Linear(d, 4 * d), out=nn.Linear(4 * d, d)))
                                    for _ in range(layers))
        self.drop, self.heads, self.dropout = nn.Dropout(dropout), heads, dropout
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        b, t = idx.shape
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(t, device=idx.device)))
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](x)).split(x.shape[-1], dim=2)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout, is_causal=True)
            x = x + self.drop(blk["proj"](y.transpose(1, 2).contiguous().view(b, t, -1)))
            x = x + self.drop(blk["out"](F.gelu(blk["fc"](blk["ln2"](x)))))
        return self.head(self.ln(x))


class TinyClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(96, E)
        self.enc = nn.TransformerEncoder(encoder_layer(), 2, enable_nested_tensor=False)
        self.head = nn.Linear(E, 3)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(dim=1))


def ids(b, device):
    return (torch.randint(0, 96, (b, S), device=device),)


@pytest.mark.parametrize("factory", [TinyGPT, TinyClassifier])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "pure-bf16"])
def test_meta_trace_equals_a_real_cpu_run(factory, precision):
    """Saved bytes and loss temporaries on meta equal those of real CPU autograd (same stand-ins).
    (The backward's gradient pairs are not compared: the CPU stand-in's backward is Python math.)"""
    torch.manual_seed(0)
    meta = per_sample(factory, ids, precision, loss="ce")
    cpu = per_sample(factory, ids, precision, loss="ce", device="cpu")
    # LayerNorm on bf16 inputs keeps mean and rstd in fp32 on CUDA (the accumulate type,
    # layer_norm_kernel.cu) and on meta, in bf16 on CPU: 2 x 2 bytes per token and LayerNorm.
    norms = sum(isinstance(m, nn.LayerNorm) for m in factory().modules())
    cpu_ln_stats = norms * S * 4 if precision == "pure-bf16" else 0
    assert meta[0] == cpu[0] + cpu_ln_stats
    assert meta[1] == cpu[1]
    assert meta[2].backends == cpu[2].backends


def test_loss_temporaries_by_hand():
    """Cross-entropy: the gradient of its fp32 log-softmax (4) and of the logits, which autocast
    returns in bf16 (2: log-softmax with half_to_float, no fp32 copy), plus the bf16 logits the
    loop holds (2); pure-bf16 stays in bf16; MSE: one fp32 gradient (4, autocast upcasts its input)."""
    vocab = 96
    per = S * vocab
    _, ce, _ = per_sample(TinyGPT, ids, "bf16", loss="ce")
    assert ce == per * (4 + 2 + 2)
    _, ce16, _ = per_sample(TinyGPT, ids, "pure-bf16", loss="ce")
    assert ce16 == per * (2 + 2 + 2)
    _, mse, _ = per_sample(TinyGPT, ids, "bf16", loss="mse")
    assert mse == per * (4 + 2)
    saved_none, none, _ = per_sample(TinyGPT, ids, "bf16", loss="none")
    saved_ce, _, _ = per_sample(TinyGPT, ids, "bf16", loss="ce")
    assert none == 0
    assert saved_ce - saved_none == per * 4 + S * 8  # the fp32 log-softmax kept for backward, int64 targets


def test_ce_needs_a_class_dimension():
    with pytest.raises(UserError) as err:
        per_sample(lambda: nn.Sequential(nn.Linear(E, 1), nn.Flatten(0)), floats, loss="ce")
    assert "--loss" in err.value.message()


def test_backward_gradient_pair_is_a_transient():
    """Inside an MLP's backward hidden-sized gradients are made while others are alive: the pair
    counted is at least one hidden gradient (4 bytes per element in fp32) and at most two; weight
    gradients (model state) are not part of it."""
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(E, FF), nn.GELU(), nn.Linear(FF, E))
    t2, t3 = (trace_step(m, lambda b: floats(b, "meta"), b, "fp32", loss="none") for b in (2, 3))
    per = t3.backward_peak_bytes - t2.backward_peak_bytes
    assert S * FF * 4 <= per <= S * FF * 8
    assert t3.transient_bytes(t2) == per  # no loss temporaries, no held output (loss none)


def test_gradient_pair_counts_only_above_the_saved_tensors_still_alive():
    """A wide block made last in backward (a CNN's stem): by then the saved tensors of every later
    layer are freed, so its gradient pair adds nothing above the saved total; what is left is the
    narrow layers' own pairs (at most two E-wide gradients)."""
    with torch.device("meta"):
        narrow = [m for _ in range(8) for m in (nn.Linear(E, E), nn.GELU())]
        m = nn.Sequential(nn.Linear(E, FF), nn.GELU(), nn.Linear(FF, E), *narrow)
    t2, t3 = (trace_step(m, lambda b: floats(b, "meta"), b, "fp32", loss="none") for b in (2, 3))
    assert t3.saved_bytes - t2.saved_bytes > S * FF * 8  # the later layers saved more than the wide pair
    assert 0 <= t3.backward_peak_bytes - t2.backward_peak_bytes <= S * E * 8
