"""PyTorch implementations of the catalog models, for tracing, recipes and benchmarks.

Each matches its public counterpart's parameter count exactly (HF transformers for GPT-2, Llama,
Qwen2 and BERT; torchvision for ViT and ResNet) so that what we measure is what users train.
Attention goes through ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on
GPU), as HF's ``attn_implementation="sdpa"`` does.

``build_trainable(spec)`` returns a module whose ``forward(inputs, targets)`` is the loss, and
``synthetic_batch`` makes matching inputs, so every recipe and the tracer share one path.
Importing this module imports torch; the catalog itself never does.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from advisor.models import ModelSpec, TransformerArch


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm, op for op: its saved tensors are the same on every device (``F.rms_norm``
    has a fused CUDA kernel in recent torch that saves less, so meta traces would not match)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def _norm(arch: TransformerArch, dim: int) -> nn.Module:
    return nn.LayerNorm(dim, eps=1e-5) if arch.norm == "layernorm" else RMSNorm(dim)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, arch: TransformerArch):
        super().__init__()
        h, kv = arch.d_model, arch.kv_heads * arch.head_dim
        qkv_bias = arch.bias if arch.qkv_bias is None else arch.qkv_bias
        self.arch = arch
        self.q = nn.Linear(h, h, bias=qkv_bias)
        self.k = nn.Linear(h, kv, bias=qkv_bias)
        self.v = nn.Linear(h, kv, bias=qkv_bias)
        self.o = nn.Linear(h, h, bias=arch.bias)

    def forward(self, x, rope=None):
        b, s, _ = x.shape
        a = self.arch
        q = self.q(x).view(b, s, a.n_heads, a.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, a.kv_heads, a.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, a.kv_heads, a.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = _rope(q, *rope), _rope(k, *rope)
        if a.kv_heads != a.n_heads:  # HF repeat_kv: expand + reshape (a copy autograd does not save)
            rep = a.n_heads // a.kv_heads
            k = k[:, :, None].expand(b, a.kv_heads, rep, s, a.head_dim).reshape(b, a.n_heads, s, a.head_dim)
            v = v[:, :, None].expand(b, a.kv_heads, rep, s, a.head_dim).reshape(b, a.n_heads, s, a.head_dim)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        return self.o(y.transpose(1, 2).reshape(b, s, a.d_model))


class MLP(nn.Module):
    def __init__(self, arch: TransformerArch):
        super().__init__()
        h, f = arch.d_model, arch.d_ff
        self.swiglu = arch.mlp == "swiglu"
        self.up = nn.Linear(h, f, bias=arch.bias)
        self.gate = nn.Linear(h, f, bias=arch.bias) if self.swiglu else None
        self.down = nn.Linear(f, h, bias=arch.bias)

    def forward(self, x):
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm (GPT-2, Llama, ViT) or post-norm (BERT) transformer layer."""

    def __init__(self, arch: TransformerArch, post_norm: bool):
        super().__init__()
        self.post_norm = post_norm
        self.norm1 = _norm(arch, arch.d_model)
        self.attn = Attention(arch)
        self.norm2 = _norm(arch, arch.d_model)
        self.mlp = MLP(arch)

    def forward(self, x, rope=None):
        if self.post_norm:
            x = self.norm1(x + self.attn(x, rope))
            return self.norm2(x + self.mlp(x))
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """Decoder LM, BERT-style encoder, or ViT, by ``arch``."""

    def __init__(self, arch: TransformerArch, image_size: int | None = None):
        super().__init__()
        self.arch = arch
        h = arch.d_model
        self.vit = arch.patch_size > 0
        self.post_norm = arch.is_post_norm  # BERT family: post-LN layers, no final norm
        self.grad_ckpt = False
        if self.vit:
            self.patch = nn.Conv2d(arch.channels, h, arch.patch_size, stride=arch.patch_size)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, h))
            self.pos = nn.Parameter(torch.zeros(1, arch.tokens(image_size=image_size), h))
        else:
            self.embed = nn.Embedding(arch.vocab, h)
            self.pos = nn.Embedding(arch.max_seq, h) if arch.positions == "learned" else None
            self.types = nn.Embedding(arch.type_vocab, h) if arch.type_vocab else None
            self.embed_norm = nn.LayerNorm(h, eps=1e-12) if arch.type_vocab else None
        self.blocks = nn.ModuleList(Block(arch, self.post_norm) for _ in range(arch.n_layers))
        if arch.head == "mlm":
            self.transform = nn.Linear(h, h)
            self.transform_norm = nn.LayerNorm(h, eps=1e-12)
            self.decoder_bias = nn.Parameter(torch.zeros(arch.vocab))
            self.lm_head = None if arch.tie_embeddings else nn.Linear(h, arch.vocab, bias=False)
        elif arch.head == "cls":
            self.pooler = nn.Linear(h, h)
            self.classifier = nn.Linear(h, arch.num_labels)
        else:
            self.final_norm = None if self.post_norm else _norm(arch, h)
            if arch.head == "lm":
                self.lm_head = None if arch.tie_embeddings else nn.Linear(h, arch.vocab, bias=False)
            elif arch.head == "image-cls":
                self.classifier = nn.Linear(h, arch.num_labels)
            elif arch.head == "qa":  # BertForQuestionAnswering's qa_outputs: start/end logits of every token
                self.qa_outputs = nn.Linear(h, arch.num_labels)
            elif arch.pooler:  # bare backbone (HF BertModel / ViTModel): pooled first token
                self.pooler = nn.Linear(h, h)

    def _rope_tables(self, s: int, device, dtype):
        a = self.arch
        inv = 1.0 / (500000.0 ** (torch.arange(0, a.head_dim, 2, device=device, dtype=torch.float32) / a.head_dim))
        ang = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos().to(dtype), ang.sin().to(dtype)

    def forward(self, inputs):
        a = self.arch
        if self.vit:
            x = self.patch(inputs).flatten(2).transpose(1, 2)
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
            rope = None
        else:
            s = inputs.shape[1]
            x = self.embed(inputs)
            if self.pos is not None:
                x = x + self.pos(torch.arange(s, device=inputs.device))
            if self.types is not None:
                x = x + self.types(torch.zeros_like(inputs))
            if self.embed_norm is not None:
                x = self.embed_norm(x)
            rope = self._rope_tables(s, x.device, x.dtype) if a.positions == "rope" else None
        for blk in self.blocks:
            if self.grad_ckpt and self.training:
                x = checkpoint(blk, x, rope, use_reentrant=False)
            else:
                x = blk(x, rope)
        if a.head == "mlm":
            x = self.transform_norm(F.gelu(self.transform(x)))
            w = self.embed.weight if self.lm_head is None else self.lm_head.weight
            return F.linear(x, w, self.decoder_bias)
        if a.head == "cls":
            return self.classifier(torch.tanh(self.pooler(x[:, 0])))
        if self.final_norm is not None:
            x = self.final_norm(x)
        if a.head == "image-cls":
            return self.classifier(x[:, 0])
        if a.head == "qa":
            return self.qa_outputs(x)
        if a.head == "none":  # backbone: the hidden states (and pooled first token, as HF returns)
            return torch.tanh(self.pooler(x[:, 0])) if a.pooler else x
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w)


