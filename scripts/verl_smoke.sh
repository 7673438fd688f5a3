#!/usr/bin/env bash
# GPU smoke check of the verl trainer and the vllm policy: one round of the loop on one CUDA
# GPU, fully offline, on a tiny Qwen3 built on the spot (nothing is downloaded).
#
#   pip install -e ".[train,verl]"
#   bash scripts/verl_smoke.sh               # needs nvidia-smi, a CUDA device, verl and vllm
#   bash scripts/verl_smoke.sh --prepare-only   # any machine: build the model and the config, check them, stop
#   bash scripts/verl_smoke.sh --gpus 4 --tp 2  # one node of 4 GPUs, vLLM tensor parallel 2 (as the paper preset)
#
# Steps (the first failure stops the script with a non-zero exit):
#  1. scripts/build_tiny_qwen3.py: a ~3.3 M-parameter Qwen3 (hidden 256, 4 layers, 8192
#     positions) with a byte-level BPE tokenizer, Qwen3's special tokens and a Qwen3-like
#     chat template that honours enable_thinking; reloaded with transformers and checked.
#  2. A run config (in SMOKE_DIR, default a mktemp folder): policy vllm on that model, trainer
#     verl (--gpus GPUs, default 1, vLLM tensor parallel --tp, default 1, for the rollouts and the
#     policy; 4 generations, batch 8, 3 training steps), engineer fixed, 1 round of 64
#     instances, evaluation on 32 instances of mapf-2agents-val. `envengineer run CONFIG
#     --dry-run` checks it first when the installed envengineer has that option.
#  3. `envengineer run CONFIG`: base eval (vLLM), generate, GRPO through verl, round eval.
#  4. The new checkpoint (round-00/train/checkpoint) loads in transformers
#     (AutoModelForCausalLM.from_pretrained, 8 greedy tokens) and in vLLM
#     (LLM(..., enforce_eager=True, gpu_memory_utilization=0.3).generate(["hello"], max_tokens 8)).
#  5. scripts/smoke_report.py: GPU name, versions, throughput, the round's reward curve
#     (reward mean per step), the valid rate before and after, a row for docs/performance.md.
#
# With a random model the rewards and valid rates are 0: the check is that every stage runs
# and hands the next one files it can use, not that anything is learned.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "verl_smoke: $*" >&2; exit 1; }

