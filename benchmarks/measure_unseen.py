"""Unseen configurations of the users' models (issue 16's throughput bar), measured like the rest.

Every row here is declared *holdout* before it is measured: no calibration constant is ever fit
on it (benchmarks/fit_calibration.py fits "fit" rows only). They are new batch sizes, precisions and
compile choices of the models in ``benchmarks/users_models/``, so they check the roofline on
configurations it was not fitted on. Measurement is ``measure_users_models.py``'s, unchanged (same
loop, timing, header); only the table of configurations differs.

On one H200 (about 4 minutes: 12 eager rows of ~12 s and one compiled row of ~70 s):

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 benchmarks/measure_unseen.py --out $OUT/h200-users-unseen.jsonl --budget-s 230
    ... measure_unseen.py --set u2 --out $OUT/h200-users-unseen2.jsonl     # the second set (UNSEEN2)
    ... measure_unseen.py --set u3 --out $OUT/h200-users-unseen3.jsonl     # the third set (UNSEEN3)
    ... measure_unseen.py --set u4 --out $OUT/h200-users-unseen4.jsonl     # the fourth set (UNSEEN4)
    ... measure_unseen.py --set u5 --out $OUT/h200-users-unseen5.jsonl     # the fifth set (UNSEEN5)
    ... measure_unseen.py --set u6 --out $OUT/h200-users-unseen6.jsonl     # the sixth set (UNSEEN6)
    ... measure_unseen.py --set u7 --out $OUT/h200-users-unseen7.jsonl     # the seventh set, drawn at random
    ... measure_unseen.py --set u8 --out $OUT/h200-users-unseen8.jsonl     # the eighth set, drawn at random
    ... measure_unseen.py --set u9 --out $OUT/h200-users-unseen9.jsonl     # the ninth set, drawn at random

Copy the JSONL to ``benchmarks/results/h200-users-unseen.jsonl``; ``benchmarks/fit_calibration.py``
reads it next to ``h200-users.jsonl`` (holdout: judged, never fit) and ``python benchmarks/predict_users.py``
reports it. ``--set u1|u2`` picks the table (u1 default). ``--predict FILE`` (CPU, no measurement) writes what ``advise estimate`` predicts for every
row now, before any measurement: ``results/h200-users-unseen-predicted.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure_users_models as mum  # noqa: E402

# (id, model, micro_batch, seq_len, image_size, precision, compile, split): all holdout, none measured yet.
UNSEEN = [
    ("u-enc-bf16-32", "encoder_classifier", 32, 512, None, "bf16", False, "holdout"),
    ("u-enc-fp32-128", "encoder_classifier", 128, 512, None, "fp32", False, "holdout"),
    ("u-nanogpt-bf16-8", "nanogpt", 8, 1024, None, "bf16", False, "holdout"),
    ("u-nanogpt-pure-8", "nanogpt", 8, 1024, None, "pure-bf16", False, "holdout"),
    ("u-unet-bf16-64", "unet", 64, None, 256, "bf16", False, "holdout"),
    ("u-unet-fp32-8", "unet", 8, None, 256, "fp32", False, "holdout"),
    ("u-convnext-bf16-32", "convnext", 32, None, 224, "bf16", False, "holdout"),
    ("u-convnext-fp32-64", "convnext", 64, None, 224, "fp32", False, "holdout"),
    ("u-hfgpt2-bf16-16", "hf-gpt2", 16, 1024, None, "bf16", False, "holdout"),
    ("u-hfbertcls-bf16-64", "hf-bert-cls", 64, 512, None, "bf16", False, "holdout"),
    ("u-hfbertmlm-bf16-8", "hf-bert-mlm", 8, 512, None, "bf16", False, "holdout"),
    ("u-hfqwen2-bf16-4", "hf-qwen2-0.5b", 4, 2048, None, "bf16", False, "holdout"),
    ("u-convnext-bf16-compile-64", "convnext", 64, None, 224, "bf16", True, "holdout"),
]

# The second set (2026-12-04, after the host-speed work): two models never measured before (a
# hand-written EfficientNet-B0 module, an HF Mistral config with grouped-query attention), and the
# earlier models at sequence lengths and image sizes no row had. Its predictions were written
# (--predict) and committed before the call that measured it.
UNSEEN2 = [
    ("u2-effnet-bf16-32", "efficientnet", 32, None, 224, "bf16", False, "holdout"),
    ("u2-effnet-bf16-256", "efficientnet", 256, None, 224, "bf16", False, "holdout"),
    ("u2-effnet-fp32-128", "efficientnet", 128, None, 224, "fp32", False, "holdout"),
    ("u2-effnet-pure-128", "efficientnet", 128, None, 224, "pure-bf16", False, "holdout"),
    ("u2-mistral-bf16-1", "hf-mistral-small", 1, 2048, None, "bf16", False, "holdout"),
    ("u2-mistral-bf16-8", "hf-mistral-small", 8, 2048, None, "bf16", False, "holdout"),
    ("u2-mistral-pure-4", "hf-mistral-small", 4, 2048, None, "pure-bf16", False, "holdout"),
    ("u2-enc-bf16-64-s256", "encoder_classifier", 64, 256, None, "bf16", False, "holdout"),
    ("u2-nanogpt-bf16-32-s512", "nanogpt", 32, 512, None, "bf16", False, "holdout"),
    ("u2-unet-bf16-32-i128", "unet", 32, None, 128, "bf16", False, "holdout"),
    ("u2-convnext-fp32-96-i160", "convnext", 96, None, 160, "fp32", False, "holdout"),
    ("u2-hfgpt2-bf16-8-s512", "hf-gpt2", 8, 512, None, "bf16", False, "holdout"),
    ("u2-hfbertcls-fp32-16-s128", "hf-bert-cls", 16, 128, None, "fp32", False, "holdout"),
    ("u2-hfbertmlm-bf16-64-s128", "hf-bert-mlm", 64, 128, None, "bf16", False, "holdout"),
    ("u2-hfqwen2-pure-2-s4096", "hf-qwen2-0.5b", 2, 4096, None, "pure-bf16", False, "holdout"),
    ("u2-effnet-bf16-compile-128", "efficientnet", 128, None, 224, "bf16", True, "holdout"),
    ("u2-mistral-bf16-compile-4", "hf-mistral-small", 4, 2048, None, "bf16", True, "holdout"),
    ("u2-enc-bf16-compile-64-s256", "encoder_classifier", 64, 256, None, "bf16", True, "holdout"),
]

# The third set (2026-12-04, after the batch-norm, layout and light-op changes the second set's
# errors prompted): three models never measured before (a hand-written VGG-11 with batch norm, HF
# ViTForImageClassification, HF LlamaForCausalLM at TinyLlama's size) and new sizes of the earlier
# ones. Predictions written (--predict) and committed before the call that measured it.
UNSEEN3 = [
    ("u3-vgg-bf16-64", "vgg_bn", 64, None, 224, "bf16", False, "holdout"),
    ("u3-vgg-fp32-32", "vgg_bn", 32, None, 224, "fp32", False, "holdout"),
    ("u3-vgg-pure-128", "vgg_bn", 128, None, 224, "pure-bf16", False, "holdout"),
    ("u3-vgg-bf16-8", "vgg_bn", 8, None, 224, "bf16", False, "holdout"),
    ("u3-hfvit-bf16-64", "hf-vit", 64, None, 224, "bf16", False, "holdout"),
    ("u3-hfvit-fp32-16", "hf-vit", 16, None, 224, "fp32", False, "holdout"),
    ("u3-hfvit-pure-128", "hf-vit", 128, None, 224, "pure-bf16", False, "holdout"),
    ("u3-tinyllama-bf16-1", "hf-tinyllama", 1, 2048, None, "bf16", False, "holdout"),
    ("u3-tinyllama-bf16-4", "hf-tinyllama", 4, 2048, None, "bf16", False, "holdout"),
    ("u3-tinyllama-pure-8-s1024", "hf-tinyllama", 8, 1024, None, "pure-bf16", False, "holdout"),
    ("u3-effnet-bf16-64-i192", "efficientnet", 64, None, 192, "bf16", False, "holdout"),
    ("u3-effnet-fp32-32-i256", "efficientnet", 32, None, 256, "fp32", False, "holdout"),
    ("u3-unet-fp32-16-i192", "unet", 16, None, 192, "fp32", False, "holdout"),
    ("u3-convnext-bf16-48-i192", "convnext", 48, None, 192, "bf16", False, "holdout"),
    ("u3-enc-fp32-32-s384", "encoder_classifier", 32, 384, None, "fp32", False, "holdout"),
    ("u3-nanogpt-pure-12-s768", "nanogpt", 12, 768, None, "pure-bf16", False, "holdout"),
    ("u3-hfbertcls-bf16-32-s256", "hf-bert-cls", 32, 256, None, "bf16", False, "holdout"),
    ("u3-hfqwen2-bf16-8-s1024", "hf-qwen2-0.5b", 8, 1024, None, "bf16", False, "holdout"),
    ("u3-vgg-bf16-compile-64", "vgg_bn", 64, None, 224, "bf16", True, "holdout"),
    ("u3-tinyllama-bf16-compile-2", "hf-tinyllama", 2, 2048, None, "bf16", True, "holdout"),
]

# The fourth set (2026-12-04, after the backward gradient moment that the third set's VGG rows
# prompted; the throughput model is the third set's): new sizes and precisions of every users' model,
# eager. Predictions written (--predict) and committed before the call that measured it.
UNSEEN4 = [
    ("u4-vgg-bf16-32-i160", "vgg_bn", 32, None, 160, "bf16", False, "holdout"),
    ("u4-vgg-fp32-8", "vgg_bn", 8, None, 224, "fp32", False, "holdout"),
    ("u4-hfvit-bf16-16", "hf-vit", 16, None, 224, "bf16", False, "holdout"),
    ("u4-hfvit-fp32-64", "hf-vit", 64, None, 224, "fp32", False, "holdout"),
    ("u4-hfvit-pure-32", "hf-vit", 32, None, 224, "pure-bf16", False, "holdout"),
    ("u4-tinyllama-bf16-2-s1024", "hf-tinyllama", 2, 1024, None, "bf16", False, "holdout"),
    ("u4-tinyllama-pure-1", "hf-tinyllama", 1, 2048, None, "pure-bf16", False, "holdout"),
    ("u4-effnet-pure-64-i160", "efficientnet", 64, None, 160, "pure-bf16", False, "holdout"),
    ("u4-effnet-bf16-16", "efficientnet", 16, None, 224, "bf16", False, "holdout"),
    ("u4-unet-bf16-64-i160", "unet", 64, None, 160, "bf16", False, "holdout"),
    ("u4-unet-pure-32-i192", "unet", 32, None, 192, "pure-bf16", False, "holdout"),
    ("u4-convnext-fp32-32", "convnext", 32, None, 224, "fp32", False, "holdout"),
    ("u4-convnext-pure-64", "convnext", 64, None, 224, "pure-bf16", False, "holdout"),
    ("u4-enc-bf16-32-s384", "encoder_classifier", 32, 384, None, "bf16", False, "holdout"),
    ("u4-enc-pure-64-s256", "encoder_classifier", 64, 256, None, "pure-bf16", False, "holdout"),
    ("u4-nanogpt-bf16-8-s768", "nanogpt", 8, 768, None, "bf16", False, "holdout"),
    ("u4-hfgpt2-fp32-4-s512", "hf-gpt2", 4, 512, None, "fp32", False, "holdout"),
    ("u4-hfbertmlm-fp32-8-s256", "hf-bert-mlm", 8, 256, None, "fp32", False, "holdout"),
    ("u4-mistral-pure-2", "hf-mistral-small", 2, 2048, None, "pure-bf16", False, "holdout"),
    ("u4-hfqwen2-pure-4-s1024", "hf-qwen2-0.5b", 4, 1024, None, "pure-bf16", False, "holdout"),
]

# The fifth set (2026-12-04, after compiled CNNs' memory was estimated from what their convolutions
# touch): compiled CNNs at new sizes, and eager rows of every kind. Predictions written (--predict)
# and committed before the call that measured it.
UNSEEN5 = [
    ("u5-vgg-bf16-16-i192", "vgg_bn", 16, None, 192, "bf16", False, "holdout"),
    ("u5-effnet-bf16-128-i160", "efficientnet", 128, None, 160, "bf16", False, "holdout"),
    ("u5-hfvit-bf16-32", "hf-vit", 32, None, 224, "bf16", False, "holdout"),
    ("u5-tinyllama-bf16-1-s1024", "hf-tinyllama", 1, 1024, None, "bf16", False, "holdout"),
    ("u5-unet-bf16-32-i224", "unet", 32, None, 224, "bf16", False, "holdout"),
    ("u5-convnext-fp32-64-i160", "convnext", 64, None, 160, "fp32", False, "holdout"),
    ("u5-enc-bf16-16-s512", "encoder_classifier", 16, 512, None, "bf16", False, "holdout"),
    ("u5-hfbertmlm-bf16-16-s512", "hf-bert-mlm", 16, 512, None, "bf16", False, "holdout"),
    ("u5-mistral-bf16-4-s1024", "hf-mistral-small", 4, 1024, None, "bf16", False, "holdout"),
    ("u5-vgg-bf16-compile-32-i160", "vgg_bn", 32, None, 160, "bf16", True, "holdout"),
    ("u5-unet-bf16-compile-16-i192", "unet", 16, None, 192, "bf16", True, "holdout"),
    ("u5-convnext-bf16-compile-32-i192", "convnext", 32, None, 192, "bf16", True, "holdout"),
    ("u5-effnet-bf16-compile-64-i192", "efficientnet", 64, None, 192, "bf16", True, "holdout"),
    ("u5-effnet-fp32-compile-32", "efficientnet", 32, None, 224, "fp32", True, "holdout"),
]

# The sixth set (2026-12-04, after GEMM and convolution launches were given a per-launch tail and
# half of the second to fifth sets joined the fit): new sizes and precisions of every users' model,
# three compiled. Predictions written (--predict) and committed before the call that measured it.
UNSEEN6 = [
    ("u6-enc-bf16-48-s320", "encoder_classifier", 48, 320, None, "bf16", False, "holdout"),
    ("u6-enc-fp32-64-s256", "encoder_classifier", 64, 256, None, "fp32", False, "holdout"),
    ("u6-nanogpt-bf16-16-s512", "nanogpt", 16, 512, None, "bf16", False, "holdout"),
    ("u6-nanogpt-fp32-4-s1024", "nanogpt", 4, 1024, None, "fp32", False, "holdout"),
    ("u6-unet-bf16-16-i256", "unet", 16, None, 256, "bf16", False, "holdout"),
    ("u6-unet-fp32-32-i128", "unet", 32, None, 128, "fp32", False, "holdout"),
    ("u6-effnet-bf16-96-i224", "efficientnet", 96, None, 224, "bf16", False, "holdout"),
    ("u6-effnet-fp32-64-i192", "efficientnet", 64, None, 192, "fp32", False, "holdout"),
    ("u6-convnext-bf16-64-i160", "convnext", 64, None, 160, "bf16", False, "holdout"),
    ("u6-convnext-pure-32-i192", "convnext", 32, None, 192, "pure-bf16", False, "holdout"),
    ("u6-vgg-bf16-48-i192", "vgg_bn", 48, None, 192, "bf16", False, "holdout"),
    ("u6-vgg-fp32-16-i160", "vgg_bn", 16, None, 160, "fp32", False, "holdout"),
    ("u6-hfgpt2-bf16-4-s1024", "hf-gpt2", 4, 1024, None, "bf16", False, "holdout"),
    ("u6-hfgpt2-pure-8-s512", "hf-gpt2", 8, 512, None, "pure-bf16", False, "holdout"),
    ("u6-hfbertcls-fp32-32-s256", "hf-bert-cls", 32, 256, None, "fp32", False, "holdout"),
    ("u6-hfbertmlm-bf16-32-s256", "hf-bert-mlm", 32, 256, None, "bf16", False, "holdout"),
    ("u6-hfvit-bf16-48", "hf-vit", 48, None, 224, "bf16", False, "holdout"),
    ("u6-hfvit-fp32-32", "hf-vit", 32, None, 224, "fp32", False, "holdout"),
    ("u6-tinyllama-bf16-2-s2048", "hf-tinyllama", 2, 2048, None, "bf16", False, "holdout"),
    ("u6-mistral-bf16-2-s1024", "hf-mistral-small", 2, 1024, None, "bf16", False, "holdout"),
    ("u6-hfqwen2-bf16-4-s1024", "hf-qwen2-0.5b", 4, 1024, None, "bf16", False, "holdout"),
    ("u6-nanogpt-bf16-compile-8-s1024", "nanogpt", 8, 1024, None, "bf16", True, "holdout"),
    ("u6-effnet-bf16-compile-32-i224", "efficientnet", 32, None, 224, "bf16", True, "holdout"),
    ("u6-hfvit-bf16-compile-32", "hf-vit", 32, None, 224, "bf16", True, "holdout"),
]

# The seventh set (2026-12-04, after the compiled-ViT math path and the sixth set's half joined the fit):
# drawn at random, `python benchmarks/draw_unseen.py --seed 7 --rows 24 --prefix u7` (a seed, not a
# choice, says which configurations are judged). Predictions written (--predict) and committed
# before the call that measured it.
UNSEEN7 = [
    ('u7-hfgpt2-fp32-16-s256', 'hf-gpt2', 16, 256, None, 'fp32', False, 'holdout'),
    ('u7-effnet-fp32-64-i160', 'efficientnet', 64, None, 160, 'fp32', False, 'holdout'),
    ('u7-tinyllama-bf16-1-s512', 'hf-tinyllama', 1, 512, None, 'bf16', False, 'holdout'),
    ('u7-hfbertcls-bf16-64-s128', 'hf-bert-cls', 64, 128, None, 'bf16', False, 'holdout'),
    ('u7-hfbertcls-fp32-8-s512', 'hf-bert-cls', 8, 512, None, 'fp32', False, 'holdout'),
    ('u7-mistral-bf16-2-s512', 'hf-mistral-small', 2, 512, None, 'bf16', False, 'holdout'),
    ('u7-hfbertmlm-fp32-16-s256', 'hf-bert-mlm', 16, 256, None, 'fp32', False, 'holdout'),
    ('u7-hfvit-pure-48-i224', 'hf-vit', 48, None, 224, 'pure-bf16', False, 'holdout'),
    ('u7-enc-fp32-128-s128', 'encoder_classifier', 128, 128, None, 'fp32', False, 'holdout'),
    ('u7-hfbertcls-fp32-8-s256', 'hf-bert-cls', 8, 256, None, 'fp32', False, 'holdout'),
    ('u7-effnet-bf16-192-i160', 'efficientnet', 192, None, 160, 'bf16', False, 'holdout'),
    ('u7-mistral-fp32-8-s1024', 'hf-mistral-small', 8, 1024, None, 'fp32', False, 'holdout'),
    ('u7-vgg-fp32-8-i160', 'vgg_bn', 8, None, 160, 'fp32', False, 'holdout'),
    ('u7-tinyllama-fp32-2-s1024', 'hf-tinyllama', 2, 1024, None, 'fp32', False, 'holdout'),
    ('u7-vgg-pure-16-i192', 'vgg_bn', 16, None, 192, 'pure-bf16', False, 'holdout'),
    ('u7-mistral-pure-1-s512', 'hf-mistral-small', 1, 512, None, 'pure-bf16', False, 'holdout'),
    ('u7-hfvit-fp32-24-i224', 'hf-vit', 24, None, 224, 'fp32', False, 'holdout'),
    ('u7-effnet-bf16-64-i160', 'efficientnet', 64, None, 160, 'bf16', False, 'holdout'),
    ('u7-nanogpt-fp32-8-s512', 'nanogpt', 8, 512, None, 'fp32', False, 'holdout'),
    ('u7-nanogpt-pure-2-s512', 'nanogpt', 2, 512, None, 'pure-bf16', False, 'holdout'),
    ('u7-hfgpt2-bf16-2-s256', 'hf-gpt2', 2, 256, None, 'bf16', False, 'holdout'),
    ('u7-hfbertmlm-bf16-16-s128', 'hf-bert-mlm', 16, 128, None, 'bf16', False, 'holdout'),
    ('u7-hfqwen2-bf16-2-s512', 'hf-qwen2-0.5b', 2, 512, None, 'bf16', False, 'holdout'),
    ('u7-enc-bf16-16-s128', 'encoder_classifier', 16, 128, None, 'bf16', False, 'holdout'),
]

# The eighth set (2026-12-04, after the fit dropped its worst-row term and half of the seventh set joined
# it): drawn at random, `python benchmarks/draw_unseen.py --seed 8 --rows 24 --prefix u8`. Predictions
# written (--predict) and committed before the call that measured it.
UNSEEN8 = [
    ('u8-hfbertcls-bf16-64-s256', 'hf-bert-cls', 64, 256, None, 'bf16', False, 'holdout'),
    ('u8-effnet-pure-32-i192', 'efficientnet', 32, None, 192, 'pure-bf16', False, 'holdout'),
    ('u8-tinyllama-fp32-2-s512', 'hf-tinyllama', 2, 512, None, 'fp32', False, 'holdout'),
    ('u8-mistral-bf16-compile-8-s512', 'hf-mistral-small', 8, 512, None, 'bf16', True, 'holdout'),
    ('u8-hfbertmlm-bf16-64-s512', 'hf-bert-mlm', 64, 512, None, 'bf16', False, 'holdout'),
    ('u8-mistral-bf16-compile-8-s2048', 'hf-mistral-small', 8, 2048, None, 'bf16', True, 'holdout'),
    ('u8-hfbertcls-bf16-8-s512', 'hf-bert-cls', 8, 512, None, 'bf16', False, 'holdout'),
    ('u8-hfbertcls-fp32-16-s512', 'hf-bert-cls', 16, 512, None, 'fp32', False, 'holdout'),
    ('u8-enc-pure-128-s512', 'encoder_classifier', 128, 512, None, 'pure-bf16', False, 'holdout'),
    ('u8-hfbertmlm-pure-32-s512', 'hf-bert-mlm', 32, 512, None, 'pure-bf16', False, 'holdout'),
    ('u8-mistral-pure-2-s512', 'hf-mistral-small', 2, 512, None, 'pure-bf16', False, 'holdout'),
    ('u8-effnet-pure-64-i224', 'efficientnet', 64, None, 224, 'pure-bf16', False, 'holdout'),
    ('u8-hfbertmlm-pure-8-s512', 'hf-bert-mlm', 8, 512, None, 'pure-bf16', False, 'holdout'),
    ('u8-convnext-bf16-compile-64-i192', 'convnext', 64, None, 192, 'bf16', True, 'holdout'),
    ('u8-hfbertmlm-pure-32-s256', 'hf-bert-mlm', 32, 256, None, 'pure-bf16', False, 'holdout'),
    ('u8-mistral-bf16-8-s512', 'hf-mistral-small', 8, 512, None, 'bf16', False, 'holdout'),
    ('u8-nanogpt-pure-4-s256', 'nanogpt', 4, 256, None, 'pure-bf16', False, 'holdout'),
    ('u8-enc-bf16-8-s384', 'encoder_classifier', 8, 384, None, 'bf16', False, 'holdout'),
    ('u8-vgg-pure-32-i224', 'vgg_bn', 32, None, 224, 'pure-bf16', False, 'holdout'),
    ('u8-convnext-pure-16-i160', 'convnext', 16, None, 160, 'pure-bf16', False, 'holdout'),
    ('u8-tinyllama-pure-1-s1024', 'hf-tinyllama', 1, 1024, None, 'pure-bf16', False, 'holdout'),
    ('u8-tinyllama-bf16-4-s1024', 'hf-tinyllama', 4, 1024, None, 'bf16', False, 'holdout'),
    ('u8-enc-fp32-64-s384', 'encoder_classifier', 64, 384, None, 'fp32', False, 'holdout'),
    ('u8-effnet-bf16-64-i224', 'efficientnet', 64, None, 224, 'bf16', False, 'holdout'),
]

# The ninth set (2026-12-04, the session's last calibration: half of the eighth set in the fit): drawn at
# random, `python benchmarks/draw_unseen.py --seed 9 --rows 24 --prefix u9`. Predictions written
# (--predict) and committed before the call that measured it.
UNSEEN9 = [
    ('u9-nanogpt-fp32-8-s256', 'nanogpt', 8, 256, None, 'fp32', False, 'holdout'),
    ('u9-effnet-pure-192-i192', 'efficientnet', 192, None, 192, 'pure-bf16', False, 'holdout'),
    ('u9-hfvit-fp32-96-i224', 'hf-vit', 96, None, 224, 'fp32', False, 'holdout'),
    ('u9-vgg-bf16-32-i128', 'vgg_bn', 32, None, 128, 'bf16', False, 'holdout'),
    ('u9-vgg-pure-8-i224', 'vgg_bn', 8, None, 224, 'pure-bf16', False, 'holdout'),
    ('u9-hfbertcls-bf16-compile-32-s256', 'hf-bert-cls', 32, 256, None, 'bf16', True, 'holdout'),
    ('u9-unet-bf16-64-i128', 'unet', 64, None, 128, 'bf16', False, 'holdout'),
    ('u9-hfqwen2-bf16-1-s512', 'hf-qwen2-0.5b', 1, 512, None, 'bf16', False, 'holdout'),
    ('u9-effnet-pure-16-i160', 'efficientnet', 16, None, 160, 'pure-bf16', False, 'holdout'),
    ('u9-hfbertcls-bf16-compile-32-s128', 'hf-bert-cls', 32, 128, None, 'bf16', True, 'holdout'),
    ('u9-tinyllama-bf16-4-s512', 'hf-tinyllama', 4, 512, None, 'bf16', False, 'holdout'),
    ('u9-hfbertcls-bf16-8-s256', 'hf-bert-cls', 8, 256, None, 'bf16', False, 'holdout'),
    ('u9-unet-bf16-8-i128', 'unet', 8, None, 128, 'bf16', False, 'holdout'),
    ('u9-enc-pure-128-s384', 'encoder_classifier', 128, 384, None, 'pure-bf16', False, 'holdout'),
    ('u9-effnet-bf16-32-i256', 'efficientnet', 32, None, 256, 'bf16', False, 'holdout'),
    ('u9-unet-pure-8-i192', 'unet', 8, None, 192, 'pure-bf16', False, 'holdout'),
    ('u9-effnet-bf16-128-i224', 'efficientnet', 128, None, 224, 'bf16', False, 'holdout'),
    ('u9-hfgpt2-bf16-16-s256', 'hf-gpt2', 16, 256, None, 'bf16', False, 'holdout'),
    ('u9-hfbertmlm-bf16-8-s256', 'hf-bert-mlm', 8, 256, None, 'bf16', False, 'holdout'),
    ('u9-mistral-fp32-4-s1024', 'hf-mistral-small', 4, 1024, None, 'fp32', False, 'holdout'),
    ('u9-vgg-bf16-96-i224', 'vgg_bn', 96, None, 224, 'bf16', False, 'holdout'),
    ('u9-hfgpt2-bf16-8-s256', 'hf-gpt2', 8, 256, None, 'bf16', False, 'holdout'),
    ('u9-hfbertmlm-pure-8-s128', 'hf-bert-mlm', 8, 128, None, 'pure-bf16', False, 'holdout'),
    ('u9-vgg-pure-32-i160', 'vgg_bn', 32, None, 160, 'pure-bf16', False, 'holdout'),
]
SETS = {"u1": UNSEEN, "u2": UNSEEN2, "u3": UNSEEN3, "u4": UNSEEN4, "u5": UNSEEN5, "u6": UNSEEN6, "u7": UNSEEN7,
        "u8": UNSEEN8, "u9": UNSEEN9}



def predict(path: Path, table: list[tuple]) -> None:
    """``advise estimate FLAGS --gpu H200`` for every row, written before the rows are measured."""
    import json

    from users import predict_request, request_of

    out = {}
    for c in table:
        row = dict(zip(mum.KEYS, c))
        est = predict_request(request_of(mum.cardwise_flags(row)))
        out[row["id"]] = {"samples_per_s": round(est.throughput.samples_per_s, 3),
                          "peak_gib": round(est.memory.peak_gib, 4)}
    path.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


def _take(flag: str) -> str | None:
    """Removes ``flag VALUE`` from sys.argv (the rest goes to measure_users_models' parser)."""
    if flag not in sys.argv:
        return None
    i = sys.argv.index(flag)
    value = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    return value


if __name__ == "__main__":
    name = _take("--set") or "u1"
    if name not in SETS:
        raise SystemExit(f"--set: unknown set {name!r}; choose one of {', '.join(SETS)}")
    target = _take("--predict")
    if target:
        predict(Path(target), SETS[name])
    else:
        mum.CONFIGS = SETS[name]
        mum.main()
