#!/usr/bin/env bash
# GPU smoke check of the trl trainer: one real GRPO round of the embedded tiny policy on one
# CUDA GPU, with the quickstart's recipe (examples/quickstart.yaml: its warm start, its trl
# settings, its 2,400-instance budget), then the loop's evaluation, then a report.
#
#   pip install torch transformers trl && pip install -e ".[train]"
#   bash scripts/gpu_smoke_trl.sh            # needs nvidia-smi and a CUDA device torch can see
#
# What it runs: `envengineer run examples/quickstart.yaml rounds=1 trainer.use_cpu=false
# policy.device=cuda ...` into a fresh folder (SMOKE_DIR, default a mktemp folder; rerun with
# the same SMOKE_DIR to resume). The warm start is the quickstart's, shipped with mapf-frozenlake
# (tasks/mapf_frozenlake/data/tiny/, checked against its SHA256SUMS), so nothing is pretrained
# first. Everything else (prefilter sampling, GRPO, base and round eval on the
# 480-instance mapf-2agents-val) runs on the GPU. Budgets are work (one pass over the kept
# prompts), never seconds. Target: under 10 minutes on one GPU; not yet measured on one.
#
# It prints (scripts/smoke_report.py, reading the run directory through envengineer's RunDir
# and runview): the GPU name, library versions, training throughput (completions/s and
# optimiser steps/s of round 0's GRPO), the reward curve (step, reward mean), the valid rate
# before (base eval) and after (round 0 eval) with the paired change, and a row for the table
# in docs/performance.md ("GPU smoke checks"). Any failed step stops the script (exit != 0).
#
# CPU form: `bash scripts/gpu_smoke_trl.sh --cpu` (or SMOKE_CPU=1) runs the same command on
# the CPU with the same shipped warm start and a reduced round: 64 training instances (the
# prefilter keeps 9 of them at seed 0), 2 optimiser steps and 48 evaluation instances, in a
# private cache; ~25 s on 2 cores. It is only a check that this script works end to end (the
# report fails when no optimiser step was taken); its figures measure nothing.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "gpu_smoke_trl: $*" >&2; exit 1; }

cpu="${SMOKE_CPU:-0}"
for arg in "$@"; do
  case "$arg" in
    --cpu) cpu=1 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $arg (see --help)" ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v envengineer >/dev/null || die "envengineer is not installed: pip install -e \".[train]\""
python -c "import trl" 2>/dev/null || die "TRL is not installed: pip install -e \".[train]\""

work="${SMOKE_DIR:-$(mktemp -d -t envengineer-gpu-smoke.XXXXXX)}"
mkdir -p "$work"
run_dir="$work/run"

overrides=(name=gpu-smoke rounds=1 "output=$run_dir")
if [[ "$cpu" == 1 ]]; then
  echo "== CPU form: a check of this script only (a reduced round; the figures measure nothing)"
  export ENVENGINEER_CACHE="$work/cache"   # whatever the run caches stays out of the shared cache
  overrides+=(
    trainer.use_cpu=true policy.device=cpu
    budget=64 trainer.max_steps=2 eval.limit=48
  )
  report_flags=()
else
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs a CUDA GPU (the CPU form: --cpu)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    || die "nvidia-smi failed: no usable GPU (the CPU form: --cpu)"
  python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || die "torch sees no CUDA device (torch $(python -c 'import torch; print(torch.__version__)')): install a CUDA build of torch"
  overrides+=(trainer.use_cpu=false policy.device=cuda)
  report_flags=(--require-gpu)
fi

echo "== envengineer run examples/quickstart.yaml ${overrides[*]}"
SECONDS=0
envengineer run examples/quickstart.yaml "${overrides[@]}"
echo "== the run took ${SECONDS} s"

python scripts/smoke_report.py "$run_dir" ${report_flags[@]+"${report_flags[@]}"}
echo "== run directory: $run_dir"
