"""The ``openai-compatible`` engineer against a real server process: ``envengineer serve
smollm2-135m-instruct`` (``transformers serve`` on 127.0.0.1) answers one design step through the
real openai client; the step's files record the model's own text. Skipped where the model or
the serving extras are missing. About a minute on one CPU thread."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from envengineer.api import free_port
from envengineer.design.step import design
from envengineer.design.evidence import load_evidence
from envengineer.design.prompts import build_request

pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

MODEL = "smollm2-135m-instruct"


@pytest.fixture
def server(smollm2_folder):
    if shutil.which("transformers") is None:
        pytest.skip("no `transformers` command")
    folder = smollm2_folder
    port = free_port("127.0.0.1")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "envengineer.cli.commands", "serve", MODEL, "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
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
                raise AssertionError("the server did not answer /health within 60 s")
            time.sleep(0.5)
        yield url, folder
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and nothing else
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()


def test_serve_print_names_transformers_serve(capsys, smollm2_folder):
    from envengineer.plugins.serve import serve_command

    folder = smollm2_folder
    argv = serve_command(MODEL, port=8123)
    assert argv[1:] == ["serve", folder, "--host", "127.0.0.1", "--port", "8123", "--device", "cpu"]


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_openai_compatible_engineer_against_transformers_serve(server, recorded_run, registry, tmp_path):
    url, folder = server
    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V1"})
    engineer = registry.create("engineer", "openai-compatible", {
        "model": folder, "base_url": url + "/v1", "max_tokens": 64, "temperature": 0.0, "timeout": 60.0, "max_retries": 0,
    })
    out = tmp_path / "engineer"
    outcome = design(engineer, request, out_dir=out, reask=0, summarize=False)

    assert len(outcome.replies) == 1
    text = outcome.replies[0].text
    assert text.strip(), "the model answered with no text"
    response = (out / "response.md").read_text(encoding="utf-8")
    assert text.strip() in response  # the model's own words, as it wrote them
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 1 and calls[0]["error"] is None and calls[0]["model"] == folder
    assert calls[0]["usage"]["prompt_tokens"] > 100 and 0 < calls[0]["usage"]["completion_tokens"] <= 64
    assert calls[0]["params"]["max_tokens"] == 64
    projection = yaml.safe_load((out / "projection.yaml").read_text())
    # a 135M model's answer is whatever it is: either applied or a recorded fallback with its reason
    assert projection["fallback"] == outcome.fallback
    assert projection["fallback"] is False or projection["reason"]
