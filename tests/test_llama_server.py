"""llama.cpp's ``llama-server`` as the real server of a structured design step.

``envengineer serve smollm2-135m-instruct --server llama.cpp`` serves the wheel's GGUF file; the
``openai-compatible`` engineer with ``structured: true`` sends the config schema as
``response_format`` and the server samples under it, so SmolLM2's proposal is applied. The
server is built once (``envengineer serve --server llama.cpp --build``, ~10 CPU minutes);
where it is missing these tests skip, unless ENVENGINEER_REQUIRE_LLAMA_SERVER=1 (CI sets it)."""

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from envengineer.api import free_port
from envengineer.design.step import design
from envengineer.errors import ConfigError
from envengineer.design.evidence import load_evidence
from envengineer.plugins.serve import llama_server
from envengineer.design.prompts import build_request

MODEL = "smollm2-135m-instruct"


def _fake_binary(path):
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# -- which server, which file (no server needed) --------------------------------------------
def test_the_variable_names_the_binary_and_a_bad_one_is_an_error(tmp_path, monkeypatch):
    exe = _fake_binary(tmp_path / "llama-server")
    monkeypatch.setenv(llama_server.ENV, str(exe))
    assert llama_server.find_llama_server(tmp_path / "cache") == exe
    monkeypatch.setenv(llama_server.ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=llama_server.ENV):
        llama_server.find_llama_server(tmp_path / "cache")


def test_a_missing_server_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.delenv(llama_server.ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no llama-server on PATH
    with pytest.raises(ConfigError) as info:
        llama_server.require_llama_server(tmp_path / "cache")
    assert llama_server.BUILD_COMMAND in str(info.value) and llama_server.SOURCE.version in str(info.value)


def test_a_cached_build_counts_only_for_this_source_cpu_and_flags(tmp_path, monkeypatch):
    monkeypatch.delenv(llama_server.ENV, raising=False)
    cache = tmp_path / "cache"
    folder = llama_server.build_dir(cache)
    folder.mkdir(parents=True)
    exe = _fake_binary(folder / llama_server.BINARY)
    record = {"sha256": llama_server.SOURCE.sha256, "cpu": llama_server.cpu_model(),
              "cpu_features": llama_server.cpu_features(), "cmake_flags": list(llama_server.CMAKE_FLAGS)}
    (folder / llama_server.BUILD_RECORD).write_text(json.dumps(record))
    assert llama_server.cached_build(cache) == exe
    for key, other in (("sha256", "0" * 64), ("cpu", "another CPU"),
                       ("cpu_features", "0123456789abcdef"), ("cmake_flags", ["-DGGML_NATIVE=OFF"])):
        (folder / llama_server.BUILD_RECORD).write_text(json.dumps({**record, key: other}))
        assert llama_server.cached_build(cache) is None, key
    (folder / llama_server.BUILD_RECORD).write_text("{not json")
    assert llama_server.cached_build(cache) is None


def test_a_failed_build_step_names_the_step_and_shows_the_log(tmp_path):
    log = tmp_path / "build.log"
    with pytest.raises(ConfigError) as info:
        llama_server._run_logged([sys.executable, "-c", "print('no compiler here'); raise SystemExit(3)"], log, what="compile")
    message = str(info.value)
    assert "compile failed (exit 3)" in message and str(log) in message and "no compiler here" in message


def test_a_build_without_cmake_says_what_it_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="cmake"):
        llama_server.build_llama_server(tmp_path / "cache")
    assert not llama_server.build_dir(tmp_path / "cache").exists()