prepare_only="${SMOKE_PREPARE_ONLY:-0}"
gpus="${SMOKE_GPUS:-1}"
tp="${SMOKE_TP:-1}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prepare-only) prepare_only=1 ;;
    --gpus) [[ $# -ge 2 ]] || die "--gpus needs a number"; gpus="$2"; shift ;;
    --tp) [[ $# -ge 2 ]] || die "--tp needs a number"; tp="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
[[ "$gpus" =~ ^[1-9][0-9]*$ && "$tp" =~ ^[1-9][0-9]*$ ]] || die "--gpus and --tp take positive whole numbers"
(( gpus % tp == 0 )) || die "--gpus $gpus cannot hold vLLM engines of --tp $tp"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled \
  VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v envengineer >/dev/null || die "envengineer is not installed: pip install -e \".[train,verl]\""

if [[ "$prepare_only" != 1 ]]; then
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs a CUDA GPU (--prepare-only checks the model and config without one)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || die "nvidia-smi failed: no usable GPU"
  python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || die "torch sees no CUDA device"
  python -c "import torch, sys; sys.exit(0 if torch.cuda.device_count() >= $gpus else 1)" || die "fewer than $gpus CUDA devices visible"
  python -c "import verl" || die "verl is not installed: pip install -e \".[train,verl]\""
  python -c "import vllm" || die "vllm is not installed: pip install -e \".[train,verl]\""
fi

work="${SMOKE_DIR:-$(mktemp -d -t envengineer-verl-smoke.XXXXXX)}"
mkdir -p "$work"
model_dir="$work/tiny-qwen3"
run_dir="$work/run"
config="$work/verl-smoke.yaml"

echo "== 1. tiny Qwen3 -> $model_dir"
python scripts/build_tiny_qwen3.py "$model_dir"

echo "== 2. run config -> $config"
cat > "$config" <<EOF
# written by scripts/verl_smoke.sh: one round of verl GRPO on a tiny random Qwen3, $gpus GPU(s), vLLM TP $tp, offline
name: verl-smoke
task: {name: mapf-frozenlake, agents: 2}
seed: 0
policy: {name: vllm, path: "$model_dir", max_new_tokens: 256, gpu_memory_utilization: 0.3, enforce_eager: true, tensor_parallel_size: $tp}
trainer:
  name: verl
  n_gpus_per_node: $gpus
  nnodes: 1
  tensor_model_parallel_size: $tp
  gpu_memory_utilization: 0.3
  enforce_eager: true
  num_generations: 4
  train_batch_size: 8
  ppo_mini_batch_size: 8
  ppo_micro_batch_size_per_gpu: 4
  log_prob_micro_batch_size_per_gpu: 4
  max_prompt_length: 2048
  max_response_length: 256
  epochs: 1
  total_training_steps: 3
engineer: {name: fixed}
rounds: 1
budget: 64
eval: {validation: mapf-2agents-val, limit: 32, benchmarks: []}
output: "$run_dir"
EOF
cat "$config"

run_help="$(envengineer run --help 2>/dev/null || true)"   # read whole: grep -q on a pipe would break it under pipefail
if grep -q -- '--dry-run' <<<"$run_help"; then
  echo "== envengineer run $config --dry-run"
  envengineer run "$config" --dry-run
else
  echo "== (this envengineer's run has no --dry-run: the config is checked by the run itself)"
fi

if [[ "$prepare_only" == 1 ]]; then
  echo "== prepare-only: model in $model_dir, config in $config; no GPU steps run"
  exit 0
fi

echo "== 3. envengineer run $config"
SECONDS=0
envengineer run "$config"
echo "== the run took ${SECONDS} s"

checkpoint="$run_dir/round-00/train/checkpoint"
[[ -d "$checkpoint" ]] || die "no checkpoint at $checkpoint"

echo "== 4a. the checkpoint in transformers"
python - "$checkpoint" "$model_dir" <<'PY'
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

checkpoint, base = sys.argv[1], sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained(checkpoint)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = AutoModelForCausalLM.from_pretrained(checkpoint).to(device)
ids = tokenizer("hello", return_tensors="pt").to(device)
with torch.no_grad():
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
before = AutoModelForCausalLM.from_pretrained(base).state_dict()
diff = max((p.float().cpu() - before[k].float()).abs().max().item() for k, p in model.state_dict().items() if k in before)
print(f"transformers: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters, {model.dtype}; "
      f"generated {tokenizer.decode(out[0, ids['input_ids'].shape[1]:])!r}; largest change from the tiny base: {diff:.3g}")
PY

echo "== 4b. the checkpoint in vLLM"
# a file with a main guard, not stdin: vLLM may start its engine in a spawned process, which re-imports __main__
cat > "$work/check_vllm.py" <<'PY'
import sys


def main() -> None:
    from vllm import LLM, SamplingParams

    llm = LLM(model=sys.argv[1], enforce_eager=True, gpu_memory_utilization=0.3, tensor_parallel_size=int(sys.argv[2]))
    out = llm.generate(["hello"], SamplingParams(max_tokens=8))
    assert out and out[0].outputs, "vLLM returned no output"
    print(f"vllm: generated {out[0].outputs[0].text!r} ({len(out[0].outputs[0].token_ids)} tokens)")


if __name__ == "__main__":
    main()
PY
python "$work/check_vllm.py" "$checkpoint" "$tp"

echo "== 5. report"
python scripts/smoke_report.py "$run_dir" --require-gpu
echo "== run directory: $run_dir"
