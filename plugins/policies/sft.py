"""A supervised warm start of a pretrained model on the task's solver answers, through TRL's ``SFTTrainer``.

``policy: {name: transformers, path: smollm2-135m-instruct, warm_start: {...}}``: before the run
starts (``prepare``), the model of ``path`` is fine-tuned on the task's ``warm_start_pairs`` in the
policy's prompt style, the prompt as the chat's user turn (rendered through the model's chat
template with the policy's ``chat_template_kwargs``, as evaluation and GRPO render it) and the
solver's completion as the assistant's turn, the loss on the completion's tokens only (TRL's
``completion_only_loss``). The result is an ordinary model folder cached under
``$ENVENGINEER_CACHE/sft/<key>``, the key hashing the base model's files, the task, the style,
the task's warm-start options and the recipe (:class:`SftWarmStart` without ``cache_dir``), with
the tiny policy's machinery (:func:`~envengineer.plugins.policies.tiny_model.recipe_key`; the pairs'
fingerprint, so a task whose pairs changed rebuilds the folder). Budgeted by instances, epochs and
steps, never by seconds. Measured figures: docs/smollm2.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import ConfigError

#: Bump when the SFT build changes what it trains (part of the cache key).
SFT_VERSION = 1
WARM_START_FILE = "warm_start.json"


class SftWarmStart(BaseModel):
    """The recipe of a supervised warm start (the ``warm_start`` option of the transformers policy)."""

    model_config = ConfigDict(extra="forbid")

    instances: int = Field(256, ge=1, description="(prompt, solver answer) pairs from the task's Generator.warm_start_pairs")
    epochs: float = Field(1.0, gt=0, description="passes over the pairs (max_steps, when set, stops earlier)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimiser steps")
    lr: float = Field(1e-4, gt=0, description="learning rate (AdamW)")
    lr_scheduler_type: str = Field("constant", description="transformers scheduler name")
    batch_size: int = Field(8, ge=1, description="pairs per optimiser step")
    max_length: int = Field(1024, ge=8, description="tokens per training sequence (longer ones are cut)")
    seed: int = 0
    threads: int | None = Field(1, ge=1, description="torch CPU threads while training (not part of the key)")
    cache_dir: str | None = Field(None, description="default: $ENVENGINEER_CACHE/sft (not part of the key)")

    def recipe(self) -> dict[str, Any]:
        """The options that shape the weights."""
        return self.model_dump(exclude={"threads", "cache_dir"})


def base_identity(folder: Path) -> dict[str, str]:
    """sha256 of the base model's weights, config and tokenizer (a converted model: from its record)."""
    from envengineer.api import sha256_file
    from envengineer.plugins._shared.models import model_record

    recorded = (model_record(folder) or {}).get("files", {})
    found = {}
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (folder / name).is_file():
            found[name] = recorded.get(name) or sha256_file(folder / name)
    if "model.safetensors" not in found:
        raise ConfigError(f"policy.transformers.warm_start: the base model {folder} has no model.safetensors")
    return found


def cache_root(options: SftWarmStart) -> Path:
    from envengineer.api import cache_root as root

    return Path(options.cache_dir).expanduser() if options.cache_dir else root() / "sft"


