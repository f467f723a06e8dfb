"""Step 1, Hardware: the GPUs detected (name, memory, links), or a machine to plan for.

With no GPU detected (or with "plan for another machine" on) the user picks a GPU kind from the
GPU table, a count per node and a number of nodes, as ``--gpu NAME --gpus N --nodes N`` do.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Input, Label, Select, Static, Switch

from advisor.errors import UserError
from tui.fields import ParserValidator, positive_int
from tui.screens.base import StepScreen
from tui.state import DEFAULT_PLANNED_COUNT, HardwareChoice


def links_text(machine) -> str:
    if len(machine.gpus) < 2:
        return "links: single GPU" if machine.gpus else ""
    nv = [l for l in machine.links if l.kind == "nvlink"]
    if not machine.links:
        return "links: unknown"
    if len(nv) == len(machine.links):
        counts = sorted({l.nvlinks for l in nv})
        return f"links: NVLink between every pair (NV{'/NV'.join(map(str, counts))})"
    if nv:
        return f"links: NVLink on {len(nv)} of {len(machine.links)} pairs, PCIe elsewhere"
    return "links: PCIe only (no NVLink): all-reduce goes over PCIe"


class HardwareScreen(StepScreen):
    STEP = "hardware"
    CSS_PATH = "hardware.tcss"
    AUTO_FOCUS = "#plan-switch, #gpu-kind"

    def compose_body(self) -> ComposeResult:
        m = self.wizard.machine
        if m.has_gpu:
            yield Static(f"Detected by NVML: {len(m.gpus)} GPU(s)", classes="title")
            yield DataTable(id="gpu-table", cursor_type="row", zebra_stripes=True)
        else:
            yield Static("No GPU detected", classes="title")
            yield Static(f"{m.nvml_error or 'NVML reports 0 GPUs'}. Plan for the GPUs you will train on below; "
                         "launches can still run here as CPU processes.", id="no-gpu", classes="note")
        extra = links_text(m)
        host = f"CPU: {m.cpu_cores} cores · RAM: {m.ram_gib:.1f} GiB"
        if m.driver:
            host += f" · driver {m.driver}" + (f" (CUDA {m.cuda_driver})" if m.cuda_driver else "")
        yield Static(host + (f"\n{extra}" if extra else ""), id="host", classes="note")
        with Horizontal(id="plan-row"):
            if m.has_gpu:
                yield Switch(value=self.wizard.state.hardware.mode == "planned", id="plan-switch")
                yield Label("plan for another machine (GPU kind, count, nodes below)", id="plan-label")
            else:
                yield Label("[b]Plan for:[/b]", id="plan-label", classes="flush")
        h = self.wizard.state.hardware
        from advisor.gpus import all_gpus

        with Horizontal(id="planned", classes="fields"):
            yield Label("GPU kind", classes="field-label")
            yield Select([(f"{g.name} ({g.memory_gib:g} GiB)", g.name) for g in all_gpus()], value=h.gpu,
                         allow_blank=False, compact=True, id="gpu-kind")
        with Horizontal(classes="fields"):
            yield Label("GPUs per node", classes="field-label")
            yield Input(str(h.gpus) if h.gpus else "", placeholder=self._count_placeholder(), id="gpu-count",
                        compact=True, validators=[ParserValidator(positive_int)], classes="field-input")
            yield Label("nodes", classes="field-label short")
            yield Input(str(h.nodes) if h.nodes > 1 else "", placeholder="1", id="node-count", compact=True,
                        validators=[ParserValidator(positive_int)], classes="field-input")
        yield Static("", id="hw-error", classes="error note")
        yield Static("", id="hw-summary", classes="panel")

    def _count_placeholder(self) -> str:
        m = self.wizard.machine
        if self.wizard.state.hardware.mode == "detected" and m.has_gpu:
            return f"all {len(m.gpus)}"
        return str(DEFAULT_PLANNED_COUNT)

    def on_mount(self) -> None:
        m = self.wizard.machine
        if m.has_gpu:
            table = self.query_one("#gpu-table", DataTable)
            table.add_columns("#", "name", "memory", "free", "cc", "util", "table row")
            for g in m.gpus:
                cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "?"
                util = f"{g.utilization_pct:.0f}%" if g.utilization_pct is not None else "?"
                table.add_row(str(g.index), g.name, f"{g.memory_total_gib:.1f} GiB", f"{g.memory_free_gib:.1f} GiB",
                              cc, util, g.spec or "not in table: plan with a GPU kind")
        self._sync_enabled()
        self._summarise()

    # -------------------------------------------------------------- events
    @on(Switch.Changed, "#plan-switch")
    def _toggle(self, event: Switch.Changed) -> None:
        h = self.wizard.state.hardware
        self._apply(h.model_copy(update={"mode": "planned" if event.value else "detected"}))
        self._sync_enabled()
        self.query_one("#gpu-count", Input).placeholder = self._count_placeholder()

    @on(Select.Changed, "#gpu-kind")
    def _kind(self, event: Select.Changed) -> None:
        if event.value is not Select.BLANK:
            self._apply(self.wizard.state.hardware.model_copy(update={"gpu": str(event.value)}))

    @on(Input.Changed, "#gpu-count, #node-count")
    def _counts(self, event: Input.Changed) -> None:
        bad = [i for i in self.query(".field-input").results(Input) if i.value.strip() and not i.is_valid]
        err = self.query_one("#hw-error", Static)
        if bad:
            result = bad[0].validate(bad[0].value)
            message = (f"{'GPUs per node' if bad[0].id == 'gpu-count' else 'nodes'}: "
                       + "; ".join(result.failure_descriptions if result else []))
            err.update(message)
            self.wizard.flag("hardware", message)
            return
        err.update("")
        self.wizard.flag("hardware", None)
        count = self.query_one("#gpu-count", Input).value.strip()
        nodes = self.query_one("#node-count", Input).value.strip()
        self._apply(self.wizard.state.hardware.model_copy(update={
            "gpus": int(count) if count else None, "nodes": int(nodes) if nodes else 1}))

    # -------------------------------------------------------------- helpers
    def _apply(self, choice: HardwareChoice) -> None:
        if choice == self.wizard.state.hardware:
            return
        self.wizard.state.hardware = choice
        self.wizard.changed()
        self._summarise()

    def _sync_enabled(self) -> None:
        planned = self.wizard.state.hardware.mode == "planned"
        self.query_one("#gpu-kind", Select).disabled = not planned
        if self.wizard.machine.has_gpu:
            self.query_one("#gpu-table", DataTable).set_class(planned, "-inactive")

    def _summarise(self) -> None:
        out = self.query_one("#hw-summary", Static)
        err = self.query_one("#hw-error", Static)
        try:
            hw = self.wizard.state.hardware.resolve(self.wizard.machine)
        except UserError as exc:
            err.update(exc.message())
            out.update("")
            return
        err.update("")
        g = hw.gpu
        link = (f"NVLink {g.nvlink_gbps:g} GB/s" if hw.interconnect == "nvlink" and g.nvlink_gbps else f"PCIe {g.pcie_gbps:g} GB/s")
        prec = "bf16" if g.supports_bf16 else "fp16 + GradScaler (no bf16 before compute capability 8.0)"
        nodes = f" x {hw.nodes} nodes" if hw.nodes > 1 else ""
        out.update(f"[b]Planning for:[/b] {hw.gpus_per_node}x {g.name}{nodes} "
                   f"({'detected' if hw.detected else 'planned'})\n"
                   f"{g.memory_gib:g} GiB each · {g.bf16_tflops or g.fp16_tflops:g} TFLOPS dense "
                   f"{'bf16' if g.supports_bf16 else 'fp16'} · {link} · mixed precision: {prec}\n"
                   "[dim]ctrl+n: next step (Model)[/dim]")
