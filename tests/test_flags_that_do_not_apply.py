"""Issue 31: "flags that do not apply to the plan are accepted silently and copied into the launch command".
A CPU launch refuses the GPU hardware flags (they feed only the GPU estimate it does not make); a one-node
recommendation says --network does not apply and leaves it out (the rule flag.network-one-node, whose cases
are in tests/cases/rules.toml)."""

from __future__ import annotations

import pytest

from cli.main import main

CPU = ["launch", "--cpu", "--processes", "1", "--model", "mini-transformer", "--recipe", "synthetic", "--dry-run"]


@pytest.mark.parametrize("extra, named", [(["--network", "400G-IB"], "--network"),
                                          (["--cpus-per-gpu", "4"], "--cpus-per-gpu"),
                                          (["--interconnect", "pcie"], "--interconnect"),
                                          (["--network", "100GbE", "--cpus-per-gpu", "2"], "--network/--cpus-per-gpu")])
def test_a_cpu_launch_refuses_the_gpu_hardware_flags(capsys, tmp_path, extra, named):
    rc = main([*CPU, "--home", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and f"error: {named} do" in err and "not apply to --cpu runs" in err, err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


def test_a_cpu_launch_without_them_still_plans(capsys, tmp_path):
    assert main([*CPU, "--home", str(tmp_path)]) == 0
