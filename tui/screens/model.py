"""Step 2, Model: the searchable catalog with sizes, a Hugging Face config.json, or a module.

Typing filters the catalog; Enter (on the search or a row) picks a model. A ``config.json`` path
or a ``FILE.py:FACTORY`` module is resolved in a worker (a module is traced on the meta device,
which imports torch), and a mistake is flagged on its field with the estimator's own message.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.widgets import DataTable, Input, Static

from advisor import units
from advisor.errors import UserError
from advisor.plan import ModelRef
from tui import compute
from tui.fields import FieldSpec, text
from tui.messages import ModelResolved
from tui.screens.base import StepScreen
from tui.widgets.form_row import FormRow


HF_FIELD = FieldSpec("hf_config", "HF config.json", text, "a local config.json; Enter to use it", "path/config.json")
MODULE_FIELD = FieldSpec("module", "module", text, "FILE.py:FACTORY or pkg.mod:FACTORY; Enter", "model.py:build")
SHAPE_FIELD = FieldSpec("input_shape", "input shape", units.shape, "per-sample input of the module", "3,224,224")


class ModelScreen(StepScreen):
    STEP = "model"
    CSS_PATH = "model.tcss"
    AUTO_FOCUS = "#search"

    def compose_body(self) -> ComposeResult:
        yield Input(placeholder="search the catalog (llama, vit, resnet, encoder ...); Enter picks the first match",
                    id="search", compact=True)
        yield DataTable(id="catalog", cursor_type="row", zebra_stripes=True)
        yield FormRow(HF_FIELD)
        yield FormRow(MODULE_FIELD)
        yield FormRow(SHAPE_FIELD)
        yield Static("", id="chosen", classes="panel")

    def on_mount(self) -> None:
        self.rows = compute.catalog_rows()
        table = self.query_one("#catalog", DataTable)
        table.add_columns("model", "params", "family", "task", "description")
        self._fill("")
        self._show_chosen(None)

    # -------------------------------------------------------------- catalog
    def _matches(self, query: str) -> list[compute.ModelInfo]:
        words = query.lower().split()
        return [r for r in self.rows
                if all(w in f"{r.name} {r.family} {r.task} {r.description}".lower() for w in words)]

    def _fill(self, query: str) -> None:
        table = self.query_one("#catalog", DataTable)
        table.clear()
        for r in self._matches(query):
            table.add_row(r.name, compute.human_count(r.params), r.family, r.task, r.description, key=r.name)

    @on(Input.Changed, "#search")
    def _search(self, event: Input.Changed) -> None:
        self._fill(event.value)

    @on(Input.Submitted, "#search")
    def _search_pick(self, event: Input.Submitted) -> None:
        found = self._matches(event.value)
        if not found:
            self.notify(f"no catalog model matches '{event.value}'", severity="warning")
            return
        self._choose(found[0])

    @on(DataTable.RowSelected, "#catalog")
    def _row_pick(self, event: DataTable.RowSelected) -> None:
        name = str(event.row_key.value)
        info = next(r for r in self.rows if r.name == name)
        self._choose(info)

    # -------------------------------------------------------------- other sources
    @on(Input.Submitted, "#in-hf_config")
    def _hf(self, event: Input.Submitted) -> None:
        path = event.value.strip()
        if path:  # reading it can take seconds (a model is built and traced on the meta device): say so
            self.query_one("#chosen", Static).update(f"reading {path} and tracing the model on the meta device ...")
            self._resolve(ModelRef(hf_config=path), "hf_config")

    @on(Input.Submitted, "#in-module, #in-input_shape")
    def _module(self, event: Input.Submitted) -> None:
        mod = self.query_one("#row-module", FormRow)
        shape = self.query_one("#row-input_shape", FormRow)
        if not mod.input.value.strip():
            mod.set_problem("give FILE.py:FACTORY")
            return
        if not shape.valid:
            return
        try:
            ref = ModelRef(module=mod.input.value.strip(), input_shape=shape.value)
        except UserError as exc:
            mod.set_problem(exc.what)
            return
        self.query_one("#chosen", Static).update("tracing the module on the meta device ...")
        self._resolve(ref, "module")

    @work(thread=True, exclusive=True, group="model")
    def _resolve(self, ref: ModelRef, where: str) -> None:
        try:
            info = compute.resolve_model(ref)
        except UserError as exc:
            self.post_message(ModelResolved(None, exc.message(), where))
            return
        except Exception as exc:  # a module that fails to build: the user's code, show its error
            self.post_message(ModelResolved(None, f"{type(exc).__name__}: {exc}", where))
            return
        self.post_message(ModelResolved(info, None, where))

    def on_model_resolved(self, message: ModelResolved) -> None:
        row = self.query(f"#row-{message.where}").first(FormRow) if message.where else None
        if message.info is None:
            if row is not None:
                row.set_problem(message.error.splitlines()[0] if message.error else "cannot read it")
            self.query_one("#chosen", Static).update(f"[b red]{message.error}[/]")
            return
        if row is not None:
            row.set_problem(None)
        self._choose(message.info)

    # -------------------------------------------------------------- choosing
    def _choose(self, info: compute.ModelInfo) -> None:
        state = self.wizard.state
        if state.model != info.ref:
            state.model = info.ref
            self.wizard.changed()
        self.wizard.model_info = info
        self._show_chosen(info)
        self.notify(f"model: {info.name} ({compute.human_count(info.params)} parameters)", timeout=2)
        self.app.action_step("workload")

    def _show_chosen(self, info: compute.ModelInfo | None) -> None:
        out = self.query_one("#chosen", Static)
        if info is None:
            info = self.wizard.model_info
        if info is None:
            out.update("[dim]no model chosen yet: Enter on a row, or give a config.json / module[/dim]")
            return
        out.update(f"[b]Chosen:[/b] {info.name} · {compute.human_count(info.params)} parameters · {info.family}"
                   + (f" · {info.task}" if info.task else ""))
