"""The network between nodes in units users type, stated whenever nodes > 1; the header counts the nodes named."""

import json

import pytest

from advisor import units
from advisor.errors import UserError
from advisor.plan import ModelRef
from advisor.request import Request


@pytest.mark.parametrize("text,kind,gbit", [("100GbE", "ethernet", 100), ("400G-IB", "infiniband", 400),
                                            ("NDR", "infiniband", 400), ("hdr", "infiniband", 200),
                                            ("100Gb/s", "infiniband", 100), ("25 Gbps", "ethernet", 25),
                                            ("12.5GB/s", "infiniband", 100), ("50 GB/s", "infiniband", 400)])
def test_network_units(text, kind, gbit):
    n = units.network(text)
    assert (n.kind, n.gbit_s) == (kind, gbit) and n.gbytes_s == gbit / 8


@pytest.mark.parametrize("text,msg", [("100", "no unit"), ("fast", "cannot read"), ("0GbE", "faster than 0")])
def test_network_refused(text, msg):
    with pytest.raises(ValueError, match=msg):
        units.network(text)


def test_request_refuses_bare_number():
    with pytest.raises(UserError) as err:
        Request(model=ModelRef(name="gpt2"), gpu="H100", nodes=2, network="100")
    assert "no unit" in err.value.message() and "100GbE" in err.value.message()
    r = Request(model=ModelRef(name="gpt2"), gpu="H100", nodes=2, network="400G-IB")
    assert r.to_argv()[-2:] == ["--network", "400G-IB"]


def _advise(*argv):
    from cli.main import main

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_multi_node_json_states_network_and_nodes(capsys):
    from advisor.exact import estimate_request
    from advisor.hardware import Machine

    req = Request(model=ModelRef(name="gpt2"), gpu="H100", gpus=8, nodes=2, micro_batch=8, strategy="ddp")
    e, _ = estimate_request(req, machine=Machine(cpu_cores=2))
    assert e.hardware.nodes == 2 and "assumed" in e.hardware.network and "200" in e.hardware.network
    stated, _ = estimate_request(req.model_copy(update={"network": units.network("100GbE")}), machine=Machine(cpu_cores=2))
    assert "--network 100GbE" in stated.hardware.network
    assert stated.throughput.samples_per_s < e.throughput.samples_per_s  # 12.5 GB/s against 25
    one, _ = estimate_request(req.model_copy(update={"nodes": 1}), machine=Machine(cpu_cores=2))
    assert one.hardware.network is None


def test_header_counts_the_nodes_named():
    from rich.console import Console

    from cli.recommend_cmd import render_report
    from rules.api import recommend

    rec = recommend(Request(model=ModelRef(name="gpt2"), gpu="H100", gpus=8, nodes=2, network="100GbE"))
    console = Console(record=True, width=200)
    render_report(rec, console=console)
    text = console.export_text()
    head = next(line for line in text.splitlines() if "hardware" in line)
    assert "16x H100" in head and "2 nodes" in head, head
    assert "100GbE" in text
    assert rec.estimate.hardware.nodes_at_hand == 2
    json.loads(rec.model_dump_json())
