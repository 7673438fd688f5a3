"""SmolLM2-135M-Instruct as the policy: evaluated on a task's full prompts, warm-started through TRL's
SFTTrainer on the task's solver answers (cached by its recipe), and trained one GRPO step by the ``trl``
trainer. Small budgets (a few instances, a few new tokens, one optimiser step): the figures of longer
runs are in docs/smollm2.md."""

import json
import random
from pathlib import Path
from typing import ClassVar

import pytest

pytest.importorskip("trl")

from envengineer.components import GenerationResult, Generator, Validator, Verdict  # noqa: E402
from envengineer.errors import ConfigError  # noqa: E402
from envengineer.components.training import TrainRequest  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def warm(smollm2_folder, tmp_path_factory, one_thread):
    """SmolLM2 after one SFT step on 2 grid-walk pairs (its own cache folder), and the policy that built it."""
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    registry = Registry(create_plugin_manager(entry_points=False, environ={}))
    cache = tmp_path_factory.mktemp("sft-cache")
    options = {"path": "smollm2-135m-instruct", "warm_start": {"instances": 2, "max_steps": 1, "batch_size": 2, "lr": 1e-4,
                                                                 "cache_dir": str(cache)}}
    policy = registry.create("policy", "transformers", options, where="policy.transformers")
    generator, _ = registry.task("grid-walk", {})
    path = policy.prepare(generator=generator)
    return {"registry": registry, "options": options, "policy": policy, "path": path, "cache": cache, "generator": generator}


def _tensor(folder, name="model.embed_tokens.weight"):
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        keys = list(handle.keys())
        return handle.get_tensor(name if name in keys else keys[0])


def test_full_prompts_through_the_chat_template(registry, smollm2_folder, tmp_path, one_thread):
    """`envengineer eval --policy transformers:smollm2-135m-instruct --style full` on grid-walk: the chat template
    renders the prompt (Llama's template takes no thinking switch and ignores the default one), generation stops
    at <|im_end|> (id 2, also the pad token), and the verdicts are written."""
    from typer.testing import CliRunner

    from envengineer.cli.commands import app
    from envengineer.plugins.policies.transformers_policy import chat_text

    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id, GenerationConfig.from_pretrained(smollm2_folder).eos_token_id) == (2, 2, 2)
    generator, _ = registry.task("grid-walk", {})
    record = generator.generate(generator.default_config(), n=1, seed=0).records[0]
    text = chat_text(tokenizer, generator.render(record, "full"), {"enable_thinking": False})
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert f"{record['k']} moves" in text and "enable_thinking" not in text

    config = tmp_path / "policy.yaml"
    config.write_text("max_new_tokens: 6\nthreads: 1\n")
    result = CliRunner().invoke(app, ["eval", "--policy", "transformers:smollm2-135m-instruct", "--policy-config", str(config),
                                      "--bench", "grid-walk-val", "--limit", "2", "--style", "full", "--output", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "eval" / "grid-walk-val" / "summary.json").read_text())
    assert summary["overall"]["n"] == 2
    responses = [json.loads(line) for line in (tmp_path / "eval" / "grid-walk-val" / "responses.jsonl").read_text().splitlines()]
    assert len(responses) == 2 and all("<|im_end|>" not in json.dumps(line) for line in responses)


