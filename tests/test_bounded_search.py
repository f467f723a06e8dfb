"""Any --gpus/--nodes answers with a bounded number of estimator calls (issue 12: --gpus 100000
used to call it ~12,800 times at 2,048 GPUs and hang). Calls are counted, never timed: timings
live in benchmarks/speed/search_timing.py."""

from __future__ import annotations

import pytest

from advisor.hardware import Machine
from advisor.plan import ModelRef
from advisor.request import Request
from rules.planner import bounded_counts

# The most estimator calls one recommendation may make, at any size (a few hundred in practice).
MAX_CALLS = 1500


@pytest.fixture
def calls(monkeypatch):
    import rules.planner as planner

    count = [0]
    real = planner.estimate

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "estimate", counting)
    return count


def _run(**kw):
    from rules.api import recommend

    return recommend(Request(model=ModelRef(name=kw.pop("model")), gpu=kw.pop("gpu", "H100"), **kw),
                     machine=Machine(cpu_cores=64))


@pytest.mark.parametrize("kw", [
    dict(model="gpt2", gpus=100_000),
    dict(model="llama3-8b", gpus=100_000, seq_len=2048),
    dict(model="llama3-8b", gpus=8, nodes=100_000, seq_len=2048),
    dict(model="llama3-8b", gpus=8, nodes=256, seq_len=2048),
    dict(model="vit-h-14", gpus=8, nodes=100_000, image_size=512, batch_size=4096, dataset_size=1_281_167, epochs=10,
         deadline_h=1.0),
    dict(model="llama3-70b", gpus=1, seq_len=2048),
    # a planned global batch (issue 37): one more dimension, doubled only while it pays (rules.planner._grow)
    dict(model="resnet50", gpu="A100-80GB", gpus=8, nodes=100_000, dataset_size=1_281_167, epochs=90, deadline_h=2.0),
    dict(model="vit-b-16", gpu="A100-80GB", gpus=8, nodes=4, dataset_size=1_281_167, epochs=300, deadline_h=1.0),
])
def test_any_size_asks_the_estimator_a_bounded_number_of_times(calls, kw):
    rec = _run(**kw)
    print(f"{calls[0]} estimator calls")
    assert calls[0] <= MAX_CALLS, f"{calls[0]} estimator calls for {kw}"
    assert rec.recommendation.gpus <= (kw.get("gpus") or 1) * kw.get("nodes", 1)
    # Efficiency is against the baseline row (the smallest count that fits), computed, not capped.
    base = [r for r in rec.scaling if r.baseline]
    assert len(base) <= 1
    for row in rec.scaling:
        if row.fits:
            b = base[0]
            assert row.scaling_efficiency == pytest.approx((row.samples_per_s / row.gpus) / (b.samples_per_s / b.gpus))
            # never rounded per count; a planned batch (pretraining) is each count's own, inside the family's range
            r = rec.recommendation
            assert row.global_batch == r.global_batch or (r.batch_planned and r.batch_held <= row.global_batch <= r.batch_limit)


def test_calls_grow_no_faster_than_the_log_of_the_size(calls):
    _run(model="llama3-8b", gpus=8, nodes=8, seq_len=2048)
    small = calls[0]
    calls[0] = 0
    _run(model="llama3-8b", gpus=8, nodes=100_000, seq_len=2048)
    assert calls[0] <= 4 * small, (small, calls[0])


def test_the_counts_compared_are_divisors_of_the_node_then_whole_nodes():
    assert bounded_counts(8, 1) == [1, 2, 4, 8]  # never 3, 5 or 7 of 8
    assert bounded_counts(6, 1) == [1, 2, 3, 6]
    assert bounded_counts(8, 2) == [1, 2, 4, 8, 16]
    big = bounded_counts(100_000, 1)
    assert big[0] == 1 and big[-1] == 100_000 and len(big) < 30 and all(100_000 % n == 0 for n in big)
    nodes = bounded_counts(8, 100_000)
    assert nodes[-1] == 800_000 and 16 in nodes and 24 not in nodes and len(nodes) < 40
    assert all(n % 8 == 0 for n in nodes if n > 8)
