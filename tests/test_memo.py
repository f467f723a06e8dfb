"""The estimator's per-process memo (advisor.memo) never answers for another model, calibration or
configuration: memoised estimates equal the unmemoised functions' results, and a changed input is
recomputed, also when it reuses a freed object's id."""

from advisor.activations import activation_profile, shared_activation_profile
from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, Strategy, TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memo import Memo
from advisor.step_work import shared_step_work, step_work

LLAMA = catalog_model("llama3-8b")  # closed form: step_work reads the activation profile and the calibration
CAL = default_calibration()


def test_memo_recomputes_for_another_owner_with_the_same_key():
    memo, calls = Memo(), []

    class Owner:
        pass

    a, b = Owner(), Owner()
    assert memo.get((a,), ("k",), lambda: calls.append("a") or "A") == "A"
    assert memo.get((a,), ("k",), lambda: calls.append("a2") or "A2") == "A"  # a hit
    assert memo.get((b,), ("k",), lambda: calls.append("b") or "B") == "B"  # same key, another object
    assert calls == ["a", "b"]


def test_memo_holds_its_owners_so_a_freed_id_is_never_taken_for_them():
    memo = Memo()
    first = TrainConfig(micro_batch=1)
    memo.get((first,), (), lambda: "first")
    del first  # the memo still holds it: no new object can take its id while the entry lives
    for _ in range(200):
        assert memo.get((TrainConfig(micro_batch=2),), (), lambda: "other") == "other"


def test_memo_is_bounded():
    memo = Memo(size=3)
    for i in range(10):
        memo.get((), (i,), lambda: i)
    assert len(memo._entries) <= 3


def test_shared_profile_and_work_equal_the_functions_for_every_strategy_and_count():
    for strategy in (Strategy.single, Strategy.ddp, Strategy.fsdp, Strategy.fsdp_keep):
        for precision in (Precision.bf16, Precision.fp32, Precision.pure_bf16):
            cfg = TrainConfig(micro_batch=2, grad_accum=4, seq_len=2048, precision=precision, strategy=strategy)
            assert shared_activation_profile(LLAMA, cfg) == activation_profile(LLAMA, cfg)
            assert shared_step_work(LLAMA, cfg, CAL) == step_work(LLAMA, cfg, CAL)


def test_a_changed_calibration_is_not_answered_from_the_memo():
    cfg = TrainConfig(micro_batch=2, grad_accum=4, seq_len=2048, strategy=Strategy.fsdp)
    hw = HardwareSpec(gpu=get_gpu("A100-80GB"), gpus_per_node=8)
    before = estimate(LLAMA, cfg, hw, calibration=CAL)
    heavier = CAL.model_copy(update={"traffic_per_saved_byte": CAL.traffic_per_saved_byte * 4})
    after = estimate(LLAMA, cfg, hw, calibration=heavier)
    assert after.throughput.gpu_s > before.throughput.gpu_s  # more bytes per saved byte: a slower step
    assert estimate(LLAMA, cfg, hw, calibration=CAL) == before
