"""The embedded tiny policy: a word-level tokenizer, a ~1 M-parameter Qwen3, a warm start.

Everything is built locally (nothing is downloaded): the tokenizer knows exactly the
tokens of the compact prompt style (``N7 H 2_4 … S1 0_6 G1 1_0 S2 4_2 G2 1_2 P``) and of
its answer (``| 0_6 4_2 | 0_5 3_2 … </s>``); the model is randomly initialised and then
trained by supervised learning on solver-optimal answers of 2-agent instances. The
result is a standard Hugging Face model directory (the "base model" of a run), cached
under a hash of the options that shape it, so it is built once per machine.

Measured facts behind the defaults are in docs/tiny-policy.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from envengineer.errors import ConfigError
from envengineer.plugins.policies.transformers_policy import TransformersOptions, TransformersPolicy, quiet_hf

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
MAX_COORD = 10  # cells 0_0 … 9_9: maps up to 10x10
MAX_AGENTS = 8
SIZES = range(3, 11)

#: Bump when the tokenizer, the model or the warm-start recipe changes: it is part of the cache key.
RECIPE_VERSION = 3  # 2: the compact answer starts at t = 1; 3: geometric cell init, data solved once

CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def vocabulary() -> list[str]:
    """Every token of the compact style, specials first (ids are positions in this list)."""
    tokens = [PAD, EOS, UNK, "H", "P", "|"]
    tokens += [f"N{n}" for n in SIZES]
    for i in range(1, MAX_AGENTS + 1):
        tokens += [f"S{i}", f"G{i}"]
    tokens += [f"{r}_{c}" for r in range(MAX_COORD) for c in range(MAX_COORD)]
    return tokens


def build_tokenizer():
    """A ``PreTrainedTokenizerFast`` over :func:`vocabulary`: whitespace split, space-joined decode."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(vocabulary())}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Metaspace-free word level: decoding joins tokens with single spaces.
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, *, hidden_size: int = 128, layers: int = 4, ffn: int = 512, seed: int = 0, geometric: bool = True):
    """A randomly initialised Qwen3 decoder (tied embeddings; ~1.0 M parameters by default).

    ``geometric``: cell tokens start from row/column features (see :func:`geometric_embeddings`).
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        use_cache=True,
    )
    model = Qwen3ForCausalLM(config)
    if geometric:
        geometric_embeddings(model, tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.eos_token_id
    return model


def geometric_embeddings(model, tokenizer, *, frequencies: int = 8, scale: float = 1.0) -> None:
    """Initialise the embedding rows of the cell tokens ``r_c`` (and ``N<size>``) with grid geometry.

    Cell tokens are atomic words, so a randomly initialised model must first discover
    from data that ``2_3`` is next to ``2_4``. Here a cell's row starts as Fourier
    features of ``r`` (cos/sin at ``frequencies`` frequencies) in one block of dimensions
    and its column as features of ``c`` in another; nearby cells start with similar
    vectors. With tied embeddings this also shapes the output layer. Only the initial
    values change: the architecture stays a plain Qwen3.
    """
    import torch

    emb = model.get_input_embeddings().weight
    hidden = emb.shape[1]
    block = 2 * frequencies
    if 2 * block > hidden:
        return
    std = float(emb.detach().std())
    vocab = tokenizer.get_vocab()

    def features(x: float) -> torch.Tensor:
        k = torch.arange(1, frequencies + 1, dtype=torch.float32)
        angle = math.pi * k * x / (2 * MAX_COORD)
        return torch.cat([torch.cos(angle), torch.sin(angle)]) * std * scale * math.sqrt(hidden / (2 * block))

    with torch.no_grad():
        for r in range(MAX_COORD):
            for c in range(MAX_COORD):
                row = emb[vocab[f"{r}_{c}"]]
                row[:block] = features(r)
                row[block : 2 * block] = features(c)
        for n in SIZES:
            row = emb[vocab[f"N{n}"]]
            row[:block] = features(n - 1)
            row[block : 2 * block] = features(n - 1)


_CELL = re.compile(r"\((-?\d+),\s*(-?\d+)\)")


def compact_reference(generator, record: Mapping[str, Any]) -> str:
    """The compact answer for ``record``, from the task's optimal reference answer."""
    from envengineer.tasks.mapf_frozenlake.prompts import compact_answer

    text = generator.reference_answer(record)
    paths = []
    for line in text.splitlines():
        if line.strip().lower().startswith("agent"):
            paths.append([(int(r), int(c)) for r, c in _CELL.findall(line.split(":", 1)[1])])
    return compact_answer(paths)


