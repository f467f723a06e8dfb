#!/usr/bin/env bash
# One GPU call (600 s at most on the lent machines): the measurements named as STEPs, in order, each under
# its own timeout, then everything as OUT_DIR/NAME.tgz (copy the files the fit reads to
# benchmarks/calibration/results/, the rest to results/calls/NAME/). The checkout is the working directory
# and on PYTHONPATH; NVLink multicast off; OUT_DIR/NAME/nvidia-smi.csv and versions.txt record the machine,
# and versions.txt each step's exit status and the seconds since the call began.
#
#     bash benchmarks/calibration/gpu_call.sh OUT_DIR NAME STEP [STEP ...]
#
# Steps (budgets in seconds: start no row after; each step's timeout leaves room for the last row):
#   unseen:SET             one unseen set, every row timed in ROUNDS rounds (default 3) with a host probe
#                          before each, compiled rows each in a process of their own (BUDGET, default 420)
#   users                  the users' reference rows again (measure/users_models.py; USERS_BUDGET, 110)
#   hostbound              the host-bound set (measure/reference.py --set hostbound; HOSTBOUND_BUDGET, 200)
#   contended              its eager rows on one core that a busy loop shares (the slowed host; 80)
#   compiled-fresh:IDS     compiled rows, each in a process of its own (measure/compiled_overlap.py --fresh;
#                          COMPILED_BUDGET, 400)
#   rerun:SET:IDS          rows of a set again with the rounds protocol (RERUN_BUDGET, 50)
#   profile:IDS            kernel profiles of rows (notebook 2026-12-04-kernel-profiles/profile_users_rows.py)
#   recipes[:ONLY]         gpu_checks/h200_recipes.sh (RECIPE_TIMEOUT, 270)
#   compromises:NAMES      gpu_checks/h200_compromises.py, NAMES comma-separated (COMPROMISE_BUDGET 170,
#                          COMPROMISE_TOTAL 235)
#   probe:MODEL-FLAGS      `advise probe` then `advise estimate` with and without the probe's home (flags with
#                          commas for spaces: probe:--model,resnet50,--micro-batch,8)
#   published[:IDS]        published rows' configurations under this stack (measure/published_configs.py: DLE
#                          SQuAD's BertForQuestionAnswering, BertForMaskedLM, ResNet-50; PUBLISHED_BUDGET, 150)
#   reference[:IDS]        the H200 reference set's rows on this GPU (measure/reference.py --only; eager rows
#                          first, compiled last; REFERENCE_BUDGET, 220)
#   refset:SET             one of measure/reference.py's sets (--set SET: hostbound, i39, i39b, i39c), eager rows
#                          first, compiled last, into NAME/SET.jsonl (REFSET_BUDGET, 420)
#   loader                 the loader on this host: gpu_checks/loader_workers.py (where a worker's time goes, the
#                          product's probe against DataLoader as the runtime builds it; 75) then
#                          gpu_checks/loader_fed.py (the probed plan against the image recipe's run; 120)
#
# The calls behind the committed results, as this script (benchmarks/README.md lists them all):
#   unseen sets u3..u14       gpu_call.sh OUT u14 unseen:u14            (u5..u8: BUDGET=460-480, ROUNDS=1)
#   round 6 (u2, profiles)    gpu_call.sh OUT round6 unseen:u2 users profile:enc-bf16-128,hfbertcls-bf16-128,...
#   host-bound regime         gpu_call.sh OUT host hostbound unseen:u1 contended
#   compiled kernels          gpu_call.sh OUT compiled-kernels compiled-fresh:u12-vgg-bf16-compile-16-i192,... \
#                               rerun:u12:u12-nanogpt-pure-4-s1024
#   rounds 3-5 (gpu_checks)   gpu_call.sh OUT round3 recipes compromises:adamw-8bit,in-backward,lora-r16,...
#   H100 (issue 28)           gpu_call.sh OUT h100-i28 published reference:r50-fp32-64,...,r50-bf16-cl-compile-128
#   H100 (issue 39)           gpu_call.sh OUT h100-i39 refset:i39
#   next, prepared (39)       REFSET_BUDGET=300 gpu_call.sh OUT h100-i39c refset:i39c loader   (~560 s)
set -uo pipefail
usage="usage: bash benchmarks/calibration/gpu_call.sh OUT_DIR NAME STEP [STEP ...]"
steps="unseen:SET, users, hostbound, contended, compiled-fresh:IDS, rerun:SET:IDS, profile:IDS, recipes[:ONLY], compromises:NAMES, probe:FLAGS, published[:IDS], reference[:IDS], refset:SET, loader"
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
out=${1:?$usage}
name=${2:?$usage}
shift 2
[[ $# -gt 0 ]] || { echo "gpu_call: no step given; $usage" >&2; exit 2; }
for step in "$@"; do  # every step known before the call spends a second of the GPU's time
  case ${step%%:*} in
    unseen|users|hostbound|contended|compiled-fresh|rerun|profile|recipes|compromises|probe|published|reference|refset|loader) ;;
    *) echo "gpu_call: unknown step '$step'; steps: $steps" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
r="$out/$name"
mkdir -p "$r"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$r/nvidia-smi.csv" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" > "$r/versions.txt" 2>&1
grep -m1 "model name" /proc/cpuinfo >> "$r/versions.txt"
start=$(date +%s)

