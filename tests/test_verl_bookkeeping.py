"""verl's length filter: the prompts it drops are counted before launch, and a round that loses prompts to it still
reaches verl's last step (where verl saves), checked with verl's own dataset and its own step arithmetic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envengineer.errors import ConfigError
from envengineer.components.training import TrainRequest

REPLAY = Path(__file__).parent / "verl_replay"


@pytest.fixture(scope="module")
def model(tmp_path_factory, tiny_models):
    return tiny_models.char_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture()
def round_request(registry, model, tmp_path):
    generator, validator = registry.task("grid-walk")
    records = generator.generate(generator.default_config(), n=24, seed=1).records
    return TrainRequest(policy_path=model, records=records, generator=generator, validator=validator, out_dir=tmp_path / "round",
                        seed=5, round=0, validation_records=records[:4], task={"name": "grid-walk"})


def prompt_lengths(trainer, request) -> list[int]:
    """Each training prompt's tokens with the chat template, as verl's filter counts them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(request.policy_path)
    kwargs = {"enable_thinking": False}
    texts = [tokenizer.apply_chat_template(request.generator.render(r, "full"), add_generation_prompt=True, tokenize=False, **kwargs)
             for r in request.records]
    return sorted(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)


def options(**extra):
    return {"train_batch_size": 4, "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 4, "num_generations": 2, **extra}


def test_dropped_prompts_are_counted_and_the_last_step_is_reachable(registry, round_request):
    lengths = prompt_lengths(registry.create("trainer", "verl", options()), round_request)
    cut = lengths[len(lengths) // 2]  # about half the prompts are longer
    expect_kept = sum(n <= cut for n in lengths)
    assert 0 < expect_kept < len(lengths)
    trainer = registry.create("trainer", "verl", options(max_prompt_length=cut, epochs=2, total_training_steps=100))
    data = trainer.write_data(round_request)
    import os

    environ = os.environ
    counted = trainer.count_kept(round_request, data)
    # datasets' filter with num_proc puts a copy in os.environ's place; the count keeps the object every
    # reference (rich's consoles, subprocess) holds, with datasets' contents
    assert os.environ is environ
    assert counted == {"kept_rows": expect_kept, "dropped_prompts": len(lengths) - expect_kept}
    cfg = trainer.check(trainer.overrides(round_request, counted["kept_rows"]))
    # verl 0.9.1's trainer (ppo/v1/trainer_base.py): steps_per_epoch = len(train_dataset) // train_batch_size, the total
    # is total_training_steps when set, the loop ends after the epochs, and the save comes at the last step
    from envengineer.plugins.trainers.verl_data import kept_rows

    steps_per_epoch = kept_rows(cfg) // cfg.data.train_batch_size
    total = cfg.trainer.total_training_steps or steps_per_epoch * cfg.trainer.total_epochs
    assert 1 <= total <= steps_per_epoch * cfg.trainer.total_epochs  # the last step, and its save, happen
    assert total == trainer.planned_steps(counted["kept_rows"]) == (expect_kept // 4) * 2
    assert cfg.trainer.save_freq == total


def test_a_round_whose_prompts_are_all_too_long_fails_before_launch(registry, round_request):
    trainer = registry.create("trainer", "verl", options(max_prompt_length=16))
    with pytest.raises(ConfigError, match="max_prompt_length: all 24 of the round's prompts are longer than 16 tokens"):
        trainer.train(round_request)
    assert not (Path(round_request.out_dir) / "verl.log").exists()


def test_a_round_records_its_dropped_prompts_and_attention(registry, round_request):
    lengths = prompt_lengths(registry.create("trainer", "verl", options()), round_request)
    trainer = registry.create("trainer", "verl", options(max_prompt_length=lengths[-5], module="replay_main_ppo",
                                                         env={"PYTHONPATH": str(REPLAY)}))
    result = trainer.train(round_request)
    dropped = sum(n > lengths[-5] for n in lengths)
    assert dropped > 0 and result.metrics["prompts_dropped"] == dropped and result.metrics["prompts_given"] == 24
    assert result.launch["prompts_dropped"] == dropped
    assert result.launch["attention"] == "sdpa" and result.launch["remove_padding"] is False  # no flash-attn here
    assert result.launch["python"] == sys.executable  # the interpreter that ran verl was probed, not this process's imports
    assert result.checkpoint.is_dir()


@pytest.mark.slow
def test_details_json_records_how_the_round_was_launched(model, tmp_path):
    """The loop writes the trainer's launch record into the round's details.json, beside (not inside) what the engineer reads."""
    import yaml

    from envengineer.loop.steps import run

    config = tmp_path / "verl.yaml"
    config.write_text(yaml.safe_dump({
        "name": "verl-launch", "task": {"name": "grid-walk"}, "rounds": 1, "budget": 8, "seed": 1,
        "engineer": {"name": "fixed"}, "policy": {"name": "transformers", "path": str(model), "max_new_tokens": 4},
        "trainer": {"name": "verl", **options(), "module": "replay_main_ppo", "env": {"PYTHONPATH": str(REPLAY)}},
        "eval": {"limit": 4}, "output": str(tmp_path / "run"),
    }))
    run(config)
    details = json.loads((tmp_path / "run" / "round-00" / "train" / "details.json").read_text())
    assert details["launch"]["attention"] == "sdpa" and details["launch"]["prompts_dropped"] == 0
    assert "attention" not in json.dumps(details["full"])
