"""Host RAM per node: what CPU offload keeps in each node's RAM (every rank of a node offloads its shard
there: ``advisor.memory.MemoryEstimate.host_node_gib``), against the node's RAM (``--host-ram``, or this
machine's when planning for the GPUs detected here: ``rules.planner.Planner.host_ram_gib``) (issue 38)."""

from __future__ import annotations

from advisor.estimate import Estimate

# Share of host RAM CPU offload may take (the OS, dataloader workers and pinned buffers need the rest;
# a rule of thumb, not measured).
HOST_RAM_FRACTION = 0.8


def host_text(e: Estimate) -> str:
    """The host RAM an offloaded run needs, per node first (every rank of a node offloads its shard)."""
    m = e.memory
    ranks = round(m.host_node_gib / m.host_gib) if m.host_gib else 1
    return (f"~{m.host_node_gib:.0f} GiB of host RAM per node" +
            (f", {ranks} ranks x ~{m.host_gib:.0f} GiB" if ranks > 1 else ""))


def host_short(e: Estimate, p) -> str:
    """Why the node's RAM cannot hold what ``e`` offloads ('' when it can, or when its RAM is unknown)."""
    ram = p.host_ram_gib
    if not ram or not e.memory.host_node_gib or e.memory.host_node_gib <= ram * HOST_RAM_FRACTION:
        return ""
    return (f"needs {host_text(e)}; {ram:.0f} GiB per node ({p.host_ram_source or 'given'}), "
            f"{HOST_RAM_FRACTION:.0%} of it for the run")