def test_sft_warm_start_is_cached_by_its_recipe(warm):
    """The warm start trains (TRL's SFTTrainer, one step) into a model folder keyed by its recipe; the same options
    find it again without training, other options get another folder, and bad options name the field."""
    path, registry, generator = warm["path"], warm["registry"], warm["generator"]
    assert warm["policy"].prepared == "built" and path.parent == warm["cache"]
    info = json.loads((path / "warm_start.json").read_text())
    assert info["kind"] == "sft" and info["steps"] == 1 and info["instances"] == 2 and info["prompts"] == "chat"
    assert info["recipe"]["task"] == "grid-walk" and info["recipe"]["style"] == "full" and info["train"]["first_loss"] > 0
    from envengineer.plugins._shared.models import resolve_model

    import torch

    base = resolve_model("smollm2-135m-instruct")
    assert not torch.equal(_tensor(path), _tensor(Path(base)))  # the optimiser step moved the weights

    again = registry.create("policy", "transformers", warm["options"], where="policy.transformers")
    assert again.prepare(generator=generator) == path and again.prepared == "cached"
    assert again.with_path(path).options.warm_start is None  # a checkpoint already holds its warm start
    with pytest.raises(ConfigError, match="sample the warm-started model"):
        again.load()

    from envengineer.plugins.policies.sft import SftWarmStart, sft_recipe
    from envengineer.plugins.policies.tiny_model import recipe_key

    key = lambda **change: recipe_key(sft_recipe(SftWarmStart(**{**warm["options"]["warm_start"], **change}), Path(base),
                                                 generator, "full", {"enable_thinking": False}))
    assert key() == path.name and key(threads=2) == path.name and key(lr=2e-4) != path.name and key(instances=3) != path.name
    other, _ = registry.task("grid-walk", {"warm_start_max_moves": 3})
    assert recipe_key(sft_recipe(SftWarmStart(**warm["options"]["warm_start"]), Path(base), other, "full",
                                 {"enable_thinking": False})) != path.name

    with pytest.raises(ConfigError, match="policy.transformers.warm_start.lr"):
        registry.create("policy", "transformers", {"path": "smollm2-135m-instruct", "warm_start": {"lr": 0}}, where="policy.transformers")
    with pytest.raises(ConfigError, match="policy.transformers.warm_start"):
        registry.create("policy", "transformers", {"path": "smollm2-135m-instruct", "warm_start": {"steps": 3}}, where="policy.transformers")
    with pytest.raises(ConfigError, match="policy.tiny.warm_start"):
        registry.create("policy", "tiny", {"warm_start": {"instances": 3}}, where="policy.tiny")


class SayGenerator(Generator):
    """Prompts that ask for a number; SmolLM2 sampled at temperature 1 writes it in some answers and not in others."""

    name: ClassVar[str] = "say-number"

    def generate(self, config, *, n, seed, workers=None, progress=None):
        rng = random.Random(seed)
        return GenerationResult([{"id": f"say-{seed}-{i}", "value": rng.randint(2, 9), "group": "all"} for i in range(n)])

    def render(self, record, style="full"):
        return [{"role": "user", "content": f"Write the number {record['value']}."}]

    def group(self, record):
        return "all"

    def groups(self):
        return ("all",)


class SayValidator(Validator):
    name: ClassVar[str] = "say-number"
    failure_types: ClassVar[tuple[str, ...]] = ("missing",)

    def score(self, record, response):
        ok = str(record["value"]) in response
        return Verdict(ok, ok, None if ok else "missing", () if ok else ("missing",))


def test_one_grpo_step_on_smollm2(registry, warm, tmp_path):
    """One GRPO step of the trl trainer from the warm-started SmolLM2 (4 prompts × 2 completions of at most 8 tokens):
    a real optimiser step on mixed rewards moves the weights, writes the checkpoint and logs the curve."""
    from envengineer.components.training import CURVE_KEYS

    trainer = registry.create("trainer", "trl", {
        "num_generations": 2, "per_device_train_batch_size": 8, "max_completion_length": 8, "max_steps": 1, "temperature": 1.0,
        "learning_rate": 1e-5, "threads": 1, "seed": 0, "gradient_checkpointing": False,
    }, where="trainer.trl")
    generator, validator = SayGenerator(), SayValidator()
    records = generator.generate(None, n=4, seed=0).records
    result = trainer.train(TrainRequest(policy_path=warm["path"], records=records, generator=generator, validator=validator,
                                        out_dir=tmp_path / "round", seed=0, prompt_style="full"))
    assert result.metrics["steps"] == 1 and result.metrics["trained_prompts"] == 4
    lines = [json.loads(line) for line in result.curves.read_text().splitlines()]
    assert len(lines) == 1 and set(CURVE_KEYS) <= set(lines[0]) and lines[0]["step"] == 1
    assert lines[0]["zero_std_frac"] < 1 and lines[0]["grad_norm"] > 0  # some group had mixed rewards: a gradient
    checkpoint = result.checkpoint
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "tokenizer.json").is_file()
    import torch

    assert not torch.equal(_tensor(checkpoint, "model.layers.0.self_attn.q_proj.weight"), _tensor(warm["path"], "model.layers.0.self_attn.q_proj.weight"))
    rollouts = [json.loads(line) for line in (tmp_path / "round" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4
