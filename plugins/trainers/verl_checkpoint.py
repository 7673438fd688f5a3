"""From a verl checkpoint folder to the next round's model directory.

verl's trainer saves the actor to ``trainer.default_local_dir/global_step_N/actor/`` and, after a
save is complete, writes N to ``latest_checkpointed_iteration.txt`` beside those folders. With
``actor_rollout_ref.actor.checkpoint.save_contents`` including ``hf_model``, verl's
``FSDPCheckpointManager`` writes a complete Hugging Face model directory (config, weights,
tokenizer, generation config) to ``actor/huggingface/``; without it that folder holds only the
config and tokenizer, and the FSDP shards beside it need verl's model merger first.

:func:`hand_off` moves that directory to where the loop expects the round's checkpoint, so the
next round starts from a plain model directory; by default it then removes the shards, which
are many times the model's size (optimizer state included).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from envengineer.api import InputError, fsync_dir, missing_files

#: verl's tracker, written in ``default_local_dir`` once a step's save is complete
#: (``verl.utils.checkpoint.checkpoint_manager.get_checkpoint_tracker_filename``)
TRACKER = "latest_checkpointed_iteration.txt"
_STEP_FOLDER = re.compile(r"global_step_(\d+)")


def step_folders(ckpt_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """Every ``global_step_N`` folder in ``ckpt_dir``, by N (anything else is ignored)."""
    folder = Path(ckpt_dir)
    if not folder.is_dir():
        return {}
    found = {}
    for child in folder.iterdir():
        match = _STEP_FOLDER.fullmatch(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return found


def tracked_step(ckpt_dir: str | os.PathLike[str]) -> int | None:
    """The step in verl's ``latest_checkpointed_iteration.txt``, or None (no file, or not a number)."""
    try:
        text = (Path(ckpt_dir) / TRACKER).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def latest_step(ckpt_dir: str | os.PathLike[str]) -> int | None:
    """The step the next round should start from, or None when ``ckpt_dir`` holds no checkpoint.

    verl's tracker wins when the folder it names exists: it is written only after a save is
    complete, so a higher ``global_step_N`` without it is a save cut short. Without a usable
    tracker (verl skips it for asynchronous saves), the highest N.
    """
    folders = step_folders(ckpt_dir)
    tracked = tracked_step(ckpt_dir)
    if tracked is not None and tracked in folders:
        return tracked
    return max(folders) if folders else None


def _merge_hint(actor: Path) -> str:
    return (
        "save the Hugging Face model with actor_rollout_ref.actor.checkpoint.save_contents including hf_model, "
        f"or merge the FSDP shards: python -m verl.model_merger merge --backend fsdp --local_dir {actor} "
        "--target_dir <dir>"
    )


def check_model_dir(folder: Path, actor: Path | None = None) -> None:
    """Raise :class:`InputError` unless ``folder`` holds a config, weights and a tokenizer."""
    hint = _merge_hint(actor if actor is not None else folder.parent)
    if not folder.is_dir():
        raise InputError(f"{folder}: no Hugging Face model directory; {hint}")
    missing = missing_files(folder)
    if missing:
        raise InputError(f"{folder}: not a complete model directory, missing {', '.join(missing)}; {hint}")


def hand_off(
    ckpt_dir: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    step: int | None = None,
    keep: bool = False,
) -> Path:
    """Move the Hugging Face model of ``step`` (default: :func:`latest_step`) to ``target``.

    ``target`` appears complete or not at all: the model is staged beside it and renamed into
    place. Nothing moves unless the model directory holds a config, weights and a tokenizer.
    ``keep=False`` then removes verl's step folders (FSDP shards, optimizer state) and its
    tracker from ``ckpt_dir``, and ``ckpt_dir`` itself when nothing else is left in it.
    """
    root = Path(ckpt_dir)
    destination = Path(target)
    chosen = latest_step(root) if step is None else step
    if chosen is None:
        raise InputError(f"{root}: no verl checkpoint (no global_step_N folder); was trainer.save_freq > 0?")
    actor = root / f"global_step_{chosen}" / "actor"
    source = actor / "huggingface"
    check_model_dir(source, actor)
    if destination.exists() or destination.is_symlink():
        raise InputError(f"{destination}: already exists; the model of {source} is not moved over it")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = destination.parent / f".{destination.name}.{os.getpid()}.tmp"
    if staging.exists():
        shutil.rmtree(staging)
    try:
        shutil.move(str(source), str(staging))  # a rename on one filesystem; else a copy, source kept until done
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        os.rename(staging, destination)
    except BaseException:
        if not source.exists():
            shutil.move(str(staging), str(source))  # put the checkpoint back as it was
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(destination.parent)
    if not keep:
        for folder in step_folders(root).values():
            shutil.rmtree(folder)
        with contextlib.suppress(FileNotFoundError):
            (root / TRACKER).unlink()
        with contextlib.suppress(OSError):
            root.rmdir()  # only when empty
    return destination
