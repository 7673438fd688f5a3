"""The round's instances as verl reads them, and the reward verl calls back.

verl's ``RLHFDataset`` reads parquet rows of ``data_source``, ``prompt`` (chat messages),
``ability``, ``reward_model`` and ``extra_info``; its reward workers call
``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`` once
per response. Those workers are Ray actors, possibly on another node, so a row carries all the
reward needs: the instance record (``reward_model.ground_truth``, a JSON string: parquet struct
columns merge badly across records of different shapes) and the task section, name and options
(``extra_info.task``, JSON), from which :func:`compute_score` rebuilds the generator and
validator through the plugin registry, once per process and task.

The reward is the validator's R_acc on the response decoded from the row's prompt style
(``generator.decode_response``), plus ``optimality_bonus`` for an optimal answer: the same
reward as the ``trl`` trainer's.

With ``reward_kwargs.outcomes`` (a folder: the trainer passes the round's ``verl-outcomes``),
:func:`compute_score` also appends each training response's reward and validity to a file of
its own process there (``HOST-PID.jsonl``; validation rows are left out); after the job
:func:`read_rollouts` turns them into the round's ``rollouts.jsonl`` lines.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import socket
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.api import REWARDS, ConfigError, EnvEngineerError, InputError, reward_value
from envengineer.plugins.trainers.rollouts import chunks, prompt_line

#: prefix of every row's ``data_source`` (verl groups validation metrics by it)
DATA_SOURCE_PREFIX = "envengineer/"


def task_section(generator: Any, task: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The task section (``{"name": ..., **options}``) a generator was built from, as plain JSON values."""
    if task is None:
        return {"name": generator.name, **generator.options.model_dump(mode="json")}
    section = json.loads(json.dumps(dict(task)))  # plain JSON values, or a TypeError naming the culprit
    if section.get("name") != generator.name:
        raise ConfigError(f"task.name: {section.get('name')!r} is not the generator's task {generator.name!r}")
    return section


def record_id(record: Mapping[str, Any], where: str = "record") -> str:
    """The instance's id: every instance record carries it as a non-empty string ``id``."""
    rid = record.get("id")
    if not isinstance(rid, str) or not rid:
        raise InputError(f"{where}: missing string field 'id'")
    return rid


