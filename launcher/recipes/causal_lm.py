"""Fine-tune a Hugging Face causal LM on instruction or chat examples, loss on the responses only.

    advise launch --hf-config llama/config.json --lora-rank 16 --recipe causal-lm \\
        --hf-model llama/ --data chats.jsonl --checkpoint-every 200

The model and tokenizer come from ``--hf-model`` (a folder written by ``save_pretrained``, or a
Hub id when the network allows); a folder with a config but no weights starts from random
weights of that shape (how ``benchmarks/gpu_checks/h200_recipes.sh`` measures a 1B model without a download).
Examples (``launcher.recipes.chat_rows``): ``messages`` rendered with the tokenizer's chat
template, ``prompt``/``response``, or plain ``text``. Labels are -100 (ignored by the loss) on
everything but the assistant turns / the response; plain text is learnt whole.

Examples are tokenized, concatenated and cut into rows of exactly the plan's ``seq_len``
(packing, as torchtune's and axolotl's ``sample_packing``): no padding is computed, and a row may
hold the end of one example and the start of the next. Rows whose labels are all ignored are
dropped. Everything else is the plan through ``launcher.runtime``: precision, LoRA (applied by
``Runtime.setup_model``), checkpointing, compile, LR schedule, accumulation, checkpoints/resume;
the final weights (or only the adapters) are saved as safetensors with the tokenizer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from launcher.recipes import chat_rows, startup

DEFAULT_SEQ = 1024
DEFAULT_STEPS = 100
IGNORE = -100  # torch.nn.CrossEntropyLoss's ignore_index, which Hugging Face models use for labels
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def _segments(tok, kind: str, value) -> list[tuple[str, bool]]:
    """The example as (text, learnt?) pieces in order."""
    if kind == "prompt" and getattr(tok, "chat_template", None):
        kind, value = "messages", [{"role": "user", "content": value[0]}, {"role": "assistant", "content": value[1]}]
    if kind == "text":
        return [(value, True)]
    if kind == "prompt":
        return [(value[0], False), (value[1], True)]
    render = lambda msgs, gen=False: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)  # noqa: E731
    full, pieces, pos = render(value), [], 0
    for i, m in enumerate(value):
        if m["role"] != "assistant":
            continue
        before, upto = (render(value[:i], True) if i else ""), render(value[: i + 1])
        if not (full.startswith(upto) and upto.startswith(before) and len(before) >= pos):
            return [(full, True)]  # a template that rewrites earlier turns: learn the whole text
        pieces += [(full[pos:len(before)], False), (full[len(before):len(upto)], True)]
        pos = len(upto)
    return pieces + [(full[pos:], False)]


def encode(tok, kind: str, value) -> tuple[list[int], list[int]]:
    """Token ids and labels (ids on learnt pieces, -100 elsewhere) of one example."""
    ids, labels = [], []
    templated = kind == "messages" or (kind == "prompt" and getattr(tok, "chat_template", None))
    if not templated and tok.bos_token_id is not None:
        ids.append(tok.bos_token_id)
        labels.append(IGNORE)
    for text, learnt in _segments(tok, kind, value):
        if not text:
            continue
        piece = tok(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if learnt else [IGNORE] * len(piece)
    if not templated and tok.eos_token_id is not None:  # templates end a turn themselves
        ids.append(tok.eos_token_id)
        labels.append(tok.eos_token_id)
    return ids, labels


def pack(examples, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate (ids, labels) pairs and cut rows of exactly ``seq_len``; drop the rest and rows
    that learn nothing."""
    rows_x, rows_y, buf_x, buf_y = [], [], [], []
    for ids, labels in examples:
        buf_x += ids
        buf_y += labels
        while len(buf_x) >= seq_len:
            x, y = buf_x[:seq_len], buf_y[:seq_len]
            buf_x, buf_y = buf_x[seq_len:], buf_y[seq_len:]
            if any(v != IGNORE for v in y[1:]):  # label 0 is never predicted (the model shifts)
                rows_x.append(x)
                rows_y.append(y)
    if not rows_x:
        return torch.empty(0, seq_len, dtype=torch.long), torch.empty(0, seq_len, dtype=torch.long)
    return torch.tensor(rows_x, dtype=torch.long), torch.tensor(rows_y, dtype=torch.long)


