"""What each recipe can train and the data it reads, checked before any rank starts.

``launcher.command.check_target`` calls ``check_recipe``; a mistake is a ``UserError`` (one line
and exit 2 in the CLI), raised before a run record or a process exists. The files are read with
the readers the recipes use (``text_rows``, ``chat_rows``, ``image_folder``), so the launch and the
ranks agree on what a good file is. No torch here: the CLI imports this while it plans.
"""

from __future__ import annotations

import os

from pathlib import Path

from advisor.errors import UserError


def option(args: list[str], name: str) -> str | None:
    """The last value of ``--name VALUE`` or ``--name=VALUE`` in a recipe's arguments."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a[len(name) + 1:]
    return value


def _catalog(recipe: str, plan):
    if not plan.model.name:
        raise UserError(f"recipe {recipe} trains catalog models", fix="use --model NAME (see `advise models`), or launch a script")
    from advisor.catalog import catalog_model

    spec = catalog_model(plan.model.name)  # unknown names fail here, with suggestions, not in every rank
    if spec.family == "encoder-decoder":  # advisor.catalog.ENCODER_DECODERS: no cardwise implementation to run
        raise UserError(f"{spec.name} is an encoder-decoder that cardwise's recipes do not implement (it is planned "
                        f"as {spec.implementation})",
                        fix=f"launch your own training script: advise launch --model {spec.name} -- train.py ARGS")
    return spec


def _lora_available(recipe: str, plan) -> None:
    """LoRA is applied by ``Runtime.setup_model`` through ``launcher.compromises.lora`` (peft)."""
    if plan.config.lora_rank and not _importable("launcher.compromises.lora"):
        raise UserError(f"recipe {recipe}: this cardwise cannot train LoRA adapters (launcher.compromises.lora is missing)",
                        fix="drop --lora-rank to train every weight")


def check_recipe(recipe: str, args: list[str], plan) -> None:
    _lora_available(recipe, plan)
    if recipe == "causal-lm":
        return _check_causal_lm(args, plan)
    spec = _catalog(recipe, plan)
    if recipe == "text-classification":
        if plan.model.name != "mini-transformer":
            raise UserError("recipe text-classification trains mini-transformer", fix="use --model mini-transformer")
        _check_rows(args, plan, spec.arch.num_labels)
    elif recipe == "image-classification":
        if not spec.is_vision:
            raise UserError(f"recipe image-classification trains vision models, not {spec.name}",
                            fix="use a vision model: --model resnet50, vit-b-16, ... (see `advise models`)")
        _check_images(args, plan)


def _check_rows(args: list[str], plan, num_labels: int) -> None:
    """The text-classification file, streamed as the recipe streams it."""
    from launcher.recipes import text_rows

    data = Path(option(args, "--data") or text_rows.SAMPLE)
    fix = ('give a JSONL file of {"text": ..., "label": ...} lines or a CSV with a text,label header '
           f"({num_labels} distinct labels)")
    try:
        fraction = float(option(args, "--eval-fraction") or text_rows.EVAL_FRACTION)
        text_rows.held_out_every(fraction)
    except ValueError:
        raise UserError("--eval-fraction takes a number between 0 and 1", fix="e.g. -- --eval-fraction 0.1") from None
    try:
        n_rows, _ = text_rows.scan(data, num_labels)
    except ValueError as exc:
        raise UserError(str(exc), fix=fix) from None
    try:
        text_rows.check_enough(n_rows, data, plan.config.micro_batch, plan.world_size, fraction)
    except ValueError as exc:
        raise UserError(str(exc), fix="add rows, or lower --micro-batch or --processes") from None


def _check_images(args: list[str], plan) -> None:
    from launcher.recipes import image_folder

    import importlib.util

    data = option(args, "--data")
    if not data:
        raise UserError("recipe image-classification needs an image folder", fix="add --data DIR (one sub-folder per class)")
    if importlib.util.find_spec("PIL") is None:
        raise UserError("recipe image-classification decodes images with Pillow, which is not installed",
                        fix="pip install 'cardwise[image]' (or pip install pillow)")
    bad = option(args, "--bad-samples") or "stop"
    if bad not in image_folder.BAD_SAMPLES:
        raise UserError(f"--bad-samples {bad}: expected {' or '.join(image_folder.BAD_SAMPLES)}",
                        fix="-- --bad-samples skip (skip and count unreadable images) or stop (the default)")
    try:
        image_folder.check_folder(Path(data), 1000, micro_batch=plan.config.micro_batch, world=plan.world_size,
                                  files=bad == "stop")
    except image_folder.BadImage as exc:
        raise UserError(str(exc), fix="remove or replace that file, or skip unreadable images with "
                                      "`-- --bad-samples skip` (counted in the run's metrics)") from None
    except ValueError as exc:
        raise UserError(str(exc), fix=image_folder.FIX) from None


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def is_hub_id(value: str) -> bool:
    """``org/name`` that is not a local path: a model to download from the Hugging Face Hub."""
    parts = value.split("/")
    return len(parts) == 2 and all(parts) and not value.startswith((".", "~")) and not Path(value).exists()


def _check_hub_model(repo: str) -> None:
    """A Hub id must be loadable before any process starts: its config in the local Hugging Face cache,
    or the Hub reachable to fetch it (a few kB). Otherwise the ranks would fail after the run started,
    in a 125-line traceback of connection errors."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                            RevisionNotFoundError)
    except ImportError:
        raise UserError(f"--hf-model {repo} is a Hub id, and huggingface_hub is not installed to fetch it",
                        fix="pip install transformers, or give --hf-model DIR: a local folder written by "
                            "save_pretrained (config.json and a tokenizer)") from None
    local_fix = (f"give a local folder instead: where the network is, `huggingface-cli download {repo} --local-dir DIR` "
                 "(or save_pretrained of the model and its tokenizer), copy DIR here and pass --hf-model DIR")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo, "config.json"), str):
        return  # cached: transformers loads it from there, network or not
    if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0"):
        raise UserError(f"--hf-model {repo} is a Hub id, not in the local cache, and HF_HUB_OFFLINE is set",
                        fix=local_fix)
    reach = _hub_unreachable()
    if reach:  # one quick look, not huggingface_hub's five retries over 23 s
        raise UserError(f"--hf-model {repo} is a Hub id, not in the local cache, and the Hub cannot be reached "
                        f"({reach})", fix=local_fix)
    try:
        hf_hub_download(repo, "config.json")
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise UserError(f"--hf-model {repo}: no such model on the Hugging Face Hub (or it is private)",
                        fix=f"check the id (https://huggingface.co/{repo}), log in with `huggingface-cli login` for a "
                            f"private one, or {local_fix}") from None
    except GatedRepoError:
        raise UserError(f"--hf-model {repo} is gated on the Hub: accept its licence there and log in",
                        fix=f"`huggingface-cli login`, or {local_fix}") from None
    except (LocalEntryNotFoundError, OSError) as exc:
        why = "offline mode (HF_HUB_OFFLINE)" if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0") else \
            (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise UserError(f"--hf-model {repo} is a Hub id, not in the local cache, and the Hub cannot be reached "
                        f"({why})", fix=local_fix) from None


