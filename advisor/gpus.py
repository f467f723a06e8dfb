"""The GPU spec table: peak rates, memory and links of the GPUs people train on.

All rates are *dense* (no 2:4 sparsity) tensor-core peaks from the vendor datasheets or
architecture whitepapers named on each row; memory is what ``nvidia-smi`` reports as total
(MiB / 1024), since that is what a user compares against. Links are the datasheet's
bidirectional figure; the communication model takes half of it per direction.

Looking a GPU up never imports torch or touches CUDA.
"""

import re
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from advisor.config import Precision
from advisor.errors import unknown_name
from advisor.gpu_perf import arch_of, fraction_vs_reference


class GpuSpec(BaseModel):
    """One GPU model's datasheet numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="canonical name, e.g. 'A100-SXM-80GB'")
    aliases: tuple[str, ...] = Field(default=(), description="other names people and NVML use")
    memory_gib: float = Field(description="total memory as nvidia-smi shows it, GiB")
    bandwidth_gbps: float = Field(description="memory bandwidth, GB/s (1e9 bytes)")
    fp32_tflops: float = Field(description="dense FP32 (CUDA cores), TFLOP/s")
    tf32_tflops: float = Field(description="dense TF32 tensor cores; equals fp32 where there are none")
    bf16_tflops: float = Field(description="dense BF16 tensor cores with fp32 accumulate; 0 = no bf16")
    fp16_tflops: float = Field(description="dense FP16 tensor cores with fp32 accumulate")
    fp8_tflops: float = Field(0.0, description="dense FP8 tensor cores; 0 = no FP8 (before Ada/Hopper)")
    compute_capability: tuple[int, int]
    sms: int = Field(0, ge=0, description="streaming multiprocessors (datasheet; the CUDA device property "
                     "multiProcessorCount); 0 = not known, derived from the fp32 peak at a 1.75 GHz clock")
    nvlink_gbps: float = Field(0.0, description="NVLink per GPU, bidirectional GB/s; 0 = none")
    pcie_gbps: float = Field(description="PCIe x16 bidirectional GB/s (gen3 32, gen4 64, gen5 128)")
    pcie_p2p: bool = Field(True, description="PCIe peer-to-peer between two of these; False on GeForce cards, whose "
                           "driver disables it (NCCL then goes through host memory)")
    source: str
    sustained: float = Field(1.0, gt=0, description="dense-GEMM throughput sustained, as a fraction of the "
                             "datasheet peak, over the H200's (1.0: not measured, the H200's assumed)")
    sustained_source: str = "not measured: assumed to sustain the share of its datasheet peak the H200 does"

    @property
    def supports_bf16(self) -> bool:
        # bf16 tensor cores arrived with Ampere (compute capability 8.0).
        return self.compute_capability >= (8, 0) and self.bf16_tflops > 0

    @property
    def tensor_tf32(self) -> bool:
        """TF32 tensor cores arrived with Ampere (8.0): before it, tf32 is the fp32 rate."""
        return self.compute_capability >= (8, 0)

    @property
    def arch(self) -> str:
        """Architecture name (Volta, Turing, Ampere, Ada, Hopper, Blackwell) from the compute capability."""
        return arch_of(self.compute_capability)

    @property
    def sm_cycles(self) -> float:
        """SM clock cycles per second summed over the SMs (SM count x boost clock): the datasheet fp32
        peak over the fp32 FLOPs an SM does per clock, 2 x 64 lanes for compute capability 7.x and
        8.0, 2 x 128 from 8.6 on (CUDA C Programming Guide, "Arithmetic Instructions" throughput
        table, 32-bit floating-point add/multiply/multiply-add)."""
        lanes = 64 if self.compute_capability < (8, 6) else 128
        return self.fp32_tflops * 1e12 / (2 * lanes)

    @property
    def sm_count(self) -> int:
        """SMs: the table's, else the fp32 peak's SM cycles at 1.75 GHz, mid-way through the table's boost
        clocks (1.41 GHz A100 to 2.52 GHz RTX 4090)."""
        return self.sms or max(1, round(self.sm_cycles / 1.75e9))

    @property
    def sm_clock(self) -> float:
        """An SM's boost clock, cycles/s: the SM cycles over the SMs (H200: 1.98 GHz, nvidia-smi's max SM clock)."""
        return self.sm_cycles / self.sm_count

    @property
    def mem_bw(self) -> float:
        """Datasheet memory bandwidth, bytes/s."""
        return self.bandwidth_gbps * 1e9

    @property
    def bandwidth_vs_h200(self) -> float:
        """Datasheet memory bandwidth (bytes/s) times this architecture's achievable share of it over
        the H200's: the bandwidth the H200-fit efficiencies (``rate_efficiency["bytes"]``, the 8-bit
        AdamW kernel's fraction) multiply, so that a fit on the H200 carries to this GPU."""
        return self.mem_bw * self.fraction_vs_h200("bandwidth")

    def peak_tflops(self, precision: str) -> float:
        """Dense matmul peak for a precision name (fp32, tf32, bf16, fp16, pure-bf16, fp8).

        Before Ampere there are no bf16 tensor cores: mixed precision there is fp16 with a GradScaler
        (rules/data/precision.toml); a bf16 run asked for anyway gets no tensor cores (cuBLAS's bf16
        GEMMs need compute capability 8.0), so it is estimated at the fp32 rate."""
        return _PEAK.get(_column(precision), _PEAK["fp32"])(self)

    def matmul_flops(self, precision: str) -> float:
        """Dense peak of linear layers / matmuls, FLOP/s, under DESIGN.md's precision names
        (fp32: fp32 matmuls on CUDA cores; tf32: TF32 tensor cores from Ampere on)."""
        return self.peak_tflops(precision) * 1e12

    def conv_flops(self, precision: str) -> float:
        """Dense peak of cuDNN convolutions, FLOP/s: fp32 runs them as TF32 where there are TF32
        tensor cores (torch.backends.cudnn.allow_tf32 defaults to True), else at the fp32 rate."""
        return self.peak_tflops(_CONV_COLUMN.get(precision, precision)) * 1e12

    def fraction_vs_h200(self, kind: str) -> float:
        """Achievable fraction of this GPU's peak for a work kind (matmul, conv, simt, bandwidth)
        over the H200's, which the packaged efficiencies were fit on (advisor.gpu_perf).

        Compute kinds (all but ``bandwidth``) also carry ``sustained``: datasheet TFLOPS are at the
        boost clock, and a power-limited card runs dense tensor-core work at a lower one (the memory
        clock does not move, so bandwidth keeps 1). The one place the factor is applied."""
        clock = 1.0 if kind == "bandwidth" else self.sustained
        return fraction_vs_reference(self.compute_capability, kind) * clock

    def tensor_work(self, precision: str, conv: bool) -> bool:
        """Whether a precision's matmuls (conv=False) or convolutions (conv=True) use tensor cores here."""
        return _TENSOR.get(_column(precision), _TENSOR["fp32"])(self, conv)


