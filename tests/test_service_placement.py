"""Placement rules of the queue service, on fake GPU inventories given as data (no NVML, no processes)."""

from __future__ import annotations

from advisor.hardware import DetectedGpu, Machine
from launcher.placement import (Device, Request, cpu_slots, gpu_devices, never_fits, schedule)


def gpus(*free: float, total: float = 80.0) -> list[Device]:
    """GPU i with free[i] GiB free out of ``total``."""
    return [Device(index=i, kind="gpu", name="A100-80GB", total_gib=total, free_gib=f) for i, f in enumerate(free)]


def req(rid: str, k: int = 1, need: float | None = 10.0, kind: str = "gpu") -> Request:
    return Request(id=rid, devices=k, need_gib=need, kind=kind)


def started(dec) -> dict[str, list[int]]:
    return {p.id: p.devices for p in dec.start}


def test_k_gpu_runs_get_k_distinct_gpus_fifo():
    dec = schedule([req("a", 2), req("b", 2), req("c", 1)], gpus(79, 79, 79, 79))
    assert started(dec) == {"a": [0, 1], "b": [2, 3]}
    assert dec.head == "c" and "needs 1 GPU" in dec.waiting["c"]
    assert not dec.refuse


def test_held_gpus_are_never_given_again():
    dec = schedule([req("a", 2)], gpus(79, 79, 79, 79), held=[0, 2])
    assert started(dec) == {"a": [1, 3]}
    dec = schedule([req("b", 1)], gpus(79, 79), held=[0, 1])
    assert started(dec) == {} and dec.head == "b"


def test_busy_gpus_with_foreign_processes_are_avoided():
    # GPU 1 and 3 are used by someone else's process (NVML free memory says so).
    inv = gpus(79, 6.0, 79, 30.0)
    assert started(schedule([req("a", 2, need=40.0)], inv)) == {"a": [0, 2]}
    # 30 GiB free is enough for a 20 GiB run: best fit takes it, keeping the idle GPUs free.
    assert started(schedule([req("a", 1, need=20.0)], inv)) == {"a": [3]}
    assert started(schedule([req("a", 2, need=20.0)], inv)) == {"a": [0, 3]}
    # No estimate: only GPUs that look idle (>= 90% free) qualify.
    assert started(schedule([req("u", 3, need=None)], inv)) == {}
    assert started(schedule([req("u", 2, need=None)], inv)) == {"u": [0, 2]}


def test_memory_too_small_is_refused_but_memory_busy_waits():
    inv = gpus(79, 79)
    dec = schedule([req("big", 1, need=100.0), req("ok", 1, need=10.0)], inv)
    assert [r.id for r in dec.refuse] == ["big"]
    assert "100.0 GiB per GPU" in dec.refuse[0].reason and "largest 80.0 GiB" in dec.refuse[0].reason
    assert started(dec) == {"ok": [0]}
    # 50 GiB fits an 80 GiB GPU, just not now (both are 70 GiB busy): a wait, not a refusal.
    dec = schedule([req("later", 1, need=50.0)], gpus(10, 10))
    assert not dec.refuse and dec.head == "later" and "50.0 GiB free" in dec.waiting["later"]


def test_more_ranks_than_devices_and_wrong_kind_are_refused():
    dec = schedule([req("wide", 4), req("cpu", 1, need=None, kind="cpu")], gpus(79, 79))
    reasons = {r.id: r.reason for r in dec.refuse}
    assert "needs 4 GPUs" in reasons["wide"] and "has 2" in reasons["wide"]
    assert "serve with --cpu" in reasons["cpu"]
    assert "serve without --cpu" in never_fits(req("g", 1), cpu_slots(2))
    assert "needs 3 CPU slots" in never_fits(req("c", 3, need=None, kind="cpu"), cpu_slots(2))


def test_backfill_starts_smaller_runs_that_fit_now():
    # GPU 0 is held; the head needs both GPUs; a 1-GPU run behind it fits on GPU 1 now.
    dec = schedule([req("head", 2), req("small", 1)], gpus(79, 79), held=[0])
    assert dec.head == "head"
    assert started(dec) == {"small": [1]} and dec.start[0].backfill
    assert dec.bypassed == {"head": 1}


def test_head_is_not_starved_after_max_bypass():
    inv = gpus(79, 79)
    # Bypassed max_bypass times already: GPU 1 is reserved for the head, the small run waits.
    dec = schedule([req("head", 2), req("small", 1)], inv, held=[0], bypassed={"head": 2}, max_bypass=2)
    assert started(dec) == {} and dec.reserved == [1]
    assert "reserved for it" in dec.waiting["head"]
    # When GPU 0 frees, the head gets both GPUs before the small run.
    dec = schedule([req("head", 2), req("small", 1)], inv, held=[], bypassed=dec.bypassed, max_bypass=2)
    assert started(dec) == {"head": [0, 1]}
    # max_bypass=0 is strict FIFO.
    assert started(schedule([req("head", 2), req("small", 1)], inv, held=[0], max_bypass=0)) == {}


def test_bounded_wait_under_a_stream_of_small_runs():
    """Simulate passes: 1-GPU runs keep arriving and finishing; the 2-GPU head still starts."""
    inv = gpus(79, 79)
    running: dict[str, tuple[list[int], int]] = {"r0": ([0], 1)}  # id -> (gpus, passes left)
    queue = [req("head", 2)] + [req(f"s{i}", 1) for i in range(20)]
    bypassed: dict[str, int] = {}
    for tick in range(30):
        held = [g for gs, _ in running.values() for g in gs]
        dec = schedule(queue, inv, held=held, bypassed=bypassed, max_bypass=3)
        bypassed = dec.bypassed
        for p in dec.start:
            running[p.id] = (p.devices, 2)
            queue = [q for q in queue if q.id != p.id]
        if "head" in started(dec):
            break
        running = {k: (g, n - 1) for k, (g, n) in running.items() if n > 1}
    else:
        raise AssertionError("the head never started")
    assert tick < 12 and bypassed.get("head", 0) <= 3


def test_max_runs_caps_concurrent_runs():
    dec = schedule([req("a"), req("b"), req("c")], gpus(79, 79, 79), max_runs=2, running=1)
    assert list(started(dec)) == ["a"]
    assert "at most 2 run(s)" in dec.waiting["b"]


def test_cpu_slots_one_per_rank():
    dec = schedule([req("a", 1, None, "cpu"), req("b", 2, None, "cpu"), req("c", 1, None, "cpu")], cpu_slots(2))
    # b (2 ranks) does not fit beside a; c backfills the free slot.
    assert started(dec) == {"a": [0], "c": [1]} and dec.head == "b"


def test_gpu_inventory_from_a_machine_given_as_data():
    machine = Machine(gpus=[DetectedGpu(index=i, name="NVIDIA H200", memory_total_gib=140.0,
                                        memory_free_gib=139.5 - 100 * (i == 1)) for i in range(3)])
    devs = gpu_devices(machine)
    assert [d.free_gib for d in devs] == [139.5, 39.5, 139.5]
    assert [d.index for d in gpu_devices(machine, only=[1, 2])] == [1, 2]
    assert started(schedule([req("x", 2, need=60.0)], devs)) == {"x": [0, 2]}