def _hub_unreachable(timeout_s: float = 5.0) -> str | None:
    """Why the Hub's host cannot be reached over TCP (name lookup, connect), or None when it can."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout_s).close()
    except OSError as exc:
        return f"{url.hostname}: {exc.strerror or exc}"
    return None


def _check_causal_lm(args: list[str], plan) -> None:
    from launcher.recipes import chat_rows

    model = option(args, "--hf-model")
    data = option(args, "--data")
    if not model:
        raise UserError("recipe causal-lm needs the model and tokenizer to fine-tune",
                        fix="add --hf-model DIR (a folder written by save_pretrained: config.json and tokenizer)")
    if not data:
        raise UserError("recipe causal-lm needs examples to train on", fix="add --data FILE.jsonl; " + chat_rows.FIX)
    try:
        counts = chat_rows.scan(Path(data))
    except ValueError as exc:
        raise UserError(str(exc), fix=chat_rows.FIX) from None
    if is_hub_id(model):
        _check_hub_model(model)  # the ranks load it from the cache this fills, or fail here in one line
        return
    try:
        chat_rows.check_model_dir(Path(model), needs_chat_template=counts["messages"] > 0)
    except ValueError as exc:
        raise UserError(str(exc), fix="give a folder with config.json and a tokenizer (model.save_pretrained(DIR); "
                                      "tokenizer.save_pretrained(DIR)), with a chat template for 'messages' data") from None
