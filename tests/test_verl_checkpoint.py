"""verl checkpoint → next round's model directory, on a checkpoint written by verl's own FSDPCheckpointManager (CPU, gloo)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envengineer.api import free_port
from envengineer.errors import InputError
from envengineer.plugins.trainers.verl_checkpoint import TRACKER, hand_off, latest_step

#: Run in a fresh interpreter: torch.distributed stays out of the test process. Builds a tiny
#: Qwen3, wraps it in FSDP1 on CPU, takes one optimiser step and saves it with verl's manager the
#: way verl's trainer lays it out (default_local_dir/global_step_N/actor, then the tracker).
WRITER = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer, models, pre_tokenizers
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    out = Path(sys.argv[1])
    torch.manual_seed(0)
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<unk>", *"abcdefghijklmnopqrstuvwxyz0123456789:{}`"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    config = Qwen3Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, max_position_embeddings=512, tie_word_embeddings=True,
                         pad_token_id=0, eos_token_id=1)
    Qwen3ForCausalLM(config).save_pretrained(out / "base")
    tok.save_pretrained(out / "base")

    dist.init_process_group("gloo", rank=0, world_size=1)
    model = AutoModelForCausalLM.from_pretrained(out / "base")  # name_or_path set: verl saves the generation config
    fsdp = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True)
    optimizer = torch.optim.AdamW(fsdp.parameters(), lr=1e-2)

    def train_step():
        ids = torch.tensor([tok("abc:{1}")["input_ids"]])
        fsdp(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def save(root, step, contents):
        manager = FSDPCheckpointManager(model=fsdp, optimizer=optimizer, processing_class=AutoTokenizer.from_pretrained(out / "base"),
                                        checkpoint_config=OmegaConf.create({"save_contents": contents, "load_contents": ["model"]}))
        manager.save_checkpoint(local_path=str(root / f"global_step_{step}" / "actor"), global_step=step)
        Path(get_checkpoint_tracker_filename(str(root))).write_text(str(step))  # as verl's trainer does after a save

    full = ["model", "optimizer", "extra", "hf_model"]
    train_step()
    save(out / "ckpt", 2, full)
    train_step()
    save(out / "ckpt", 3, full)
    save(out / "shards", 3, ["model", "optimizer", "extra"])  # verl's default: no Hugging Face weights
    save(out / "hf_only", 3, ["hf_model"])  # what the verl trainer plugin asks for: no shards at all
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "trained.pt")
    json.dump({"tracker": os.path.basename(get_checkpoint_tracker_filename(str(out)))}, open(out / "facts.json", "w"))
    dist.destroy_process_group()
''')


@pytest.fixture(scope="module")
def verl_checkpoints(tmp_path_factory) -> Path:
    pytest.importorskip("verl")
    out = tmp_path_factory.mktemp("verl-ckpt")
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port("127.0.0.1")), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", WRITER, str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_tracker_is_the_file_verl_writes(verl_checkpoints):
    assert json.loads((verl_checkpoints / "facts.json").read_text())["tracker"] == TRACKER


@pytest.mark.parametrize("layout", ["ckpt", "hf_only"])
def test_hand_off_gives_the_trained_model(verl_checkpoints, tmp_path, layout):
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = tmp_path / "ckpt"
    shutil.copytree(verl_checkpoints / layout, ckpt)
    assert latest_step(ckpt) == 3
    target = hand_off(ckpt, tmp_path / "round-01" / "checkpoint", keep=True)
    assert target == tmp_path / "round-01" / "checkpoint"
    assert {"config.json", "generation_config.json"} <= {p.name for p in target.iterdir()}
    assert not (ckpt / "global_step_3" / "actor" / "huggingface").exists()  # moved, not copied
    shards = (ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt").exists()
    assert shards == (layout == "ckpt")  # kept (keep=True) where verl wrote them
    assert [p.name for p in target.parent.iterdir()] == ["checkpoint"]  # no staging folder left behind

    # verl stores fp32 tensors under a config.json that says bfloat16 (the dtype it builds the empty model
    # in): transformers' default dtype="auto" would round them, so read them as stored
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    trained = torch.load(verl_checkpoints / "trained.pt")
    loaded = model.state_dict()
    assert trained.keys() == loaded.keys()
    for name, tensor in trained.items():
        assert torch.equal(loaded[name], tensor), name
    base = AutoModelForCausalLM.from_pretrained(verl_checkpoints / "base").state_dict()
    assert any(not torch.equal(base[name], tensor) for name, tensor in trained.items())  # the steps changed the weights
    tokenizer = AutoTokenizer.from_pretrained(target)
    original = AutoTokenizer.from_pretrained(verl_checkpoints / "base")
    assert tokenizer("abc:{1}")["input_ids"] == original("abc:{1}")["input_ids"] and tokenizer.eos_token == "<eos>"
    assert tokenizer.chat_template == original.chat_template


def test_hand_off_removes_the_shards_unless_kept(verl_checkpoints, tmp_path):
    import shutil

    for extra in ("notes.txt", None):
        ckpt = tmp_path / f"ckpt-{extra}"
        shutil.copytree(verl_checkpoints / "ckpt", ckpt)
        if extra:
            (ckpt / extra).write_text("not verl's")
        model = hand_off(ckpt, tmp_path / f"model-{extra}")
        assert (model / "config.json").exists()
        if extra:
            assert [p.name for p in ckpt.iterdir()] == [extra]  # step folders and tracker gone, the rest left
        else:
            assert not ckpt.exists()  # nothing else in it: the folder goes too


def test_a_checkpoint_without_weights_says_how_to_merge(verl_checkpoints, tmp_path):
    shards = verl_checkpoints / "shards"
    actor = shards / "global_step_3" / "actor"
    assert (actor / "huggingface" / "config.json").exists()  # verl writes config and tokenizer anyway
    with pytest.raises(InputError) as caught:
        hand_off(shards, tmp_path / "model")
    message = str(caught.value)
    assert str(actor / "huggingface") in message and "weights" in message
    assert f"python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir" in message
    assert not (tmp_path / "model").exists() and (actor / "huggingface").exists()  # nothing moved


def test_latest_step_reads_folders_and_verl_tracker(tmp_path):
    assert latest_step(tmp_path / "missing") is None
    assert latest_step(tmp_path) is None
    for name in ("global_step_2", "global_step_10", "global_step_x", "actor"):
        (tmp_path / name).mkdir()
    (tmp_path / "global_step_99").write_text("a file, not a step")
    assert latest_step(tmp_path) == 10  # numeric, not lexical
    (tmp_path / TRACKER).write_text("2\n")
    assert latest_step(tmp_path) == 2  # step 10 was never recorded as complete
    (tmp_path / TRACKER).write_text("7")
    assert latest_step(tmp_path) == 10  # the tracker names no folder: the highest


def test_hand_off_refuses_a_missing_checkpoint_or_an_existing_target(tmp_path):
    with pytest.raises(InputError, match="no global_step_N folder"):
        hand_off(tmp_path / "ckpt", tmp_path / "model")
    source = tmp_path / "ckpt" / "global_step_1" / "actor" / "huggingface"
    source.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (source / name).write_text("{}")
    (tmp_path / "model").mkdir()
    with pytest.raises(InputError, match="already exists"):
        hand_off(tmp_path / "ckpt", tmp_path / "model")
    assert (source / "model.safetensors").exists()


def test_a_sharded_model_needs_every_shard(tmp_path):
    source = tmp_path / "ckpt" / "global_step_1" / "actor" / "huggingface"
    source.mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json", "model-00001-of-00002.safetensors"):
        (source / name).write_text("{}")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (source / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match="model-00002-of-00002.safetensors"):
        hand_off(tmp_path / "ckpt", tmp_path / "model")
