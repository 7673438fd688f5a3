"""verl rows and reward, checked against verl's own code: its RLHFDataset reads our parquet, its reward worker calls our compute_score."""

import importlib.resources as ir
import json
import re
import subprocess
import sys

import pytest

from envengineer.errors import ConfigError, InputError
from envengineer.plugins.trainers import verl_data
from envengineer.plugins.trainers.verl_data import compute_score, verl_rows, write_parquet

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
REWARD_OVERRIDES = [
    "reward.custom_reward_function.path=pkg://envengineer.plugins.trainers.verl_data",
    "reward.custom_reward_function.name=compute_score",
    "reward.reward_manager.name=naive",
    "+reward.custom_reward_function.reward_kwargs.optimality_bonus=0.5",
]


def verl_config(overrides):
    """verl's PPO config composed from the Hydra files in the installed wheel, as main_ppo composes it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ir.files("verl") / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tiny_models):
    """A byte-level tokenizer (any text round-trips) with a chat template; nothing downloaded."""
    path = tmp_path_factory.mktemp("verl-tokenizer")
    tiny_models.byte_chat_tokenizer(CHAT_TEMPLATE).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def task():
    from envengineer.registry import load_registry

    registry = load_registry(entry_points=False, environ={})
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=6, seed=11).records
    return generator, validator, records


def _slower(answer: str) -> str:
    """The answer with agent 1 waiting one step at its start (valid but not optimal, unless that causes a conflict)."""
    return re.sub(r"(Agent 1: )(\(\d+,\d+\))", r"\1\2 -> \2", answer, count=1)


def test_rows_carry_prompt_record_and_task(task):
    generator, _, records = task
    rows = verl_rows(records, generator, split="train")
    assert len(rows) == len(records)
    for index, (row, record) in enumerate(zip(rows, records)):
        assert row["data_source"] == "envengineer/mapf-frozenlake" and isinstance(row["ability"], str)
        assert row["prompt"] == generator.render(record, "full")
        assert row["reward_model"]["style"] == "rule" and json.loads(row["reward_model"]["ground_truth"]) == record
        info = row["extra_info"]
        assert info["split"] == "train" and info["index"] == index and info["id"] == record["id"]
        assert info["group"] == generator.group(record) and info["prompt_style"] == "full"
        assert json.loads(info["task"]) == {"name": "mapf-frozenlake", **generator.options.model_dump(mode="json")}
    compact = verl_rows(records[:1], generator, split="validation", style="compact", task={"name": "mapf-frozenlake", "agents": 2})
    assert compact[0]["prompt"] == [{"role": "user", "content": generator.render(records[0], "compact")}]
    assert json.loads(compact[0]["extra_info"]["task"]) == {"name": "mapf-frozenlake", "agents": 2}
    with pytest.raises(ConfigError, match="task.name"):
        verl_rows(records, generator, split="train", task={"name": "another-task"})
    with pytest.raises(InputError, match="train record 0: missing string field 'id'"):
        verl_rows([{k: v for k, v in records[0].items() if k != "id"}], generator, split="train")


def test_parquet_loads_through_verls_dataset(task, tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import RLHFDataset

    generator, _, records = task
    rows = verl_rows(records, generator, split="train")
    path = tmp_path / "data" / "train.parquet"
    write_parquet(rows, path)
    assert [p.name for p in path.parent.iterdir()] == ["train.parquet"]  # no temporary file left
    cfg = verl_config([f"data.train_files={path}", "data.max_prompt_length=100000", "data.filter_overlong_prompts=true"])
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)  # what main_ppo's trainer calls
    assert isinstance(dataset, RLHFDataset) and len(dataset) == len(records)
    for index, record in enumerate(records):
        item = dataset[index]
        assert item["raw_prompt"] == generator.render(record, "full")
        assert json.loads(item["reward_model"]["ground_truth"]) == record
        assert item["data_source"] == "envengineer/mapf-frozenlake" and item["index"] == index
        assert item["extra_info"]["id"] == record["id"] and json.loads(item["extra_info"]["task"])["agents"] == 2
        text = tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
        assert record["id"].split("-")[1] in text and text.endswith("<|im_start|>assistant\n")
    # verl's dataset takes its config straight from the data section too
    direct = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=cfg.data, processor=None)
    assert direct[0]["raw_prompt"] == dataset[0]["raw_prompt"]


def test_verls_reward_worker_scores_like_the_validator(task, tokenizer_dir, tmp_path):
    """verl's RewardLoopWorker (the class main_ppo runs as Ray actors) with the naive manager, built from the config keys."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import resolve_reward_manager_cls
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    generator, validator, records = task
    path = tmp_path / "train.parquet"
    write_parquet(verl_rows(records, generator, split="train"), path)
    cfg = verl_config([*REWARD_OVERRIDES, f"actor_rollout_ref.model.path={tokenizer_dir}", f"data.train_files={path}"])
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    dataset = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=cfg.data, processor=None)

    optimal = generator.reference_answer(records[0])
    slower = next((_slower(generator.reference_answer(r)), i) for i, r in enumerate(records)
                  if (v := validator.score(r, _slower(generator.reference_answer(r)))).valid and not v.optimal)
    broken = optimal.replace("Agent 2:", "Agent 9:")
    cases = [(0, optimal), (slower[1], slower[0]), (1, broken), (2, "I am not sure. <answer>garbage"), (3, "")]

    batch = collate_fn([dataset[i] for i, _ in cases])
    prompts = [tokenizer(tokenizer.apply_chat_template(dataset[i]["raw_prompt"], add_generation_prompt=True, tokenize=False),
                         add_special_tokens=False)["input_ids"] for i, _ in cases]
    responses = [tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"] for _, text in cases]
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    pad = tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
    mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
                         for p, r in zip(prompts, responses)])
    data = DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask,
                 "input_ids": torch.cat([prompt_ids, response_ids], dim=1)},
        non_tensors={key: batch[key] for key in ("data_source", "reward_model", "extra_info")},
    )

    worker = RewardLoopWorker(cfg)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    # what RewardLoopManager.compute_rm_score does with the outputs (without Ray)
    infos = [out["reward_extra_info"] for out in outputs]
    keys = list(infos[0])
    assert keys == ["score", "acc", "optimal", "failure"] and all(list(info) == keys for info in infos)
    arrays = {key: np.array([info[key] for info in infos]) for key in keys}
    rm_scores = resolve_reward_manager_cls(cfg).assemble_rm_scores(data, [out["reward_score"] for out in outputs])
    assert rm_scores.sum(dim=1).tolist() == [out["reward_score"] for out in outputs]

    for (index, text), out, acc, optimal_flag, failure in zip(cases, outputs, arrays["acc"], arrays["optimal"], arrays["failure"]):
        verdict = validator.score(records[index], text)
        expected = verdict.reward + (0.5 if verdict.valid and verdict.optimal else 0.0)
        assert out["reward_score"] == pytest.approx(expected), text
        assert acc == (1.0 if verdict.valid else 0.0) and optimal_flag == (1.0 if verdict.valid and verdict.optimal else 0.0)
        assert failure == ("" if verdict.valid else verdict.failure)
    assert [out["reward_score"] for out in outputs][:2] == [1.5, 1.0]
    assert [out["reward_score"] for out in outputs][2:] == [0.0, 0.0, 0.0]