def warm_start_records(generator, *, instances: int, seed: int) -> list[dict[str, Any]]:
    """2-agent instances of the task's own generator (certified optimal), as records.

    Kept for callers that want task records; the warm start itself uses
    :func:`warm_start_examples`, which solves each instance once and keeps the paths.
    """
    from envengineer.tasks.mapf_frozenlake.config import uniform_config

    if getattr(generator.options, "agents", 2) != 2:
        generator = type(generator)(generator.Options.model_validate({**generator.options.model_dump(), "agents": 2}))
    parts = ((0.0, 0.0), (0.1, 0.3), (0.2, 0.3), (0.3, 0.3))
    records: list[dict[str, Any]] = []
    for i, (hole_ratio, wait_ratio) in enumerate(parts):
        n = instances // len(parts) + (1 if i < instances % len(parts) else 0)
        if n:
            result = generator.generate(uniform_config(hole_ratio=hole_ratio, wait_ratio=wait_ratio), n=n, seed=seed * 1000 + i)
            records += result.records
    random.Random(seed).shuffle(records)
    return records


#: (hole ratio, share of crossing placements) of the warm-start parts, drawn in turn. Crossing
#: agents often need a WAIT or a detour. Measured: this easier mix (mean hole ratio 0.15, ~22%
#: crossing) gave a better base than hole ratios 0-0.4 with 50% crossing (11.5% vs 4.4% valid on
#: mapf-2agents-val after the same 1.8 M tokens).
WARM_PARTS = ((0.0, 0.0), (0.1, 0.3), (0.2, 0.3), (0.3, 0.3))


def warm_start_pairs(*, instances: int, seed: int, time_limit: float = 10.0) -> list[tuple[str, str]]:
    """(compact prompt, compact optimal answer) for ``instances`` 2-agent instances.

    Sizes 3–10 in turn, hole ratio and crossing share from :data:`WARM_PARTS` in turn
    (the generator's own placement helpers). Each draw is
    solved once and its optimal paths are kept, so there is no rejection loop and no
    second solve (unsolvable draws, and draws past the generator's work limit, are redrawn).
    Deterministic in ``seed``: the solver's work limit, not the clock, decides a give-up.
    """
    import inspect

    from envengineer.tasks.mapf_frozenlake.config import hole_count
    from envengineer.tasks.mapf_frozenlake.generator import _crossing_placement, _random_placement
    from envengineer.tasks.mapf_frozenlake.instance import Agent, Instance
    from envengineer.tasks.mapf_frozenlake.prompts import compact_answer, render_compact
    from envengineer.tasks.mapf_frozenlake.solver import solve

    limits: dict[str, Any] = {"time_limit": time_limit}
    if "work_limit" in inspect.signature(solve).parameters:
        from envengineer.tasks.mapf_frozenlake import generator as gen

        limits["work_limit"] = getattr(gen, "WORK_LIMIT", 40_000)
    rng = random.Random(f"tiny-warm-start-{seed}")
    sizes = list(SIZES)
    out: list[tuple[str, str]] = []
    while len(out) < instances:
        size = sizes[len(out) % len(sizes)]
        hole_ratio, crossing = WARM_PARTS[(len(out) // len(sizes)) % len(WARM_PARTS)]
        n_cells = size * size
        holes = set(rng.sample(range(n_cells), hole_count(size, hole_ratio)))
        free = [i not in holes for i in range(n_cells)]
        place = _crossing_placement if rng.random() < crossing else _random_placement
        placement = place(rng, size, free, 2)
        if placement is None:
            continue
        grid = tuple("".join("H" if r * size + c in holes else "F" for c in range(size)) for r in range(size))
        agents = tuple(Agent(divmod(s, size), divmod(g, size)) for s, g in placement)
        solution = solve(grid, [(a.start, a.goal) for a in agents], **limits)
        if solution.status != "optimal" or solution.paths is None:
            continue
        instance = Instance(size=size, grid=grid, agents=agents, hole_ratio=len(holes) / n_cells)
        out.append((render_compact(instance), compact_answer(solution.paths)))
    return out


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], int]]:
    """(token ids of prompt + answer + EOS, prompt length) per (prompt, answer) pair."""
    vocab = tokenizer.get_vocab()
    unk = tokenizer.unk_token_id
    out = []
    for prompt, answer in pairs:
        p = [vocab.get(t, unk) for t in prompt.split()]
        a = [vocab.get(t, unk) for t in answer.split()] + [tokenizer.eos_token_id]
        out.append((p + a, len(p)))
    return out


