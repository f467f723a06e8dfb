"""How many product files name each way of training (issue 38: "no way of training named in more than
10 product files").

A way of training is named where a file spells its config field, enum member, flag or compromise name
(the patterns below); product files are the .py and .toml files of the five layers (advisor, rules,
launcher, cli, tui). Tests, benchmarks and docs do not count, and neither do comments and docstrings
(``#`` comments of .py and .toml files, a string that is a statement of its own): prose that mentions
a way changes nothing the program does, while code and the text the program prints (help, errors, a
rule's say) do count.

    python -m benchmarks.structure.way_counts            # table, files above the limit flagged
    python -m benchmarks.structure.way_counts --files    # and which files name each way
    python -m benchmarks.structure.way_counts --json
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("advisor", "rules", "launcher", "cli", "tui")
LIMIT = 10
# way -> regular expression of the words that name it
WAYS: dict[str, str] = {
    "single": r"Strategy\.single\b|strategy single\b",
    "ddp": r"Strategy\.ddp\b",
    "fsdp": r"Strategy\.fsdp\b",
    "fsdp-keep": r"fsdp_keep|fsdp-keep|Strategy\.fsdp_keep",
    "hsdp": r"hsdp",
    "cpu-offload": r"cpu_offload|cpu-offload|CPU_OFFLOAD",
    "pure-bf16": r"pure_bf16|pure-bf16|PURE_BF16",
    "kahan|plain": r"\.kahan\b|PureBf16Update|pure_bf16_update",
    "adamw-8bit": r"adamw_8bit|adamw-8bit|ADAMW_8BIT|\.eight_bit\b",
    "paged-adamw-8bit": r"paged_adamw_8bit|paged-adamw-8bit|PAGED_ADAMW_8BIT",
    "optimizer-in-backward": r"optimizer_in_backward|optimizer-in-backward|OPTIMIZER_IN_BACKWARD",
    "lora": r"lora_rank|lora-rank|\bLORA\b",
    "qlora": r"quantize_base|quantize-base|\bQLORA\b",
    # issue 38's two new setups: the precision member, its flag, its setup class and torchao's float8
    "fp8": r"Precision\.fp8\b|precision fp8|\bFp8|float8",
    "selective-ckpt": r"grad_ckpt_every|grad-ckpt-every|selective-ckpt|SelectiveCkpt",
}


def product_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for layer in LAYERS for ext in ("py", "toml") for p in (root / layer).rglob(f"*.{ext}"))


def code_text(path: Path) -> str:
    """The file's text with its comments and docstrings blanked (line and column positions kept)."""
    src = path.read_text(errors="replace")
    if path.suffix != ".py":
        return "\n".join("" if line.lstrip().startswith("#") else line for line in src.splitlines())
    lines = [list(line) for line in src.splitlines(keepends=True)]
    tokens = list(tokenize.generate_tokens(io.StringIO(src).readline))
    spans, prev = [], None
    for i, t in enumerate(tokens):
        if t.type == tokenize.COMMENT:
            spans.append((t.start, t.end))
        elif t.type == tokenize.STRING and prev in (None, tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
            # a string that starts a statement and ends it: a docstring (or a bare string, prose too)
            if i + 1 < len(tokens) and tokens[i + 1].type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                spans.append((t.start, t.end))
        if t.type not in (tokenize.NL, tokenize.COMMENT):
            prev = t.type
    for (r0, c0), (r1, c1) in spans:
        for r in range(r0, r1 + 1):
            line = lines[r - 1]
            for k in range(c0 if r == r0 else 0, c1 if r == r1 else len(line)):
                if line[k] != "\n":
                    line[k] = " "
    return "".join("".join(line) for line in lines)


def counts(root: Path = ROOT) -> dict[str, list[str]]:
    texts = {p.relative_to(root).as_posix(): code_text(p) for p in product_files(root)}
    return {way: sorted(f for f, t in texts.items() if re.search(rx, t)) for way, rx in WAYS.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", action="store_true", help="list the files naming each way")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    c = counts()
    if args.json:
        print(json.dumps({w: {"files": len(f), "names": f} for w, f in c.items()}, indent=1))
        return 0
    for way, files in c.items():
        flag = "  over" if len(files) > LIMIT else ""
        print(f"{way:24s} {len(files):3d}{flag}")
        if args.files:
            for f in files:
                print(f"    {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