def test_compute_score_keys_and_bad_rows(task):
    generator, validator, records = task
    row = verl_rows(records[:1], generator, split="train", style="compact")[0]
    truth, info = row["reward_model"]["ground_truth"], row["extra_info"]
    keys = ["score", "acc", "optimal", "failure"]
    for response in ("", "garbage", "\x00" * 9, generator.reference_answer(records[0])):
        result = compute_score(row["data_source"], response, truth, dict(info))
        assert list(result) == keys and result["score"] == 0.0 and result["failure"]  # full-format answers are not compact ones
    full = verl_rows(records[:1], generator, split="train")[0]
    result = compute_score(full["data_source"], generator.reference_answer(records[0]), truth, full["extra_info"], optimality_bonus=0.25)
    assert result == {"score": 1.25, "acc": 1.0, "optimal": 1.0, "failure": ""}
    assert compute_score(full["data_source"], generator.reference_answer(records[0]), truth, full["extra_info"])["score"] == 1.0

    with pytest.raises(InputError, match="reward_model.ground_truth: not a JSON"):
        compute_score(row["data_source"], "", "{not json", info)
    with pytest.raises(InputError, match="reward_model.ground_truth: not a mapf-frozenlake instance"):
        compute_score(row["data_source"], "", json.dumps({"id": "x"}), info)
    with pytest.raises(InputError, match="extra_info.task: unknown generator 'no-such-task'"):
        compute_score(row["data_source"], "", truth, {**info, "task": json.dumps({"name": "no-such-task"})})
    with pytest.raises(InputError, match="extra_info.task: not a JSON"):
        compute_score(row["data_source"], "", truth, {**info, "task": "{"})
    with pytest.raises(InputError, match="extra_info.task: missing"):
        compute_score(row["data_source"], "", truth, None)
    assert verl_data.task_pair(info["task"])[0] is verl_data.task_pair(info["task"])[0]  # built once per process


def test_write_parquet_is_atomic(task, tmp_path):
    import pyarrow.parquet as pq

    generator, _, records = task
    path = tmp_path / "train.parquet"
    write_parquet(verl_rows(records[:2], generator, split="train"), path)
    before = path.read_bytes()
    with pytest.raises(Exception):
        write_parquet([{"data_source": "x", "prompt": object()}], path)
    with pytest.raises(InputError, match="no rows"):
        write_parquet([], path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["train.parquet"]
    assert pq.read_table(path).num_rows == 2


def test_the_modules_import_light():
    code = (
        "import sys, envengineer.plugins.trainers.verl_data, envengineer.plugins.trainers.verl_checkpoint\n"
        "heavy = [m for m in ('torch', 'transformers', 'verl', 'pyarrow', 'ray') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
