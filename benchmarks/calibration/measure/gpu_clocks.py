"""The GPU's clocks, power and clock-event reasons while a row is timed (NVML, sampled on a thread).

Issue 39's i39b call ran the same kernel sequences 1.2-2.1x slower than i39's call, GPU-bound rows included,
while its start-of-call host probe read 1.08x (notebook 2026-12-07-i39b-host-drift): the rows could not say
whether the host or the GPU had slowed. Each row now carries what the GPU ran at during its timed steps:

    with GpuClocks() as clocks:
        run = timed(step, steps, device)
    row.update(clocks.summary())   # sm_clock_mhz_min / _median, power_w_median, temp_c_max, clock_events

``clock_events`` is the OR of NVML's current clock-event (throttle) reasons over the samples (nvml.h
``nvmlClocksEventReason*``: 0x1 GPU idle, 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal,
0x80 power brake). Without NVML (no driver, no nvidia-ml-py, a CPU run) the summary is empty and nothing fails.
"""

from __future__ import annotations

import statistics
import threading


class GpuClocks:
    """Samples GPU ``index`` (NVML's numbering: the lent machines' one GPU is 0 in both) every ``period_s``
    between ``__enter__`` and ``__exit__``."""

    def __init__(self, index: int = 0, period_s: float = 0.02):
        self.index, self.period_s = index, period_s
        self.samples: list[tuple[int, float, int, int]] = []  # (SM MHz, W, deg C, event reasons)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = self._handle = None

    def __enter__(self) -> "GpuClocks":
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception:  # no NVML here: an empty summary
            return self
        self._thread = threading.Thread(target=self._run, name="gpu-clocks", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> tuple[int, float, int, int]:
        n, h = self._nvml, self._handle
        # nvidia-ml-py releases before the "throttle" -> "clock event" rename name the same call the old way
        reasons = (getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or n.nvmlDeviceGetCurrentClocksThrottleReasons)
        return (n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), n.nvmlDeviceGetPowerUsage(h) / 1e3,
                n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU), int(reasons(h)))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
            except Exception:  # one failed read must not end the row
                pass
            self._stop.wait(self.period_s)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    def summary(self) -> dict:
        if not self.samples:
            return {}
        sm, watts, temp, reasons = zip(*self.samples)
        events = 0
        for r in reasons:
            events |= r
        return {"sm_clock_mhz_min": min(sm), "sm_clock_mhz_median": statistics.median(sm),
                "power_w_median": round(statistics.median(watts), 1), "temp_c_max": max(temp),
                "clock_events": events, "clock_samples": len(self.samples)}