# The datasheet column a precision's matmuls run at (advisor.config.Precision.matmul_dtype: a bf16 model
# computes in bf16, as bf16 autocast does), that column's dense peak, and whether its work runs on tensor
# cores (a matmul or a convolution).
_PRECISIONS = frozenset(p.value for p in Precision)


def _column(precision: str) -> str:
    return Precision(precision).matmul_dtype if precision in _PRECISIONS else precision  # fp8: a column itself


_CONV_COLUMN = {"fp32": "tf32"}  # cuDNN runs fp32 convolutions as TF32 (cudnn.allow_tf32, on by default)
_PEAK = {
    "bf16": lambda g: g.bf16_tflops if g.supports_bf16 else g.fp32_tflops,
    "fp16": lambda g: g.fp16_tflops,
    "fp8": lambda g: g.fp8_tflops or g.bf16_tflops or g.fp16_tflops,
    "tf32": lambda g: g.tf32_tflops if g.tensor_tf32 else g.fp32_tflops,
    "fp32": lambda g: g.fp32_tflops,
}
_TENSOR = {
    "bf16": lambda g, conv: g.supports_bf16,
    "fp16": lambda g, conv: True,
    "fp8": lambda g, conv: True,
    "tf32": lambda g, conv: g.tensor_tf32,
    "fp32": lambda g, conv: g.tensor_tf32 and conv,
}


