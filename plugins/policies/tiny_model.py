"""The embedded tiny policy's model: its character tokenizer, the small Llama it builds, the supervised warm
start on a task's reference answers and its cache (keyed by the recipe and the task's fingerprint; a shipped
base model checked against its SHA256SUMS). :mod:`~envengineer.plugins.policies.tiny` is the policy that
samples from it; the SFT warm start of other models reuses the cache helpers."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.api import ConfigError
from envengineer.plugins._shared.cpu_heap import keep_freed_memory
from envengineer.plugins.policies.hf import quiet_hf

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SPECIALS = (PAD, EOS, UNK)

#: Bump when the tokenizer, the model or the warm-start recipe changes: it is part of the cache key.
RECIPE_VERSION = 3  # 2: the compact answer starts at t = 1; 3: geometric cell init, data solved once

CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

Progress = Callable[[str, int, int], None]  # (stage, done, total)
#: (input embedding matrix, token -> row): sets starting rows in place.
InitEmbeddings = Callable[[Any, Mapping[str, int]], None]


def char_vocabulary() -> list[str]:
    """The default tokens: tab, newline and printable ASCII, one token per character."""
    return ["\t", "\n", *(chr(i) for i in range(32, 127))]


def build_tokenizer(vocabulary: Sequence[str] | None = None):
    """A ``PreTrainedTokenizerFast``: ``<pad> </s> <unk>`` then ``vocabulary`` (ids are positions).

    With a ``vocabulary`` (a task's ``tiny_vocabulary``) it splits on whitespace and decodes
    with single spaces; without one it reads characters (:func:`char_vocabulary`, other
    characters are ``<unk>``) and decodes by concatenation.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = vocabulary is not None
    tokens = [*SPECIALS, *(vocabulary if words else char_vocabulary())]
    if len(set(tokens)) != len(tokens):
        raise ValueError("tiny vocabulary: tokens must be unique and must not repeat <pad>, </s>, <unk>")
    vocab = {token: i for i, token in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    if words:
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        # Metaspace-free word level: decoding joins tokens with single spaces.
        core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    else:
        core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        core.decoder = decoders.Fuse()
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


def build_model(tokenizer, *, hidden_size: int = 128, layers: int = 4, ffn: int = 512, seed: int = 0,
                init_embeddings: InitEmbeddings | None = None):
    """A randomly initialised Qwen3 decoder (tied embeddings; ~1.0 M parameters by default).

    ``init_embeddings(weight, token_ids)`` then sets starting rows of the embedding matrix
    (a task's ``tiny_init_embeddings``, e.g. grid geometry for cell tokens).
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
    if init_embeddings is not None:
        init_embeddings(model.get_input_embeddings().weight, tokenizer.get_vocab())
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.eos_token_id
    return model


def compact_reference(generator, record: Mapping[str, Any], style: str = "compact") -> str:
    """The task's optimal answer for ``record`` in ``style``'s own answer format (what the model writes)."""
    return generator.reference_completion(record, style)


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], int]]:
    """(token ids of prompt + answer + EOS, prompt length) per (prompt, answer) pair."""
    if not pairs:
        return []
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    answers = tokenizer([a for _, a in pairs], add_special_tokens=False)["input_ids"]
    return [(list(p) + list(a) + [tokenizer.eos_token_id], len(p)) for p, a in zip(prompts, answers)]


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
    from envengineer.api import cache_root

    return cache_root() / "tiny"


def recipe_key(recipe: Mapping[str, Any]) -> str:
    text = json.dumps({"version": RECIPE_VERSION, **recipe}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def verify_prebuilt(folder: Path) -> None:
    """Check a shipped base model against its ``SHA256SUMS`` (``<sha256>  <file>`` lines, every
    file of the model directory); a clear error naming the file otherwise."""
    from envengineer.api import SUMS, sha256_file

    sums = folder / SUMS
    if not sums.is_file():
        raise ConfigError(f"policy.tiny: the shipped base model {folder} has no SHA256SUMS")
    listed = set()
    for number, line in enumerate(sums.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.strip().partition("  ")
        if not name or len(digest) != 64 or "/" in name or name.startswith("."):
            raise ConfigError(f"policy.tiny: {sums}, line {number}: expected '<sha256>  <file name>'")
        listed.add(name)
        path = folder / name
        if not path.is_file():
            raise ConfigError(f"policy.tiny: {path} is listed in {sums} but missing")
        if sha256_file(path) != digest:
            raise ConfigError(f"policy.tiny: {path} does not match its sha256 in {sums} (damaged or edited): "
                              "reinstall the package, or set policy.prebuilt: false to build the base model here")
    for required in ("model.safetensors", "config.json", "tokenizer.json", "warm_start.json"):
        if required not in listed:
            raise ConfigError(f"policy.tiny: {sums} does not list {required}")


def write_sha256sums(folder: Path) -> Path:
    """Write ``folder/SHA256SUMS`` for every file in it (how a shipped base model is sealed)."""
    from envengineer.api import SUMS, sha256_file, write_text

    lines = [f"{sha256_file(p)}  {p.name}\n" for p in sorted(folder.iterdir()) if p.is_file() and p.name != SUMS]
    target = folder / SUMS
    write_text(target, "".join(lines))
    return target


#: Bump when :func:`warm_start_fingerprint` digests differently (a cache built before is then rebuilt once).
FINGERPRINT_VERSION = 1


def warm_start_fingerprint(generator, *, style: str, hidden_size: int, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """sha256 digests of everything the task's hooks hand a build, beside the recipe's options: the
    warm-start ``pairs`` (from ``warm_start_pairs``), the vocabulary (``tiny_vocabulary``) and what
    ``tiny_init_embeddings`` does to a fixed matrix of the model's shape. A base model is a function
    of its recipe, this module's code (:data:`RECIPE_VERSION`) and these, so a cached one whose
    fingerprint differs from the current task's was built from other task code or data, whatever
    file or library the change was in (the recipe key cannot see that), and one that agrees was not:
    editing a docstring or the validator rebuilds nothing. The pairs are regenerated to compare
    them, which costs what generating them costs (docs/tiny-policy.md has the measured seconds)."""
    import torch

    vocabulary = generator.tiny_vocabulary(style)
    tokenizer = build_tokenizer(vocabulary)
    # a fixed, exactly computed matrix (integer arithmetic: the same bits on any CPU), then the task's hook
    rows, width = len(tokenizer), hidden_size
    weight = (((torch.arange(rows * width, dtype=torch.int64) * 2654435761) % 1000003).to(torch.float32) / 1000003 - 0.5).reshape(rows, width)
    generator.tiny_init_embeddings(weight, tokenizer.get_vocab(), style)
    init = torch.round(weight.detach() * 2**16).to(torch.int64)  # float noise in the last bits of a hook's sin/cos does not count
    return {
        "version": FINGERPRINT_VERSION,
        "pairs": pairs_digest(pairs),
        "vocabulary": hashlib.sha256(json.dumps(vocabulary, ensure_ascii=False).encode()).hexdigest(),
        "init_embeddings": hashlib.sha256(init.numpy().tobytes()).hexdigest(),
    }


def pairs_digest(pairs: Sequence[tuple[str, str]]) -> str:
    """sha256 of warm-start (prompt, completion) pairs, in order (a fingerprint's ``pairs``)."""
    data = hashlib.sha256()
    for prompt, completion in pairs:
        data.update(json.dumps([prompt, completion], ensure_ascii=False).encode() + b"\n")
    return data.hexdigest()


def cached_state(out: Path, current: Mapping[str, Any]) -> str:
    """How a cached model folder ``out`` (its ``warm_start.json``) stands against the ``current`` fingerprint:
    ``"cached"`` when it records that fingerprint, else ``"rebuilt: ..."`` saying what changed."""
    change = fingerprint_change(json.loads((out / "warm_start.json").read_text()).get("fingerprint"), current)
    return "cached" if change is None else f"rebuilt: the cached one in {out} was stale ({change})"


def save_model_dir(out_dir: Path, model: Any, tokenizer: Any, meta: Mapping[str, Any]) -> None:
    """``model``, ``tokenizer`` and ``warm_start.json`` (``meta``) written as a model folder beside ``out_dir``,
    then renamed into its place (a half-written folder is never found by its recipe key)."""
    tmp = out_dir.with_name(out_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_hf():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out_dir)


def fingerprint_change(stored: Mapping[str, Any] | None, current: Mapping[str, Any]) -> str | None:
    """What differs between a cached model's fingerprint and the current one, in words (None: nothing)."""
    if stored == current:
        return None
    if not isinstance(stored, Mapping) or stored.get("version") != current.get("version"):
        return "it was built before its warm-start data was fingerprinted (or fingerprinted differently)"
    what = {"pairs": "warm-start pairs", "vocabulary": "vocabulary", "init_embeddings": "embedding initialisation"}
    changed = [words for key, words in what.items() if stored.get(key) != current.get(key)]
    listed = changed[0] if len(changed) == 1 else f"{', '.join(changed[:-1])} and {changed[-1]}"
    return f"the task's {listed} changed since it was built"


def warm_start_data(generator, *, n: int, seed: int, style: str, where: str = "policy.tiny") -> list[tuple[str, str]]:
    """The task's warm-start pairs, or a clear error (naming ``where``) when the task has no reference solver."""
    try:
        pairs = generator.warm_start_pairs(n=n, seed=seed, style=style)
    except NotImplementedError as exc:
        raise ConfigError(
            f"{where}: the warm start needs optimal answers of task {generator.name!r} ({exc}): "
            "implement Generator.reference_answer (or warm_start_pairs), or use another policy"
        ) from None
    if not pairs:
        raise ConfigError(f"{where}: task {generator.name!r} gave no warm-start pairs")
    return pairs


def build_base_model(
    out_dir: Path,
    *,
    generator,
    style: str = "compact",
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
    pairs: Sequence[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Build tokenizer + model from the task's hooks, warm-start it, save a HF model dir into ``out_dir`` atomically.

    The tokenizer reads ``generator.tiny_vocabulary(style)`` (None: characters), the fresh
    model's embeddings pass through ``generator.tiny_init_embeddings``, and the supervised
    data is ``generator.warm_start_pairs(n=instances, seed=seed, style=style)`` (``pairs``: those,
    already generated). ``warm_start.json`` records the figures and :func:`warm_start_fingerprint`.
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    keep_freed_memory()  # the warm start trains on the CPU: each step's activations reuse freed memory
    t0 = time.perf_counter()
    vocabulary = generator.tiny_vocabulary(style)
    tokenizer = build_tokenizer(vocabulary)
    if pairs is None:
        pairs = warm_start_data(generator, n=instances, seed=seed, style=style)
    fingerprint = warm_start_fingerprint(generator, style=style, hidden_size=hidden_size, pairs=pairs)
    if progress:
        progress("warm-start data", len(pairs), len(pairs))
    examples = encode_pairs(tokenizer, pairs)
    data_s = time.perf_counter() - t0
    model = build_model(tokenizer, hidden_size=hidden_size, layers=layers, ffn=ffn, seed=seed,
                        init_embeddings=lambda weight, token_ids: generator.tiny_init_embeddings(weight, token_ids, style))
    stats = supervised_train(model, examples, pad_id=tokenizer.pad_token_id, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed, progress=progress)
    meta = {
        "recipe_version": RECIPE_VERSION,
        "task": generator.name,
        "style": style,
        "tokenizer": "word" if vocabulary is not None else "char",
        "vocabulary_size": len(tokenizer),
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
    task_recipe = generator.warm_start_recipe()
    if task_recipe:
        meta["task_options"] = task_recipe
    meta["fingerprint"] = fingerprint
    save_model_dir(out_dir, model, tokenizer, meta)
    return meta


# --------------------------------------------------------------------------- the policy
