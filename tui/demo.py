"""Fixed data for the wizard's tests and screenshots: machines, a filled run store, a recommendation.

Everything here is data (no NVML, no rules run, no clock), so a screen built from it looks the
same on every machine and on every day. The recommendation is ``advise --json`` output validated
into the typed ``rules.recommend.Recommendation``; its numbers are illustrative, not the
estimator's. The decision tree's nodes are the rules' own (``rules/data/tree.toml``).
"""

from __future__ import annotations

import json
from pathlib import Path

from advisor.hardware import DetectedGpu, GpuLink, Machine
from advisor.plan import ModelRef, Plan
from tui.compute import ModelInfo, RecView, tree_nodes
from tui.monitor import DeviceSample

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def gpu_machine(n: int = 4) -> Machine:
    """n x H100 SXM, every pair on NVLink (NV18), as NVML would describe them."""
    gpus = [DetectedGpu(index=i, name="NVIDIA H100 80GB HBM3", memory_total_gib=79.65, memory_free_gib=79.1,
                        compute_capability=(9, 0), uuid=f"GPU-demo-{i}", utilization_pct=0.0, spec="H100-SXM")
            for i in range(n)]
    links = [GpuLink(a=i, b=j, kind="nvlink", nvlinks=18) for i in range(n) for j in range(i + 1, n)]
    return Machine(gpus=gpus, links=links, driver="550.54.15", cuda_driver="12.4", cpu_cores=64, ram_gib=1007.6)


def cpu_machine(cores: int = 2) -> Machine:
    return Machine(cpu_cores=cores, ram_gib=7.8, nvml_error="NVML unavailable: NVML Shared Library Not Found")


def cpu_samples() -> list[DeviceSample]:
    return [DeviceSample("CPU", 37.0, 2.4, 7.8)]


def gpu_samples(n: int = 4) -> list[DeviceSample]:
    return [DeviceSample(f"GPU{i}", 91.0 - 3 * i, 41.5, 79.65) for i in range(n)]


