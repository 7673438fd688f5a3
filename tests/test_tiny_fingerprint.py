"""The tiny policy's cached base model follows the task's code: a cache hit whose warm-start data,
vocabulary or embedding init no longer match what the task's hooks hand a build is rebuilt (before:
the stale model came back until ``pretrain --force``); a change that cannot alter the base (a
docstring, the validator) rebuilds nothing; and the quickstart's shipped base is still used as is."""

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.plugins.policies import tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMALL = {"hidden_size": 32, "layers": 1, "ffn": 64, "threads": 1, "instances": 100, "epochs": 1, "train_batch_size": 50}


@pytest.fixture
def arith(monkeypatch):
    """The example third-party family (examples/envengineer-arith), registered at runtime: its warm start is
    Generator's default (generated records of its default config, answered by reference_answer)."""
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    monkeypatch.syspath_prepend(str(REPO / "examples" / "envengineer-arith"))
    import envengineer_arith.plugin

    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(envengineer_arith.plugin, name="arith")
    registry = Registry(pm)
    return registry, registry.task("arith")[0]


def _policy(registry, tmp_path, **options):
    return registry.create("policy", "tiny", {"cache_dir": str(tmp_path / "cache"), **SMALL, **options}, where="policy.tiny")


def _weights(path: Path) -> bytes:
    return (path / "model.safetensors").read_bytes()


def test_a_changed_default_config_rebuilds_the_cached_base(arith, tmp_path):
    registry, generator = arith
    policy = _policy(registry, tmp_path)
    path = policy.prepare(generator=generator)
    assert policy.prepared == "built"
    before = json.loads((path / "warm_start.json").read_text())
    assert set(before["fingerprint"]) == {"version", "pairs", "vocabulary", "init_embeddings"}
    assert policy.prepare(generator=generator) == path and policy.prepared == "cached"  # the same code: reused

    class ThreeTerms(type(generator)):
        """The author changed the family's default config: three addends instead of two."""

        def default_config(self):
            config = super().default_config()
            for knobs in config.groups.values():
                knobs.terms = 3
            return config

    changed = ThreeTerms(generator.options)
    assert policy.recipe(changed) == policy.recipe(generator)  # same name, style, options: the same cache folder
    stale = _weights(path)
    assert policy.prepare(generator=changed) == path  # before: the stale model, until --force
    assert policy.prepared.startswith(f"rebuilt: the cached one in {path} was stale (the task's warm-start pairs changed")
    after = json.loads((path / "warm_start.json").read_text())
    assert after["fingerprint"]["pairs"] != before["fingerprint"]["pairs"]
    assert after["fingerprint"]["vocabulary"] == before["fingerprint"]["vocabulary"]
    assert _weights(path) != stale
    assert policy.prepare(generator=changed) == path and policy.prepared == "cached"


def test_changed_warm_start_pairs_vocabulary_or_init_rebuild_and_a_docstring_does_not(registry, tmp_path):
    generator, _ = registry.task("grid-walk")
    policy = _policy(registry, tmp_path)
    path = policy.prepare(generator=generator)
    cls = type(generator)

    class Docstring(cls):
        """Only words changed (and the guidelines the engineer reads): nothing the warm start sees."""

        def guidelines(self):
            return "other words"

    class LongerWalks(cls):
        def warm_start_pairs(self, *, n, seed, style):
            return super().warm_start_pairs(n=n, seed=seed + 1, style=style)

    class MoreWords(cls):
        def tiny_vocabulary(self, style):
            return [*super().tiny_vocabulary(style), "WAIT"]

    class Geometric(cls):
        def tiny_init_embeddings(self, weight, token_ids, style):
            import torch

            with torch.no_grad():
                weight[token_ids["0_0"]] = 0.0

    assert policy.prepare(generator=Docstring(generator.options)) == path and policy.prepared == "cached"
    variants = ((LongerWalks, "warm-start pairs"), (MoreWords, "vocabulary and embedding initialisation"),  # a row more
                (Geometric, "embedding initialisation"))
    for variant, words in variants:
        assert policy.prepare(generator=variant(generator.options)) == path
        assert policy.prepared.endswith(f"(the task's {words} changed since it was built)"), (variant, policy.prepared)
        assert policy.prepare(generator=variant(generator.options)) == path and policy.prepared == "cached"
        policy.prepare(generator=generator)  # back to the task as it was: rebuilt again
        assert policy.prepared.startswith("rebuilt")


