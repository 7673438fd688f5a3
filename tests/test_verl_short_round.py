"""A verl round with fewer instances than one ``train_batch_size``: one smaller batch (as the ``trl``
trainer takes one smaller step), or, when no batch of them divides among the GPUs, nothing trained and
the starting weights carried forward, decided before verl is launched. verl's dataloader drops a
partial batch and its job fails on an empty one, so before this such a round was refused
("prompts per step but the round has only ...")."""

import json
import shlex
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from envengineer.components.training import TrainRequest  # noqa: E402

REPLAY = Path(__file__).parent / "verl_replay"


def _options(registry, **options):
    return registry.create("trainer", "verl", options)


def test_a_whole_batch_keeps_the_options(registry):
    trainer = _options(registry, train_batch_size=16, ppo_mini_batch_size=8, num_generations=4)
    assert trainer.round_options(16) is trainer.options and trainer.round_options(40) is trainer.options
    assert trainer.short_note(16) == {} and trainer.planned_steps(40) == 2


@pytest.mark.parametrize("prompts, gpus, group, expected", [
    # (train batch, optimiser step, micro-batch per GPU); the options: batch 32, steps of 8 prompts, micro-batch 4
    (24, 1, 4, (24, 8, 4)),      # all 24 prompts, steps of 8 as configured
    (20, 1, 4, (20, 5, 4)),      # 20 prompts: steps of 5 (the largest divisor of 20 up to 8)
    (5, 1, 4, (5, 5, 4)),        # one step of all 5
    (3, 4, 2, (2, 2, 1)),        # 3 prompts x 2 responses do not split over 4 GPUs: 2 of them, 1 response per GPU
    (1, 4, 2, None),             # 2 responses for 4 GPUs: no batch at all
])
def test_fewer_prompts_than_a_batch_take_one_smaller_batch(registry, prompts, gpus, group, expected):
    trainer = _options(registry, train_batch_size=32, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4 if gpus == 1 else 1,
                       num_generations=group, n_gpus_per_node=gpus, epochs=3)
    fitted = trainer.round_options(prompts)
    note = trainer.short_note(prompts)
    if expected is None:
        assert fitted is None and trainer.planned_steps(prompts) == 0
        assert note["short_batch_prompts"] == 0 and "nothing trained" in note["note"]
        return
    assert (fitted.train_batch_size, fitted.ppo_mini_batch_size, fitted.ppo_micro_batch_size_per_gpu) == expected
    assert fitted.learning_rate == trainer.options.learning_rate and fitted.epochs == 3  # the rest as given
    assert trainer.planned_steps(prompts) == 3  # one batch per epoch
    assert note["short_batch_prompts"] == expected[0] and f"{prompts} prompts, fewer than one train batch of 32" in note["note"]
    assert ("left out" in note["note"]) == (expected[0] < prompts)


def test_the_smaller_batch_composes_and_passes_verls_validate_config(registry, tmp_path):
    trainer = _options(registry, preset="paper-4xh100", batch_reading="accumulation")  # 128 prompts per rollout, steps of 16, 4 GPUs
    request = TrainRequest(policy_path=tmp_path / "model", records=[], generator=None, validator=None, out_dir=tmp_path / "round")
    cfg = trainer.check(trainer.overrides(request, 100))
    assert cfg.data.train_batch_size == 100 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 10
    # the preset's own reading (one update per rollout): one update over the 100
    default = _options(registry, preset="paper-4xh100")
    assert default.check(default.overrides(request, 100)).actor_rollout_ref.actor.ppo_mini_batch_size == 100
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4 and cfg.trainer.save_freq == 3  # 1 batch × 3 epochs
    assert cfg.actor_rollout_ref.actor.optim.lr == 2e-6  # the preset's other values stay


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tiny_models):
    return tiny_models.char_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture()
def short_request(registry, tiny_model, tmp_path):
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=6, seed=1).records
    return TrainRequest(policy_path=tiny_model, records=records, generator=generator, validator=validator, out_dir=tmp_path / "round",
                        seed=5, round=0, validation_records=records[:2], task={"name": "mapf-frozenlake", "agents": 2})


def test_a_short_round_trains_one_smaller_batch_through_the_launch_boundary(registry, short_request):
    trainer = _options(registry, train_batch_size=8, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4, num_generations=4,
                       module="replay_main_ppo", env={"PYTHONPATH": str(REPLAY)})
    plan = trainer.plan(short_request)
    assert plan["steps"] == 1 and plan["short_batch_prompts"] == 6 and plan["batches"]["responses_per_rollout"] == 24
    result = trainer.train(short_request)
    out = Path(short_request.out_dir)
    argv = shlex.split((out / "verl.log").read_text().splitlines()[0][2:])
    values = dict(item.lstrip("+").split("=", 1) for item in argv[3:])
    assert values["data.train_batch_size"] == "6" and values["actor_rollout_ref.actor.ppo_mini_batch_size"] == "3"
    assert result.metrics["short_batch_prompts"] == 6 and result.metrics["prompts_used"] == 6
    assert "6 prompts, fewer than one train batch of 8: one batch of 6 (optimiser steps of 3 prompts" in result.metrics["note"]
    assert result.checkpoint == out / "checkpoint" and (result.checkpoint / "config.json").is_file()


def test_a_round_no_batch_fits_carries_the_checkpoint_forward_without_launching(registry, short_request):
    from dataclasses import replace

    # 4 GPUs, 2 responses per prompt: one prompt's 2 responses cannot split over them
    trainer = _options(registry, train_batch_size=4, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1, num_generations=2,
                       n_gpus_per_node=4, module="no_such_module_would_fail_if_launched")
    request = replace(short_request, records=short_request.records[:1])
    plan = trainer.plan(request)
    assert "command" not in plan and plan["steps"] == 0 and plan["short_batch_prompts"] == 0
    result = trainer.train(request)
    out = Path(request.out_dir)
    assert not (out / "verl.log").exists()  # verl never ran
    start = Path(request.policy_path)
    assert result.checkpoint == out / "checkpoint"
    assert sorted(p.name for p in result.checkpoint.iterdir()) == sorted(p.name for p in start.iterdir())
    assert (result.checkpoint / "model.safetensors").read_bytes() == (start / "model.safetensors").read_bytes()
    assert result.curves.read_text() == ""
    m = result.metrics
    assert (m["steps"], m["trained_prompts"], m["prompts_used"], m["prompts_given"], m["completions"]) == (0, 0, 0, 1, 0)
    assert "nothing trained, the starting weights are the checkpoint" in m["note"]
    [line] = [json.loads(text) for text in (out / "rollouts.jsonl").read_text().splitlines()]
    assert line["samples"] == 0 and line["kept"] is False
