"""Whether a folder is a complete Hugging Face model folder, and how to get one that is not there.

A run whose policy starts from a model folder (``policy.path``) checks it before anything is
written under the run's output (:func:`envengineer.loop.steps.run`), and ``envengineer doctor CONFIG``
reports the same as a failed check: the folder, the files it lacks and the download command.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

#: Any one of these is a tokenizer transformers can load.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def missing_files(folder: str | Path) -> list[str]:
    """What ``folder`` lacks to be a model folder (a config, weights, every shard an index names, a
    tokenizer); ``["the folder itself"]`` when it does not exist; empty when complete."""
    folder = Path(folder)
    if not folder.is_dir():
        return ["the folder itself"]
    names = {p.name for p in folder.iterdir() if p.is_file()}
    missing = []
    if "config.json" not in names:
        missing.append("config.json")
    weights = [n for n in names if n.endswith(".safetensors") or (n.endswith(".bin") and n != "training_args.bin")]
    if not weights:
        missing.append("weights (*.safetensors or *.bin)")
    for index in sorted(n for n in names if n.endswith(".index.json")):
        try:
            shards = set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            missing.append(f"a readable {index}")
            continue
        missing.extend(sorted(shards - names))
    if not any(name in names for name in TOKENIZER_FILES):
        missing.append("a tokenizer (" + " or ".join(TOKENIZER_FILES) + ")")
    return missing


def hub_id(folder: str | Path) -> str | None:
    """The Hugging Face hub id a folder is named after, when the project knows it (``models/Qwen3-4B``:
    ``Qwen/Qwen3-4B``), else None."""
    from envengineer.components.model_shape import KNOWN_SHAPES

    name = Path(folder).name.lower()
    return next((repo for repo in KNOWN_SHAPES if repo.split("/")[-1].lower() == name), None)


def download_command(folder: str | Path) -> str:
    """The command that fills ``folder`` from the hub (a placeholder id when the name is not a known model's)."""
    return f"hf download {hub_id(folder) or '<hub-id>'} --local-dir {shlex.quote(str(folder))}"


def folder_problem(folder: str | Path, where: str = "policy.path") -> tuple[str, str] | None:
    """What is wrong with ``folder`` (its name, what it lacks) and the fix (the download command); None when complete."""
    missing = missing_files(folder)
    if not missing:
        return None
    resolved = Path(folder).resolve()
    what = "does not exist" if missing == ["the folder itself"] else f"is not a complete model folder: it lacks {', '.join(missing)}"
    return (f"{where}: the model folder {folder} ({resolved}) {what}",
            f"download the weights once (nothing is downloaded for you): {download_command(folder)}")
