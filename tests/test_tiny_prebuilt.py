"""The warm start mapf-frozenlake ships for the quickstart's recipe: found, verified, used."""

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.errors import ConfigError  # noqa: E402
from envengineer.plugins.policies import tiny_model  # noqa: E402
from envengineer.registry import load_registry  # noqa: E402
from envengineer.loop.runconfig import load_run_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quickstart's tiny policy (an empty cache) and its task."""
    registry = load_registry(entry_points=False)
    config = load_run_config(ROOT / "examples" / "quickstart.yaml")
    options = {**{k: v for k, v in config.policy.items() if k != "name"}, "cache_dir": str(tmp_path_factory.mktemp("cache"))}
    policy = registry.create("policy", "tiny", options, where="policy.tiny")
    generator, validator = registry.task(config.task["name"], {k: v for k, v in config.task.items() if k != "name"})
    return registry, policy, generator, validator


def test_the_quickstart_recipe_has_a_shipped_warm_start_that_verifies(quickstart):
    _, policy, generator, _ = quickstart
    shipped = policy.prebuilt_dir(generator)
    assert shipped is not None, "examples/quickstart.yaml's recipe changed: rebuild with `envengineer pretrain --force` and ship it"
    assert shipped.name == tiny_model.recipe_key(policy.recipe(generator))
    tiny_model.verify_prebuilt(shipped)
    info = json.loads((shipped / "warm_start.json").read_text())
    o = policy.options
    assert (info["task"], info["style"], info["instances"], info["epochs"], info["lr"], info["batch_size"], info["seed"]) == (
        generator.name, o.prompt_style, o.instances, o.epochs, o.lr, o.train_batch_size, o.seed)


def test_prepare_uses_the_shipped_model_without_building_and_it_samples(quickstart):
    _, policy, generator, validator = quickstart
    path = policy.prepare(generator=generator)
    assert path == policy.prebuilt_dir(generator)
    assert not any(Path(policy.options.cache_dir).iterdir())  # nothing built
    assert policy.warm_start_info()["parameters"] == 1001088
    records = generator.generate(generator.default_config(), n=8, seed=5).records
    texts = policy.with_path(path).sample([generator.render(r, "compact") for r in records], n=1)
    assert len(texts) == 8 and all(isinstance(t, str) for (t,) in texts)
    for record, (text,) in zip(records, texts):
        validator.score(record, generator.decode_response(record, text, "compact"))  # scores, whatever it wrote


def test_prebuilt_false_names_the_cache_folder_instead(quickstart):
    registry, policy, generator, _ = quickstart
    local = registry.create("policy", "tiny", {**policy.options.model_dump(), "prebuilt": False}, where="policy.tiny")
    assert local.prebuilt_dir(generator) is None
    assert local.base_dir(generator) == local.cache_path(generator) == Path(policy.options.cache_dir) / policy.prebuilt_dir(generator).name


@pytest.mark.parametrize("damage", ["flip a byte", "drop a line", "no sums", "unlisted config"])
def test_a_damaged_shipped_model_is_refused_naming_the_file(quickstart, tmp_path, damage):
    _, policy, generator, _ = quickstart
    copy = tmp_path / "copy"
    shutil.copytree(policy.prebuilt_dir(generator), copy)
    sums = copy / "SHA256SUMS"
    if damage == "flip a byte":
        data = bytearray((copy / "model.safetensors").read_bytes())
        data[len(data) // 2] ^= 1
        (copy / "model.safetensors").write_bytes(bytes(data))
        match = "model.safetensors does not match its sha256"
    elif damage == "drop a line":
        sums.write_text(sums.read_text() + "not-a-sum\n")
        match = "line .*: expected"
    elif damage == "no sums":
        sums.unlink()
        match = "has no SHA256SUMS"
    else:
        sums.write_text("".join(line + "\n" for line in sums.read_text().splitlines() if not line.endswith("  config.json")))
        match = "does not list config.json"
    with pytest.raises(ConfigError, match=match):
        tiny_model.verify_prebuilt(copy)


def test_write_sha256sums_seals_what_verify_checks(tmp_path):
    for name, text in {"model.safetensors": "w", "config.json": "{}", "tokenizer.json": "{}", "warm_start.json": "{}"}.items():
        (tmp_path / name).write_text(text)
    tiny_model.write_sha256sums(tmp_path)
    tiny_model.verify_prebuilt(tmp_path)
    (tmp_path / "config.json").write_text("{ }")
    with pytest.raises(ConfigError, match="config.json does not match"):
        tiny_model.verify_prebuilt(tmp_path)


def test_a_task_that_ships_nothing_gets_its_base_built(quickstart):
    registry, policy, _, _ = quickstart
    for name in registry.names("generator"):
        if name == "verifiers":
            continue  # made only for a named taskset (task.taskset, task.knobs)
        generator, _ = registry.task(name, {})
        if name != "mapf-frozenlake":
            assert policy.prebuilt_dir(generator) is None


def test_the_cpu_suite_of_paper_suite_md_starts_from_the_shipped_warm_start(tmp_path):
    """docs/paper-suite.md's CPU-sized suite (its two configs, as the page gives them) uses the shipped warm
    start, so nothing is pretrained first (the page said a first run built it for ~3.5 minutes)."""
    import re

    page = (ROOT / "docs" / "paper-suite.md").read_text()
    configs = re.findall(r"```yaml\n# cpu-suite/(\w+\.yaml)\n(.*?)```", page, flags=re.S)
    assert [name for name, _ in configs] == ["heuristic.yaml", "fixed.yaml"]
    registry = load_registry(entry_points=False)
    for name, text in configs:
        (tmp_path / name).write_text(text)
        config = load_run_config(tmp_path / name)
        options = {**{k: v for k, v in config.policy.items() if k != "name"}, "cache_dir": str(tmp_path / "cache")}
        policy = registry.create("policy", "tiny", options, where="policy.tiny")
        generator, _ = registry.task(config.task["name"], {k: v for k, v in config.task.items() if k != "name"})
        assert policy.prebuilt_dir(generator) is not None, name
    assert "nothing is pretrained first" in page and "3.5 minutes" not in page.split("## A CPU-sized suite", 1)[1]
