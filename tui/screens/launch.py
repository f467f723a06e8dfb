"""Step 5, Launch & monitor: run the plan (a recipe or your script) and watch it live.

The run goes through the launcher exactly as ``advise launch`` does (tui.launching): recorded in
the run store, executed by ``launcher.runner.execute`` in a worker thread. On a machine without
GPUs the plan is for CPU processes (gloo). While it runs, a timer starts a sampling worker every
half second that reads what is new (log lines the runner echoes, ``metrics.jsonl`` rows, device
usage, the store record with its attempts) and posts one ``RunSample``; the UI thread draws it.
``x`` stops the run cleanly: the runner signals every rank and records ``cancelled``.
"probe first" runs ``advise launch --probe``'s probe in the same worker before the launch
(tui.launching.probe_first) and writes measured beside estimated into the log.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Checkbox, Input, Label, Select, Static

from advisor.errors import UserError
from launcher.host_fit import max_processes
from tui import launching
from tui.fields import ParserValidator, count_up_to, positive_int
from tui.messages import RunFinished, RunSample, RunStarted
from tui.monitor import OOM_RETRY_MARK, LineSink, LiveDataCheck, MetricsTail, data_bound_text, split_rank
from tui.screens.base import StepScreen
from tui.widgets.device_bars import DeviceBars
from tui.widgets.metric_plot import MetricPlot
from tui.widgets.rank_log import RankLog

TARGET_OPTIONS = [("recipe: synthetic data", "synthetic"), ("recipe: text-classification", "text-classification"),
                  ("your script", "script")]
SAMPLE_EVERY_S = 0.5


@dataclass(eq=False)
class ProbeReport(Message):
    """Lines from the probe that runs before a launch (progress, then the summary); this screen's only."""

    lines: list[str]


