"""``rollouts.jsonl``: what each trainer saw of its training prompts (envengineer.loop.signal's line format).

trl on CPU with a tiny random policy and a stand-in validator whose outcomes are set per record
(so which prompts are mixed is known): one line per prompt with counts that add up, ``kept_prompts``
drawing and its cap, rounds that keep nothing or less than one step. verl: our reward function
run by verl's own reward worker records the outcomes the trainer turns into lines, and a round
through the launch boundary writes lines the loop aggregates into ``signal.json``."""

import json
from collections import Counter
from pathlib import Path

import pytest

from envengineer.components.declarations import Verdict
from envengineer.loop.signal import aggregate, check_line
from envengineer.components.training import ROLLOUTS_FILE, TrainRequest

REPLAY = Path(__file__).parent / "verl_replay"


class SetOutcomes:
    """A validator whose verdicts are set per record: ids in ``mixed`` are valid on every other call
    (any two samples in a row are one right, one wrong), the rest never."""

    def __init__(self, mixed=()):
        self.mixed = set(mixed)
        self.calls = Counter()

    def score(self, record, answer):
        n = self.calls[record["id"]]
        self.calls[record["id"]] += 1
        ok = record["id"] in self.mixed and n % 2 == 0
        return Verdict(valid=ok, optimal=False, failure=None if ok else "stand-in")


@pytest.fixture(scope="module")
def base(tiny_base):
    import torch

    torch.set_num_threads(2)
    return tiny_base


@pytest.fixture(scope="module")
def task():
    from envengineer.registry import load_registry

    generator, _ = load_registry(entry_points=False, environ={}).task("mapf-frozenlake", {"agents": 2})
    return generator


def instances(generator, n, seed):
    return generator.generate(generator.default_config(), n=n, seed=seed).records


def trl(registry, **options):
    pytest.importorskip("trl")
    return registry.create("trainer", "trl", {"num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 4,
                                              "threads": 1, **options})


def round_request(base, generator, validator, records, out_dir, **kw):
    return TrainRequest(policy_path=base, records=records, generator=generator, validator=validator, out_dir=out_dir,
                        prompt_style="compact", **kw)


def read_lines(folder):
    path = Path(folder) / ROLLOUTS_FILE
    return [check_line(json.loads(line), f"{path}:{i + 1}") for i, line in enumerate(path.read_text().splitlines())]