def test_a_cache_built_before_fingerprints_is_rebuilt_once(registry, tmp_path):
    generator, _ = registry.task("grid-walk")
    policy = _policy(registry, tmp_path)
    path = policy.prepare(generator=generator)
    meta = json.loads((path / "warm_start.json").read_text())
    del meta["fingerprint"]
    (path / "warm_start.json").write_text(json.dumps(meta))
    policy.prepare(generator=generator)
    assert "it was built before its warm-start data was fingerprinted" in policy.prepared
    assert "fingerprint" in json.loads((path / "warm_start.json").read_text())
    policy.prepare(generator=generator)
    assert policy.prepared == "cached"


def test_a_cache_hit_generates_the_pairs_once_and_a_rebuild_does_not_generate_them_again(registry, tmp_path):
    generator, _ = registry.task("grid-walk")
    policy = _policy(registry, tmp_path)
    calls = []

    class Counting(type(generator)):
        def warm_start_pairs(self, *, n, seed, style):
            calls.append(n)
            return super().warm_start_pairs(n=n, seed=seed, style=style)

    counting = Counting(generator.options)
    stages = []
    policy.prepare(generator=counting)
    policy.prepare(generator=counting, progress=lambda stage, done, total: stages.append((stage, done, total)))
    assert calls == [100, 100] and policy.prepared == "cached"
    assert stages == [("checking the cached base model's warm-start data", 0, 1), ("checking the cached base model's warm-start data", 1, 1)]


def test_the_shipped_quickstart_base_is_used_without_a_check(tmp_path):
    """A task's shipped base is trusted by its recipe key and SHA256SUMS (tests/test_tiny_prebuilt.py): prepare() does
    not regenerate its 18,000 pairs, and its warm_start.json (sealed by SHA256SUMS) has no fingerprint to compare."""
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config

    registry = load_registry(entry_points=False)
    config = load_run_config(REPO / "examples" / "quickstart.yaml")
    options = {**{k: v for k, v in config.policy.items() if k != "name"}, "cache_dir": str(tmp_path)}
    policy = registry.create("policy", "tiny", options, where="policy.tiny")
    generator, _ = registry.task(config.task["name"], {k: v for k, v in config.task.items() if k != "name"})
    stages = []
    started = time.perf_counter()
    path = policy.prepare(generator=generator, progress=lambda *a: stages.append(a))
    assert path.name == "f68788b83975a655" and path == policy.prebuilt_dir(generator) and policy.prepared == "shipped"
    assert stages == [] and time.perf_counter() - started < 3 and not any(tmp_path.iterdir())
    assert "fingerprint" not in json.loads((path / "warm_start.json").read_text())


#: The quickstart recipe's warm-start pairs and vocabulary, digested when the shipped base's check was added.
#: If this fails, mapf-frozenlake's warm start changed: the shipped base (data/tiny/f68788b83975a655) was trained
#: on other data. Rebuild it with `envengineer pretrain --force` (the quickstart's options) and ship it, or
#: bump RECIPE_VERSION; only then update these digests.
QUICKSTART_PAIRS = "349a3e69d7ab338c91663022a1c11db50f55a7a3ec5545184578277b8b100852"
QUICKSTART_VOCABULARY = "ad30bd4cca43e67a0b7a2a011ea434f1998d3f39c4ff5c9af4179e2954401da5"


def test_the_quickstart_warm_start_is_still_what_the_shipped_base_was_trained_on():
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config

    registry = load_registry(entry_points=False)
    config = load_run_config(REPO / "examples" / "quickstart.yaml")
    policy = registry.create("policy", "tiny", {k: v for k, v in config.policy.items() if k != "name"}, where="policy.tiny")
    generator, _ = registry.task(config.task["name"], {k: v for k, v in config.task.items() if k != "name"})
    o = policy.options
    pairs = tiny_model.warm_start_data(generator, n=o.instances, seed=o.seed, style=o.prompt_style)
    fingerprint = tiny_model.warm_start_fingerprint(generator, style=o.prompt_style, hidden_size=o.hidden_size, pairs=pairs)
    assert (fingerprint["pairs"], fingerprint["vocabulary"]) == (QUICKSTART_PAIRS, QUICKSTART_VOCABULARY)