run() {  # LABEL TIMEOUT_S COMMAND...: one step, its output in NAME/LABEL.log
  local label=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$r/$label.log" 2>&1
  echo "$label: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
}

for step in "$@"; do
  kind=${step%%:*}
  arg=${step#*:}; [[ $arg == "$step" ]] && arg=""
  case $kind in
    unseen)
      n=${arg#u}; [[ $arg == u1 ]] && n=""
      run "unseen$n" $(( ${BUDGET:-420} + 100 )) python3 -m benchmarks.calibration.measure.unseen --set "$arg" \
        --out "$r/h200-users-unseen$n.jsonl" --budget-s "${BUDGET:-420}" --rounds "${ROUNDS:-3}" --fresh-compiled ;;
    users)
      run users $(( ${USERS_BUDGET:-110} + 40 )) python3 -m benchmarks.calibration.measure.users_models \
        --out "$r/h200-users-rerun.jsonl" --budget-s "${USERS_BUDGET:-110}" ;;
    hostbound)
      run hostbound $(( ${HOSTBOUND_BUDGET:-200} + 40 )) python3 -m benchmarks.calibration.measure.reference \
        --set hostbound --out "$r/h200-hostbound.jsonl" --budget-s "${HOSTBOUND_BUDGET:-200}" ;;
    contended)
      core=$(( $(nproc) - 1 ))
      taskset -c "$core" python3 -c "while True: pass" & busy=$!
      OMP_NUM_THREADS=1 run contended 120 taskset -c "$core" python3 -m benchmarks.calibration.measure.reference \
        --set hostbound --eager-only --out "$r/h200-hostbound-contended.jsonl" --budget-s 80 \
        --only h-r50-bf16-1 h-mini-bf16-8 h-bert-bf16-4 h-gpt2-bf16-1 h-vitb-bf16-1 h-r18-bf16-32 h-mini-bf16-32 h-l1b-bf16-1
      kill "$busy"; wait "$busy" 2>/dev/null ;;
    compiled-fresh)
      run compiled-kernels $(( ${COMPILED_BUDGET:-400} + 80 )) python3 -m benchmarks.calibration.measure.compiled_overlap \
        --fresh --only "$arg" --out "$r/compiled-kernels.json" --budget-s "${COMPILED_BUDGET:-400}" ;;
    rerun)
      set_name=${arg%%:*}
      run "$set_name-rerun" $(( ${RERUN_BUDGET:-50} + 10 )) python3 -m benchmarks.calibration.measure.unseen --set "$set_name" \
        --only "${arg#*:}" --rounds 3 --out "$r/$set_name-rerun.jsonl" --budget-s "${RERUN_BUDGET:-50}" ;;
    profile)
      run profile 100 python3 -m benchmarks.notebook.2026-12-04-kernel-profiles.profile_users_rows \
        --out "$r/profiles.json" --only "$arg" ;;
    recipes)
      run recipes "${RECIPE_TIMEOUT:-270}" bash benchmarks/gpu_checks/h200_recipes.sh "$r/recipes" --work /tmp/recipes-work \
        ${arg:+--only "$arg"} ;;
    compromises)
      OUT="$r/compromises" run compromises $(( ${COMPROMISE_TOTAL:-235} + 15 )) python3 -m benchmarks.gpu_checks.h200_compromises \
        --budget-s "${COMPROMISE_BUDGET:-170}" --total-s "${COMPROMISE_TOTAL:-235}" --only ${arg//,/ } ;;
    probe)
      flags=(${arg//,/ })
      tag=${flags[1]:-probe}
      run "probe-$tag" 90 python3 -m cli.main probe "${flags[@]}" --home "$r/probe-home" --json
      run "estimate-after-$tag" 30 python3 -m cli.main estimate "${flags[@]}" --home "$r/probe-home" --json
      run "estimate-packaged-$tag" 30 python3 -m cli.main estimate "${flags[@]}" --json ;;
    published)
      run published $(( ${PUBLISHED_BUDGET:-150} + 50 )) python3 -m benchmarks.calibration.measure.published_configs \
        --out "$r/published-configs.jsonl" --budget-s "${PUBLISHED_BUDGET:-150}" ${arg:+--only "$arg"} ;;
    reference)
      run reference $(( ${REFERENCE_BUDGET:-220} + 80 )) python3 -m benchmarks.calibration.measure.reference \
        --out "$r/reference.jsonl" --budget-s "${REFERENCE_BUDGET:-220}" ${arg:+--only ${arg//,/ }} ;;
    refset)
      run "refset-$arg" $(( ${REFSET_BUDGET:-420} + 90 )) python3 -m benchmarks.calibration.measure.reference \
        --set "$arg" --out "$r/$arg.jsonl" --budget-s "${REFSET_BUDGET:-420}" ;;
    loader)
      run loader-workers 75 python3 -m benchmarks.gpu_checks.loader_workers "$r/loader-workers" --files 512 --batches 6
      run loader-fed 120 python3 -m benchmarks.gpu_checks.loader_fed "$r/loader-fed" --files 512 --cores 3,5 \
        --steps 30 --row-seconds 0.5 ;;
  esac
done
tar -czf "$out/$name.tgz" -C "$out" "$name"
rm -rf "$r"