def test_trl_writes_one_line_per_prompt_with_counts_that_add_up(registry, base, task, tmp_path):
    records = instances(task, 6, seed=2)
    mixed = {r["id"] for r in records[:4]}
    validator = SetOutcomes(mixed)
    trainer = trl(registry, prefilter_samples=2, epochs=2)  # 2 prompts per step: the 4 kept prompts, twice each
    result = trainer.train(round_request(base, task, validator, records, tmp_path / "round"))
    lines = read_lines(tmp_path / "round")
    assert [line["id"] for line in lines] == [r["id"] for r in records]
    for line in lines:
        trained = len(line["groups"])
        assert line["samples"] == 2 + 2 * trained and all(len(group) == 2 for group in line["groups"])
        assert line["kept"] == (trained > 0) == (line["id"] in mixed)
        assert line["valid"] == (line["samples"] // 2 if line["id"] in mixed else 0)  # one right in every pair
        assert line["score"] == pytest.approx(line["valid"] / line["samples"])
        if line["kept"]:
            assert trained == 2 and all(sorted(group) == [0.0, 1.0] for group in line["groups"])
    m = result.metrics
    assert (m["judged"], m["kept"], m["prefilter_kept"], m["prompts_used"], m["trained_prompts"]) == (6, 4, 4, 4, 4)
    assert m["budget_mode"] == "instances" and "capped" not in m
    signal = aggregate(lines, records, task)
    assert signal["overall"]["prompts"] == 6 and signal["overall"]["kept"] == 4 and signal["overall"]["mixed"] == 4


def test_trl_without_a_prefilter_every_record_is_a_grpo_prompt(registry, base, task, tmp_path):
    records = instances(task, 4, seed=3)
    result = trl(registry).train(round_request(base, task, SetOutcomes({records[0]["id"]}), records, tmp_path / "round"))
    lines = read_lines(tmp_path / "round")
    assert [line["id"] for line in lines] == [r["id"] for r in records]
    assert all(line["kept"] and line["samples"] == 2 and len(line["groups"]) == 1 for line in lines)
    assert [line["valid"] for line in lines] == [1, 0, 0, 0]
    assert result.metrics["trained_prompts"] == 4 and "judged" not in result.metrics


def drawing(generator, parts):
    """A ``draw(n, part)`` that hands out ``parts[part]`` and notes each call."""
    calls = []

    def draw(n, part):
        calls.append((n, part))
        return parts[part][:n]

    return draw, calls


def test_kept_prompts_draws_until_enough_are_kept(registry, base, task, tmp_path):
    records, one, two = instances(task, 4, seed=4), instances(task, 4, seed=5), instances(task, 4, seed=6)
    # part 0 has 1 mixed prompt, part 1 two, part 2 two: the 4th kept one is in part 2, its neighbour is left out
    mixed = {records[0]["id"], one[1]["id"], one[2]["id"], two[0]["id"], two[3]["id"]}
    draw, calls = drawing(task, {1: one, 2: two})
    request = round_request(base, task, SetOutcomes(mixed), records, tmp_path / "round",
                            budget_mode="kept_prompts", kept_target=4, max_draws=40, draw=draw)
    result = trl(registry, prefilter_samples=2).train(request)
    assert calls == [(4, 1), (4, 2)]
    lines = read_lines(tmp_path / "round")
    assert [line["id"] for line in lines] == [r["id"] for r in records + one + two]
    kept = [line["id"] for line in lines if line["kept"]]
    assert kept == [records[0]["id"], one[1]["id"], one[2]["id"], two[0]["id"]]
    assert next(line for line in lines if line["id"] == two[3]["id"])["samples"] == 2  # mixed, judged, beyond the target
    m = result.metrics
    assert (m["budget_mode"], m["judged"], m["kept"], m["kept_target"], m["capped"], m["draws"]) == ("kept_prompts", 12, 4, 4, False, 3)
    assert m["steps"] == 2 and m["trained_prompts"] == 4


def test_kept_prompts_stops_at_the_cap_and_says_so(registry, base, task, tmp_path):
    records, one = instances(task, 4, seed=4), instances(task, 4, seed=5)
    draw, calls = drawing(task, {1: one, 2: instances(task, 4, seed=6)})
    request = round_request(base, task, SetOutcomes({records[0]["id"], one[1]["id"], one[2]["id"]}), records, tmp_path / "round",
                            budget_mode="kept_prompts", kept_target=4, max_draws=8, draw=draw)
    # no prefilter_samples: kept_prompts judges with num_generations samples
    result = trl(registry).train(request)
    assert calls == [(4, 1)]
    m = result.metrics
    assert (m["judged"], m["kept"], m["max_draws"], m["capped"]) == (8, 3, 8, True)
    lines = read_lines(tmp_path / "round")
    assert len(lines) == 8 and all(line["samples"] in (2, 4) for line in lines)
    assert sum(line["kept"] for line in lines) == m["trained_prompts"] == 2  # 3 kept; one step takes 2, TRL drops the third


def test_a_round_that_keeps_nothing_goes_on_with_the_starting_weights(registry, base, task, tmp_path):
    import torch
    from safetensors.torch import load_file

    records = instances(task, 4, seed=7)
    result = trl(registry, prefilter_samples=2).train(round_request(base, task, SetOutcomes(), records, tmp_path / "round"))
    m = result.metrics
    assert (m["steps"], m["trained_prompts"], m["prompts_used"], m["kept"]) == (0, 0, 0, 0) and "nothing trained" in m["note"]
    start, kept = load_file(Path(base) / "model.safetensors"), load_file(result.checkpoint / "model.safetensors")
    assert start.keys() == kept.keys() and all(torch.equal(start[k], kept[k]) for k in start)
    assert (result.checkpoint / "tokenizer_config.json").exists() and result.curves.read_text() == ""
    lines = read_lines(tmp_path / "round")
    assert len(lines) == 4 and not any(line["kept"] for line in lines) and all(line["samples"] == 2 for line in lines)


def test_fewer_kept_prompts_than_one_step_train_one_smaller_step(registry, base, task, tmp_path):
    """TRL's sampler drops a partial rollout (the round would crash with max_steps 0): one step of what there is."""
    records = instances(task, 6, seed=8)
    trainer = trl(registry, prefilter_samples=2, per_device_train_batch_size=4, gradient_accumulation_steps=2)  # 4 prompts a step
    result = trainer.train(round_request(base, task, SetOutcomes({r["id"] for r in records[:3]}), records, tmp_path / "round"))
    m = result.metrics
    assert (m["steps"], m["trained_prompts"], m["short_step_prompts"], m["completions"]) == (1, 3, 3, 6)
    assert "fewer than one optimiser step's 4" in m["note"]
    assert sum(line["kept"] for line in read_lines(tmp_path / "round")) == 3


def test_trl_honours_both_budget_modes(registry):
    pytest.importorskip("trl")
    assert registry.create("trainer", "trl", {}).budget_modes == ("instances", "kept_prompts")
    assert registry.create("trainer", "verl", {}).budget_modes == ("instances",)


# ------------------------------------------------------------------ verl

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_verls_reward_worker_records_outcomes_that_become_rollout_lines(task, tiny_models, tmp_path):
    """verl's RewardLoopWorker (naive manager, our compute_score with the trainer's reward kwargs) scores two GRPO
    groups per training row and a validation row; the recorded outcomes become one checked line per training row."""
    pytest.importorskip("verl")
    pytest.importorskip("hydra")
    import importlib.resources as ir

    import torch
    from hydra import compose, initialize_config_dir
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.reward_loop import RewardLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from envengineer.plugins.trainers.verl_data import read_rollouts, verl_rows, write_parquet

    tokenizer_dir = tmp_path / "tokenizer"
    tiny_models.byte_chat_tokenizer(CHAT_TEMPLATE).save_pretrained(tokenizer_dir)
    records = instances(task, 3, seed=11)
    validation = instances(task, 1, seed=12)
    train_path, val_path = tmp_path / "train.parquet", tmp_path / "validation.parquet"
    write_parquet(verl_rows(records, task, split="train"), train_path)
    write_parquet(verl_rows(validation, task, split="validation"), val_path)
    outcomes = tmp_path / "round" / "verl-outcomes"
    outcomes.mkdir(parents=True)
    with initialize_config_dir(config_dir=str(ir.files("verl") / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            "reward.custom_reward_function.path=pkg://envengineer.plugins.trainers.verl_data",
            "reward.custom_reward_function.name=compute_score", "reward.reward_manager.name=naive",
            f"+reward.custom_reward_function.reward_kwargs.outcomes={outcomes}",
            f"actor_rollout_ref.model.path={tokenizer_dir}", f"data.train_files={train_path}",
        ])
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    train = RLHFDataset(data_files=[str(train_path)], tokenizer=tokenizer, config=cfg.data, processor=None)
    val = RLHFDataset(data_files=[str(val_path)], tokenizer=tokenizer, config=cfg.data, processor=None)
    right = [task.reference_answer(r) for r in records]
    # two steps (epochs) of groups of 2: row 0 right then wrong, row 1 always wrong, row 2 always right; then validation
    steps = [[(0, right[0]), (0, "nonsense"), (1, ""), (1, "x"), (2, right[2]), (2, right[2])]] * 2
    items = [[(train[i], text) for i, text in step] for step in steps] + [[(val[0], task.reference_answer(validation[0]))]]

    worker = RewardLoopWorker(cfg)
    for batch_items in items:
        batch = collate_fn([item for item, _ in batch_items])
        prompts = [tokenizer(tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False),
                             add_special_tokens=False)["input_ids"] for item, _ in batch_items]
        responses = [tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"] for _, text in batch_items]
        width_p, width_r, pad = max(map(len, prompts)), max(map(len, responses)), tokenizer.pad_token_id
        prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
        response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
        mask = torch.tensor([[0] * (width_p - len(p)) + [1] * (len(p) + len(r)) + [0] * (width_r - len(r)) for p, r in zip(prompts, responses)])
        data = DataProto.from_dict(
            tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask, "input_ids": torch.cat([prompt_ids, response_ids], 1)},
            non_tensors={key: batch[key] for key in ("data_source", "reward_model", "extra_info")},
        )
        worker.loop.run_until_complete(worker.compute_score_batch(data))

    recorded = [json.loads(line) for path in outcomes.glob("*.jsonl") for line in path.read_text().splitlines()]
    assert len(recorded) == 12 and {item["index"] for item in recorded} == {0, 1, 2}  # the validation row is left out
    lines = [check_line(line, f"line {i}") for i, line in enumerate(read_rollouts(outcomes, records, task, group_size=2))]
    assert [line["id"] for line in lines] == [r["id"] for r in records]
    assert [(line["samples"], line["valid"], line["kept"]) for line in lines] == [(4, 2, True), (4, 0, True), (4, 4, True)]
    # a batch is scored in a thread pool: the order within a group is the workers', the groups are the steps
    assert [sorted(group) for group in lines[0]["groups"]] == [[0.0, 1.0], [0.0, 1.0]] and lines[2]["groups"] == [[1.0, 1.0], [1.0, 1.0]]
    signal = aggregate(lines, records, task)
    assert (signal["overall"]["mixed"], signal["overall"]["all_wrong"], signal["overall"]["all_right"]) == (1, 1, 1)