def test_llama_cpp_serves_gguf_files_only(tmp_path):
    with pytest.raises(ConfigError, match="GGUF"):
        llama_server.gguf_file(str(tmp_path))  # a Hugging Face folder is for transformers serve
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    argv = llama_server.llama_serve_command(str(gguf), port=8123, exe=tmp_path / "llama-server")
    assert argv[:3] == [str(tmp_path / "llama-server"), "-m", str(gguf)]
    assert argv[argv.index("--alias") + 1] == "m" and argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def _packaged_gguf():
    """The wheel's GGUF file (its package's own module is not importable without its dependencies)."""
    from envengineer.plugins._shared.models import MODELS

    try:
        return MODELS[MODEL].source()
    except ConfigError as exc:
        if os.environ.get("ENVENGINEER_REQUIRE_SMOLLM2") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def test_a_model_name_serves_its_packaged_file(tmp_path):
    _packaged_gguf()
    from envengineer.plugins._shared.models import MODELS

    argv = llama_server.llama_serve_command(MODEL, port=8123, exe=tmp_path / "llama-server")
    assert argv[2] == str(MODELS[MODEL].source()) and argv[argv.index("--alias") + 1] == MODEL


def test_the_cli_refuses_an_unknown_server_and_build_without_llama_cpp():
    from envengineer.cli.commands import app
    from typer.testing import CliRunner

    runner = CliRunner()
    result = runner.invoke(app, ["serve", MODEL, "--server", "vllm"])
    assert result.exit_code != 0 and "--server" in str(result.exception or result.output)
    result = runner.invoke(app, ["serve", MODEL, "--build"])
    assert result.exit_code != 0 and "llama.cpp" in str(result.exception or result.output)


# -- the real server -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_exe():
    try:
        exe = llama_server.find_llama_server()
    except ConfigError as exc:
        exe, problem = None, str(exc)
    else:
        problem = f"no llama-server built ({llama_server.BUILD_COMMAND})"
    if exe is None:
        if os.environ.get("ENVENGINEER_REQUIRE_LLAMA_SERVER") == "1":
            pytest.fail(f"llama-server is required here (ENVENGINEER_REQUIRE_LLAMA_SERVER=1): {problem}")
        pytest.skip(problem)
    return exe


