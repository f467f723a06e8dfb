"""The measurement rows' GPU clock record (benchmarks/calibration/measure/gpu_clocks.py): what the GPU ran at while a
row was timed, so that a call whose rows slow down says whether the GPU or the host did (issue 39's i39b call)."""

from benchmarks.calibration.measure.gpu_clocks import GpuClocks


def test_without_nvml_the_record_is_empty_and_nothing_fails():
    with GpuClocks(index=10_000) as clocks:  # no such GPU here (or no driver at all)
        pass
    assert clocks.summary() == {}


def test_the_summary_keeps_the_lowest_clock_and_every_clock_event_seen():
    clocks = GpuClocks()
    clocks.samples = [(1980, 650.0, 60, 0x0), (1755, 700.0, 71, 0x4), (1980, 690.0, 66, 0x20)]
    s = clocks.summary()
    assert s["sm_clock_mhz_min"] == 1755 and s["sm_clock_mhz_median"] == 1980
    assert s["power_w_median"] == 690.0 and s["temp_c_max"] == 71
    assert s["clock_events"] == 0x24 and s["clock_samples"] == 3  # SW power cap and SW thermal
