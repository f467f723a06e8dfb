"""Draw an unseen set at random: configurations of the users' models no file has measured.

    python -m benchmarks.calibration.draw_unseen --seed 7 --rows 24 --prefix u7

Prints the rows as ``unseen_sets.json`` holds them; ``--write "what it is for"`` adds them to that file
as set PREFIX (refused if it exists), so that which configurations are judged is chosen by a seed, not by
someone who knows where the estimator is weak. Each model has the sizes its users would pick (batch sizes, lengths, image
sides); a precision is drawn (bf16 half the time, fp32 and pure-bf16 a quarter each), and a bf16 row
is compiled one time in six, at most ``--compiled`` of them (a compiled row costs ~70 s of the call).
Rows predicted above 100 GiB or 1.5 s a step are drawn again (one H200, one call). A configuration
some results file has measured is never drawn, so the same seed draws differently once a set is in.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


# model -> ("seq" | "image", sizes, micro-batches)
GRID = {
    "encoder_classifier": ("seq", (128, 256, 384, 512), (8, 16, 32, 64, 128)),
    "nanogpt": ("seq", (256, 512, 1024), (2, 4, 8, 16, 32)),
    "unet": ("image", (128, 160, 192, 224, 256), (8, 16, 32, 64)),
    "efficientnet": ("image", (160, 192, 224, 256), (16, 32, 64, 128, 192)),
    "convnext": ("image", (160, 192, 224), (16, 32, 64, 96, 128)),
    "vgg_bn": ("image", (128, 160, 192, 224), (8, 16, 32, 64, 96)),
    "hf-gpt2": ("seq", (256, 512, 1024), (2, 4, 8, 16)),
    "hf-bert-cls": ("seq", (128, 256, 512), (8, 16, 32, 64)),
    "hf-bert-mlm": ("seq", (128, 256, 512), (8, 16, 32, 64)),
    "hf-vit": ("image", (224,), (8, 16, 24, 32, 48, 64, 96)),  # HF ViT's position table is 224 px
    "hf-tinyllama": ("seq", (512, 1024, 2048), (1, 2, 4)),
    "hf-mistral-small": ("seq", (512, 1024, 2048), (1, 2, 4, 8)),
    "hf-qwen2-0.5b": ("seq", (512, 1024, 2048), (1, 2, 4, 8)),
}
SHORT = {"encoder_classifier": "enc", "efficientnet": "effnet", "vgg_bn": "vgg", "hf-tinyllama": "tinyllama",
         "hf-mistral-small": "mistral", "hf-qwen2-0.5b": "hfqwen2", "hf-bert-cls": "hfbertcls",
         "hf-bert-mlm": "hfbertmlm", "hf-gpt2": "hfgpt2", "hf-vit": "hfvit"}
PREC = {"bf16": "bf16", "fp32": "fp32", "pure-bf16": "pure"}


def measured() -> set[tuple]:
    """Every (model, batch, seq, image, precision, compile) some results file has."""
    seen = set()
    for f in (Path(__file__).resolve().parent / "results").glob("h200-users*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "model" in r:
                seen.add((r["model"], r["micro_batch"], r.get("seq_len"), r.get("image_size"), r["precision"],
                          bool(r.get("compile"))))
    return seen


def draw(seed: int, n: int, prefix: str, compiled_max: int) -> list[tuple]:
    import benchmarks.calibration.measure.users_models as mum
    from benchmarks.calibration.users import predict_request, request_of

    rng = random.Random(seed)
    seen, rows, compiled = measured(), [], 0
    while len(rows) < n:
        model = rng.choice(sorted(GRID))
        kind, sizes, batches = GRID[model]
        size, batch = rng.choice(sizes), rng.choice(batches)
        prec = rng.choices(("bf16", "fp32", "pure-bf16"), weights=(2, 1, 1))[0]
        comp = prec == "bf16" and compiled < compiled_max and rng.random() < 1 / 6
        seq, image = (size, None) if kind == "seq" else (None, size)
        key = (model, batch, seq, image, prec, comp)
        if key in seen:
            continue
        rid = f"{prefix}-{SHORT.get(model, model)}-{PREC[prec]}{'-compile' if comp else ''}-{batch}-" \
              f"{'s' if kind == 'seq' else 'i'}{size}"
        row = (rid, model, batch, seq, image, prec, comp, "holdout")
        est = predict_request(request_of(mum.cardwise_flags(dict(zip(mum.KEYS, row)))))
        if est.memory.peak_gib > 100 or est.throughput.step_s > 1.5:
            continue
        seen.add(key)
        compiled += comp
        rows.append(row)
    return rows


def dumps_sets(sets: dict) -> str:
    """unseen_sets.json as it is kept: each set's fields on a line, each row on a line (reviewable diffs)."""
    out = ["{"]
    for n, (key, s) in enumerate(sets.items()):
        out.append(f" {json.dumps(key)}: {{")
        out += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in s.items() if k != "rows"]
        out.append('  "rows": [')
        out += ["   " + json.dumps(r) + ("," if i < len(s["rows"]) - 1 else "") for i, r in enumerate(s["rows"])]
        out += ["  ]", " }" + ("," if n < len(sets) - 1 else "")]
    return "\n".join(out + ["}"]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--compiled", type=int, default=3, help="at most this many compiled rows")
    ap.add_argument("--write", metavar="ABOUT", help="add the set to unseen_sets.json, with this description")
    ap.add_argument("--name", help='with --write: how reports name the set ("twelfth": "twelfth set"); '
                                   'default "set <prefix>"')
    args = ap.parse_args()
    from benchmarks.calibration.measure.unseen import SETS_FILE

    sets = json.loads(SETS_FILE.read_text())
    if args.write and args.prefix in sets:
        raise SystemExit(f"--prefix {args.prefix}: {SETS_FILE.name} already has that set; pick the next name")
    rows = draw(args.seed, args.rows, args.prefix, args.compiled)
    for row in rows:
        print(json.dumps(list(row)))
    if args.write:
        about = f"{args.write.rstrip('.')}. Drawn: `python -m benchmarks.calibration.draw_unseen --seed {args.seed} --rows {args.rows} " \
                f"--prefix {args.prefix}`."
        n = args.prefix.lstrip("u")
        # a new set: judged before it is measured, and none of its rows in the fit until that is recorded
        sets[args.prefix] = {"name": args.name or f"set {args.prefix}", "about": about,
                             "predicted": f"h200-users-unseen{n}-predicted.json",
                             "measured": [f"h200-users-unseen{n}.jsonl"], "half_in_fit": False,
                             "rows": [list(r) for r in rows]}
        SETS_FILE.write_text(dumps_sets(sets))


if __name__ == "__main__":
    main()