def packed_rows(rt, tok, data: Path, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed (ids, labels) rows, int32. The node's first rank tokenizes and writes them to the run
    directory; the node's other ranks wait for it (``local_main_process_first``) and read them."""
    cache = Path(rt.run_dir) / f"packed-{seq}.pt" if rt.run_dir is not None else None
    local_main = rt.accelerator.is_local_main_process
    with rt.accelerator.local_main_process_first():
        if cache is not None and cache.is_file() and not local_main:
            x, y = torch.load(cache, weights_only=True)  # written by rank 0 of this run a moment ago
            return x, y
        try:
            x, y = pack((encode(tok, kind, value) for kind, value in chat_rows.iter_examples(data)), seq)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        x, y = x.to(torch.int32), y.to(torch.int32)  # half the memory of int64; widened per batch
        if cache is not None and local_main:
            tmp = cache.with_suffix(".tmp")
            torch.save((x, y), tmp)
            tmp.replace(cache)
    return x, y


def load_model(source: str, device: torch.device, rank_seed: int = 0):
    """(model, tokenizer, where the weights came from)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(source)
    path = Path(source)
    if path.is_dir() and not any((path / f).is_file() for f in WEIGHT_FILES):
        config = transformers.AutoConfig.from_pretrained(source)
        torch.manual_seed(rank_seed)  # every rank builds the same weights (DDP broadcasts rank 0's anyway)
        with torch.device(device):  # initialised where it trains: a 1B model's init on the CPU takes a while
            model = transformers.AutoModelForCausalLM.from_config(config)
        return model, tok, "random weights of the config (no weights in the folder)"
    model = transformers.AutoModelForCausalLM.from_pretrained(source)
    return model.to(torch.float32), tok, "pretrained weights"  # fp32 master weights; pure-bf16 casts later


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.recipes.causal_lm", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--hf-model", required=True, help="folder with config.json and a tokenizer, or a Hub id")
    p.add_argument("--data", type=Path, required=True, help="JSONL of messages / prompt+response / text examples")
    startup.add_step_args(p, DEFAULT_STEPS)
    args = p.parse_args(argv)

    rt = startup.runtime(args)
    plan = rt.plan
    model, tok, source = startup.seeded(lambda: load_model(args.hf_model, rt.device))
    limit = getattr(model.config, "max_position_embeddings", None) or DEFAULT_SEQ
    seq = min(plan.config.seq_len or DEFAULT_SEQ, limit)
    x, y = packed_rows(rt, tok, args.data, seq)
    need = plan.config.micro_batch * rt.world_size
    if len(x) < need:
        raise SystemExit(f"{args.data}: {len(x)} packed row(s) of {seq} tokens, fewer than one micro-batch "
                         f"({plan.config.micro_batch}) per rank ({rt.world_size}): add examples or lower --seq-len")
    if rt.is_main:
        learnt = float((y != IGNORE).float().mean())
        print(f"causal-lm: {type(model).__name__} ({source}), {len(x)} packed rows of {seq} tokens, "
              f"{learnt:.0%} of tokens learnt", flush=True)
    dataset = torch.utils.data.TensorDataset(x, y)
    model, optimizer, loader = startup.setup_and_prepare(rt, model, rt.dataloader(dataset, shuffle=True))
    rt.tokens_per_sample = seq
    batches = rt.batches(loader)
    steps = startup.step_count(rt, args, DEFAULT_STEPS)

    def loss_fn(m, batch):
        return m(input_ids=batch[0].long(), labels=batch[1].long()).loss

    startup.train_until(rt, steps, model, optimizer, batches, loss_fn=loss_fn)
    rt.finish(model, tokenizer=tok, recipe="causal-lm", packed_rows=len(x), seq_len=seq,
              lora=plan.config.adapters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