def sft_recipe(options: SftWarmStart, base: Path, generator: Any, style: str, chat_template_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Everything that shapes the warm-started weights."""
    recipe = {"kind": "sft", "sft_version": SFT_VERSION, "base": base_identity(base), "task": generator.name, "style": style,
              "chat_template_kwargs": dict(chat_template_kwargs), **options.recipe()}
    task_recipe = generator.warm_start_recipe()
    if task_recipe:
        recipe["task_options"] = task_recipe
    return recipe


def warm_started(options: SftWarmStart, base: Path, *, generator: Any, style: str, chat_template_kwargs: dict[str, Any],
                 force: bool = False, progress: Any = None) -> tuple[Path, str]:
    """The warm-started model folder for ``base`` (built unless cached with the current pairs) and how it was found
    (``cached``, ``built`` or ``rebuilt: WHY``)."""
    from filelock import FileLock

    from envengineer.plugins.policies.tiny_model import cached_state, pairs_digest, recipe_key, warm_start_data

    if generator is None:
        raise ConfigError("policy.transformers.warm_start: the warm start needs the task's generator (prepare(generator=...))")
    problem = generator.style_problem(style)
    if problem:
        raise ConfigError(f"policy.transformers.prompt_style: {problem}")
    recipe = sft_recipe(options, base, generator, style, chat_template_kwargs)
    out = cache_root(options) / recipe_key(recipe)
    pairs = warm_start_data(generator, n=options.instances, seed=options.seed, style=style, where="policy.transformers.warm_start")
    fingerprint = {"version": 1, "pairs": pairs_digest(pairs)}
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.parent / f".{out.name}.lock")):  # one build at a time (test workers, suite runs)
        state = "built"
        if (out / WARM_START_FILE).exists() and not force:
            state = cached_state(out, fingerprint)
            if state == "cached":
                return out, state
        rows = sft_rows(generator, pairs, seed=options.seed, style=style, chat_template_kwargs=chat_template_kwargs)
        build(out, options, base, rows, recipe=recipe, fingerprint=fingerprint, progress=progress)
    return out, state


def sft_rows(generator: Any, pairs: list[tuple[str, str]], *, seed: int, style: str,
             chat_template_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """TRL's prompt-completion rows for ``pairs``, rendered as the policy renders ``style``'s prompts.

    Plain-string prompts stay strings (tokenized as they are; TRL appends the end-of-sequence token). Chat
    prompts are conversational rows, the answer as the assistant's turn: a task on the default
    ``warm_start_pairs`` (records of its default config) gets each record's own messages (a system turn
    kept); a task with its own hook hands over joined texts, which become one user turn (grid-walk's and
    mapf-frozenlake's full prompts are one user turn)."""
    from envengineer.api import Generator

    config = generator.default_config()
    if isinstance(generator.render(generator.generate(config, n=1, seed=seed).records[0], style), str):
        return [{"prompt": prompt, "completion": answer} for prompt, answer in pairs]
    messages = [[{"role": "user", "content": prompt}] for prompt, _ in pairs]
    # the default hook's records again (seeded as it draws them), only where their own messages may be used
    records = generator.generate(config, n=len(pairs), seed=seed).records if type(generator).warm_start_pairs is Generator.warm_start_pairs else []
    if len(records) == len(pairs):
        rendered = [generator.render(record, style) for record in records]
        if all("".join(m["content"] for m in chat) == prompt for chat, (prompt, _) in zip(rendered, pairs)):
            messages = [list(chat) for chat in rendered]
    return [{"prompt": chat, "completion": [{"role": "assistant", "content": answer}],
             "chat_template_kwargs": dict(chat_template_kwargs)} for chat, (_, answer) in zip(messages, pairs)]


def build(out: Path, options: SftWarmStart, base: Path, rows: list[dict[str, Any]], *, recipe: dict[str, Any],
          fingerprint: dict[str, Any], progress: Any = None) -> dict[str, Any]:
    """Fine-tune ``base`` on ``rows`` (:func:`sft_rows`) with TRL's SFTTrainer; write the model folder ``out`` with
    ``warm_start.json``."""
    import tempfile

    import datasets.utils.logging as datasets_logging
    from datasets import Dataset
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from envengineer.plugins._shared.cpu_heap import keep_freed_memory
    from envengineer.plugins.policies.tiny_model import save_model_dir
    from envengineer.plugins.policies.hf import quiet_hf

    use_cpu = not torch.cuda.is_available()
    before = torch.get_num_threads()
    if use_cpu:
        keep_freed_memory()
        if options.threads:
            torch.set_num_threads(options.threads)
    started, cpu_started = time.perf_counter(), time.process_time()
    losses: list[dict[str, Any]] = []
    bars = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()  # datasets' map bars (tokenizing, labels); our own progress reports steps
    try:
        with quiet_hf(), tempfile.TemporaryDirectory(prefix="envengineer-sft-") as scratch:
            tokenizer = AutoTokenizer.from_pretrained(str(base))
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32 if use_cpu else torch.bfloat16)
            steps_per_epoch = -(-len(rows) // options.batch_size)
            total = options.max_steps or max(1, int(round(steps_per_epoch * options.epochs)))
            config = SFTConfig(
                output_dir=scratch, num_train_epochs=options.epochs, max_steps=options.max_steps or -1,
                per_device_train_batch_size=options.batch_size, gradient_accumulation_steps=1,
                learning_rate=options.lr, lr_scheduler_type=options.lr_scheduler_type, warmup_steps=0,
                max_length=options.max_length, completion_only_loss=True, packing=False,
                logging_steps=1, save_strategy="no", report_to="none", seed=options.seed, data_seed=options.seed,
                use_cpu=use_cpu, bf16=not use_cpu, disable_tqdm=True, dataloader_num_workers=0,
            )

            class Log(TrainerCallback):
                def on_log(self, args, state, control, logs=None, **kwargs):
                    if logs and "loss" in logs:
                        losses.append({"step": state.global_step, "loss": round(float(logs["loss"]), 4)})
                        if progress:
                            progress("warm start (SFT)", state.global_step, total)

            trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                                 processing_class=tokenizer, callbacks=[Log()])
            trainer.remove_callback(PrinterCallback)
            tokens = int(sum(len(ids) for ids in trainer.train_dataset["input_ids"]))
            trainer.train()
            steps = trainer.state.global_step
            model = trainer.model
            model.eval()
    finally:
        torch.set_num_threads(before)
        if bars:
            datasets_logging.enable_progress_bar()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    tail = losses[-max(1, len(losses) // 10):]
    meta = {
        "kind": "sft", "task": recipe["task"], "style": recipe["style"], "base": str(base), "recipe": recipe,
        "instances": len(rows), "steps": steps, "prompts": "chat" if isinstance(rows[0]["prompt"], list) else "text", "dataset_tokens": tokens,
        "train": {"seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2), "threads": options.threads if use_cpu else None,
                  "first_loss": losses[0]["loss"] if losses else None,
                  "final_loss": round(sum(x["loss"] for x in tail) / len(tail), 4) if tail else None},
        "losses": losses,
        "fingerprint": fingerprint,
    }
    save_model_dir(out, model, tokenizer, meta)
    return meta


def warm_start_info(folder: str | Path) -> dict[str, Any] | None:
    """The recorded figures of a warm-started folder (None for any other folder)."""
    path = Path(folder) / WARM_START_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if info.get("kind") == "sft" else None