class LaunchScreen(StepScreen):
    STEP = "launch"
    CSS_PATH = "launch.tcss"
    AUTO_FOCUS = "#target"
    BINDINGS = [
        Binding("ctrl+r", "launch", "Launch"),
        Binding("ctrl+s", "submit_slurm", "Submit to Slurm"),
        Binding("x", "stop", "Stop run"),
        Binding("r", "ranks", "Rank filter"),
    ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_id: str | None = None
        self.run_dir: str | None = None
        self.world = 1
        self.max_steps: int | None = None
        self.started_at = 0.0
        self._cancel: threading.Event | None = None
        self._sink: LineSink | None = None
        self._tail: MetricsTail | None = None
        self._sampler = None
        self._data: LiveDataCheck | None = None
        self._data_line: str | None = None
        self._sample_lock = threading.Lock()
        self._timer = None
        self._thr: dict[int, list[float]] = {}
        self._last_status = ""

    def compose_body(self) -> ComposeResult:
        cores = self.wizard.machine.cpu_cores
        with Horizontal(classes="launch-row"):
            yield Label("run", classes="launch-label")
            yield Select(TARGET_OPTIONS, value="synthetic", allow_blank=False, compact=True, id="target")
            yield Input(placeholder="train.py --lr {lr} --bs {micro_batch}", id="script", compact=True, disabled=True)
            yield Checkbox("probe first", id="probe", compact=True,
                           tooltip="run a few steps first, show them beside the estimate, store the factors")
        with Horizontal(classes="launch-row"):
            yield Label("on", classes="launch-label")
            yield Select(self._device_options(), value="gpu" if self.wizard.machine.has_gpu else "cpu", allow_blank=False, compact=True, id="device")
            yield Label("procs", classes="launch-small")
            yield Input(str(min(2, max(1, cores))), id="procs", compact=True, classes="launch-num",
                        validators=[ParserValidator(count_up_to(max_processes(cores)), required=True)])
            yield Label("micro", classes="launch-small")
            yield Input("", placeholder="4", id="micro", compact=True, classes="launch-num",
                        validators=[ParserValidator(positive_int)])
            yield Label("steps", classes="launch-small")
            yield Input("20", id="steps", compact=True, classes="launch-num", validators=[ParserValidator(positive_int)])
        yield Static("[dim]ctrl+r launches; nothing running[/dim]", id="run-status")
        with Horizontal(id="plots"):
            yield MetricPlot("loss", id="loss-plot")
            yield MetricPlot("samples/s", fmt="{:,.1f}", id="thr-plot")
        yield DeviceBars(id="devices")
        yield RankLog(id="run-log")

    def _device_options(self) -> list[tuple[str, str]]:
        opts = [("CPU processes (gloo)", "cpu")]
        if self.wizard.machine.has_gpu:
            opts.insert(0, ("GPUs: the recommended plan", "gpu"))
        return opts

    def on_mount(self) -> None:
        self._sampler = self.wizard.sampler_factory(self.wizard.machine)
        self.query_one("#devices", DeviceBars).show(self._sampler.sample())
        self.query_one("#run-log", RankLog).add([(None, "ctrl+r launches the run; every rank's output appears here, "
                                                        "r shows one rank at a time")])
        self._sync_form()

    def on_unmount(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
        if self._sampler is not None:
            self._sampler.close()

    # -------------------------------------------------------------- form
    @on(Select.Changed, "#target, #device")
    def _form_changed(self, event: Select.Changed) -> None:
        self._sync_form()
        if event.select.id == "target" and event.value == "script":
            self.query_one("#script", Input).focus()

    def _sync_form(self) -> None:
        """Enable what applies: the script field for scripts, processes and micro-batch for CPU runs."""
        busy = self.running
        script = self.query_one("#target", Select).value == "script"
        cpu = self.query_one("#device", Select).value == "cpu"
        self.query_one("#target", Select).disabled = busy
        self.query_one("#device", Select).disabled = busy
        self.query_one("#script", Input).disabled = busy or not script
        self.query_one("#procs", Input).disabled = busy or not cpu
        self.query_one("#micro", Input).disabled = busy or not cpu
        self.query_one("#steps", Input).disabled = busy
        self.query_one("#probe", Checkbox).disabled = busy

    @property
    def running(self) -> bool:
        return self._cancel is not None

    def _choice(self) -> launching.LaunchChoice:
        for inp in self.query(".launch-num").results(Input):
            if inp.disabled:
                continue
            result = inp.validate(inp.value)
            if result is not None and not result.is_valid:
                raise UserError(f"{inp.id}: {'; '.join(result.failure_descriptions)}", fix="fix the flagged field")

        def num(wid: str) -> int | None:
            v = self.query_one(wid, Input).value.strip()
            return int(v) if v else None

        return launching.LaunchChoice(
            target=str(self.query_one("#target", Select).value), script=self.query_one("#script", Input).value,
            cpu=self.query_one("#device", Select).value == "cpu", processes=num("#procs") or 1,
            micro_batch=num("#micro"), max_steps=num("#steps"))

    def _status(self, markup: str) -> None:
        self._last_status = markup
        self.query_one("#run-status", Static).update(markup)

    # -------------------------------------------------------------- launch / stop
    def _ready_plan(self, busy: str):
        """(choice, plan, target, notes) of the form, or None with the reason shown: the checks that
        running here (``action_launch``) and handing to Slurm (``action_submit_slurm``) share."""
        if self.running:
            self.notify(busy, severity="warning")
            return None
        if self.wizard.problems:
            step, message = next(iter(self.wizard.problems.items()))
            self._status(f"[b red]{message}[/] — fix it on the {step.title()} screen first")
            return None
        try:
            choice = self._choice()
            plan, notes = launching.build_plan(choice, self.wizard.state, self.wizard.recommendation,
                                               self.wizard.machine)
            return choice, plan, launching.build_target(choice, plan), notes
        except UserError as exc:
            self._status(f"[b red]{escape(exc.message())}[/]")
            return None

    def action_launch(self) -> None:
        ready = self._ready_plan("a run is already going: x stops it")
        if ready is None:
            return
        choice, plan, target, notes = ready
        self._cancel = threading.Event()
        self.wizard.run_cancel = self._cancel
        self._sink = LineSink()
        self.max_steps = choice.max_steps or plan.total_steps
        self.world = plan.world_size
        self._thr.clear()
        self.query_one("#loss-plot", MetricPlot).reset()
        self.query_one("#thr-plot", MetricPlot).reset()
        log = self.query_one("#run-log", RankLog)
        log.reset(range(plan.world_size))
        for note in notes:
            log.add([(None, f"note: {note}")])
        self._sync_form()
        log.focus()
        probe = self.query_one("#probe", Checkbox).value
        self._status("probing one device first …" if probe else
                     f"starting {plan.world_size} {'CPU process' if plan.cpu else 'GPU rank'}(es) …")
        self._execute(plan, target, choice.max_steps, self._cancel, self._sink, notes, probe)

    def action_submit_slurm(self) -> None:
        """The form's plan handed to Slurm instead of run here: ``advise submit --slurm``'s call
        (tui.launching.submit_slurm); the Runs screen and ``advise runs`` then show Slurm's state."""
        ready = self._ready_plan("a run is going here: x stops it first")
        if ready is None:
            return
        choice, plan, target, _ = ready
        self._status(f"submitting {plan.nodes} node(s) x {plan.processes_per_node} rank(s) to Slurm …")
        self._submit_slurm(plan, target, choice.max_steps)

    @work(thread=True, exclusive=True, group="slurm")
    def _submit_slurm(self, plan, target, max_steps) -> None:
        try:
            rec = launching.submit_slurm(self.wizard.store, plan, target, max_steps=max_steps)
        except UserError as exc:
            self.app.call_from_thread(self._status, f"[b red]{escape(exc.message())}[/]")
            return
        job = rec.slurm["job_id"]
        self.app.call_from_thread(self._status, f"submitted run {rec.id} as Slurm job {job} — the Runs screen (F7) and "
                                                f"`advise runs` show Slurm's state, `advise logs {rec.id} -f` its output")

    def action_stop(self) -> None:
        if not self.running:
            self.notify("nothing running", severity="warning")
            return
        self._cancel.set()
        self._status("[b yellow]stopping[/]: every rank gets SIGTERM, then SIGKILL after 5 s …")

    def action_ranks(self) -> None:
        name = self.query_one("#run-log", RankLog).cycle()
        self.notify(f"log: {name}", timeout=1.5)

    # -------------------------------------------------------------- workers
    @work(thread=True, exclusive=True, group="run")
    def _execute(self, plan, target, max_steps, cancel: threading.Event, sink: LineSink, notes: list[str],
                 probe: bool = False) -> None:
        store = self.wizard.store
        run_id = None
        try:
            launching.check_fits(plan)  # RAM and cores, before the probe, the record or any process
            if probe:
                result = launching.probe_first(plan, Path(store.path).parent, cancel=cancel,
                                               progress=lambda text: self.post_message(ProbeReport([f"probe: {text}"])))
                go, lines = launching.probe_summary(result)
                self.post_message(ProbeReport(lines))
                if not go or cancel.is_set():
                    self.post_message(RunFinished(None, None, lines[0] if not go else "cancelled during the probe"))
                    return
            rec, rdir = launching.create_run(store, plan, target)
            run_id = rec.id
            self.post_message(RunStarted(rec.id, str(rdir), plan.world_size, notes))
            final = launching.execute_run(store, rec.id, plan, target, rdir, max_steps=max_steps, cancel=cancel, echo=sink)
        except UserError as exc:
            self.post_message(RunFinished(run_id, None, exc.message()))
            return
        except Exception as exc:  # reported on the screen; the record says failed
            self.post_message(RunFinished(run_id, None, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(RunFinished(run_id, final))

    def _tick(self) -> None:
        if self.run_id is not None:
            self._sample(self.run_id, False)

    @work(thread=True, exclusive=True, group="monitor")
    def _sample(self, run_id: str, final: bool) -> None:
        if not self._sample_lock.acquire(blocking=final):
            return  # the previous sample is still being read
        try:
            lines = self._sink.drain(final=final) if self._sink else []
            rows = self._tail.read() if self._tail else []
            devices = self._sampler.sample() if self._sampler else []
            try:
                record = self.wizard.store.get(run_id)
            except Exception:
                record = None
            bound = self._data.add(rows, devices) if self._data is not None else None
            self.post_message(RunSample(run_id, lines, rows, devices, record, bound))
        finally:
            self._sample_lock.release()

    # -------------------------------------------------------------- messages
    def on_probe_report(self, message: ProbeReport) -> None:
        self.query_one("#run-log", RankLog).add([(None, line) for line in message.lines])

    def on_run_started(self, message: RunStarted) -> None:
        self.run_id, self.run_dir, self.world = message.run_id, message.run_dir, message.world_size
        self.started_at = time.monotonic()
        self._tail = MetricsTail(Path(message.run_dir) / "metrics.jsonl")
        self._data = LiveDataCheck()
        self.query_one("#run-log", RankLog).add([(None, f"run {message.run_id}: {message.world_size} rank(s), "
                                                        f"logs in {message.run_dir}")])
        self._timer = self.set_interval(SAMPLE_EVERY_S, self._tick)

    def on_run_sample(self, message: RunSample) -> None:
        if message.run_id != self.run_id:
            return
        entries = []
        for line in message.lines:
            rank, text = split_rank(line)
            if rank is None and self.world == 1 and not line.startswith("cardwise:"):
                rank = 0
            entries.append((rank, text))
            if line.startswith(OOM_RETRY_MARK):
                self.notify(line.removeprefix("cardwise: "), title="OOM retry", severity="warning", timeout=6)
        self.query_one("#run-log", RankLog).add(entries)
        loss = [r["loss"] for r in message.rows if r.get("rank", 0) == 0 and r.get("loss") is not None]
        self.query_one("#loss-plot", MetricPlot).extend(loss)
        done = []
        for r in message.rows:
            if r.get("samples_per_s") is None:
                continue
            acc = self._thr.setdefault(int(r["step"]), [0.0, 0])
            acc[0] += float(r["samples_per_s"])
            acc[1] += 1
            if acc[1] >= self.world:
                done.append(acc[0])
        self.query_one("#thr-plot", MetricPlot).extend(done)
        self.query_one("#devices", DeviceBars).show(message.devices)
        self._data_line = data_bound_text(message.data_bound) or self._data_line
        if message.record is not None and self.running:
            self._status(self._status_text(message.record))

    def _status_text(self, rec) -> str:
        att = rec.attempts[-1] if rec.attempts else None
        steps = max((int(s) for s in self._thr), default=0)
        of = f"/{self.max_steps}" if self.max_steps else ""
        oom = [a for a in rec.attempts if a.status == "oom"]
        text = (f"[b]{rec.status}[/b] run {rec.id} · {self.world} rank(s) · step {steps}{of}"
                f" · {time.monotonic() - self.started_at:.0f} s")
        if att is not None:
            text += f" · attempt {att.n}: micro-batch {att.micro_batch} x {att.grad_accum}"
        if oom:
            text += f"\n[b yellow]{len(oom)} OOM retr{'y' if len(oom) == 1 else 'ies'}[/]: " + ", ".join(
                f"micro-batch {a.micro_batch} ran out of memory" for a in oom)
        if self._cancel is not None and self._cancel.is_set():
            text += " · [b yellow]stopping …[/]"
        if self._data_line:
            text += f"\n{escape(self._data_line)}"
        return text + "   [dim]x: stop · r: rank filter[/dim]"

    def on_run_finished(self, message: RunFinished) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if message.run_id is not None:
            self._sample(message.run_id, True)
        self._cancel = None
        self.wizard.run_cancel = None
        self._sync_form()
        rec = message.record
        if rec is None:
            self._status(f"[b red]launch failed[/]: {message.error}")
            self.notify(message.error or "launch failed", severity="error")
            return
        colour = {"succeeded": "green", "cancelled": "yellow"}.get(rec.status, "red")
        summary = f"[b {colour}]{rec.status}[/] run {rec.id}"
        if rec.started and rec.ended:
            summary += f" in {rec.ended - rec.started:.1f} s"
        m = rec.metrics
        if m is not None:
            summary += f": {m.steps} steps on {m.ranks} rank(s)"
            if m.last_loss is not None:
                summary += f", loss {m.first_loss:.4g} → {m.last_loss:.4g}"
            if m.samples_per_s:
                summary += f", {m.samples_per_s:,.1f} samples/s"
        line = data_bound_text(m.data_bound) if m is not None else None
        if line:
            summary += f"\n{escape(line)}"
        if rec.status != "succeeded" and rec.error:
            summary += f"\n[red]{rec.error}[/]"
        self._status(summary + "   [dim]F7: runs[/dim]")
        self.notify(f"run {rec.id} {rec.status}", severity="information" if rec.status == "succeeded" else "warning")
