"""A pretraining run's planned global batch (issue 37), re-derived from the candidates the planner scored.

For requests whose batch is free (pretraining, no --batch-size), every row of the scaling table is at its
own batch. Re-derived here from ``Recommendation.candidates`` without rules.planner's code: at each count,
every doubling up to the planned batch made the plan more than ``BATCH_GAIN`` faster, and the next one
did not (or does not run); the batch stays inside the family's published range; the LR follows it by the
recipe's rule; and the count the policy took is the one a re-derivation over those rows takes (weak
scaling: each row at its own batch against the smallest count's). ``ROOMY`` absorbs the planner's
preference for a roomier micro-batch (within 2% of the fastest: rules/planner.py ROOMY_SLACK), the
only gap between a plan and the fastest row of its count, strategy and batch.
"""

from __future__ import annotations

import pytest

from advisor.hardware import Machine
from advisor.plan import ModelRef
from advisor.request import Request

BATCH_GAIN = 0.05  # rules/planner.py: a doubling is taken when it makes the count's plan > 5% faster
ROOMY = 0.021
NEAR = 0.05  # counts within 5% of the efficiency floor may go either way (tests/test_policy_regret.py)
FLOOR = 0.80  # rules/data/defaults.toml search.min_scaling_efficiency

REQUESTS = [
    dict(model="resnet50", gpu="A100-80GB", gpus=8, dataset_size=1_281_167, epochs=90),
    dict(model="resnet50", gpu="H100", gpus=8, nodes=2, dataset_size=1_281_167, epochs=90),
    dict(model="resnet50", gpu="A100-80GB", gpus=6, dataset_size=1_281_167, epochs=90),
    dict(model="resnet50", gpu="L40S", gpus=8, interconnect="pcie", dataset_size=1_281_167, epochs=90),
    dict(model="vit-b-16", gpu="A100-80GB", gpus=8, dataset_size=1_281_167, epochs=300),
    dict(model="bert-base", gpu="H100", gpus=8, seq_len=512, dataset_size=20_000_000, epochs=1),
]


def _recommend(kw):
    from rules.api import recommend

    kw = dict(kw)
    return recommend(Request(model=ModelRef(name=kw.pop("model")), **kw), machine=Machine(cpu_cores=64))


def _fastest(cands, n, strategy, batch):
    rows = [c.samples_per_s for c in cands if c.gpus == n and c.strategy.value == strategy and c.global_batch == batch]
    return max(rows) if rows else None


@pytest.mark.parametrize("kw", REQUESTS, ids=[f"{k['model']}-{k['gpu']}-{k['gpus']}x{k.get('nodes', 1)}" for k in REQUESTS])
def test_each_count_takes_the_batch_its_doublings_paid_for(kw):
    rec = _recommend(kw)
    r = rec.recommendation
    assert r.task == "pretrain" and r.batch_planned, r.batch_rule
    start, top = r.batch_held, r.batch_limit
    cands = [c for c in rec.candidates if c.fits and c.standard]
    for row in (x for x in rec.scaling if x.fits):
        b = row.global_batch
        assert start <= b <= top, f"{row.gpus} GPUs at {b}: outside [{start}, {top}]"
        assert b % row.gpus == 0
        assert row.lr == pytest.approx(r.base_lr * (b / r.base_batch if r.lr_scaling == "linear" else
                                                    (b / r.base_batch) ** 0.5), rel=1e-9), "each row's lr follows its batch"
        here = _fastest(cands, row.gpus, row.strategy, b)
        assert here is not None and row.samples_per_s <= here * (1 + 1e-9)
        ladder = sorted({c.global_batch for c in cands if c.gpus == row.gpus and c.strategy.value == row.strategy})
        above = [x for x in ladder if x > b]
        if above:  # the next doubling was scored and did not pay
            nxt = _fastest(cands, row.gpus, row.strategy, above[0])
            assert nxt <= here * (1 + BATCH_GAIN) / (1 - ROOMY), \
                f"{row.gpus} GPUs: {above[0]} runs {nxt / here - 1:.0%} faster than the planned {b}"
        below = [x for x in ladder if x < b]
        if below:  # the last doubling before it paid
            prev = _fastest(cands, row.gpus, row.strategy, below[-1])
            assert here >= prev * (1 + BATCH_GAIN) * (1 - ROOMY), \
                f"{row.gpus} GPUs: {b} is only {here / prev - 1:.0%} faster than {below[-1]}"
    # the LR follows the batch by the recipe's rule
    ratio = r.global_batch / r.base_batch
    want = r.base_lr * (ratio if r.lr_scaling == "linear" else ratio ** 0.5 if r.lr_scaling == "sqrt" else 1)
    assert r.lr == pytest.approx(want, rel=1e-9)
    # the count: the no-deadline rule over the rows at their own batches (weak scaling)
    rows = [x for x in rec.scaling if x.fits]
    base = min(rows, key=lambda x: x.gpus)
    eff = {x.gpus: (x.samples_per_s / x.gpus) / (base.samples_per_s / base.gpus) for x in rows}
    if rec.policy.kind == "efficiency":
        assert rec.policy.scaling == "weak"
        assert eff[r.gpus] >= FLOOR * (1 - NEAR)
        assert not [n for n in eff if n > r.gpus and eff[n] >= FLOOR * (1 + NEAR)]


def test_a_pinned_batch_and_a_finetune_are_never_planned():
    for kw in (dict(model="resnet50", gpu="A100-80GB", gpus=8, dataset_size=1_281_167, epochs=90, batch_size=256),
               dict(model="llama3-8b", gpu="H100", gpus=8, dataset_size=52_002, epochs=3)):
        rec = _recommend(kw)
        r = rec.recommendation
        assert not r.batch_planned and rec.policy.scaling == "fixed"
        assert {x.global_batch for x in rec.scaling if x.fits} == {r.global_batch}
        assert all(c.global_batch == r.global_batch for c in rec.candidates if c.standard)