def fill_store(store) -> list:
    """Four runs (succeeded, failed after an OOM retry, cancelled, queued), with metrics and logs."""
    from launcher.store import Attempt, MetricsSummary

    home = Path(store.path).parent
    out = []
    specs = [
        ("a1b2c3d4", "succeeded", "mini-transformer · recipe synthetic", 0, None),
        ("b2c3d4e5", "failed", "gpt2 · train.py", 1, "rank 1 exited with exit code 1"),
        ("c3d4e5f6", "cancelled", "resnet50 · recipe synthetic", -15, "cancelled"),
        ("d4e5f6a7", "queued", "llama3-8b · recipe synthetic", None, None),
    ]
    plan = demo_cpu_plan().model_dump(mode="json")
    for i, (rid, status, label, code, error) in enumerate(specs):
        created = T0 + 600 * i
        rec = store.create(label=label, plan=plan, run_id=rid)
        rdir = home / "runs" / rid
        adir = rdir / "attempt-1"
        adir.mkdir(parents=True, exist_ok=True)
        fields = {"created": created, "run_dir": str(rdir)}
        if status != "queued":
            fields.update(started=created + 2, ended=created + 2 + 40 * (i + 1), exit_code=code, error=error)
            attempts = [Attempt(n=1, micro_batch=2, grad_accum=1, status="succeeded" if status == "succeeded" else
                                ("oom" if status == "failed" else "cancelled"), exit_code=code if status != "failed" else 1,
                                started=created + 2, ended=created + 20, log_dir=str(adir),
                                error="out of GPU memory" if status == "failed" else None)]
            if status == "failed":
                adir2 = rdir / "attempt-2"
                adir2.mkdir(parents=True, exist_ok=True)
                attempts.append(Attempt(n=2, micro_batch=1, grad_accum=2, status="failed", exit_code=1,
                                        started=created + 21, ended=created + 80, log_dir=str(adir2), error=error))
            fields["attempts"] = attempts
            rows = [{"step": s, "loss": round(0.69 * 0.8 ** s + 0.05, 4), "samples_per_s": 5.0 + s / 10,
                     "rank": r, "time": created + 3 + s, "attempt": len(attempts)} for s in range(1, 9) for r in (0, 1)]
            (rdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            log = [f"[default{r}]:step {s}: loss {0.69 * 0.8 ** s + 0.05:.4f}, {5.0 + s / 10:.1f} samples/s (rank {r})"
                   for s in range(1, 9) for r in (0, 1)]
            (Path(attempts[-1].log_dir) / "launcher.log").write_text("\n".join(log) + "\n")
            fields["metrics"] = MetricsSummary.from_jsonl(rdir / "metrics.jsonl")
        rec = store.update(rec.id, **fields)
        if status != "queued":
            store.transition(rec.id, "running", expect=["queued"], started=fields["started"])
            rec = store.transition(rec.id, status, expect=["running"], ended=fields["ended"])
        out.append(rec)
    return out


def demo_cpu_plan() -> Plan:
    from advisor.config import TrainConfig

    return Plan(model=ModelRef(name="mini-transformer"), config=TrainConfig(micro_batch=2, seq_len=32, precision="fp32",
                                                                          strategy="ddp"),
                processes_per_node=2, cpu=True, global_batch=4, lr=3e-4, base_lr=3e-4, base_batch=4, warmup_steps=1,
                pin_memory=False)


def demo_recommendation() -> RecView:
    """llama3-8b on 4x H100-SXM with a 10 h deadline: FSDP on 4 GPUs (illustrative numbers)."""
    from advisor.config import TrainConfig
    from rules.recommend import Recommendation

    ref = ModelRef(name="llama3-8b")
    cfg = TrainConfig(micro_batch=1, grad_accum=32, seq_len=2048, precision="bf16", compile=True, strategy="fsdp")
    plan = Plan(model=ref, config=cfg, gpu="H100-SXM", processes_per_node=4, global_batch=128, lr=2e-5, base_lr=2e-5,
                base_batch=128, warmup_steps=391, total_steps=7813, epochs=1, dataset_size=1_000_000, num_workers=4)
    command = ("advise launch --model llama3-8b --gpus 4 --strategy fsdp --micro-batch 1 --batch-size 128 "
               "--seq-len 2048 --precision bf16 --compile --dataset-size 1000000 --epochs 1 --deadline 10h")
    data = {
        "recommendation": {"strategy": "fsdp", "gpus": 4, "nodes": 1, "micro_batch": 1, "grad_accum": 32,
                           "global_batch": 128, "precision": "bf16", "compile": True, "grad_ckpt": False, "lr": 2e-5,
                           "lr_scaling": "linear", "warmup_steps": 391, "num_workers": 4, "fits": True,
                           "command": command, "gpu": "H100-SXM", "optimizer": "adamw", "channels_last": False,
                           "seq_len": 2048, "base_lr": 2e-5, "base_batch": 128, "total_steps": 7813,
                           "time_to_train_h": 14.0, "deadline_h": 10.0},
        "estimate": {"model": {"name": "llama3-8b", "params": 8_030_261_248, "trainable_params": 8_030_261_248,
                               "family": "decoder", "source": "catalog"},
                     "hardware": {"gpu": "H100-SXM", "count": 4, "per_node": 4, "nodes": 1, "memory_gib": 79.65,
                                  "interconnect": "nvlink", "detected": True},
                     "config": cfg.model_dump(mode="json"),
                     "memory": {"weights_gib": 7.5, "gradients_gib": 7.5, "optimizer_gib": 15.0, "activations_gib": 9.0,
                                "other_gib": 3.5, "peak_gib": 42.4, "device_gib": 45.9, "gpu_memory_gib": 79.65,
                                "fits": True, "peak_at": "optimizer-step", "trainable_params": 8_030_261_248},
                     "throughput": {"samples_per_s": 19.8, "step_s": 6.46, "tokens_per_s": 40_550.0, "mfu": 0.48,
                                    "tflops_per_gpu": 475.0, "compute_s": 6.1, "comm_s": 1.2, "exposed_comm_s": 0.36,
                                    "optimizer_s": 0.02, "host_bound": False},
                     "time_to_train_h": 14.0},
        "decision_path": [
            {"node": "A", "question": "Start", "answer": "llama3-8b (8,030M parameters) on 4x H100-SXM (detected)",
             "why": "", "key": "start"},
            {"node": "B", "question": "fits on one GPU?", "answer": "no: ~130 GiB per GPU at micro-batch 1",
             "why": "weights, gradients and AdamW states alone are 120 GiB", "key": "too-big"},
            {"node": "C", "question": "how many GPUs?", "answer": "sharded over 2 or more", "why": "", "key": "several"},
            {"node": "I", "question": "DDP or FSDP?", "answer": "FSDP: a full replica does not fit",
             "why": "DDP would need 130 GiB per GPU", "key": "fsdp"},
            {"node": "J", "question": "learning rate?", "answer": "2e-05 at batch 128, 391 warmup steps", "why": "",
             "key": "done"},
        ],
        "rules_fired": [
            {"id": "precision.bf16", "why": "H100-SXM (compute capability 9.0) has bf16 tensor cores: autocast with "
                                            "fp32 master weights, no GradScaler."},
            {"id": "compile.repays", "why": "~4 min to compile, steps ~27% faster: repaid after ~16 min."},
            {"id": "dataparallel.never", "why": "one process per GPU (DDP/FSDP), never nn.DataParallel."},
            {"id": "deadline.missed", "level": "warning",
             "why": "14.0 h on all 4 GPUs, over the 10 h deadline by 4.0 h."},
        ],
        "alternatives": [
            {"name": "8 GPUs", "kind": "scale-out", "summary": "FSDP on 8x H100-SXM: 7.2 h", "fits": True, "gpus": 8,
             "strategy": "fsdp", "peak_gib": 40.1, "samples_per_s": 38.4, "time_to_train_h": 7.2,
             "cost": {"speed": "needs 4 more GPUs"}},
            {"name": "LoRA r16", "kind": "compromise", "summary": "adapters only: fits on one GPU", "fits": True,
             "gpus": 1, "strategy": "single", "peak_gib": 31.0,
             "cost": {"accuracy_risk": "adapters, not a full fine-tune"}},
        ],
        "warnings": ["the deadline is missed by 4.0 h with the GPUs at hand"],
        "plan": plan.model_dump(mode="json"),
        "scaling": [
            {"gpus": 1, "strategy": "single", "fits": False, "device_gib": 130.2, "chosen": False,
             "note": "needs ~130 GiB per GPU; 75.7 of 80 GiB are usable"},
            {"gpus": 2, "strategy": "fsdp", "fits": True, "micro_batch": 1, "grad_accum": 64, "samples_per_s": 10.1,
             "scaling_efficiency": 1.0, "speedup": 1.0, "baseline": True, "time_to_train_h": 27.5, "peak_gib": 56.8,
             "chosen": False},
            {"gpus": 4, "strategy": "fsdp", "fits": True, "micro_batch": 1, "grad_accum": 32, "samples_per_s": 19.8,
             "scaling_efficiency": 0.98, "speedup": 1.96, "time_to_train_h": 14.0, "peak_gib": 42.4, "chosen": True},
        ],
    }
    info = ModelInfo(ref=ref, name="llama3-8b", params=8_030_261_248, family="decoder", task="causal LM",
                     description="Llama 3 8B (meta-llama/Meta-Llama-3-8B)", default_seq_len=2048)
    return RecView(rec=Recommendation.model_validate(data), model=info,
                   hardware_label="4x NVIDIA H100 80GB HBM3 (detected)", tree=tree_nodes())


# ---------------------------------------------------------------- README screenshots
def save_screenshots(out_dir: str | Path, home: str | Path = "/tmp/cardwise-demo") -> list[Path]:
    """The SVGs of docs/usage.md, from the real rules on the demo 4x H100 machine, and a real 2-process CPU run.

        python -m tui.demo docs/img
    """
    import shutil
    import time as _time

    from launcher.store import RunStore
    from tui.app import make_app
    from tui.monitor import FixedSampler
    from tui.state import HardwareChoice, WizardState, Workload

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(home, ignore_errors=True)
    saved: list[Path] = []

    async def until(pilot, cond, timeout: float = 120.0) -> None:
        end = _time.monotonic() + timeout
        while not cond():
            if _time.monotonic() > end:
                raise TimeoutError("screenshot state not reached")
            await pilot.pause(0.1)

    def shot(app, name: str) -> None:
        saved.append(Path(app.save_screenshot(f"{name}.svg", path=str(out_dir))))

    machine = gpu_machine(4)
    state = WizardState(hardware=HardwareChoice.initial(machine), model=ModelRef(name="llama3-8b"),
                        workload=Workload(dataset_size=1_000_000, epochs=1, deadline_h=10))
    app = make_app(machine, RunStore.open(Path(home) / "gpu"), state=state,
                   sampler_factory=lambda m: FixedSampler(gpu_samples()))

    async def advice(pilot):
        await pilot.press("f5")
        await until(pilot, lambda: pilot.app.recommendation is not None)
        await pilot.pause(0.3)
        shot(pilot.app, "wizard-recommendation")
        await pilot.press("2", "tab", "end", "up", "up")  # the cursor on I: DDP or FSDP?
        await pilot.pause(0.3)
        shot(pilot.app, "wizard-decision-tree")
        pilot.app.exit(0)

    app.run(headless=True, size=(80, 24), auto_pilot=advice)

    cpu_state = WizardState(hardware=HardwareChoice.initial(cpu_machine()), model=ModelRef(name="mini-transformer"),
                            workload=Workload(seq_len=32))
    app = make_app(cpu_machine(2), RunStore.open(Path(home) / "cpu"), state=cpu_state,
                   sampler_factory=lambda m: FixedSampler(cpu_samples()))

    async def monitor(pilot):
        await pilot.press("f6")
        screen = pilot.app.screen
        screen.query_one("#micro").value = "2"
        screen.query_one("#steps").value = "20"
        await pilot.press("ctrl+r")
        await until(pilot, lambda: screen.run_id is not None and not screen.running)
        await pilot.pause(1.0)
        pilot.app.clear_notifications()
        await pilot.pause(0.2)
        shot(pilot.app, "wizard-monitor")
        pilot.app.exit(0)

    app.run(headless=True, size=(80, 24), auto_pilot=monitor)
    return saved


if __name__ == "__main__":
    import sys

    for p in save_screenshots(sys.argv[1] if len(sys.argv) > 1 else "docs/img"):
        print(p)
