"""Model specs: what the estimator needs to know about a network, from any of three sources.

A ``ModelSpec`` is plain data. Transformers carry their architecture (``TransformerArch``), from
which parameter counts and FLOPs are closed-form; every model may carry a ``TraceProfile``:
bytes autograd saves for backward and FLOPs per sample, measured by tracing the module on the
meta device (``advisor.tracer``). Catalog profiles are precomputed into ``data/traced.json`` by
``benchmarks/calibration/trace_catalog.py`` so that looking up a catalog model never imports torch.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# "encoder-decoder": T5/BART-style, both stacks and cross-attention; no closed form, always a trace
# (transformers' class from --hf-config or the catalog's precomputed one, or a --module).
Family = Literal["decoder", "encoder", "encoder-decoder", "vit", "cnn", "custom"]
Head = Literal["lm", "mlm", "cls", "qa", "image-cls", "none"]
# "qa": extractive question answering, a Linear(d_model, num_labels=2) on every token giving the span's start
# and end logits, its loss the mean of two cross-entropies over the positions (transformers'
# BertForQuestionAnswering, modeling_bert.py; DeepLearningExamples PyTorch/LanguageModeling/BERT modeling.py
# BertForQuestionAnswering, what run_squad.py trains). No pooler, no dropout before the projection.
# ce: cross-entropy over the output's last dim; mse: against a target shaped like the output;
# none: the output is the loss (or its mean is); model: the model computes its own (HF labels).
Loss = Literal["ce", "mse", "none", "model"]


class TransformerArch(BaseModel):
    """The shape of a standard transformer (GPT-2, Llama, BERT, ViT style)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int | None = None  # grouped-query attention; None = n_heads
    d_ff: int
    vocab: int = 0  # 0 for ViT
    max_seq: int = 2048
    mlp: Literal["gelu", "swiglu"] = "gelu"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    bias: bool = True  # biases on linear layers (GPT-2/BERT/ViT yes, Llama no)
    qkv_bias: bool | None = None  # Qwen2: bias on q/k/v only; None = same as bias
    positions: Literal["learned", "rope"] = "learned"
    tie_embeddings: bool = False
    causal: bool = True
    # Dropout on the attention probabilities in training (HF attention_probs_dropout_prob / attn_pdrop).
    attn_dropout: float = 0.0
    head: Head = "lm"
    num_labels: int = 2
    type_vocab: int = 0  # BERT token types
    patch_size: int = 0  # ViT
    image_size: int = 0  # ViT default input side
    channels: int = 3
    # Bare backbones (HF BertModel / ViTModel, head "none"): a pooler (dense + tanh on the first
    # token) after the last layer. Head "cls" always has its own pooler; the others never do.
    pooler: bool = False
    # Post-LN layers with no final norm (BERT). None = BERT's heads ("mlm", "cls", "qa") are post-norm.
    post_norm: bool | None = None
    # Positions per sequence the LM/MLM head runs on; None = every token (transformers' BertForMaskedLM,
    # GPT2LMHeadModel). NVIDIA's BERT pre-training gathers the masked positions before its MLM head
    # (DeepLearningExamples PyTorch/LanguageModeling/BERT, modeling.py BertPreTrainingHeads with
    # sequence_output_is_dense, on unless --no_dense_sequence_output): max_predictions_per_seq, 20 of 128
    # tokens in phase 1 and 80 of 512 in phase 2 (scripts/run_pretraining.sh). Left out of dumps when None,
    # so that the packaged traces (advisor/data/traced.json) read as before.
    head_positions: int | None = Field(None, ge=1, exclude_if=lambda v: v is None)

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def is_post_norm(self) -> bool:
        return self.head in ("mlm", "cls", "qa") if self.post_norm is None else self.post_norm

    def tokens(self, seq_len: int | None = None, image_size: int | None = None) -> int:
        """Tokens per sample: the sequence length, or patches (+ class token) for a ViT."""
        if self.patch_size:
            side = (image_size or self.image_size) // self.patch_size
            return side * side + 1
        return seq_len or self.max_seq

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of one block's linear projections: q, k, v, o, then the MLP's (what LoRA adapts and
        what fp8 converts)."""
        h, f, kv = self.d_model, self.d_ff, self.kv_heads * self.head_dim
        mlp = [(h, f), (h, f), (f, h)] if self.mlp == "swiglu" else [(h, f), (f, h)]
        return [(h, h), (h, kv), (h, kv), (h, h)] + mlp

    # ---- parameter counts (exact for the implementations in advisor.zoo and HF/torchvision) ----
    def layer_params(self) -> int:
        h, f, kv = self.d_model, self.d_ff, self.kv_heads * self.head_dim
        qkv_b = self.bias if self.qkv_bias is None else self.qkv_bias
        attn = h * h + 2 * h * kv + h * h  # q, k, v, o
        attn += (h + 2 * kv) * qkv_b + h * self.bias
        mlp = (3 if self.mlp == "swiglu" else 2) * h * f
        mlp += (2 * f + h if self.mlp == "swiglu" else f + h) * self.bias  # gate + up, down
        norms = 2 * h * (2 if self.norm == "layernorm" else 1)
        return attn + mlp + norms

    def embedding_params(self, image_size: int | None = None) -> int:
        h = self.d_model
        if self.patch_size:
            patch = self.channels * self.patch_size**2 * h + h
            return patch + h + self.tokens(image_size=image_size) * h  # conv, class token, positions
        n = self.vocab * h
        if self.positions == "learned":
            n += self.max_seq * h
        if self.type_vocab:
            n += self.type_vocab * h + 2 * h  # token types + embedding LayerNorm (BERT)
        return n

    def head_params(self) -> int:
        h = self.d_model
        final_norm = 0 if self.is_post_norm else h * (2 if self.norm == "layernorm" else 1)
        if self.head == "lm":
            return final_norm + (0 if self.tie_embeddings else self.vocab * h)
        if self.head == "mlm":  # BERT: dense + LayerNorm transform, tied decoder + its bias
            return final_norm + (h * h + h) + 2 * h + (0 if self.tie_embeddings else self.vocab * h) + self.vocab
        if self.head == "cls":  # BERT-style pooler (dense + tanh) and classifier
            return final_norm + (h * h + h) + (h * self.num_labels + self.num_labels)
        if self.head in ("image-cls", "qa"):  # a classifier on the class token / the span projection on every token
            return final_norm + h * self.num_labels + self.num_labels
        return final_norm + ((h * h + h) if self.pooler else 0)

    def params(self) -> int:
        # BERT's heads carry no final norm (its norms are post-LN inside layers): head_params knows.
        return self.embedding_params() + self.n_layers * self.layer_params() + self.head_params()

    def head_tokens(self, tokens: int) -> int:
        """Tokens per sample the LM/MLM head (and its loss) runs on: all of them unless ``head_positions``."""
        return tokens if self.head_positions is None else min(tokens, self.head_positions)

    def head_matmul_params(self) -> int:
        """Of ``matmul_params``, the LM/MLM head's: the vocabulary projection and BERT's dense transform."""
        if self.head not in ("lm", "mlm"):
            return 0
        return self.vocab * self.d_model + (self.d_model**2 if self.head == "mlm" else 0)

    def matmul_params(self) -> int:
        """Parameters that take part in matmuls per token (excludes embeddings, norms, biases)."""
        h, f, kv = self.d_model, self.d_ff, self.kv_heads * self.head_dim
        layer = 2 * h * h + 2 * h * kv + (3 if self.mlp == "swiglu" else 2) * h * f
        n = self.n_layers * layer
        if self.head in ("lm", "mlm"):
            n += self.vocab * h + (h * h if self.head == "mlm" else 0)
        elif self.head == "cls":
            n += h * h + h * self.num_labels
        elif self.head in ("image-cls", "qa"):  # "qa": on every token, as every other matmul here
            n += h * self.num_labels
        elif self.pooler:
            n += h * h
        if self.patch_size:
            n += self.channels * self.patch_size**2 * h
        return n


class TraceProfile(BaseModel):
    """What tracing the module once on the meta device measured, per sample.

    Transformers store per-token coefficients (exactly linear in tokens with memory-efficient
    attention); CNNs and custom modules store per-sample figures at ``ref_input``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ref_input: tuple[int, ...] = Field(description="input shape per sample the trace used")
    scales_with: Literal["tokens", "pixels", "fixed"] = "fixed"
    fwd_flops: float = Field(description="forward FLOPs per sample (or per token)")
    saved_bytes: dict[str, float] = Field(
        description="bytes saved for backward per sample (or token), by traced precision (Precision.trace_key)"
    )
    fixed_saved_bytes: dict[str, float] = Field(
        default_factory=dict, description="saved bytes that do not grow with the batch (autocast weight copies)"
    )
    output_numel: float = Field(0, description="logits elements per sample (or token), for loss temporaries")
    matmul_weight_params: int = Field(0, description="weights that autocast casts (linear/conv)")
    largest_unit_params: int = Field(0, description="biggest block FSDP gathers at once")
    kernels: int = Field(0, description="aten ops launched per forward (eager launch overhead)")
    has_batchnorm: bool = False
    loss: Loss = Field("none", description="loss traced on the output: ce, mse, none, or model (its own)")
    loss_temp_bytes: dict[str, float] = Field(
        default_factory=dict,
        description="per sample (or token), by precision: loss-backward temporaries at the start of backward, or "
                    "the largest gradient pair inside the model's backward, whichever is larger",
    )
    saved_bytes_quadratic: dict[str, float] = Field(
        default_factory=dict, description="per sample, by precision: c in saved = a*tokens + c*tokens^2, where "
                                          "attention falls back to the math path (s x s probabilities kept)"
    )
    fixed_saved_bytes_quadratic: dict[str, float] = Field(
        default_factory=dict, exclude_if=lambda v: not v,
        description="by precision: c in fixed_saved_bytes + c*(tokens^2 - ref^2), what does not grow with the batch "
                    "but with the square of the sequence: an encoder-decoder's [heads, q, k] position bias, which each "
                    "layer's attention keeps (its own copy under autocast); left out of dumps when empty")
    output_bytes: dict[str, float] = Field(
        default_factory=dict, description="per sample (or token), by precision: the output (logits) itself, alive "
                                          "through backward when the training loop keeps it referenced (not assumed)"
    )
    attention: list[str] = Field(default_factory=list, description="SDPA backends a CUDA GPU would run (advisor.sdpa)")
    work: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="per sample (or token), by precision: one training step's work by kernel "
                                          "kind (advisor.trace_counters.OpCensus keys, plus attn_flops)")
    work_fixed: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="by precision: the step's work that does not grow with the batch")
    saved_bytes_compiled: dict[str, float] = Field(
        default_factory=dict, description="per sample, by precision: of saved_bytes, what GEMMs, convolutions and "
                                          "gathers read or write, which a compiled step keeps (it recomputes the rest)")
    grad_moment_fixed: dict[str, float] = Field(
        default_factory=dict, description="by precision: during backward, the most the weight gradients so far "
                                          "put above the saved tensors still alive, at batch 0 (fixed part)")
    grad_moment_per_sample: dict[str, float] = Field(
        default_factory=dict, description="by precision: that moment's change per sample (or token): the saved bytes "
                                          "freed by then, negative")
    layers: int = Field(0, description="repeated layers, when layer_saved_bytes is known")
    layer_saved_bytes: dict[str, float] = Field(
        default_factory=dict, description="per sample (or token), by precision: one layer's share of saved_bytes"
    )


