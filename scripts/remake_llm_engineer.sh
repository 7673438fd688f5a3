#!/usr/bin/env bash
# Remake docs/results-llm-engineer.md's runs and archive them (issue 43, point 7): the simulated student's suite,
# grid-walk's suite and claim (c)'s two trainee-to-trainer runs with their scoring, each step skipped when its
# output is already there (the suites resume what finished). About 4 hours on 2 cores; run from the repository root
# in the development venv with SmolLM2 fetched (envengineer models smollm2-135m-instruct --fetch) and the arith
# example installed (pip install -e examples/envengineer-arith). Writes bench/results/llm-engineer/{sim,gw,claim-c}.tar.xz.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-2}"
archive="bench/results/llm-engineer"
export_dir="$(mktemp -d)"
mkdir -p "$archive"

suite() {  # a suite of examples/llm-engineer (the smollm2-v6 arm first: the donor arm reads its rounds), then its claims
    local name=$1 primary=$2 secondary=$3
    envengineer suite "examples/llm-engineer/$name-suite.yaml" --seeds 4 --jobs "$jobs" --output "runs/llm-engineer/$name" --only smollm2-v6
    envengineer suite "examples/llm-engineer/$name-suite.yaml" --seeds 4 --jobs "$jobs" --output "runs/llm-engineer/$name"
    python bench/llm_engineer_claims.py "runs/llm-engineer/$name" --primary "$primary" --secondary "$secondary" \
        ${RULE_ARMS:+--rule-arms $RULE_ARMS} --export "$export_dir"
    tar -cJf "$archive/$name.tar.xz" -C "$export_dir" "$name"
}

[ -f "$archive/sim.tar.xz" ] || RULE_ARMS=learnability suite sim bench:mapf-2agents-test eval
[ -f "$archive/gw.tar.xz" ] || suite gw eval bench:grid-walk-target

if [ ! -f "$archive/claim-c.tar.xz" ]; then
    for seed in 0 1; do
        envengineer run examples/trainee-to-trainer.yaml seed=$seed output=runs/t2t/seed-$seed
    done
    envengineer engineers score runs/t2t/seed-0 runs/t2t/seed-1 \
        --engineer examples/engineers/t2t-checkpoint.yaml --engineer examples/engineers/t2t-base.yaml \
        --samples 8 --instances 32 --draws 4 --predict 2 --output runs/t2t/claim-c
    mkdir -p "$export_dir/claim-c"
    cp runs/t2t/claim-c/score.json runs/t2t/claim-c/proposals.jsonl "$export_dir/claim-c/"
    # each run as the suites' runs are kept (configs, history, summaries, engineer folders; no checkpoints)
    python -c 'import sys; from pathlib import Path; sys.path.insert(0, "bench"); from llm_engineer_claims import export_run
for seed in (0, 1):
    assert export_run(Path(f"runs/t2t/seed-{seed}"), Path(sys.argv[1]) / f"seed-{seed}"), f"runs/t2t/seed-{seed} did not finish"' \
        "$export_dir/claim-c"
    tar -cJf "$archive/claim-c.tar.xz" -C "$export_dir" claim-c
fi
echo "archived: $(ls "$archive")"