def _gpu(**kw) -> GpuSpec:
    return GpuSpec(**kw)


# Datasheets (dense rates; where a sheet gives "with sparsity" the dense figure is half):
_V100 = "NVIDIA V100 datasheet, images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_T4 = "NVIDIA T4 datasheet, nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
_TURING = "NVIDIA Quadro RTX 8000 datasheet and Turing whitepaper, images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf"
_A10 = "NVIDIA A10 datasheet, nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf"
_A10G = "AWS EC2 G5 documentation (A10G), aws.amazon.com/ec2/instance-types/g5/"
_GA102 = "NVIDIA Ampere GA102 whitepaper, nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
_A6000 = "NVIDIA RTX A6000 datasheet, nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/proviz-print-nvidia-rtx-a6000-datasheet-us-nvidia-1454980-r9-web.pdf"
_A100 = "NVIDIA A100 datasheet, nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_ADA = "NVIDIA Ada Lovelace whitepaper, images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_L4 = "NVIDIA L4 datasheet, resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_L40S = "NVIDIA L40S datasheet, resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_RTX6000ADA = "NVIDIA RTX 6000 Ada datasheet, nvidia.com/content/dam/en-zz/Solutions/design-visualization/rtx-6000/proviz-print-rtx6000-datasheet-web-2504660.pdf"
_L40 = "NVIDIA L40 datasheet and product page, nvidia.com/en-us/data-center/l40/"
_H100 = "NVIDIA H100 datasheet, resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "NVIDIA H200 datasheet, nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_B200 = "NVIDIA DGX B200 datasheet (per GPU = system / 8), resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet"

# Sustained dense-GEMM throughput (GpuSpec.sustained). Datasheet TFLOPS are at the boost clock; under
# dense tensor-core load a card runs at whatever clock its power limit allows (A10 150 W, RTX 6000 Ada
# 300 W, against the RTX 4090's 450 W; GeForce cards boost above their rated clock). The measure is the
# largest torch.matmul rate a public benchmark records on the card (square GEMMs, 1k-10k), over its
# datasheet peak, stated against the same ratio on the H200: the H200's calibration was fit on runs at
# whatever clock it sustained, so the H200 is 1.0 and another GPU's factor is how much more (or less)
# of its datasheet peak it sustains than the H200 does. It also carries cuBLAS's efficiency on that
# GPU; the per-architecture fractions (advisor.gpu_perf, fit with these factors in place) take what is
# common to an architecture. Sources:
_ZZC = ("zzc0721/torch-performance-test-data database.md (github.com/zzc0721/torch-performance-test-data), "
        "max torch.matmul TFLOPS over 1024-10240 square GEMMs")
_CHS = ("chsasank/device-benchmarks README table and issue #16 (github.com/chsasank/device-benchmarks), "
        "max torch.matmul TFLOPS over 256-6888 square GEMMs")
_H200_GEMM = 790.29 / 989.4  # _ZZC, "NVIDIA H200" bf16 row, over the datasheet 989.4


def _sustained(measured: float, datasheet: float) -> float:
    """Measured dense GEMM TFLOPS over the datasheet peak, relative to the H200's same ratio."""
    return round(measured / datasheet / _H200_GEMM, 3)


