"""The wizard app: the steps as modes, the keys that work everywhere, and the factory.

Screens do the work (one module each under ``tui/screens``); the app only holds what they share:
the machine it was given, the run store, the wizard's choices (``tui.state.WizardState``) with a
version counter so a screen knows when to recompute, and the last recommendation.

Build it with ``make_app(machine, store)``: tests pass a fixed ``advisor.hardware.Machine`` and a
store in a temporary directory instead of patching NVML (posting's ``make_posting`` pattern).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.screen import ModalScreen

from advisor.hardware import Machine
from tui.monitor import DeviceSampler
from tui.screens.hardware import HardwareScreen
from tui.screens.launch import LaunchScreen
from tui.screens.model import ModelScreen
from tui.screens.recommendation import RecommendationScreen
from tui.screens.runs import RunsScreen
from tui.screens.workload import WorkloadScreen
from tui.state import HardwareChoice, WizardState
from tui.widgets.step_bar import STEPS

ORDER = [mode for mode, _, _ in STEPS]


class CardwiseApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "cardwise"
    MODES = {
        "hardware": HardwareScreen,
        "model": ModelScreen,
        "workload": WorkloadScreen,
        "recommendation": RecommendationScreen,
        "launch": LaunchScreen,
        "runs": RunsScreen,
    }
    DEFAULT_MODE = "hardware"
    BINDINGS = [
        Binding("f1", "help", "Help", priority=True),
        Binding("question_mark", "help", "Help", show=False),
        *[Binding(key, f"step('{mode}')", title, show=False, priority=True) for mode, key, title in STEPS],
        Binding("ctrl+n", "next_step", "Next step", priority=True),
        Binding("ctrl+b", "previous_step", "Previous step", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        # Not priority: a table, list, select or scroll area that moves with the arrows keeps them; in a
        # form (single-line inputs, which leave up/down alone) they go from field to field as Tab does.
        Binding("down", "focus_next", "Next field (as Tab)", show=False),
        Binding("up", "focus_previous", "Previous field (as shift+Tab)", show=False),
    ]

    def __init__(self, machine: Machine, store, *, state: WizardState | None = None,
                 sampler_factory: Callable[[Machine], object] | None = None, home: Path | None = None):
        super().__init__()
        self.machine = machine
        self.store = store
        self.home = Path(home) if home is not None else Path(store.path).parent
        self.state = state or WizardState(hardware=HardwareChoice.initial(machine))
        self.version = 0
        self.recommendation = None  # tui.compute.RecView of the current version, once computed
        self.model_info = None  # tui.compute.ModelInfo of state.model, once resolved
        self.problems: dict[str, str] = {}  # step -> the flagged field's message, while one is flagged
        self.sampler_factory = sampler_factory or DeviceSampler
        self.run_cancel: threading.Event | None = None  # set by the launch screen while a run is live

    # -------------------------------------------------------------- shared state
    def changed(self) -> None:
        """A screen changed the wizard's choices: later steps recompute when shown."""
        self.version += 1
        self.recommendation = None

    def flag(self, step: str, message: str | None) -> None:
        """A step has a flagged field (``message``) or none (None); later steps wait for the fix."""
        before = self.problems.get(step)
        if message is None:
            self.problems.pop(step, None)
        else:
            self.problems[step] = message
        if before != message:
            self.version += 1
            self.recommendation = None

    # -------------------------------------------------------------- actions
    def _close_modal(self) -> None:
        while isinstance(self.screen, ModalScreen):
            self.pop_screen()

    def action_step(self, mode: str) -> None:
        self._close_modal()
        if self.current_mode != mode:
            self.switch_mode(mode)

    def _move(self, delta: int) -> None:
        self._close_modal()
        i = ORDER.index(self.current_mode) if self.current_mode in ORDER else 0
        self.switch_mode(ORDER[max(0, min(len(ORDER) - 1, i + delta))])

    def action_next_step(self) -> None:
        self._move(+1)

    def action_previous_step(self) -> None:
        self._move(-1)

    def help_sections(self) -> list[tuple[str, list]]:
        from tui.screens.help import HelpScreen
        from tui.screens.run_detail import RunDetailScreen
        from tui.screens.save_plan import SavePlanScreen

        return [("Everywhere", self.BINDINGS),
                ("Recommendation", RecommendationScreen.BINDINGS), ("Launch & monitor", LaunchScreen.BINDINGS),
                ("Runs", RunsScreen.BINDINGS), ("A run's detail", RunDetailScreen.BINDINGS),
                ("Save-plan dialog", SavePlanScreen.BINDINGS), ("This help", HelpScreen.BINDINGS)]

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        if self.run_cancel is not None:
            self.run_cancel.set()  # the run's worker stops every rank and records "cancelled"
        self.exit(0)


def make_app(machine: Machine, store, *, gpu: str | None = None, gpus: int | None = None, nodes: int = 1,
             state: WizardState | None = None, sampler_factory: Callable[[Machine], object] | None = None,
             home: Path | None = None) -> CardwiseApp:
    """The wizard for ``machine`` (``advisor.hardware.Machine`` data) and ``store`` (a RunStore).

    ``gpu``/``gpus``/``nodes`` preselect a planned machine as ``--gpu --gpus --nodes`` do;
    ``sampler_factory(machine)`` makes the live view's device sampler (tests pass a fixed one).
    """
    if state is None:
        state = WizardState(hardware=HardwareChoice.initial(machine, gpu=gpu, gpus=gpus, nodes=nodes))
    return CardwiseApp(machine, store, state=state, sampler_factory=sampler_factory, home=home)