def test_read_rollouts_orders_workers_by_time_and_marks_unsampled_rows(task, tmp_path):
    from envengineer.plugins.trainers.verl_data import read_rollouts, record_outcome

    records = instances(task, 3, seed=13)
    assert read_rollouts(tmp_path, records, task, group_size=2) is None  # nothing recorded: no lines, not empty ones
    # two workers' files: the row's first step is one right and one wrong, its second two right
    (tmp_path / "b-2.jsonl").write_text("".join(json.dumps({"index": 0, "reward": r, "valid": r > 0, "t": t, "seq": s}) + "\n"
                                                for r, t, s in [(0.0, 1.0, 0), (1.0, 5.0, 1)]) + '{"index": 0, "rew')
    (tmp_path / "a-1.jsonl").write_text("".join(json.dumps({"index": 0, "reward": r, "valid": r > 0, "t": t, "seq": s}) + "\n"
                                                for r, t, s in [(1.0, 0.5, 0), (1.0, 6.0, 1)]))
    lines = read_rollouts(tmp_path, records, task, group_size=2)
    assert lines[0]["groups"] == [[1.0, 0.0], [1.0, 1.0]] and lines[0]["kept"]
    assert [(line["samples"], line["kept"]) for line in lines[1:]] == [(0, False), (0, False)]  # never sampled by verl
    # a folder this process cannot write to warns once and never fails the step
    with pytest.warns(UserWarning, match="reward_kwargs.outcomes: cannot record"):
        record_outcome(tmp_path / "missing", {"split": "train", "index": 0}, {"score": 1.0, "acc": 1.0})
    record_outcome(tmp_path / "missing", {"split": "train", "index": 0}, {"score": 1.0, "acc": 1.0})