@contextlib.contextmanager
def _serving(model: str, threads: int = 1):
    """``envengineer serve MODEL --server llama.cpp`` on a free port, until /health says ok; its URL."""
    port = free_port("127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "envengineer.cli.commands", "serve", model, "--server", "llama.cpp", "--port", str(port),
         "--threads", str(threads)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the server exited with {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if json.loads(response.read()).get("status") == "ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("llama-server did not answer /health within 60 s")
            time.sleep(0.3)
        yield url
    finally:  # the server may have died already (its exit is the failure above): nothing left to end
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()


@pytest.fixture
def served(llama_exe):
    pytest.importorskip("openai")
    _packaged_gguf()
    with _serving(MODEL) as url:
        yield url


def test_the_server_names_the_model_and_refuses_a_broken_schema(served):
    import openai

    client = openai.OpenAI(base_url=served + "/v1", api_key="none", max_retries=0, timeout=60)
    assert [m.id for m in client.models.list().data] == [MODEL]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": 3}}},
        )


@pytest.mark.slow
def test_structured_design_step_through_llama_server_is_applied(served, recorded_run, registry, tmp_path):
    """SmolLM2 answers the real V1 prompt of a recorded MAPF run under the config schema; the loop applies it."""
    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V1"})
    engineer = registry.create("engineer", "openai-compatible", {
        "model": MODEL, "base_url": served + "/v1", "structured": True, "max_tokens": 1024,
        "temperature": 0.0, "timeout": 120.0, "max_retries": 0,
    })
    out = tmp_path / "engineer"
    outcome = design(engineer, request, out_dir=out, reask=0, summarize=False)

    assert not outcome.fallback, outcome.reason
    assert outcome.projection.accepted
    text = outcome.replies[0].text
    assert text.strip() and text.strip() in (out / "response.md").read_text(encoding="utf-8")
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 1 and calls[0]["error"] is None and calls[0]["params"]["structured"] == "json_schema"
    assert calls[0]["usage"]["prompt_tokens"] > 100
    projection = yaml.safe_load((out / "projection.yaml").read_text())
    assert projection["fallback"] is False
    assert request.generator.config_model.model_validate(projection["config"])  # a valid config of the task


QWEN_SMALL = "qwen2.5-coder-0.5b-instruct"


@pytest.mark.long  # the long tier: a 491 MB model CI fetches (docs/models.md), ~1 minute on two threads
def test_qwen_05b_designs_through_llama_server_and_its_reply_is_applied(llama_exe, recorded_run, registry, tmp_path):
    """Qwen2.5-Coder-0.5B-Instruct, assembled from its data wheels, served by llama.cpp: one structured design step
    on the real V1 prompt of a recorded MAPF run, applied; a second request with the same prompt reuses it from the
    server's prompt cache (cached_tokens in calls.jsonl)."""
    pytest.importorskip("openai")
    from envengineer.plugins._shared.models import MODELS

    try:
        MODELS[QWEN_SMALL].source()
    except ConfigError as exc:
        if os.environ.get("ENVENGINEER_REQUIRE_QWEN") == "1":
            pytest.fail(f"the 0.5B is required here (ENVENGINEER_REQUIRE_QWEN=1): {exc}")
        pytest.skip(str(exc))
    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V1"})
    with _serving(QWEN_SMALL, threads=1) as url:  # one thread: the other pytest worker has the second core
        engineer = registry.create("engineer", "openai-compatible", {
            "model": QWEN_SMALL, "base_url": url + "/v1", "structured": True, "max_tokens": 1024, "analysis_chars": 400,
            "temperature": 0.0, "timeout": 600.0, "max_retries": 0,
        })
        outcomes = [design(engineer, request, out_dir=tmp_path / f"step{i}", reask=0, summarize=False) for i in (1, 2)]
    for outcome in outcomes:
        assert not outcome.fallback, outcome.reason
        assert outcome.projection.accepted and request.generator.config_model.model_validate(outcome.config.model_dump())
    calls = [json.loads((tmp_path / f"step{i}" / "calls.jsonl").read_text().splitlines()[0]) for i in (1, 2)]
    assert calls[0]["params"]["structured"] == "json_schema" and calls[0]["usage"]["prompt_tokens"] > 500
    assert calls[1]["usage"].get("cached_tokens", 0) >= calls[0]["usage"]["prompt_tokens"] - 8  # the same prompt, reused
    assert outcomes[0].config == outcomes[1].config  # greedy, same prompt: the same design
    raw = (tmp_path / "step1" / "response.md").read_text(encoding="utf-8")
    assert len(raw.split("```")[0].replace("<!-- attempt 1 -->", "").strip()) <= 400  # the server enforced maxLength


# -- the llama-server engineer: starts its own server, keeps it across steps, stops it ----------------------
def test_the_llama_server_engineer_refuses_a_url_a_key_an_unknown_model_and_a_missing_server(registry, tmp_path, monkeypatch):
    """Checked when the engineer is made, so a run stops before its first round, naming the field."""
    pytest.importorskip("openai")
    monkeypatch.setenv(llama_server.ENV, str(_fake_binary(tmp_path / "llama-server")))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    for field, value in (("base_url", "http://127.0.0.1:8000/v1"), ("api_key_env", "KEY")):
        with pytest.raises(ConfigError, match=f"engineer.llama-server.{field}: .*openai-compatible"):
            registry.create("engineer", "llama-server", {"model": str(gguf), field: value})
    with pytest.raises(ConfigError, match="engineer.llama-server.model: .*'nowhere.bin'"):
        registry.create("engineer", "llama-server", {"model": "nowhere.bin"})
    monkeypatch.delenv(llama_server.ENV)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(llama_server, "cached_build", lambda cache=None: None)
    with pytest.raises(ConfigError, match=f"engineer.llama-server: no llama.cpp server: build it once with `{llama_server.BUILD_COMMAND}`"):
        registry.create("engineer", "llama-server", {"model": str(gguf)})


def test_a_server_that_dies_while_starting_names_its_log(tmp_path):
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\necho 'error: model file is not a GGUF' >&2\nexit 3\n")
    exe.chmod(0o755)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    server = llama_server.LlamaServer(str(gguf), threads=1, exe=exe, startup_timeout=30)
    with pytest.raises(ConfigError, match="(?s)exited with 3 while starting; its log: .*model file is not a GGUF"):
        server.start()
    assert not server.alive and server.log.is_file()  # a failed start keeps its log
    server.log.unlink()


def test_a_llama_server_starts_answers_under_the_model_name_and_stops(llama_exe):
    """The process class the engineer and the benches share: a free port, /health ok, the model listed under its
    name; stop() ends the process and removes its temporary log; a context manager does the same."""
    _packaged_gguf()
    with llama_server.LlamaServer(MODEL, threads=1) as server:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as response:
            assert [m["id"] for m in json.loads(response.read())["data"]] == [MODEL]
        proc, log = server.proc, server.log
        assert server.alive and log.is_file() and server.starts == 1
    assert proc.poll() is not None and not log.exists() and not server.alive
    server.stop()  # nothing left to stop


@pytest.mark.long  # the long tier: three design steps and a restart, ~1 minute on one thread
def test_the_llama_server_engineer_designs_reuses_its_server_restarts_a_dead_one_and_stops(llama_exe, recorded_run, registry, tmp_path, caplog):
    """SmolLM2 by name: the engineer starts llama-server at its first design step (applied, structured), the second
    step reuses the same server and its prompt cache, a killed server is started again at the next step, and
    close() ends the process and removes its temporary log."""
    pytest.importorskip("openai")
    _packaged_gguf()
    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V1"})
    engineer = registry.create("engineer", "llama-server", {
        "model": MODEL, "structured": True, "max_tokens": 512, "temperature": 0.0, "threads": 1, "max_retries": 1,
        "backoff_initial": 0.0,
    })
    assert engineer.server is None  # nothing started by making it
    outcomes = [design(engineer, request, out_dir=tmp_path / "s1", reask=0, summarize=False)]
    server = engineer.server
    first_pid = server.proc.pid
    outcomes.append(design(engineer, request, out_dir=tmp_path / "s2", reask=0, summarize=False))
    assert server.starts == 1 and server.proc.pid == first_pid
    calls = [json.loads((tmp_path / s / "calls.jsonl").read_text().splitlines()[0]) for s in ("s1", "s2")]
    assert calls[0]["params"]["structured"] == "json_schema" and calls[0]["params"]["max_tokens"] == 512
    assert calls[1]["usage"].get("cached_tokens", 0) >= calls[0]["usage"]["prompt_tokens"] - 8  # the same server's cache
    first_log = server.log
    os.kill(first_pid, signal.SIGKILL)
    server.proc.wait()
    with caplog.at_level("WARNING"):
        outcomes.append(design(engineer, request, out_dir=tmp_path / "s3", reask=0, summarize=False))
    assert server.starts == 2 and server.alive and server.proc.pid != first_pid
    assert first_log.is_file() and server.log != first_log and str(first_log) in caplog.text  # the dead one's log kept, named
    first_log.unlink()
    for outcome in outcomes:
        assert not outcome.fallback, outcome.reason
        assert request.generator.config_model.model_validate(outcome.config.model_dump())
    assert outcomes[0].config == outcomes[1].config == outcomes[2].config  # greedy, the same prompt
    log, proc = server.log, server.proc
    engineer.close()
    assert proc.poll() is not None and not log.exists()


def test_a_server_goes_when_its_starter_is_killed_outright(llama_exe, tmp_path):
    """A starter killed by SIGKILL runs no exit handler; the kernel ends its server (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    _packaged_gguf()
    pid_file = tmp_path / "server.pid"
    script = (f"import time; from envengineer.plugins.serve.llama_server import LlamaServer\n"
              f"s = LlamaServer({MODEL!r}, threads=1).start()\n"
              f"open({str(pid_file)!r}, 'w').write(str(s.proc.pid))\n"
              f"time.sleep(600)\n")
    starter = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert starter.poll() is None and time.monotonic() < deadline, "the starter did not start its server"
            time.sleep(0.2)
        server_pid = int(pid_file.read_text())
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                state = open(f"/proc/{server_pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                break
            if state in ("Z", "X"):  # ended, not yet reaped (by whoever adopted it)
                break
            time.sleep(0.2)
        else:
            os.kill(server_pid, signal.SIGKILL)
            pytest.fail("the server outlived its starter's SIGKILL")
    finally:
        if starter.poll() is None:
            starter.kill()