# ---------------------------------------------------------------- ResNet (torchvision layout)
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + idt)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.down = None
        if stride != 1 or cin != width:
            self.down = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + idt)


RESNET_LAYERS = {
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet34": (BasicBlock, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
    "resnet101": (Bottleneck, (3, 4, 23, 3)),
    "resnet152": (Bottleneck, (3, 8, 36, 3)),
}


class ResNet(nn.Module):
    def __init__(self, name: str, num_classes: int = 1000):
        super().__init__()
        block, counts = RESNET_LAYERS[name]
        self.grad_ckpt = False
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, n in enumerate(counts):
            width = 64 * 2**i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.ModuleList(stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = checkpoint(stage, x, use_reentrant=False) if self.grad_ckpt and self.training else stage(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------- loss wrapper and inputs
class Trainable(nn.Module):
    """``forward(inputs, targets) -> loss``: the network plus its task's loss."""

    def __init__(self, net: nn.Module, spec: ModelSpec):
        super().__init__()
        self.net = net
        self.family = spec.family
        self.shift = spec.arch is not None and spec.arch.head == "lm"
        self.span = spec.arch is not None and spec.arch.head == "qa"

    def forward(self, inputs, targets):
        logits = self.net(inputs)
        if self.span:  # targets [B, 2]: each sequence's answer start and end; the mean of the two cross-entropies
            start, end = logits.float().unbind(-1)  # as transformers' BertForQuestionAnswering computes its loss
            return (F.cross_entropy(start, targets[:, 0]) + F.cross_entropy(end, targets[:, 1])) / 2
        if self.shift:  # next-token prediction: logits[t] predicts targets[t + 1]
            logits, targets = logits[:, :-1], targets[:, 1:]
        # Cross-entropy in fp32 as HF does (upcast logits), the costliest temporary of LLM training.
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    def set_grad_checkpointing(self, on: bool = True) -> None:
        self.net.grad_ckpt = on


def build_network(spec: ModelSpec, image_size: int | None = None) -> nn.Module:
    if spec.arch is not None:
        return Transformer(spec.arch, image_size=image_size)
    if spec.name in RESNET_LAYERS:
        return ResNet(spec.name)
    raise ValueError(f"no built-in implementation for {spec.name}; use --module")


def build_trainable(spec: ModelSpec, image_size: int | None = None) -> Trainable:
    return Trainable(build_network(spec, image_size), spec)


def synthetic_batch(spec: ModelSpec, batch: int, seq_len: int | None = None, image_size: int | None = None,
                    device="cpu", dtype=torch.float32, generator: torch.Generator | None = None):
    """Random inputs and targets of the right shape and range for ``spec``."""
    if spec.is_vision:
        side = image_size or spec.default_image_size or 224
        x = torch.randn(batch, 3, side, side, device=device, dtype=dtype, generator=generator)
        y = torch.randint(0, 1000, (batch,), device=device, generator=generator)
        return x, y
    a = spec.arch
    s = seq_len or spec.default_seq_len or 128
    x = torch.randint(0, a.vocab, (batch, s), device=device, generator=generator)
    if a.head == "cls":
        y = torch.randint(0, a.num_labels, (batch,), device=device, generator=generator)
    elif a.head == "qa":  # an answer span's start and end positions
        y = torch.randint(0, s, (batch, 2), device=device, generator=generator)
    else:
        y = torch.randint(0, a.vocab, (batch, s), device=device, generator=generator)
    return x, y


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """GPT-2 style init for built-in transformers (normal(0, 0.02)); convs keep Kaiming."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
