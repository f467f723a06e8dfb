"""What machine a plan is for: detected GPUs (NVML) or a hypothetical one the user names.

Detection reads NVML only (nvidia-ml-py), so it never initialises CUDA, never allocates on a
GPU, and works in a process that later forks training ranks. No NVML, no driver or no GPU all
give a ``Machine`` with ``gpus == []`` and the reason in ``nvml_error``, never an exception.
Tests build ``Machine`` objects as data instead of patching NVML.
"""

import os
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.comm import DEFAULT_NETWORK, NetworkLink
from advisor.errors import UserError
from advisor.gpus import GpuSpec, find_gpu, get_gpu
from advisor.loader import DEFAULT_CPUS_PER_GPU, InputPipeline, detected_cpus

# Per-node network when the user names several nodes but no figure: advisor.comm.DEFAULT_NETWORK
# (one 200 Gb/s InfiniBand HDR port per node), in GB/s.
DEFAULT_NETWORK_GBPS = DEFAULT_NETWORK.gbytes_s

# With no GPU detected and none named, `advise` plans for 8x A100-80GB (DESIGN.md's user story:
# "1xA100-80GB only with pure-bf16 + checkpointing; 8xA100 with FSDP", the most common training
# node) and says so in its first warning and in "hardware.assumed"; the wizard's planned mode
# starts there too. `advise estimate` and `advise launch` do not assume: they must not act on a
# machine that is not there.
ASSUMED_GPU = "A100-SXM-80GB"
ASSUMED_GPU_COUNT = 8

# pcie-nop2p: GeForce cards, whose driver turns PCIe peer-to-peer off (NCCL goes through host memory).
LinkKind = Literal["nvlink", "pcie", "pcie-nop2p", "none"]


