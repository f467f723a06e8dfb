"""Built-in training loops, run by every rank as ``accelerate launch -m launcher.recipes.NAME``.

Each reads its plan through ``launcher.runtime.Runtime.from_env()``; ``launcher.command.RECIPES``
maps the ``--recipe`` names to these modules.
"""
