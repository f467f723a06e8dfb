"""One entry point from a ``ModelRef`` (catalog name, HF config or module factory) to a ModelSpec.

Catalog specs never import torch. ``--module`` does (it traces the module on the meta device),
and so does ``--hf-config`` when transformers is installed (it traces the transformers class;
without transformers it is the closed form of ``advisor.hf_config``, and the spec says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.models import ModelSpec

if TYPE_CHECKING:
    from advisor.plan import ModelRef


def resolve_model(ref: "ModelRef") -> ModelSpec:
    """The ModelSpec ``ref`` names. User mistakes raise ``advisor.errors.UserError``."""
    if ref.name:
        from advisor.catalog import catalog_model, transformers_model

        if ref.implementation == "transformers":
            spec = transformers_model(ref.name)
            if spec is None:
                from advisor.errors import UserError

                raise UserError(f"{ref.name} has no transformers class in cardwise's table",
                                fix="drop --implementation transformers (cardwise's own implementation is estimated), "
                                    "or give the model's config with --hf-config PATH/config.json")
            return spec
        return catalog_model(ref.name)
    if ref.hf_config:
        from advisor.hf_trace import resolve_hf_config  # imports torch only if transformers is installed

        return resolve_hf_config(ref.hf_config)
    if ref.module:
        from advisor.tracer import trace_module_spec  # imports torch

        return trace_module_spec(ref.module, ref.input_shape, ref.input_dtype, ref.loss or "ce")
    from advisor.errors import UserError

    raise UserError("no model given", fix="--model NAME | --hf-config PATH/config.json | --module FILE.py:FACTORY")


def as_script_runs_it(ref: "ModelRef") -> tuple["ModelRef", str | None]:
    """``ref`` as a user's script most likely runs it, and the note that says so (None: unchanged).

    A catalog model with no ``--implementation`` chosen is estimated as its transformers class when
    cardwise knows one (the issue: "estimate the code that will run"); cardwise's recipes run its own
    implementation, so ``advise`` and recipe launches do not call this."""
    if not ref.name or ref.implementation is not None:
        return ref, None
    from advisor.catalog import has_transformers_class

    if not has_transformers_class(ref.name):
        return ref, None
    return (ref.model_copy(update={"implementation": "transformers"}),
            "estimated as the transformers class a script loads (--implementation cardwise for cardwise's own model)")

