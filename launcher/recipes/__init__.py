"""Built-in training loops, run by every rank as ``accelerate launch -m launcher.recipes.NAME``.

Each reads its plan through ``launcher.runtime.Runtime.from_env()``. ``RECIPES`` maps the
``--recipe`` names to these modules; it is the one list of recipe names (the CLI's help, the
launch form's choices and ``launcher.command`` all read it), kept here because importing this
package costs nothing: the CLI reads it while it builds its parser.
"""

RECIPES: dict[str, str] = {
    "synthetic": "launcher.recipes.synthetic",
    "text-classification": "launcher.recipes.text_classification",
    "causal-lm": "launcher.recipes.causal_lm",
    "image-classification": "launcher.recipes.image_classification",
}
