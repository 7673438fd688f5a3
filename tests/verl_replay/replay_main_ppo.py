"""A stand-in for ``python -m verl.trainer.main_ppo`` at the launch boundary (no GPU, no Ray).

It reads the same command line (Hydra overrides) and leaves what verl 0.9.1 leaves: the file
logger's lines (``{"step": N, "data": {...}}``, replayed from recorded_metrics.jsonl, whose
keys are the metric names of verl 0.9.1's trainer; written one line at a time, like the real
logger, including a validation-only line) at ``$VERL_FILE_LOGGER_PATH``, and, with
``checkpoint.save_contents=[hf_model]``, a Hugging Face model directory at
``trainer.default_local_dir/global_step_N/actor/huggingface`` plus
``latest_checkpointed_iteration.txt``. Here the "trained" model is a copy of the starting
one. ``REPLAY_FAIL=1`` makes it fail as a crashed job does: a traceback on stderr, exit 1.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    overrides = {}
    for item in argv:
        key, _, value = item.partition("=")
        overrides[key.lstrip("+")] = value.strip("'")
    print("ray init kwargs: {...}", flush=True)
    if os.environ.get("REPLAY_FAIL"):
        print("Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
        return 1
    assert overrides["trainer.resume_mode"] == "disable"
    assert overrides["actor_rollout_ref.actor.checkpoint.save_contents"] == "[hf_model]"
    logger_path = os.environ["VERL_FILE_LOGGER_PATH"]
    assert overrides["ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] == logger_path
    recorded = (Path(__file__).parent / "recorded_metrics.jsonl").read_bytes().splitlines()
    step = 0
    with open(logger_path, "wb", buffering=0) as handle:
        for line in recorded:
            handle.write(line + b"\n")
            step = max(step, json.loads(line)["step"])
            time.sleep(0.05)
    target = Path(overrides["trainer.default_local_dir"]) / f"global_step_{step}" / "actor" / "huggingface"
    shutil.copytree(overrides["actor_rollout_ref.model.path"], target)
    (Path(overrides["trainer.default_local_dir"]) / "latest_checkpointed_iteration.txt").write_text(str(step))
    print(f"Final validation metrics: {{}}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
