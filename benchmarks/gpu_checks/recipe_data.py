"""Generated data and models for the recipes, offline: a chat JSONL, an image folder, a Llama folder.

Used by ``benchmarks/gpu_checks/h200_recipes.sh`` (a 1B-class Llama from its config, no weights downloaded)
and by the CPU tests (``tests/test_recipes_data.py``, a tiny Llama saved with its weights).

    python -m benchmarks.gpu_checks.recipe_data chat OUT.jsonl --rows 2000
    python -m benchmarks.gpu_checks.recipe_data images OUT_DIR --classes 4 --per-class 200 --size 320
    python -m benchmarks.gpu_checks.recipe_data llama OUT_DIR --shape 1b --corpus OUT.jsonl     # config + tokenizer only
    python -m benchmarks.gpu_checks.recipe_data llama OUT_DIR --shape tiny --corpus OUT.jsonl --weights

The conversations are learnable (sums of two numbers, in words and digits), so a falling loss
means the model learns the assistant turns; the images are learnable too (each class has its own
colour and stripe direction, with noise), JPEG-encoded as real folders are.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
# A Llama-3-style chat template (the special tokens are this tokenizer's): each turn is a header
# and its content ending in <|eot_id|>; the generation prompt opens an assistant header.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                 "{{ m['content'] }}<|eot_id|>{% endfor %}"
                 "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
SPECIALS = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<pad>"]
# Llama-3.2-1B's shape (meta-llama/Llama-3.2-1B config.json): 1.24B parameters with tied embeddings.
LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=True, vocab_size=128256)
LLAMA_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)


def chat_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        q = f"What is {WORDS[a]} plus {WORDS[b]}?"
        ans = f"{WORDS[a]} plus {WORDS[b]} is {a + b}."
        kind = i % 10
        if kind < 7:
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]
            if kind == 0:
                msgs = [{"role": "system", "content": "You add numbers."}, *msgs]
            rows.append({"messages": msgs})
        elif kind < 9:
            rows.append({"prompt": q, "response": ans})
        else:
            rows.append({"text": f"{q} {ans}"})
    return rows


def write_chat(path: Path, n: int, seed: int = 0) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in chat_rows(n, seed)))
    return path


def _corpus(path: Path):
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        if "messages" in row:
            yield from (m["content"] for m in row["messages"])
        else:
            yield from (v for k, v in row.items() if isinstance(v, str))


def write_llama(out: Path, corpus: Path, shape: str = "tiny", weights: bool = False, vocab: int = 1000) -> Path:
    """A Llama folder: config.json and a byte-level BPE tokenizer trained on ``corpus`` with a chat
    template; with ``weights``, random weights saved by save_pretrained (safetensors)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    dims = dict(LLAMA_1B if shape == "1b" else LLAMA_TINY)
    dims["vocab_size"] = max(dims.get("vocab_size", 0), len(fast))
    config = LlamaConfig(**dims, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id)
    if weights:
        import torch

        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(str(out), safe_serialization=True)
    else:
        config.save_pretrained(str(out))
    return out


def write_images(root: Path, classes: int = 2, per_class: int = 16, size: int = 48, seed: int = 0) -> Path:
    """JPEGs in ``root/class_k/``: class k has its own colour and stripe direction, plus noise."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    root = Path(root)
    yy, xx = np.mgrid[0:size, 0:size]
    for k in range(classes):
        d = root / f"class_{k}"
        d.mkdir(parents=True, exist_ok=True)
        colour = np.array([(k * 97) % 256, (k * 57 + 80) % 256, (k * 31 + 160) % 256], dtype=np.float32)
        stripes = np.sin((xx if k % 2 else yy) * (0.5 + 0.25 * k))[..., None] * 60
        for i in range(per_class):
            img = colour + stripes + rng.normal(0, 25, (size, size, 3))
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(d / f"{i:05d}.jpg", quality=90)
    return root


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("chat", "images", "llama"))
    p.add_argument("out", type=Path)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--per-class", type=int, default=200)
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--shape", choices=("tiny", "1b"), default="tiny")
    p.add_argument("--corpus", type=Path)
    p.add_argument("--weights", action="store_true")
    a = p.parse_args()
    if a.what == "chat":
        write_chat(a.out, a.rows)
    elif a.what == "images":
        write_images(a.out, a.classes, a.per_class, a.size)
    else:
        if a.corpus is None:
            p.error("llama needs --corpus (a chat JSONL to train the tokenizer on)")
        write_llama(a.out, a.corpus, a.shape, a.weights)
    print(a.out)


if __name__ == "__main__":
    main()