# fmt: off
GPU_TABLE: tuple[GpuSpec, ...] = (
    _gpu(name="V100-SXM2-16GB", sms=80, aliases=("V100", "Tesla V100-SXM2-16GB", "V100-16GB"), memory_gib=15.78,
         bandwidth_gbps=900, fp32_tflops=15.7, tf32_tflops=15.7, bf16_tflops=0, fp16_tflops=125,
         compute_capability=(7, 0), nvlink_gbps=300, pcie_gbps=32,
         source=f"{_V100}: 15.7 FP32, 125 FP16 tensor, no TF32/BF16, 900 GB/s, NVLink 300 GB/s"),
    _gpu(name="V100-SXM2-32GB", sms=80, aliases=("Tesla V100-SXM2-32GB", "V100-32GB", "V100S"), memory_gib=31.75,
         bandwidth_gbps=900, fp32_tflops=15.7, tf32_tflops=15.7, bf16_tflops=0, fp16_tflops=125,
         compute_capability=(7, 0), nvlink_gbps=300, pcie_gbps=32,
         source=f"{_V100}: as the 16 GB part, 32 GB HBM2"),
    _gpu(name="T4", sms=40, aliases=("Tesla T4",), memory_gib=15.0, bandwidth_gbps=320, fp32_tflops=8.1,
         tf32_tflops=8.1, bf16_tflops=0, fp16_tflops=65, compute_capability=(7, 5), pcie_gbps=32,
         source=f"{_T4}: 8.1 FP32, 65 FP16 tensor (mixed precision), 320 GB/s, 70 W",
         sustained=_sustained(42.31, 65),
         sustained_source=f"{_ZZC}: T4 fp16 41.91 and 42.71 (mean 42.31) of 65; 70 W"),
    _gpu(name="RTX-8000", sms=72, aliases=("Quadro RTX 8000", "NVIDIA Quadro RTX 8000", "RTX 8000"), memory_gib=47.99,
         bandwidth_gbps=672, fp32_tflops=16.3, tf32_tflops=16.3, bf16_tflops=0, fp16_tflops=130.5,
         compute_capability=(7, 5), nvlink_gbps=100, pcie_gbps=32,
         source=f"{_TURING}: 16.3 FP32, 130.5 FP16 tensor (full-rate FP32 accumulate on Quadro), 672 GB/s, NVLink bridge 100 GB/s"),
    _gpu(name="A10", sms=72, aliases=("NVIDIA A10",), memory_gib=22.49, bandwidth_gbps=600, fp32_tflops=31.2,
         tf32_tflops=62.5, bf16_tflops=125, fp16_tflops=125, compute_capability=(8, 6), pcie_gbps=64,
         source=f"{_A10}: 31.2 FP32, 62.5 TF32 / 125 BF16 dense (125/250 with sparsity), 600 GB/s, 150 W",
         sustained=_sustained(56, 125),
         sustained_source=f"{_CHS}: A10 bf16 56 of 125; 150 W (the same table has the RTX 4090 at 168 of 165.2, as _ZZC)"),
    _gpu(name="A10G", sms=80, aliases=("NVIDIA A10G",), memory_gib=22.49, bandwidth_gbps=600, fp32_tflops=31.2,
         tf32_tflops=35.0, bf16_tflops=70, fp16_tflops=70, compute_capability=(8, 6), pcie_gbps=64,
         source=f"{_A10G}: 31.2 FP32, ~70 dense FP16/BF16 tensor TFLOPS, 600 GB/s"),
    _gpu(name="L4", sms=58, aliases=("NVIDIA L4",), memory_gib=22.49, bandwidth_gbps=300, fp32_tflops=30.3,
         tf32_tflops=60, bf16_tflops=121, fp16_tflops=121, fp8_tflops=242.5, compute_capability=(8, 9), pcie_gbps=64,
         source=f"{_L4}: 30.3 FP32, 120 TF32 / 242 BF16 / 485 FP8 with sparsity (halved here), 300 GB/s, 72 W"),
    _gpu(name="L40S", sms=142, aliases=("NVIDIA L40S",), memory_gib=44.99, bandwidth_gbps=864, fp32_tflops=91.6,
         tf32_tflops=183, bf16_tflops=362, fp16_tflops=362, fp8_tflops=733, compute_capability=(8, 9), pcie_gbps=64,
         source=f"{_L40S}: 91.6 FP32, 366 TF32 / 733 BF16 / 1,466 FP8 with sparsity (halved here), 864 GB/s",
         sustained=_sustained(269.15, 362),
         sustained_source=f"{_ZZC}: L40S bf16 269.15 of 362; 350 W"),
    _gpu(name="RTX-6000-Ada", sms=142, aliases=("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", "6000 Ada"), memory_gib=47.99,
         bandwidth_gbps=960, fp32_tflops=91.1, tf32_tflops=91.1, bf16_tflops=182.1, fp16_tflops=182.1, fp8_tflops=364.2,
         compute_capability=(8, 9), pcie_gbps=64,
         # The datasheet gives one tensor figure, 1,457 FP8 TFLOPS with sparsity: 4,096 FLOPs per SM per clock
         # (142 SMs, 2,505 MHz), the RTX 4090's FP8-with-FP16-accumulate rate (1,321 at 128 SMs, 2,520 MHz),
         # so it says nothing of FP32 accumulation, which bf16/fp16 GEMMs and TF32 use. The L40, the same
         # AD102 (142 SMs, 18,176 cores, 48 GB, 300 W), lists 724 FP8 with sparsity at FP16 accumulate and, at
         # FP32 accumulate, 181.05 BF16/FP16 and 90.5 TF32 dense: half rate, as on GeForce Ada (the L40S,
         # at 350 W, lists 362 and 183). Taken at the L40's rates for this clock. Lambda's published training
         # rows agree: BERT-large TF32 44/s on both the RTX 6000 Ada and the RTX 4090 (82.6 TF32), fp16 79/s
         # against 93/s (pytorch-train-throughput-*.csv, benchmarks/calibration/multi_gpu/NOTES.md).
         source=f"{_RTX6000ADA}: 91.1 FP32, 1,457 FP8 TFLOPS with sparsity (dense FP8 728.5 at FP16 accumulate); "
                f"at FP32 accumulate half that, as the {_L40} lists for the same chip (BF16/FP16 182.1, TF32 91.1, "
                f"FP8 364.2 dense), 960 GB/s",
         sustained=round(_sustained(166.58, 165.2) * (50.14 / 91.1) / (58 / 82.6), 3),
         sustained_source=f"{_CHS}: no half-precision run; fp32 GEMMs 50.14 of 91.1 (issue #16) against the RTX 4090's 58 of 82.6 in the same table, times the RTX 4090's factor; 300 W. The clock a power limit allows falls further under tensor-core load than fp32, so this is an upper bound"),
    _gpu(name="RTX-3090", sms=82, aliases=("NVIDIA GeForce RTX 3090", "3090", "RTX 3090"), memory_gib=24.0,
         bandwidth_gbps=936, fp32_tflops=35.6, tf32_tflops=35.6, bf16_tflops=71, fp16_tflops=71,
         compute_capability=(8, 6), nvlink_gbps=112.5, pcie_gbps=64, pcie_p2p=False,  # GeForce: P2P off without the bridge
         source=f"{_GA102}: 35.6 FP32, 35.6 TF32 / 71 FP16-BF16 tensor dense with FP32 accumulate (GeForce half rate), 936 GB/s",
         sustained=_sustained(76.58, 71),
         sustained_source=f"{_ZZC}: RTX 3090 bf16 76.34, 76.68, 76.58 (median 76.58) of 71: GeForce boosts above its rated 1,695 MHz; 350 W"),
    _gpu(name="RTX-4090", sms=128, aliases=("NVIDIA GeForce RTX 4090", "4090", "RTX 4090"), memory_gib=23.99,
         bandwidth_gbps=1008, fp32_tflops=82.6, tf32_tflops=82.6, bf16_tflops=165.2, fp16_tflops=165.2, fp8_tflops=330.3,
         compute_capability=(8, 9), pcie_gbps=64, pcie_p2p=False,  # GeForce Ada: `nvidia-smi topo -p2p r` reports NS
         source=f"{_ADA}: 82.6 FP32, 82.6 TF32 / 165.2 FP16-BF16 / 330.3 FP8 tensor dense with FP32 accumulate, 1,008 GB/s",
         sustained=_sustained(166.58, 165.2),
         sustained_source=f"{_ZZC}: RTX 4090 24GB bf16 170.06, 173.31, 162.39, 163.09 (median 166.58) of 165.2 (the 48 GB rebuilt cards left out); 450 W"),
    _gpu(name="RTX-A6000", sms=84, aliases=("NVIDIA RTX A6000", "A6000"), memory_gib=47.99, bandwidth_gbps=768,
         fp32_tflops=38.7, tf32_tflops=77.4, bf16_tflops=154.8, fp16_tflops=154.8,
         compute_capability=(8, 6), nvlink_gbps=112.5, pcie_gbps=64,
         source=f"{_A6000}: 38.7 FP32, 309.7 tensor TFLOPS with sparsity (154.8 dense FP16/BF16, 77.4 TF32), 768 GB/s",
         sustained=_sustained(123.34, 154.8),
         sustained_source=f"{_ZZC}: RTX A6000 bf16 123.34 of 154.8; 300 W"),
    _gpu(name="A100-SXM-40GB", sms=108, aliases=("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "A100-40GB", "A100 40GB"),
         memory_gib=40.0, bandwidth_gbps=1555, fp32_tflops=19.5, tf32_tflops=156, bf16_tflops=312,
         fp16_tflops=312, compute_capability=(8, 0), nvlink_gbps=600, pcie_gbps=64,
         source=f"{_A100}: 19.5 FP32, 156 TF32, 312 BF16/FP16 dense, 1,555 GB/s, NVLink 600 GB/s"),
    _gpu(name="A100-SXM-80GB", sms=108, aliases=("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "A100-80GB", "A100", "A100 80GB"),
         memory_gib=80.0, bandwidth_gbps=2039, fp32_tflops=19.5, tf32_tflops=156, bf16_tflops=312,
         fp16_tflops=312, compute_capability=(8, 0), nvlink_gbps=600, pcie_gbps=64,
         source=f"{_A100}: 19.5 FP32, 156 TF32, 312 BF16/FP16 dense, 2,039 GB/s, NVLink 600 GB/s",
         sustained=_sustained(264.53, 312),
         sustained_source=f"{_ZZC}: A100 SXM4 80GB bf16 264.53 of 312; 400 W"),
    _gpu(name="A100-PCIE-40GB", sms=108, aliases=("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"), memory_gib=40.0,
         bandwidth_gbps=1555, fp32_tflops=19.5, tf32_tflops=156, bf16_tflops=312, fp16_tflops=312,
         compute_capability=(8, 0), pcie_gbps=64,
         source=f"{_A100} (PCIe 40GB): 19.5 FP32, 156 TF32, 312 BF16, 1,555 GB/s, PCIe gen4 64 GB/s"),
    _gpu(name="A100-PCIE-80GB", sms=108, aliases=("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB", "A100 80GB PCIe"),
         memory_gib=80.0, bandwidth_gbps=1935, fp32_tflops=19.5, tf32_tflops=156, bf16_tflops=312,
         fp16_tflops=312, compute_capability=(8, 0), pcie_gbps=64,
         source=f"{_A100} (PCIe 80GB): 19.5 FP32, 156 TF32, 312 BF16, 1,935 GB/s, PCIe gen4 64 GB/s"),
    _gpu(name="H100-SXM", sms=132, aliases=("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", "H100", "H100 SXM"),
         memory_gib=79.65, bandwidth_gbps=3350, fp32_tflops=67, tf32_tflops=494.7, bf16_tflops=989.4,
         fp16_tflops=989.4, fp8_tflops=1978.9, compute_capability=(9, 0), nvlink_gbps=900, pcie_gbps=128,
         source=f"{_H100} (SXM): 67 FP32, 989 TF32 / 1,979 BF16 / 3,958 FP8 with sparsity (halved), 3.35 TB/s, NVLink 900 GB/s",
         sustained=_sustained(786.45, 989.4),
         sustained_source=f"{_ZZC}: H100 80GB HBM3 bf16 789.24 and 783.66 (mean 786.45) of 989.4; 700 W"),
    _gpu(name="H100-PCIE", sms=114, aliases=("NVIDIA H100 PCIe", "H100 PCIe", "H100-PCIe-80GB"), memory_gib=79.65,
         bandwidth_gbps=2000, fp32_tflops=51, tf32_tflops=378, bf16_tflops=756, fp16_tflops=756, fp8_tflops=1513,
         compute_capability=(9, 0), pcie_gbps=128,
         source=f"{_H100} (PCIe): 51 FP32, 756 TF32 / 1,513 BF16 / 3,026 FP8 with sparsity (halved), 2 TB/s, PCIe gen5 128 GB/s"),
    _gpu(name="H100-NVL", sms=132, aliases=("NVIDIA H100 NVL", "H100 NVL"), memory_gib=93.58,
         bandwidth_gbps=3900, fp32_tflops=60, tf32_tflops=417.5, bf16_tflops=835.5, fp16_tflops=835.5, fp8_tflops=1670.5,
         compute_capability=(9, 0), nvlink_gbps=600, pcie_gbps=128,
         source=f"{_H100} (NVL): 60 FP32, 835 TF32 / 1,671 BF16 / 3,341 FP8 with sparsity (halved), 3.9 TB/s, NVLink bridge 600 GB/s"),
    _gpu(name="H200", sms=132, aliases=("NVIDIA H200", "H200-SXM", "H200-SXM-141GB"), memory_gib=140.4,
         bandwidth_gbps=4800, fp32_tflops=67, tf32_tflops=494.7, bf16_tflops=989.4, fp16_tflops=989.4, fp8_tflops=1978.9,
         compute_capability=(9, 0), nvlink_gbps=900, pcie_gbps=128,
         source=f"{_H200} (SXM): H100 SXM compute, 141 GB HBM3e (143,771 MiB in nvidia-smi), 4.8 TB/s",
         sustained=1.0,
         sustained_source=f"the reference: {_ZZC}, H200 bf16 790.29 of 989.4 (_H200_GEMM)"),
    _gpu(name="B200", sms=148, aliases=("NVIDIA B200", "B200-SXM", "B200-180GB"), memory_gib=179.0,
         bandwidth_gbps=8000, fp32_tflops=75, tf32_tflops=1125, bf16_tflops=2250, fp16_tflops=2250, fp8_tflops=4500,
         compute_capability=(10, 0), nvlink_gbps=1800, pcie_gbps=128,
         source=f"{_B200}: 600 FP32 / 18 PF TF32 / 36 PF BF16 / 72 PF FP8 with sparsity per 8 GPUs (dense per GPU: 75, 1,125, 2,250, 4,500), 1,440 GB (180 GB per GPU; the nvidia-smi total is not verified here, 179 GiB assumed), 64 TB/s (8 TB/s per GPU), NVLink 1.8 TB/s",
         sustained=_sustained(1696.03, 2250),
         sustained_source=f"{_ZZC}: B200 180GB bf16 1,696.03 of 2,250 (GCP a4-highgpu-8g)"),
)
# fmt: on


def _key(name: str) -> str:
    """Normalise a GPU name so 'NVIDIA A100-SXM4-80GB', 'a100 80gb' and 'A100_80GB' meet."""
    k = name.lower().replace("nvidia", "").replace("geforce", "").replace("tesla", "")
    return re.sub(r"[^a-z0-9]", "", k)


@lru_cache(maxsize=1)
def _index() -> dict[str, GpuSpec]:
    idx: dict[str, GpuSpec] = {}
    for spec in GPU_TABLE:
        for n in (spec.name, *spec.aliases):
            idx.setdefault(_key(n), spec)
    return idx


def all_gpus() -> tuple[GpuSpec, ...]:
    return GPU_TABLE


def find_gpu(name: str) -> GpuSpec | None:
    """Forgiving lookup ('h100', 'A100-80GB', 'NVIDIA H200'); None when nothing matches.

    Exact (normalised) names and aliases first; then a table name the query starts ('l40' ->
    L40S) when that is unambiguous; then, for NVML's longer names, a known name inside the query
    whose memory size agrees with any size the query states (so 'A100-90GB' matches nothing).
    """
    idx = _index()
    key = _key(name)
    if not key:
        return None
    if key in idx:
        return idx[key]
    prefixed = {idx[k].name: idx[k] for k in idx if k.startswith(key)}
    if len(prefixed) == 1:
        return next(iter(prefixed.values()))
    size = re.search(r"(\d+)gb", key)
    inside = sorted((k for k in idx if len(k) >= 3 and k in key), key=len, reverse=True)
    for k in inside:
        spec = idx[k]
        rest = key.replace(k, "", 1)
        if rest[:1].isdigit():  # 'l40' inside 'l40s'? no: 'l4' inside 'l40' leaves '0...': a different GPU
            continue
        if size and abs(int(size.group(1)) - spec.memory_gib) > 0.1 * spec.memory_gib + 2:
            continue
        return spec
    return None


def get_gpu(name: str) -> GpuSpec:
    """Like ``find_gpu`` but raises a UserError listing close names."""
    spec = find_gpu(name)
    if spec is None:
        names = [g.name for g in GPU_TABLE] + [a for g in GPU_TABLE for a in g.aliases]
        raise unknown_name("GPU", name, names, "advise gpus --list")
    return spec
