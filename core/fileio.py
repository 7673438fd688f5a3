"""Atomic writes and checked reads.

Every artifact is written to a temporary file in the same folder, flushed, fsynced and
renamed over the target, so a crash leaves either the old file or the new one, never
half of one. Readers name the file and line of anything malformed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from envengineer.errors import InputError


def cache_root() -> Path:
    """Where envengineer caches what it can rebuild: ``$ENVENGINEER_CACHE``, else ``~/.cache/envengineer``."""
    root = os.environ.get("ENVENGINEER_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "envengineer"


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; rename it over ``path`` on success.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.chmod(tmp, _FILE_MODE)  # mkstemp makes 0600; artifacts are ordinary files
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_folder(staged: Path, folder: Path) -> None:
    """Put the finished folder ``staged`` (made beside ``folder``, on its file system) in ``folder``'s place: an
    older ``folder`` is renamed aside first and removed after, so a reader sees the old folder or the new one,
    never a half-made one."""
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        os.replace(folder, old)
        os.replace(staged, folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, folder)
    fsync_dir(folder.parent)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


def dumps_json(obj: Any) -> str:
    """Canonical one-line JSON (stable across machines: sorted nothing, fixed separators)."""
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def write_jsonl(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> int:
    count = 0
    with atomic_open(path) as handle:
        for record in records:
            handle.write(dumps_json(record))
            handle.write("\n")
            count += 1
    return count


def write_yaml(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))


def append_jsonl(path: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Append one line and fsync: used for history.jsonl, where each line is a finished step."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    line = dumps_json(record) + "\n"
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSONL file; blank lines are skipped, anything else malformed names file and line."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    source = Path(path)
    try:
        handle = open(source, "rb")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{source}: is a directory, expected a JSONL file") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{source}, line {number}: not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{source}, line {number}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise InputError(f"{source}, line {number}: expected a JSON object, got {type(obj).__name__}")
            yield obj


def read_json(path: str | os.PathLike[str], missing: str = "") -> Any:
    """A JSON file's value; a missing, unreadable or malformed file is refused by name (``missing``: what to add in
    parentheses when it does not exist, e.g. what writes it)."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file" + (f" ({missing})" if missing else "")) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"{source}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"{source}: not valid JSON ({exc})") from None


def read_yaml(path: str | os.PathLike[str]) -> Any:
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"{source}: cannot read ({exc})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML ({exc})") from None
