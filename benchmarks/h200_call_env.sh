# Sourced by the H200 call scripts: the checkout as the working directory and on PYTHONPATH (the flat
# layout runs without installing), NVLink multicast off, unbuffered logs, and the record of the machine
# every result file needs beside it: OUT_DIR/nvidia-smi.csv and OUT_DIR/versions.txt (torch, transformers).
#     source "$(dirname "${BASH_SOURCE[0]}")/h200_call_env.sh" OUT_DIR
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$1"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$1/nvidia-smi.csv" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" > "$1/versions.txt" 2>&1