# transformers' model classes whose blocks' projections are ``Conv1D`` (transformers.pytorch_utils: a Linear
# with its weight transposed, not an nn.Linear subclass): the modeling files that build it in transformers 5.25
# (models/gpt2, openai, imagegpt, decision_transformer, clvp), by class-name prefix.
CONV1D_CLASSES = ("GPT2", "OpenAIGPT", "ImageGPT", "DecisionTransformer", "Clvp")


class ModelSpec(BaseModel):
    """One model, whatever its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    family: Family
    params: int
    source: str = Field(description="catalog | hf-config PATH | module SPEC")
    implementation: str = Field(
        "", description="the code whose memory is estimated: 'cardwise zoo', 'transformers GPT2LMHeadModel (sdpa)', "
                        "'closed form (transformers not installed)', 'traced module' ..."
    )
    loss: Loss | None = Field(None, description="the loss the estimate assumes (None: not modelled)")
    description: str = ""
    task: str = Field("", description="what the catalog head does (causal LM, masked LM, 1000-class ...)")
    arch: TransformerArch | None = None
    trace: TraceProfile | None = None
    input_shape: tuple[int, ...] | None = Field(None, description="per-sample input for custom modules")
    input_dtype: str = "float32"
    default_seq_len: int | None = None
    default_image_size: int | None = None

    @property
    def is_text(self) -> bool:
        return self.family in ("decoder", "encoder", "encoder-decoder")

    @property
    def is_vision(self) -> bool:
        return self.family in ("vit", "cnn")

    @property
    def linear_blocks(self) -> bool | None:
        """Whether its blocks' projections are ``nn.Linear``, the only layers torchao's float8 conversion takes
        (``--precision fp8``): cardwise's zoo and most transformers classes build them so; transformers' GPT-2
        family builds them as ``Conv1D``. None where the spec does not say (a closed form, a traced module)."""
        if self.implementation == "cardwise zoo":
            return True
        if self.implementation.startswith("transformers "):
            cls_name = self.implementation.split()[1]
            return not cls_name.startswith(CONV1D_CLASSES)
        return None

    @property
    def is_transformers(self) -> bool:
        """Estimated as transformers builds it (--hf-config, or a catalog transformer for a user's own
        script), not as cardwise's zoo: its compiled attention and its probe factors differ."""
        return self.implementation.startswith("transformers")
