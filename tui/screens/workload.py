"""Step 3, Workload: the workload flags as a form, with the estimate updating as values change.

Each change re-validates its field (the CLI's parsers: a bad value is flagged on the field with
the CLI's message and never reaches the estimator). When every field is valid the wizard's state
is updated and a worker computes the rules' recommendation, whose headline numbers show under
the form. A newer change supersedes an older computation:
the worker is exclusive and waits a moment first, so typing is never blocked by estimating.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label, Select, Static
from textual.worker import get_current_worker

from advisor.errors import UserError
from advisor.units import format_hours
from tui import compute
from tui.fields import FieldSpec, duration_hours, positive_float, positive_int, task
from tui.messages import PreviewReady
from tui.screens.base import StepScreen
from tui.state import Workload
from tui.widgets.form_row import FormRow

if TYPE_CHECKING:
    from rules.recommend import Recommendation

FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("task", "task", task, "pretrain or finetune: picks the LR recipe", "family default"),
    FieldSpec("batch_size", "global batch", positive_int, "samples per optimizer step, all GPUs", "rules choose"),
    FieldSpec("seq_len", "seq len", positive_int, "tokens per sample", "model default"),
    FieldSpec("image_size", "image size", positive_int, "image side in pixels", "model default"),
    FieldSpec("dataset_size", "dataset size", positive_int, "training samples per epoch", "-"),
    FieldSpec("epochs", "epochs", positive_float, "passes over the dataset", "-"),
    FieldSpec("deadline_h", "deadline", duration_hours, "e.g. 6h, 90m, 2d (needs dataset and epochs)", "none"),
    FieldSpec("base_lr", "base LR", positive_float, "LR tuned at the base batch", "family default"),
    FieldSpec("base_batch", "base batch", positive_int, "global batch the base LR was tuned at", "family default"),
)
DEBOUNCE_S = 0.15


def preview_text(rec: Recommendation) -> str:
    """The recommendation's headline numbers, three lines under the form."""
    r, e = rec.recommendation, rec.estimate
    fits = "[b green]fits[/]" if r.fits else "[b red]does not fit[/]"
    note = rec.warnings[0] if rec.warnings else ""
    return (f"[b]{r.strategy}[/b] on {r.gpus} GPU(s) · micro-batch {r.micro_batch} x {r.grad_accum} accum"
            f" = global {r.global_batch} · {r.precision}\n"
            f"peak {e.memory.peak_gib:.1f} GiB of {e.hardware.memory_gib:.0f} GiB per GPU: {fits} · "
            f"{e.throughput.samples_per_s:,.1f} samples/s · time to train {format_hours(e.time_to_train_h)}\n"
            + (f"[dim]{note}[/dim]" if note else "[dim]ctrl+n: the full recommendation[/dim]"))


def _text(name: str, value) -> str:
    if value is None:
        return ""
    if name == "deadline_h":
        return f"{value:g}h"
    return f"{value:g}" if isinstance(value, float) else str(value)


