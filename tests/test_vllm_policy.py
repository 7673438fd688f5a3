"""The ``vllm`` policy and the checkpoint engineer's vLLM backend, through the child process.

vLLM needs a CUDA GPU and has no CPU wheel, so the child imports ``tests/fake_vllm``: a
stand-in of vLLM 0.24's ``LLM``/``SamplingParams``/``RequestOutput`` on transformers, with
the real keyword names and refusals (its docstring says what it follows). What is tested
here is our side: what we send, how the answers come back, what happens when the child
raises or dies, and that the parent never imports vllm. Real vLLM is not exercised.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from envengineer.errors import ConfigError

pytest.importorskip("torch")
pytest.importorskip("transformers")

FAKE = Path(__file__).resolve().parent / "fake_vllm"
TEMPLATE = "{% if enable_thinking is defined and not enable_thinking %}n:{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_models):
    """A random Qwen3 (hidden 32) with a character tokenizer and a chat template that reads enable_thinking."""
    return tiny_models.char_model(tmp_path_factory.mktemp("vllm-model"), template=TEMPLATE,
                                  chars="abcdefghijklmnopqrstuvwxyz0123456789:{}` ", heads=2, kv_heads=1, head_dim=16,
                                  max_positions=16384)


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """The stand-in on the child's PYTHONPATH; returns a reader of what it received."""
    log = tmp_path / "fake-vllm.jsonl"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _policy(registry, path, **options):
    return registry.create("policy", "vllm", {"path": str(path), "max_new_tokens": 8, **options}, where="policy.vllm")


CHAT = [{"role": "user", "content": "go from a1 to b2"}]


def test_sampling_is_seeded_and_shaped(registry, model_dir, fake_vllm):
    policy = _policy(registry, model_dir, temperature=1.0, seed=7, chat_template_kwargs={"enable_thinking": True})
    prompts = [CHAT, "abc", [{"role": "user", "content": "xyz"}]]
    first = policy.sample(prompts, n=3)
    again = policy.with_path(model_dir).sample(prompts, n=3)
    assert first == again  # the same policy and prompts: the same texts, from a fresh child each time
    assert [len(texts) for texts in first] == [3, 3, 3] and all(isinstance(t, str) for texts in first for t in texts)
    assert len({text for texts in first for text in texts}) > 1  # sampled, not copied
    log = fake_vllm()
    assert [entry["call"] for entry in log] == ["LLM", "chat", "generate"] * 2  # chat prompts via chat, strings via generate
    engine = log[0]["kwargs"]
    assert log[0]["model"] == str(model_dir)
    assert engine == {"tensor_parallel_size": 1, "dtype": "auto", "enforce_eager": False, "seed": 7, "gpu_memory_utilization": 0.9}
    assert log[1]["chat_template_kwargs"] == {"enable_thinking": True}
    assert log[1]["prompts"] == ["go from a1 to b2", "xyz"] and log[2]["prompts"] == ["abc"]  # no "n:": thinking on
    assert all("n=3" in params and "max_tokens=8" in params for params in log[1]["sampling"])
    assert [p.split("seed=")[1].split(",")[0] for p in log[1]["sampling"] + log[2]["sampling"]] == ["7", "9", "8"]


def test_greedy_copies_one_answer_and_renders_chat_with_the_template_options(registry, model_dir, fake_vllm):
    policy = _policy(registry, model_dir, max_model_len=256, enforce_eager=True, dtype="float32")
    [texts] = policy.sample([CHAT], n=2)
    assert len(texts) == 2 and texts[0] == texts[1]  # vLLM refuses n > 1 with greedy sampling: one answer, copied
    llm, chat = fake_vllm()
    assert llm["kwargs"]["max_model_len"] == 256 and llm["kwargs"]["enforce_eager"] is True and llm["kwargs"]["dtype"] == "float32"
    assert chat["chat_template_kwargs"] == {"enable_thinking": False} and chat["add_generation_prompt"] is True
    assert chat["prompts"] == ["n:go from a1 to b2"]  # the template saw enable_thinking: false
    assert "n=1" in chat["sampling"][0] and "temperature=0" in chat["sampling"][0]



def test_an_error_in_the_child_comes_back_with_its_type_and_message(registry, model_dir, fake_vllm):
    from envengineer.plugins._shared.vllm_child import VllmChildError

    policy = _policy(registry, model_dir, max_model_len=100_000)  # longer than the model's: vLLM refuses it
    with pytest.raises(VllmChildError) as info:
        policy.sample(["abc"])
    message = str(info.value)
    assert message.startswith("policy.vllm: the vLLM child process raised ValueError: User-specified max_model_len (100000)")
    assert "last lines of its output" in message and "Traceback" in info.value.output_tail
    assert info.value.error_type == "ValueError" and info.value.returncode == 1


def test_a_killed_child_is_an_error_naming_its_exit_code(registry, tmp_path, model_dir, fake_vllm):
    from envengineer.plugins._shared.vllm_child import VllmChildError

    marked = tmp_path / "FAKE_VLLM_SIGKILL"
    marked.symlink_to(model_dir)
    started = time.monotonic()
    with pytest.raises(VllmChildError) as info:
        _policy(registry, marked).sample(["abc"])
    assert time.monotonic() - started < 60
    assert info.value.returncode == -9
    assert "exited with code -9 (killed by SIGKILL" in str(info.value) and "before answering" in str(info.value)


