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
    cardwise knows one: for ``advise launch -- script.py``, where a user's script is the code that runs.
    ``advise``, ``advise estimate`` and recipe launches estimate cardwise's own (``implementation_note``)."""
    if not ref.name or ref.implementation is not None:
        return ref, None
    from advisor.catalog import has_transformers_class

    if not has_transformers_class(ref.name):
        return ref, None
    return (ref.model_copy(update={"implementation": "transformers"}),
            "estimated as the transformers class a script loads (--implementation cardwise for cardwise's own model)")



def implementation_note(ref: "ModelRef") -> str | None:
    """The note of a catalog model estimated as cardwise's own implementation where a transformers class
    exists too (None otherwise). One default for ``advise`` and ``advise estimate`` (issue 40: they gave
    23.6 GiB and 127 samples/s vs 16.6 GiB and 197 for GPT-2 at micro-batch 16, one estimating the
    transformers class, the other cardwise's own); ``--implementation transformers`` chooses the class a
    script loads, and a launch of a user's script plans for it (``as_script_runs_it``)."""
    if not ref.name or ref.implementation is not None:
        return None
    from advisor.catalog import has_transformers_class

    if not has_transformers_class(ref.name):
        return None
    return ("estimated as cardwise's own implementation, as `advise` is (--implementation transformers for the "
            "transformers class a script loads)")
