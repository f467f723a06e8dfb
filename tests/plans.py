"""``launcher.cpu_plan`` with the learning-rate recipe the CLI gives it (``rules.lr``), for tests."""

from __future__ import annotations


def cpu_plan_for(req, **kwargs):
    from launcher.cpu_plan import cpu_plan
    from rules.lr import recipe_for_request

    return cpu_plan(req, recipe_for_request(req), **kwargs)