def test_without_vllm_the_error_names_the_install(registry, model_dir, monkeypatch):
    from envengineer.plugins._shared.vllm_child import VllmNotInstalled

    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(VllmNotInstalled) as info:
        _policy(registry, model_dir).sample(["abc"])
    message = str(info.value)
    assert message.startswith("policy.vllm: vllm is not installed (ModuleNotFoundError: No module named 'vllm')")
    assert 'pip install "envengineer[vllm]"' in message and "envengineer[train,verl]" in message


def test_options_are_checked_where_the_config_loads(registry, tmp_path):
    with pytest.raises(ConfigError, match=r"policy\.vllm.*enable_thinking: write chat_template_kwargs: \{enable_thinking: false\}"):
        registry.create("policy", "vllm", {"path": "x", "enable_thinking": False}, where="policy.vllm")
    with pytest.raises(ConfigError, match=r"policy\.vllm\.gpu_memory_utilization"):
        registry.create("policy", "vllm", {"path": "x", "gpu_memory_utilization": 1.5}, where="policy.vllm")
    with pytest.raises(ConfigError, match=r"policy\.vllm\.path: a model directory or a model name is required"):
        registry.create("policy", "vllm", {}).sample(["abc"])
    with pytest.raises(ConfigError, match=r"policy\.vllm\.path: .* does not exist"):
        registry.create("policy", "vllm", {"path": str(tmp_path / "missing")}).sample(["abc"])
    policy = registry.create("policy", "vllm", {"path": "x", "temperature": 0.5})
    assert policy.describe()["decoding"] == "sampling" and policy.describe()["chat_template_kwargs"] == {"enable_thinking": False}
    assert policy.sample([]) == []


def test_importing_the_policy_imports_neither_vllm_nor_torch():
    code = textwrap.dedent(
        """
        import sys
        import envengineer
        import envengineer.plugins.policies.vllm_policy, envengineer.plugins._shared.vllm_child, envengineer.plugins.engineers.checkpoint
        print("HEAVY", [m for m in ("vllm", "torch", "transformers") if m in sys.modules])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(FAKE)}  # even with a vllm importable
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_eval_command_runs_the_vllm_policy(tmp_path, fake_vllm):
    from typer.testing import CliRunner

    from envengineer.cli.commands import app
    from envengineer.plugins.policies import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    model = tiny_model.build_model(tokenizer, hidden_size=32, layers=1, ffn=64, seed=2)
    path = tmp_path / "tiny"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config = tmp_path / "policy.yaml"
    config.write_text(yaml.safe_dump({"path": str(path), "prompt_style": "compact", "max_new_tokens": 16, "enforce_eager": True}))
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", "--policy", "vllm", "--policy-config", str(config), "--bench", "mapf-3agents",
                                      "--limit", "70", "--output", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "mapf-3agents" / "summary.json").read_text())
    assert summary["overall"]["n"] == 70 and summary["settings"]["policy"] == "vllm"
    assert summary["settings"]["prompt_style"] == "compact" and summary["settings"]["path"] == str(path)
    assert len((out / "mapf-3agents" / "responses.jsonl").read_text().splitlines()) == 70
    log = fake_vllm()
    assert [entry["call"] for entry in log] == ["LLM", "generate"]  # compact prompts are plain strings
    assert len(log[1]["prompts"]) == 70  # more than evaluate's 64 per call: one child, one engine start, per evaluation
    assert "vllm" not in sys.modules


def test_checkpoint_engineer_runs_vllm_in_a_child(registry, recorded_run, model_dir, fake_vllm):
    from envengineer.design.prompts import build_request
    from envengineer.design.evidence import load_evidence

    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V6"}, policy_path=str(model_dir), base_policy_path=str(model_dir),
                            chat_template_kwargs={"enable_thinking": False})
    engineer = registry.create("engineer", "checkpoint", {"backend": "vllm", "max_new_tokens": 16, "max_model_len": 12288})
    reply = engineer.propose(request)
    assert isinstance(reply.text, str) and reply.calls[0]["backend"] == "vllm" and reply.calls[0]["error"] is None
    assert 1 <= reply.usage["completion_tokens"] <= 16 and reply.usage["prompt_tokens"] > 0
    llm, chat = fake_vllm()
    assert llm["kwargs"]["gpu_memory_utilization"] == 0.55 and llm["kwargs"]["max_model_len"] == 12288
    assert chat["chat_template_kwargs"] == {"enable_thinking": False}
    assert "temperature=0.7" in chat["sampling"][0] and "max_tokens=16" in chat["sampling"][0]
    assert "vllm" not in sys.modules  # the parent never imported it


def test_checkpoint_engineer_without_vllm_is_a_recorded_fallback(registry, recorded_run, model_dir, monkeypatch, tmp_path):
    from envengineer.design.step import design
    from envengineer.design.prompts import build_request
    from envengineer.design.evidence import load_evidence

    monkeypatch.delenv("PYTHONPATH", raising=False)
    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V6"}, policy_path=str(model_dir), base_policy_path=str(model_dir))
    outcome = design(registry.create("engineer", "base", {"backend": "vllm"}), request, out_dir=tmp_path)
    assert outcome.fallback and "engineer call failed" in outcome.reason
    assert "vllm is not installed" in outcome.reason and "envengineer[vllm]" in outcome.reason