class WorkloadScreen(StepScreen):
    STEP = "workload"
    CSS_PATH = "workload.tcss"
    AUTO_FOCUS = "#in-batch_size"

    def compose_body(self) -> ComposeResult:
        yield Static("", id="wl-title", classes="title")
        w = self.wizard.state.workload
        with Vertical(id="form"):
            for spec in FIELDS:
                yield FormRow(spec, _text(spec.name, getattr(w, spec.name)))
            with Horizontal(classes="form-row", id="row-lr_scaling"):
                yield Label("LR scaling", classes="form-label")
                yield Select([("recipe's", "auto"), ("linear", "linear"), ("sqrt", "sqrt"), ("none", "none")], value=w.lr_scaling,
                             allow_blank=False, compact=True, id="lr-scaling")
                yield Static("with the global batch (Goyal et al. 2017)", classes="form-hint")
        yield Static("", id="preview", classes="panel")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token = 0
        self._last = "[dim]estimating[/dim]"

    def on_screen_resume(self) -> None:
        self._retitle()
        self._recompute()

    def on_mount(self) -> None:
        self._retitle()

    def _retitle(self) -> None:
        st = self.wizard.state
        model = st.model.label() if st.model else "no model yet (F3)"
        self.query_one("#wl-title", Static).update(f"Workload: {model} on {st.hardware.label(self.wizard.machine)}")
        info = self.wizard.model_info
        if st.model is not None and st.model.name and (info is None or info.ref != st.model):
            try:  # a catalog model is data: resolving it is instant (no torch)
                info = self.wizard.model_info = compute.resolve_model(st.model)
            except UserError:
                info = None
        if info is not None and info.ref == st.model:
            seq = self.query_one("#row-seq_len", FormRow)
            img = self.query_one("#row-image_size", FormRow)
            seq.set_placeholder(f"{info.default_seq_len}" if info.default_seq_len else "n/a")
            img.set_placeholder(f"{info.default_image_size}" if info.default_image_size else "n/a")

    # -------------------------------------------------------------- changes
    @on(Input.Changed, ".form-input")
    def _changed(self, event: Input.Changed) -> None:
        self._recompute()

    @on(Select.Changed, "#lr-scaling")
    def _scaling(self, event: Select.Changed) -> None:
        self._recompute()

    def rows(self) -> list[FormRow]:
        return list(self.query(FormRow).results(FormRow))

    def _recompute(self) -> None:
        self.token += 1  # whatever happens next, a computation still running is out of date
        rows = self.rows()
        bad = [r for r in rows if not r.valid]
        if bad:
            self.wizard.flag("workload", f"{bad[0].spec.label}: {bad[0].error}")
            self._say(f"[b red]{bad[0].spec.label}: {bad[0].error}[/] — fix the flagged field")
            return
        values = {r.spec.name: r.value for r in rows}
        scaling = self.query_one("#lr-scaling", Select).value
        workload = Workload(**values, lr_scaling=scaling if scaling is not Select.BLANK else "auto")
        problems = workload.problems()
        for r in rows:
            r.set_problem(problems.get(r.spec.name))
        if problems:
            name, msg = next(iter(problems.items()))
            self.wizard.flag("workload", msg)
            self._say(f"[b yellow]{msg}[/]")
            return
        self.wizard.flag("workload", None)
        if workload != self.wizard.state.workload:
            self.wizard.state.workload = workload
            self.wizard.changed()
        if self.wizard.state.model is None:
            self._say("[dim]pick a model first (F3); the estimate appears here[/dim]")
            return
        self._say(self._last + " [dim]…[/dim]")
        self._preview(self.token, self.wizard.state.snapshot())

    def _say(self, markup: str) -> None:
        self.query_one("#preview", Static).update(markup)

    # -------------------------------------------------------------- worker
    @work(thread=True, exclusive=True, group="preview")
    def _preview(self, token: int, state) -> None:
        time.sleep(DEBOUNCE_S)  # a newer keystroke cancels this worker before it computes
        worker = get_current_worker()
        if worker.is_cancelled:
            return
        machine, home = self.wizard.machine, self.wizard.home
        try:
            rec = compute.recommendation(state, machine, home)
            info = compute.resolve_model(state.model)
        except UserError as exc:
            if not worker.is_cancelled:
                self.post_message(PreviewReady(token, None, None, exc.message()))
            return
        except Exception as exc:  # never let a bad combination crash the form
            if not worker.is_cancelled:
                self.post_message(PreviewReady(token, None, None, f"{type(exc).__name__}: {exc}"))
            return
        if not worker.is_cancelled:
            self.post_message(PreviewReady(token, rec, info))

    def on_preview_ready(self, message: PreviewReady) -> None:
        if message.token != self.token:
            return  # an older computation finishing late
        if message.rec is None:
            self._last = f"[b red]{message.error}[/]"
            self._say(self._last)
            return
        info = message.info
        if self.wizard.model_info is None or self.wizard.model_info.ref != info.ref:
            self.wizard.model_info = info
            self._retitle()
        self._last = preview_text(message.rec)
        self._say(self._last)
