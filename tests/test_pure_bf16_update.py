"""--pure-bf16-update: which AdamW step pure-bf16 runs (kahan: cardwise's KahanAdamW, the default;
plain: torch AdamW on bf16 weights), in the estimate, the flags and the runtime."""

from __future__ import annotations

import pytest
import torch

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.setup.optimizers import KAHAN_BYTES
from advisor.config import Optimizer, Precision, PureBf16Update, TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.plan import ModelRef, Plan
from advisor.request import Request
from advisor.setup.optimizers import STREAM_BYTES as _OPT_BYTES
from cli.main import main
from launcher.compromises import make_optimizer
from launcher.compromises.kahan import KahanAdamW

N8B = 8_030_261_248
GIB = float(2**30)


def _est(**cfg):
    cfg = {"micro_batch": 1, "seq_len": 2048, "precision": Precision.pure_bf16, **cfg}
    return estimate(catalog_model("llama3-8b"), TrainConfig(**cfg), HardwareSpec(gpu=get_gpu("H200")))


def test_plain_keeps_no_compensation_buffer():
    kahan, plain = _est().memory, _est(pure_bf16_update=PureBf16Update.plain).memory
    assert plain.optimizer_gib == pytest.approx(4 * N8B / GIB)  # bf16 m and v only
    assert kahan.optimizer_gib - plain.optimizer_gib == pytest.approx(KAHAN_BYTES * N8B / GIB)
    assert kahan.peak_gib > plain.peak_gib
    assert any("plain torch AdamW" in n for n in plain.notes) and not any("plain" in n for n in kahan.notes)


def test_plain_is_one_fused_pass_over_bf16_not_kahans_kernels():
    kahan, plain = _est().throughput, _est(pure_bf16_update=PureBf16Update.plain).throughput
    g, cal = get_gpu("H200"), default_calibration()
    bw = g.mem_bw * cal.rate_efficiency["bytes"] * g.fraction_vs_h200("bandwidth")
    assert plain.optimizer_s == pytest.approx(N8B * _OPT_BYTES[Optimizer.adamw] * 0.5 / bw)
    assert kahan.optimizer_s > 2 * plain.optimizer_s
    assert any("KahanAdamW" in n for n in kahan.notes) and not any("KahanAdamW" in n for n in plain.notes)


def test_the_update_only_matters_with_pure_bf16():
    bf16 = _est(precision=Precision.bf16)
    plain = _est(precision=Precision.bf16, pure_bf16_update=PureBf16Update.plain)
    assert bf16.memory.peak_gib == plain.memory.peak_gib and bf16.throughput.step_s == plain.throughput.step_s


def test_the_flag_round_trips_through_the_request():
    req = Request(model=ModelRef(name="llama3-8b"), precision="pure-bf16", pure_bf16_update="plain")
    argv = req.to_argv()
    assert argv[argv.index("--pure-bf16-update") + 1] == "plain"
    from cli.flags import request_from_namespace
    from cli.main import build_parser

    assert request_from_namespace(build_parser("estimate").parse_args(argv)) == req
    assert "pure_bf16_update" in req.pinned()


@pytest.mark.parametrize("extra", [["--precision", "bf16"], []])
def test_the_update_without_pure_bf16_is_refused(capsys, extra):
    rc = main(["estimate", "--model", "llama3-8b", "--gpu", "H200", "--pure-bf16-update", "plain", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "--pure-bf16-update plain" in err and "add --precision pure-bf16" in err


def test_estimate_says_which_update_it_assumed(capsys):
    assert main(["estimate", "--model", "llama3-8b", "--gpu", "H200", "--precision", "pure-bf16", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"pure_bf16_update": "kahan"' in out and "--pure-bf16-update plain for torch AdamW" in out


def _plan(update: PureBf16Update) -> Plan:
    c = TrainConfig(micro_batch=2, seq_len=8, precision=Precision.pure_bf16, pure_bf16_update=update)
    return Plan(model=ModelRef(name="mini-transformer"), config=c, gpu=None, processes_per_node=1, cpu=True,
                global_batch=2, lr=1e-3, base_lr=1e-3, base_batch=2)


def test_the_runtime_runs_torch_adamw_for_plain_and_kahan_by_default():
    w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    plain = make_optimizer(_plan(PureBf16Update.plain), [w], torch.device("cpu"))
    assert type(plain) is torch.optim.AdamW
    w.grad = torch.ones_like(w)
    plain.step()
    assert w.dtype == torch.bfloat16 and set(plain.state[w]) >= {"exp_avg", "exp_avg_sq"}
    assert "compensation" not in plain.state[w] and plain.state[w]["exp_avg"].dtype == torch.bfloat16
    assert type(make_optimizer(_plan(PureBf16Update.kahan), [w], torch.device("cpu"))) is KahanAdamW


def test_a_plain_pin_is_said_and_given_back_in_the_launch_command(capsys):
    import json

    argv = ["--model", "llama3-8b", "--gpu", "H200", "--gpus", "1", "--seq-len", "2048", "--json", "--precision", "pure-bf16"]
    assert main([*argv, "--pure-bf16-update", "plain"]) == 0
    r = json.loads(capsys.readouterr().out)["recommendation"]
    assert "--pure-bf16-update plain" in r["command"] and "plain torch AdamW" in r["gives_up"]
    assert main(argv) == 0  # the default: Kahan, and the flag is not written
    r = json.loads(capsys.readouterr().out)["recommendation"]
    assert "--pure-bf16-update" not in r["command"] and "KahanAdamW" in r["gives_up"]
