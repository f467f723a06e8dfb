"""The examples of ``--recipe causal-lm`` and the model folder it loads: read and checked without torch.

A JSONL file, one example a line, in any of three shapes (mixed freely):

- ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]}``,
  rendered with the tokenizer's chat template; the loss is on the assistant turns only;
- ``{"prompt": ..., "response": ...}``: the loss is on the response only;
- ``{"text": ...}``: plain text, the loss on all of it.

``launcher.recipes.checks`` streams the whole file through ``iter_examples`` before any process
starts, and every rank reads it with the same function, so a bad line is one message naming the
file and line, exit 2. ``check_model_dir`` checks a ``--hf-model`` folder the same way: a
``config.json`` (parsed with cardwise's strict JSON limits) and a tokenizer, with a chat template
when the data has ``messages``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from advisor.files import read_small_text
from advisor.units import strict_json_loads

ROLES = ("system", "user", "assistant", "tool")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")
MIN_EXAMPLES = 2
FIX = ('give a JSONL file with one example a line: {"messages": [{"role": "user", "content": "..."}, '
       '{"role": "assistant", "content": "..."}]}, {"prompt": "...", "response": "..."} or {"text": "..."}')


def _messages(value, where: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: 'messages' must be a non-empty list of {{'role', 'content'}} objects")
    for m in value:
        if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
            raise ValueError(f"{where}: a message needs a 'role' ({', '.join(ROLES)}) and a string 'content'")
    if not any(m["role"] == "assistant" and m["content"].strip() for m in value):
        raise ValueError(f"{where}: no assistant message to learn from")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def parse(obj, where: str) -> tuple[str, object]:
    """("messages", [...]) | ("prompt", (prompt, response)) | ("text", text) from one decoded line."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object with 'messages', 'prompt'/'response' or 'text'")
    if "messages" in obj:
        return "messages", _messages(obj["messages"], where)
    if "prompt" in obj or "response" in obj:
        p, r = obj.get("prompt"), obj.get("response")
        if not isinstance(p, str) or not isinstance(r, str) or not r.strip():
            raise ValueError(f"{where}: 'prompt' and 'response' must both be strings, the response not empty")
        return "prompt", (p, r)
    if isinstance(obj.get("text"), str) and obj["text"].strip():
        return "text", obj["text"]
    raise ValueError(f"{where}: no 'messages', 'prompt'/'response' or non-empty 'text' field")


def iter_examples(path: Path) -> Iterator[tuple[str, object]]:
    """The examples of a JSONL file, in order; ValueError naming the file and line on a bad one."""
    from advisor.files import lines, open_regular

    path = Path(path)
    try:
        with open_regular(path) as f:  # a regular file (a FIFO would hang), lines of at most 16 MiB
            for i, line in enumerate(lines(f, path), 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise ValueError(f"{path}:{i}: not a JSON object") from None
                except RecursionError:  # json's decoder recurses per level: [[[[...]]]] ends here
                    raise ValueError(f"{path}:{i}: JSON nested too deeply") from None
                yield parse(obj, f"{path}:{i}")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def scan(path: Path) -> dict[str, int]:
    """Stream the whole file once: examples per shape; at least ``MIN_EXAMPLES`` in all."""
    counts = {"messages": 0, "prompt": 0, "text": 0}
    for kind, _ in iter_examples(path):
        counts[kind] += 1
    n = sum(counts.values())
    if n == 0:
        raise ValueError(f"{path}: the file is empty")
    if n < MIN_EXAMPLES:
        raise ValueError(f"{path}: {n} example(s); need at least {MIN_EXAMPLES}")
    return counts


def has_chat_template(model_dir: Path) -> bool:
    d = Path(model_dir)
    if (d / "chat_template.jinja").is_file() or (d / "chat_template.json").is_file():
        return True
    try:
        cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and bool(cfg.get("chat_template"))


def check_model_dir(model_dir: Path, *, needs_chat_template: bool) -> dict:
    """A ``--hf-model`` folder: its config (returned) and a tokenizer; ValueError saying what is missing."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ValueError(f"{d}: not a directory")
    try:
        config = strict_json_loads(read_small_text(d / "config.json"))
    except FileNotFoundError:
        raise ValueError(f"{d}: no config.json (a folder written by save_pretrained has one)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{d}/config.json: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{d}/config.json: not valid JSON ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ValueError(f"{d}/config.json: no 'model_type' (not a Hugging Face model config)")
    if not any((d / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{d}: no tokenizer ({', '.join(TOKENIZER_FILES)}); save one there with "
                         "tokenizer.save_pretrained(DIR)")
    if needs_chat_template and not has_chat_template(d):
        raise ValueError(f"{d}: the data has 'messages' but the tokenizer has no chat template")
    return config