SCORING_MAIN = '''
"""The replay stand-in, after scoring each training row as verl would: n responses per row, a step at a time."""
import json, sys
import pyarrow.parquet as pq
import replay_main_ppo
from envengineer.plugins.trainers.verl_data import compute_score, task_pair

def main(argv):
    o = {k.lstrip("+"): v.strip("'") for k, _, v in (item.partition("=") for item in argv)}
    rows = pq.read_table(o["data.train_files"]).to_pylist()
    n, batch = int(o["actor_rollout_ref.rollout.n"]), int(o["data.train_batch_size"])
    kwargs = {"outcomes": o["reward.custom_reward_function.reward_kwargs.outcomes"], "optimality_bonus": 0.0}
    for row in rows[: len(rows) - len(rows) % batch]:
        generator, _ = task_pair(row["extra_info"]["task"])
        right = generator.reference_answer(json.loads(row["reward_model"]["ground_truth"]))
        for k in range(n):
            compute_score(row["data_source"], right if k == 0 else "", row["reward_model"]["ground_truth"], row["extra_info"], **kwargs)
    return replay_main_ppo.main(argv)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def test_a_verl_round_writes_rollouts_the_loop_aggregates(tiny_models, tmp_path):
    """Through the launch boundary: the trainer passes the outcomes folder to the reward, writes rollouts.jsonl after
    the job, and the loop files it into the round's signal.json."""
    pytest.importorskip("verl")
    pytest.importorskip("hydra")
    import os

    import yaml

    from envengineer.loop.steps import run

    (tmp_path / "stand-in").mkdir()
    (tmp_path / "stand-in" / "scoring_main_ppo.py").write_text(SCORING_MAIN)
    model = tiny_models.char_model(tmp_path / "model")
    config = tmp_path / "verl.yaml"
    config.write_text(yaml.safe_dump({
        "name": "verl-rollouts", "task": {"name": "mapf-frozenlake", "agents": 2}, "rounds": 1, "budget": 10, "seed": 1,
        "engineer": {"name": "fixed"}, "policy": {"name": "transformers", "path": str(model), "max_new_tokens": 4},
        "trainer": {"name": "verl", "train_batch_size": 4, "ppo_mini_batch_size": 4, "num_generations": 4,
                    "module": "scoring_main_ppo", "env": {"PYTHONPATH": os.pathsep.join([str(tmp_path / "stand-in"), str(REPLAY)])}},
        "eval": {"validation": "mapf-2agents-val", "limit": 4}, "output": str(tmp_path / "run"),
    }))
    run(config)
    train = tmp_path / "run" / "round-00" / "train"
    lines = read_lines(train)
    assert len(lines) == 10 and not (train / "verl-outcomes").exists()
    assert [line["samples"] for line in lines] == [4] * 8 + [0, 0]  # the dataloader drops the last partial batch
    assert all(line["valid"] == 1 and line["kept"] and line["groups"] == [[1.0, 0.0, 0.0, 0.0]] for line in lines[:8])
    signal = json.loads((train / "signal.json").read_text())
    assert signal["overall"]["prompts"] == 10 and signal["overall"]["kept"] == 8 and signal["overall"]["mixed"] == 8
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert next(line for line in history if line["step"] == "train")["trained_prompts"] == 8