def chat_messages(prompt: list[dict[str, str]] | str, where: str = "prompt") -> list[dict[str, str]]:
    """A rendered prompt as chat messages (a plain string becomes one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = []
    for i, message in enumerate(prompt):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
            raise InputError(f"{where}[{i}]: expected a message with string 'role' and 'content', got {message!r}")
        messages.append({"role": message["role"], "content": message["content"]})
    return messages


def verl_rows(
    records: Sequence[Mapping[str, Any]],
    generator: Any,
    *,
    split: str,
    style: str = "full",
    task: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One verl dataset row per instance record.

    ``task``: the run config's task section (name and options); default: the generator's own.
    ``extra_info.group`` is the record's group in the task's primary grouping (``generator.group``).
    """
    section = task_section(generator, task)
    task_json = json.dumps(section, sort_keys=True, separators=(",", ":"))
    rows = []
    for index, record in enumerate(records):
        where = f"{split} record {index}"
        rid = record_id(record, where)
        rows.append({
            "data_source": DATA_SOURCE_PREFIX + generator.name,
            "prompt": chat_messages(generator.render(record, style), f"{where} ({rid}): prompt"),
            "ability": generator.name,
            "reward_model": {"style": "rule", "ground_truth": json.dumps(record, ensure_ascii=False, separators=(",", ":"))},
            "extra_info": {
                "split": split,
                "index": index,
                "id": rid,
                "group": str(generator.group(record)),
                "prompt_style": style,
                "task": task_json,
            },
        })
    return rows


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write ``rows`` as one parquet file, atomically (a temporary sibling renamed over ``path``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from envengineer.api import atomic_open

    if not rows:
        raise InputError(f"{path}: no rows to write (verl cannot train or validate on an empty file)")
    table = pa.Table.from_pylist([dict(row) for row in rows])
    with atomic_open(path, "wb") as handle:
        pq.write_table(table, handle)


# ---------------------------------------------------------------------- reward


@functools.lru_cache(maxsize=1)
def _registry() -> Any:
    from envengineer.api import load_registry

    return load_registry()


@functools.lru_cache(maxsize=16)
def task_pair(task_json: str) -> tuple[Any, Any]:
    """The (generator, validator) of a task section given as JSON, built once per process."""
    try:
        section = json.loads(task_json)
    except (TypeError, ValueError):
        raise InputError(f"extra_info.task: not a JSON task section: {str(task_json)[:200]!r}") from None
    if not isinstance(section, dict) or not isinstance(section.get("name"), str):
        raise InputError(f"extra_info.task: expected a JSON object with a 'name', got {str(task_json)[:200]!r}")
    registry = _registry()
    try:
        generator = registry.create("generator", section["name"], section, where="task")
        validator = registry.validator_for(generator)
    except EnvEngineerError as error:
        raise InputError(f"extra_info.task: {error}") from None
    return generator, validator


def _record(ground_truth: Any, generator: Any) -> dict[str, Any]:
    if isinstance(ground_truth, Mapping):  # a row written by hand with a struct: accept it as it is
        record = dict(ground_truth)
    else:
        try:
            record = json.loads(ground_truth)
        except (TypeError, ValueError):
            raise InputError(f"reward_model.ground_truth: not a JSON instance record: {str(ground_truth)[:200]!r}") from None
    if not isinstance(record, dict):
        raise InputError(f"reward_model.ground_truth: expected a JSON object, got {type(record).__name__}")
    try:
        generator.check_record(record)
    except (ValueError, KeyError, TypeError) as error:
        raise InputError(f"reward_model.ground_truth: not a {generator.name} instance ({error})") from None
    return record


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    optimality_bonus: float = 0.0,
    reward: str = "valid",
    outcomes: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's reward: ``score`` (R_acc, or with ``reward="score"`` the validator's graded score, plus
    ``optimality_bonus`` when optimal), ``acc``, ``optimal``, ``failure``.

    Every response gets the same keys (verl builds its arrays from the first one's); a response
    the task cannot read scores 0 (``failure`` is the validator's, or ``decode: <error>`` when the
    task's ``decode_response`` itself gave up). A row without a usable ``extra_info.task`` or
    ``reward_model.ground_truth`` raises :class:`InputError` naming the field. ``outcomes``: a
    folder where a training row's outcome is recorded (:func:`record_outcome`).
    """
    result = _score(data_source, solution_str, ground_truth, extra_info, optimality_bonus, reward)
    if outcomes:
        record_outcome(outcomes, extra_info, result)  # type: ignore[arg-type]
    return result


def _score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None,
           optimality_bonus: float, reward: str) -> dict[str, Any]:
    if reward not in REWARDS:
        raise ConfigError(f"reward_kwargs.reward: {reward!r} is not one of {', '.join(REWARDS)}")
    if not isinstance(extra_info, Mapping) or "task" not in extra_info:
        raise InputError(f"extra_info.task: missing from the row of {data_source!r} (rows come from verl_rows)")
    generator, validator = task_pair(extra_info["task"])
    record = _record(ground_truth, generator)
    style = extra_info.get("prompt_style") or None
    text = solution_str if isinstance(solution_str, str) else ""
    try:
        answer = generator.decode_response(record, text, style)
    except Exception as error:  # noqa: BLE001 - an unreadable response is a zero reward, never a crashed step
        return {"score": 0.0, "acc": 0.0, "optimal": 0.0, "failure": f"decode: {type(error).__name__}"}
    verdict = validator.score(record, answer)
    optimal = bool(verdict.valid and verdict.optimal)
    return {
        "score": reward_value(verdict, reward, optimality_bonus),
        "acc": 1.0 if verdict.valid else 0.0,
        "optimal": 1.0 if optimal else 0.0,
        "failure": "" if verdict.valid else (verdict.failure or "invalid"),
    }


# ---------------------------------------------------------------------- outcomes -> rollouts.jsonl

#: the folder in the round's output where compute_score records training responses
OUTCOMES_DIR = "verl-outcomes"

_lock = threading.Lock()  # verl's reward manager scores in a thread pool
_sequence = itertools.count()
_unwritable: set[str] = set()


def record_outcome(folder: str | os.PathLike[str], extra_info: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    """Append a training row's outcome (row index, id, reward, valid, time) to this process's file in ``folder``.

    One file per process (verl runs several reward workers, maybe on several nodes), appended
    under a lock; the time orders them afterwards. A folder this process cannot write to (a node
    that does not see the round's folder) is reported once and never fails the training step.
    """
    if extra_info.get("split") != "train" or extra_info.get("index") is None:
        return
    path = Path(folder) / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    try:
        with _lock, open(path, "a", encoding="utf-8") as handle:
            line = {"index": int(extra_info["index"]), "id": str(extra_info.get("id", "")), "reward": float(result["score"]),
                    "valid": bool(result["acc"]), "t": time.time(), "seq": next(_sequence)}
            handle.write(json.dumps(line) + "\n")
    except OSError as error:
        if str(folder) not in _unwritable:
            _unwritable.add(str(folder))
            warnings.warn(f"reward_kwargs.outcomes: cannot record training outcomes in {folder} ({error}); "
                          "the round's rollouts.jsonl will miss this worker's responses", stacklevel=2)


def read_outcomes(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every outcome recorded in ``folder``, in the order they were scored (a torn last line is skipped)."""
    outcomes = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue  # a worker killed mid-write
                if isinstance(item, dict) and {"index", "reward", "valid"} <= set(item):
                    outcomes.append({**item, "file": path.name})
    outcomes.sort(key=lambda o: (float(o.get("t", 0.0)), o["file"], int(o.get("seq", 0))))
    return outcomes


def read_rollouts(folder: str | os.PathLike[str], records: Sequence[Mapping[str, Any]], generator: Any, group_size: int) -> list[dict[str, Any]] | None:
    """``rollouts.jsonl`` lines for the round's training ``records`` (the train parquet's rows, in order) from
    the outcomes in ``folder``: each row's responses in scoring order cut into GRPO groups of ``group_size``
    (verl scores a step's groups before it samples the next step's). A row verl never sampled (the
    dataloader's last partial batch, an overlong prompt) gets ``samples: 0, kept: false``. None: nothing recorded."""
    outcomes = read_outcomes(folder)
    if not outcomes:
        return None
    by_index: dict[int, list[tuple[float, bool]]] = {}
    for item in outcomes:
        by_index.setdefault(int(item["index"]), []).append((float(item["reward"]), bool(item["valid"])))
    return [prompt_line(generator.record_id(record), chunks(by_index.get(index, []), group_size)) for index, record in enumerate(records)]


def kept_rows(cfg: Any) -> int:
    """How many rows of ``data.train_files`` verl's training dataset keeps: main_ppo's own ``create_rl_dataset`` with
    the composed ``cfg`` and the model's tokenizer, as verl 0.9.1's trainer builds them (its
    ``filter_overlong_prompts`` drops prompts longer than ``max_prompt_length`` with the chat template applied)."""
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.config import omega_conf_to_dataclass

    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    with same_environ():
        dataset = create_rl_dataset(cfg.data.train_files, cfg.data, model.tokenizer, model.processor, is_train=True,
                                    max_samples=cfg.data.get("train_max_samples", -1))
    return len(dataset)


@contextlib.contextmanager
def same_environ():
    """Keep ``os.environ`` the same object across a call into ``datasets``: its ``map``/``filter`` with
    ``num_proc`` (verl's prompt filter uses it) puts a deep copy of the environment in its place afterwards
    (datasets 4.x, ``arrow_dataset.py``), so everything that kept a reference to it (rich's own consoles,
    other libraries' module-level ``environ``) would read a stale mapping; our consoles read the current
    one (:class:`envengineer.display.Console`), others may not. The original object gets the copy's
    contents back, which is the environment datasets meant to restore."""
    environ = os.environ
    try:
        yield
    finally:
        replaced = os.environ
        if replaced is not environ:
            os.environ = environ
            for key in [k for k in environ if k not in replaced]:
                del environ[key]
            for key, value in replaced.items():
                if environ.get(key) != value:
                    environ[key] = value
