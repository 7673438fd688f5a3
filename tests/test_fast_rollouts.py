"""GRPO's rollouts through the fast sampler (``trainer.trl.fast_rollouts``) train the same weights as TRL's
``generate``, bit for bit; and the round runs on one CPU thread unless told otherwise."""

import json

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from envengineer.components.training import ROLLOUTS_FILE, TrainRequest  # noqa: E402


@pytest.fixture(scope="module")
def base(tiny_base):
    return tiny_base


def one_round(registry, base, out_dir, **options):
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=8, seed=2).records
    trainer = registry.create("trainer", "trl", {
        "max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 12,
        "temperature": 0.7, "learning_rate": 1e-3, "beta": 0.01, **options,
    })
    return trainer.train(TrainRequest(policy_path=base, records=records, generator=generator, validator=validator,
                                      out_dir=out_dir, seed=0, round=0, prompt_style="compact"))


def test_fast_rollouts_train_the_same_weights_as_generate(registry, base, tmp_path):
    torch.set_num_threads(2)
    slow = one_round(registry, base, tmp_path / "generate", fast_rollouts=False)
    fast = one_round(registry, base, tmp_path / "fast", fast_rollouts=True)
    assert (slow.metrics["rollouts_fast"], slow.metrics["rollouts_generate"]) == (0, 0)  # false: TRL's own path
    assert fast.metrics["rollouts_fast"] == 2 and fast.metrics["rollouts_generate"] == 0  # two steps, one rollout each
    # two rollouts: the second samples from the random state the first left, after a training step
    assert (slow.checkpoint / "model.safetensors").read_bytes() == (fast.checkpoint / "model.safetensors").read_bytes()
    assert (tmp_path / "generate" / ROLLOUTS_FILE).read_text() == (tmp_path / "fast" / ROLLOUTS_FILE).read_text()
    curves = [[{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in r.curves.read_text().splitlines()]
              for r in (slow, fast)]
    assert curves[0] == curves[1]
    # the round ran on one thread (the CPU default) and left torch's setting as it found it
    assert slow.metrics["threads"] == fast.metrics["threads"] == 1
    assert torch.get_num_threads() == 2


def test_threads_can_be_set(registry, base, tmp_path):
    torch.set_num_threads(1)
    result = one_round(registry, base, tmp_path / "two", threads=2, max_steps=1)
    assert result.metrics["threads"] == 2 and torch.get_num_threads() == 1


def test_a_batch_of_group_repeats_is_sampled_as_each_prompt_once():
    from envengineer.plugins.trainers.trl_rollouts import repeated_rows

    prompts = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 0, 4]])
    masks = (prompts != 0).long()
    assert repeated_rows(prompts.repeat_interleave(4, 0), masks.repeat_interleave(4, 0)) == 4
    assert repeated_rows(prompts.repeat_interleave(2, 0), masks.repeat_interleave(2, 0)) == 2
    assert repeated_rows(prompts, masks) == 1
    tiled = prompts.repeat(2, 1)  # each prompt twice, not side by side: generate's expansion is not this batch
    assert repeated_rows(tiled, (tiled != 0).long()) == 1
    same_ids = prompts.repeat_interleave(2, 0)
    other_mask = masks.repeat_interleave(2, 0).clone()
    other_mask[1, 0] = 1  # the same ids under another mask are another prompt
    assert repeated_rows(same_ids, other_mask) == 1