class DetectedGpu(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    memory_total_gib: float
    memory_free_gib: float
    compute_capability: tuple[int, int] | None = None
    uuid: str | None = None
    utilization_pct: float | None = None
    spec: str | None = Field(None, description="matching GPU table row, if any")


class GpuLink(BaseModel):
    model_config = ConfigDict(extra="forbid")

    a: int
    b: int
    kind: LinkKind
    nvlinks: int = 0


class Machine(BaseModel):
    """The machine this process runs on, as NVML and the OS describe it."""

    model_config = ConfigDict(extra="forbid")

    gpus: list[DetectedGpu] = []
    links: list[GpuLink] = []
    driver: str | None = None
    cuda_driver: str | None = None
    cpu_cores: int = Field(default_factory=lambda: os.cpu_count() or 1)
    ram_gib: float = 0.0
    nvml_error: str | None = Field(None, description="why no GPU was seen, when none was")

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def summary(self) -> str:
        if not self.gpus:
            return f"no GPU detected ({self.nvml_error or 'NVML reports 0 GPUs'}); {self.cpu_cores} CPU cores"
        names = {g.name for g in self.gpus}
        return f"{len(self.gpus)}x {', '.join(sorted(names))}; {self.cpu_cores} CPU cores"


class HardwareSpec(BaseModel):
    """The hardware an estimate is for: one GPU kind, a count per node, nodes, and links."""

    model_config = ConfigDict(extra="forbid")

    gpu: GpuSpec
    gpus_per_node: int = Field(1, ge=1)
    nodes: int = Field(1, ge=1)
    interconnect: LinkKind = Field("nvlink", description="how GPUs within a node talk")
    network_gbps: float = Field(DEFAULT_NETWORK_GBPS, gt=0, description="per-node network, GB/s")
    network: NetworkLink | None = Field(None, description="the network between nodes as stated (--network) or assumed")
    input: InputPipeline | None = Field(None, description="what feeds the GPUs; None: data already on the device")
    nodes_at_hand: int | None = Field(None, ge=1, description="nodes named or detected, when a plan uses fewer (with_count)")
    gpus_at_hand: int | None = Field(None, ge=1, description="GPUs named or detected in all, when a plan uses fewer")
    cpu_cores: int = Field(16, ge=1, description="CPU cores per node, for dataloader workers")
    detected: bool = Field(False, description="True when this came from NVML on this machine")
    assumed: bool = Field(False, description="True when nothing was detected or named and a default was planned for")

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def intra_node_gbps(self) -> float:
        """Bidirectional per-GPU bandwidth within a node for the chosen interconnect."""
        if self.interconnect == "nvlink" and self.gpu.nvlink_gbps > 0:
            return self.gpu.nvlink_gbps
        return self.gpu.pcie_gbps

    @property
    def link(self) -> str:
        """The intra-node link kind the communication model uses (advisor.comm): NVLink where the GPU has
        it and it was chosen; PCIe with peer-to-peer, or without it on GPUs whose driver disables it."""
        if self.interconnect == "nvlink" and self.gpu.nvlink_gbps > 0:
            return "nvlink"
        if self.interconnect == "pcie-nop2p" or not self.gpu.pcie_p2p:
            return "pcie-nop2p"
        return "pcie"

    @property
    def network_link(self) -> NetworkLink:
        """The network as stated, or one at network_gbps (a HardwareSpec built with only the number)."""
        if self.network is not None:
            return self.network
        if abs(self.network_gbps - DEFAULT_NETWORK.gbytes_s) < 1e-9:
            return DEFAULT_NETWORK
        return NetworkLink(kind="infiniband", gbit_s=self.network_gbps * 8, text=f"{self.network_gbps:g} GB/s",
                           source="network_gbps of the hardware spec")

    def with_count(self, gpus: int) -> "HardwareSpec":
        """The same node kind with a different GPU count (nodes fill up to gpus_per_node)."""
        per_node = min(gpus, self.gpus_per_node) if self.nodes > 1 else gpus
        nodes = max(1, -(-gpus // per_node))
        return self.model_copy(update={"gpus_per_node": per_node, "nodes": nodes, **self.at_hand()})

    def at_hand(self) -> dict:
        """The fields that keep what was named or detected when a plan takes fewer GPUs (the report's header)."""
        return {"nodes_at_hand": self.nodes_at_hand or self.nodes, "gpus_at_hand": self.gpus_at_hand or self.total_gpus}


def threads_per_rank(ranks_per_node: int, cores: int | None = None) -> int:
    """OpenMP threads each rank of a node gets when the node's cores are shared out (``cores``: this
    machine's by default). launcher.command sets them for --cpu and CPU-offload plans, and
    advisor.throughput.offload_threads assumes them for the offloaded optimizer step."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, ranks_per_node))


def detect_machine() -> Machine:
    """Read NVML (through ``advisor.sampling``, as the monitor and bench do) and /proc. Never raises."""
    machine = Machine(ram_gib=_ram_gib())
    if "pynvml" not in sys.modules and _nvml_library_missing():
        # pynvml's own words for this case, without importing it (~30 ms of `advise` on a
        # machine without the NVIDIA driver, where it could only fail).
        machine.nvml_error = "NVML unavailable: NVML Shared Library Not Found"
        return machine
    # imported here: a machine without the NVIDIA driver (returned above) never needs it (~1 ms of `advise`)
    from advisor.sampling import NvmlUnavailable, close_nvml, open_nvml

    try:
        pynvml = open_nvml()
    except NvmlUnavailable as exc:
        machine.nvml_error = str(exc)
        return machine
    try:
        machine.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion()
            machine.cuda_driver = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        for i, h in enumerate(handles):
            machine.gpus.append(_read_gpu(pynvml, i, h))
        machine.links = _read_links(pynvml, handles)
        if not machine.gpus:
            machine.nvml_error = "NVML reports 0 GPUs"
    except Exception as exc:
        machine.nvml_error = f"NVML query failed: {exc}"
    finally:
        close_nvml(pynvml)
    return machine


def _nvml_library_missing() -> bool:
    """True when the NVIDIA driver's NVML library cannot be loaded (checked on Linux only, the
    library name pynvml loads there)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _read_gpu(pynvml, index: int, handle) -> DetectedGpu:
    name = _text(pynvml.nvmlDeviceGetName(handle))
    from advisor.sampling import read_gpu

    reading = read_gpu(pynvml, handle)  # the same reading the monitor and bench take
    cc = None
    try:
        cc = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    except Exception:
        pass
    uuid = None
    try:
        uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
    except Exception:
        pass
    spec = find_gpu(name)
    return DetectedGpu(
        index=index,
        name=name,
        memory_total_gib=reading.total_gib,
        memory_free_gib=reading.free_gib,
        compute_capability=cc,
        uuid=uuid,
        utilization_pct=reading.util_pct,
        spec=spec.name if spec else None,
    )


def _read_links(pynvml, handles) -> list[GpuLink]:
    """NVLink count between each pair (via remote PCI bus ids); PCIe where there is none."""
    if len(handles) < 2:
        return []
    bus_ids = []
    for h in handles:
        try:
            bus_ids.append(_text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower())
        except Exception:
            bus_ids.append("")
    counts: dict[tuple[int, int], int] = {}
    for i, h in enumerate(handles):
        for link in range(18):  # NVML_NVLINK_MAX_LINKS is 18 on Hopper
            try:
                if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId).lower()
            except Exception:
                break
            # An NVSwitch system reports the switch, not the peer: then every pair is linked.
            j = bus_ids.index(remote) if remote in bus_ids else None
            targets = [j] if j is not None else [k for k in range(len(handles)) if k != i]
            for k in targets:
                pair = (min(i, k), max(i, k))
                counts[pair] = counts.get(pair, 0) + 1
    links = []
    for i in range(len(handles)):
        for k in range(i + 1, len(handles)):
            n = counts.get((i, k), 0)
            links.append(GpuLink(a=i, b=k, kind="nvlink" if n else "pcie", nvlinks=n))
    return links


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def resolve_hardware(
    machine: Machine,
    gpu: str | None = None,
    gpus: int | None = None,
    nodes: int = 1,
    interconnect: LinkKind | None = None,
    network: NetworkLink | None = None,
    assume_if_none: bool = False,
    cpus_per_gpu: float | None = None,
    data: str | None = None,
    loader: str | None = None,
) -> HardwareSpec:
    """The hardware to plan for: the named GPU if given, else what was detected.

    With no GPU detected and none named: plan for ``ASSUMED_GPU_COUNT`` x ``ASSUMED_GPU`` (marked
    ``assumed``, so every report says so) when ``assume_if_none``, else raise a UserError whose
    fix says how to name one. Counts that make no sense raise a UserError too.
    """
    if gpus is not None and gpus < 1:
        raise UserError(f"--gpus must be at least 1, got {gpus}", fix="give the GPU count per node, e.g. --gpus 8")
    if nodes < 1:
        raise UserError(f"--nodes must be at least 1, got {nodes}", fix="e.g. --nodes 2")
    detected = False
    if gpu is not None:
        spec = get_gpu(gpu)
        count = gpus or 1
        links: LinkKind = "nvlink" if spec.nvlink_gbps > 0 else "pcie"
    elif machine.has_gpu:
        first = machine.gpus[0]
        spec = find_gpu(first.name)
        if spec is None:
            raise UserError(
                f"detected GPU '{first.name}' is not in the GPU table",
                fix="name the closest one with --gpu (see `advise gpus --list`)",
            )
        count = gpus or len(machine.gpus)
        detected = True
        links = "pcie" if any(l.kind == "pcie" for l in machine.links) else "nvlink"
        if len(machine.gpus) == 1:
            links = "nvlink" if spec.nvlink_gbps > 0 else "pcie"
    elif assume_if_none:
        spec = get_gpu(ASSUMED_GPU)
        count = gpus or ASSUMED_GPU_COUNT
        net = network or DEFAULT_NETWORK
        return HardwareSpec(gpu=spec, gpus_per_node=count, nodes=nodes,
                            interconnect=interconnect or ("nvlink" if spec.nvlink_gbps > 0 else "pcie"),
                            network_gbps=net.gbytes_s, network=net if nodes > 1 else network,
                            cpu_cores=int(round((cpus_per_gpu or DEFAULT_CPUS_PER_GPU) * count)), assumed=True,
                            input=_input(cpus_per_gpu, data, loader, machine, count, detected=False))
    else:
        raise UserError(
            f"no GPU detected on this machine ({machine.nvml_error or 'NVML reports 0 GPUs'})",
            fix="plan for a GPU you will use, e.g. --gpu A100-80GB --gpus 8 (`advise gpus --list`)",
        )
    net = network or DEFAULT_NETWORK
    pipe = _input(cpus_per_gpu, data, loader, machine, count, detected=detected)
    return HardwareSpec(
        gpu=spec,
        gpus_per_node=count,
        nodes=nodes,
        interconnect=interconnect or links,
        network_gbps=net.gbytes_s,
        network=net if nodes > 1 else network,
        # A named (hypothetical) server: DEFAULT_CPUS_PER_GPU cores per GPU (advisor.loader), or --cpus-per-gpu.
        cpu_cores=max(1, int(round(pipe.cpus_per_gpu * count))) if (cpus_per_gpu or not detected) else machine.cpu_cores,
        detected=detected,
        input=pipe,
    )


def _input(cpus_per_gpu: float | None, data: str | None, loader: str | None, machine: Machine, count: int, *,
           detected: bool) -> InputPipeline:
    """The input pipeline of a request: --cpus-per-gpu as given, else this machine's cores when its GPUs are
    the ones planned for, else the default for a named server (the report states which)."""
    if cpus_per_gpu is not None:
        cores, src = cpus_per_gpu, f"--cpus-per-gpu {cpus_per_gpu:g}"
    elif detected:
        cores, src = detected_cpus(max(1, len(machine.gpus)))
    else:
        cores, src = DEFAULT_CPUS_PER_GPU, InputPipeline.model_fields["cpus_source"].default
    return InputPipeline(data=data or "auto", loader=loader or "pytorch", cpus_per_gpu=max(cores, 0.01), cpus_source=src)
