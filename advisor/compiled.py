"""What a compiled step's loss keeps: inductor's fused cross-entropy, measured (issue 39).

Eager, the cross-entropy over the vocabulary keeps the fp32 log-softmax of the upcast logits and its backward
holds 8 bytes per logit more (the fp32 gradients of the log-softmax and of the upcast logits; measured on the
LM rows of ``benchmarks/calibration/fit.py``'s table). Compiled, inductor fuses the upcast, the log-softmax and
its backward: the saved tensor is the logits themselves (``advisor.activations.transformer_base_bytes``) and
what the backward adds depends on the code that computes the loss:

* cardwise's own models (``advisor.zoo``: ``F.cross_entropy(logits.reshape(-1, V).float(), ...)``) hold
  ``Calibration.compile_loss_bytes`` per logit, fit on the compiled zoo transformers' peaks of the H200's fit
  rows and issue 39's H100 fit rows (``benchmarks/calibration/fit.fit_memory``); a causal LM's shifted
  logits (``logits[:, :-1]``) add one full-size gradient in the compute dtype: the slice's backward writes
  the gradient into a zero-filled tensor of the unshifted logits' shape (``aten.slice_backward``).
* transformers' models upcast the logits to fp32 inside the model (``logits.float()`` in their
  ``ForCausalLMLoss`` / ``ForMaskedLMLoss``) before the loss, which inductor cannot fuse away across the
  model's output: ``TRANSFORMERS_LOSS_BYTES`` per logit, fit on the H200's compiled HF rows (the
  packaged estimator since issue 16; those rows' implied bytes, 5.2-7.7, in
  ``benchmarks/notebook/2026-12-07-h100-i39``).
"""

from __future__ import annotations

# Compiled transformers' loss backward, bytes per logit (the H200's compiled HF GPT-2, Qwen2, Mistral, BERT
# rows: benchmarks/calibration/results/h200-estimator.md, fit before issue 39 and unchanged by it).
TRANSFORMERS_LOSS_BYTES = 6.0


def compiled_loss_temp_bytes(head: str, compute_bytes: int, transformers: bool, zoo_bytes: float) -> float:
    """Bytes per logit a compiled step's loss backward holds above the saved logits."""
    if transformers:
        return TRANSFORMERS_LOSS_BYTES
    return zoo_bytes + (compute_bytes if head == "lm" else 0.0)