def encode_examples(tokenizer, generator, records: Sequence[Mapping[str, Any]]) -> list[tuple[list[int], int]]:
    """(token ids of prompt + answer + EOS, prompt length) per task record (solves each record)."""
    return encode_pairs(tokenizer, [(generator.render(r, "compact"), compact_reference(generator, r)) for r in records])


def _batches(examples, batch_size: int, rng: random.Random):
    """Length-bucketed batches (less padding), in random order."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    chunk = batch_size * 32
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: len(examples[i][0]))
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def supervised_train(
    model,
    examples: list[tuple[list[int], int]],
    *,
    pad_id: int,
    epochs: float,
    lr: float,
    batch_size: int,
    seed: int,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Next-token loss on answer tokens only; AdamW, linear warm-up then cosine decay."""
    import torch

    rng = random.Random(seed)
    torch.manual_seed(seed)
    full_epochs = int(math.ceil(epochs))
    plan = [_batches(examples, batch_size, rng) for _ in range(full_epochs)]
    if epochs < full_epochs:  # a fractional last epoch
        plan[-1] = plan[-1][: max(1, int(len(plan[-1]) * (epochs - (full_epochs - 1))))]
    steps = sum(len(p) for p in plan)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, steps // 50)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))),
    )
    model.train()
    step, tokens, losses = 0, 0, []
    started = time.perf_counter()
    for epoch_batches in plan:
        for batch in epoch_batches:
            seqs = [examples[i] for i in batch]
            width = max(len(s) for s, _ in seqs)
            ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
            labels = torch.full((len(seqs), width), -100, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for row, (seq, plen) in enumerate(seqs):
                ids[row, : len(seq)] = torch.tensor(seq)
                labels[row, plen : len(seq)] = torch.tensor(seq[plen:])
                mask[row, : len(seq)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            tokens += int(mask.sum())
            losses.append(loss.item())
            if progress:
                progress("warm start", step, steps)
    model.eval()
    seconds = time.perf_counter() - started
    tail = losses[-max(1, len(losses) // 20) :]
    return {
        "steps": steps,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
        "final_loss": round(sum(tail) / len(tail), 4),
        "first_loss": round(losses[0], 4) if losses else None,
    }


def default_cache_dir() -> Path:
    root = os.environ.get("ENVENGINEER_CACHE")
    return Path(root) / "tiny" if root else Path.home() / ".cache" / "envengineer" / "tiny"


def recipe_key(recipe: Mapping[str, Any]) -> str:
    text = json.dumps({"version": RECIPE_VERSION, **recipe}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_base_model(
    out_dir: Path,
    *,
    generator,
    instances: int,
    epochs: float,
    lr: float,
    batch_size: int,
    seed: int,
    hidden_size: int = 128,
    layers: int = 4,
    ffn: int = 512,
    threads: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Build tokenizer + model, warm-start it, save a HF model dir into ``out_dir`` atomically."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    tokenizer = build_tokenizer()
    pairs = warm_start_pairs(instances=instances, seed=seed)
    if progress:
        progress("warm-start data", len(pairs), len(pairs))
    examples = encode_pairs(tokenizer, pairs)
    data_s = time.perf_counter() - t0
    model = build_model(tokenizer, hidden_size=hidden_size, layers=layers, ffn=ffn, seed=seed)
    stats = supervised_train(model, examples, pad_id=tokenizer.pad_token_id, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed, progress=progress)
    tmp = out_dir.with_name(out_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_hf():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    meta = {
        "recipe_version": RECIPE_VERSION,
        "instances": len(pairs),
        "epochs": epochs,
        "lr": lr,
        "batch_size": batch_size,
        "seed": seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "data_seconds": round(data_s, 2),
        "train": stats,
        "total_seconds": round(time.perf_counter() - t0, 2),
    }
    (tmp / "warm_start.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out_dir)
    return meta


# --------------------------------------------------------------------------- the policy

class TinyOptions(TransformersOptions):
    """Sampling options of the transformers policy, plus the warm start's recipe."""

    prompt_style: Literal["full", "compact"] = Field("compact", description="the tiny tokenizer knows only the compact style")
    max_new_tokens: int = Field(128, ge=1, description="answers of 2-agent 10x10 instances are at most ~60-70 tokens")
    batch_size: int = Field(512, ge=1)
    instances: int = Field(18000, ge=1, description="2-agent instances of the supervised warm start (18000 × 3 epochs ≈ 2 M tokens, ~3.5 min on one core: 16.5% valid on mapf-2agents-val)")
    epochs: float = Field(3.0, gt=0, description="passes over the warm-start instances")
    lr: float = Field(2e-3, gt=0, description="warm-start learning rate (AdamW, cosine)")
    train_batch_size: int = Field(64, ge=1, description="warm-start batch size")
    hidden_size: int = Field(128, ge=16)
    layers: int = Field(4, ge=1)
    ffn: int = Field(512, ge=16)
    threads: int | None = Field(1, ge=1, description="torch CPU threads; 1 measured fastest for this ~1 M model (2 threads on 2 shared cores ran 3-10x slower)")
    cache_dir: str | None = Field(None, description="default: $ENVENGINEER_CACHE/tiny or ~/.cache/envengineer/tiny")


class TinyPolicy(TransformersPolicy):
    name: ClassVar[str] = "tiny"
    description: ClassVar[str] = "embedded ~1M-parameter Qwen3, warm-started on solver answers (CPU, no download)"
    Options: ClassVar[type[BaseModel]] = TinyOptions
    options: TinyOptions

    def recipe(self) -> dict[str, Any]:
        o = self.options
        return {
            "instances": o.instances, "epochs": o.epochs, "lr": o.lr, "batch_size": o.train_batch_size,
            "seed": o.seed, "hidden_size": o.hidden_size, "layers": o.layers, "ffn": o.ffn,
        }

    def base_dir(self) -> Path:
        """Where the warm-started base model of these options is cached."""
        root = Path(self.options.cache_dir).expanduser() if self.options.cache_dir else default_cache_dir()
        return root / recipe_key(self.recipe())

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Progress | None = None) -> Path:
        """The base model directory: built (tokenizer, random init, warm start) unless cached."""
        if self.options.path and not force:
            return Path(self.options.path)
        out = self.base_dir()
        if (out / "warm_start.json").exists() and not force:
            return out
        if generator is None:
            raise ConfigError("policy.tiny: the warm start needs the task's generator (mapf-frozenlake)")
        o = self.options
        build_base_model(
            out, generator=generator, instances=o.instances, epochs=o.epochs, lr=o.lr,
            batch_size=o.train_batch_size, seed=o.seed, hidden_size=o.hidden_size, layers=o.layers,
            ffn=o.ffn, threads=o.threads, progress=progress,
        )
        return out

    def load(self) -> tuple[Any, Any]:
        if not self.options.path and not (self.base_dir() / "warm_start.json").exists():
            raise ConfigError("policy.tiny: no base model yet: run `envengineer pretrain` (or prepare()) first")
        if not self.options.path:
            self.options = self.options.model_copy(update={"path": str(self.base_dir())})
        return super().load()

    def warm_start_info(self) -> dict[str, Any] | None:
        """The recorded warm-start figures of the cached base model, if it was built."""
        path = self.base_dir() / "warm_start.json"
        return json.loads(path.read_text()) if path.exists() else None
