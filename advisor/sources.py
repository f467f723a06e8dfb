"""One entry point from a ``ModelRef`` (catalog name, HF config or module factory) to a ModelSpec.

Catalog and ``config.json`` specs never import torch; only ``--module`` does (it traces the
module on the meta device), and only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.models import ModelSpec

if TYPE_CHECKING:
    from advisor.plan import ModelRef


def resolve_model(ref: "ModelRef") -> ModelSpec:
    """The ModelSpec ``ref`` names. User mistakes raise ``advisor.errors.UserError``."""
    if ref.name:
        from advisor.catalog import catalog_model

        return catalog_model(ref.name)
    if ref.hf_config:
        from advisor.hf_config import spec_from_hf_config

        return spec_from_hf_config(ref.hf_config)
    if ref.module:
        from advisor.tracer import trace_module_spec  # imports torch

        return trace_module_spec(ref.module, ref.input_shape, ref.input_dtype)
    from advisor.errors import UserError

    raise UserError("no model given", fix="--model NAME | --hf-config PATH/config.json | --module FILE.py:FACTORY")
