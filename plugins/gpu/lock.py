"""This environment against the tested set of versions (``requirements/lock.txt``): what ``envengineer doctor``
reports without a config.

The lock is made from pyproject.toml by uv (``python scripts/lock.py``; docs/installing.md) for the extras the
README and CI install (``dev``, which includes ``train``), and both README commands install through it
(``pip install -c requirements/lock.txt ...``), so the quickstart and the tests run the same versions. A
package is reported when

- it is pinned by the lock and installed at another version (the tests never ran that version), or
- it is pinned by the lock, not installed, and an installed package requires it (something imports it), or
- it is not in the lock, yet an installed package of the lock names it among its requirements, so that the
  installed code may import it (how ``kernels`` 0.19.1, left behind by an install of ``[train]`` without the
  lock, broke ``import transformers`` 5.10.4 for the tests).

The lock lives in the source checkout (an editable install finds it beside the package); an install from a
wheel has no lock to compare with and says so.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

#: the lock, relative to the source checkout's root
LOCK = Path("requirements") / "lock.txt"
#: the installer's own packages: a venv brings them at its own versions, and nothing of the project imports them
INSTALLERS = {"pip", "setuptools", "wheel", "uv"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)")


def canonical(name: str) -> str:
    """A distribution's name as the registry compares names (PEP 503, packaging's own rule)."""
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def find_lock(start: Path | None = None) -> Path | None:
    """The checkout's lock: ``requirements/lock.txt`` in the checkout this module lives in (an editable
    install) or in ``start`` and its parents (a clone's working directory); None when neither has one."""
    checkout = Path(__file__).resolve().parents[2]  # plugins/gpu/lock.py in a source checkout (an editable install)
    candidates = [checkout / LOCK]
    if start is not None:
        start = start.resolve()
        candidates += [folder / LOCK for folder in (start, *start.parents)]
    return next((c for c in candidates if c.is_file()), None)


def read_lock(path: Path) -> dict[str, str]:
    """The lock's pins, ``{canonical name: version}``; a line that is neither a pin, a comment nor blank is an
    error naming the file and the line."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: not a pin (NAME==VERSION): {raw.strip()!r}")
        pins[canonical(match.group(1))] = match.group(3)
    return pins


def same_version(installed: str, pinned: str) -> bool:
    """Whether an installed version is the pinned one; a local label (``2.13.0+cpu``) matches its public
    version, as pip's ``==`` does."""
    from packaging.version import InvalidVersion, Version

    try:
        a, b = Version(installed), Version(pinned)
    except InvalidVersion:
        return installed == pinned
    return a == b or (b.local is None and Version(a.public) == b)


@dataclass(frozen=True)
class Finding:
    """One package that differs from the lock: its name, what was found, what the lock says, the fix."""

    name: str
    found: str
    locked: str
    fix: str


def install_paths() -> list[str]:
    """Where this interpreter's installed packages are: its site-packages folders, the user's, and PYTHONPATH's
    entries. Not every folder on ``sys.path``: a package may put its vendored copies there when it is imported
    (``import ray`` adds ``ray/thirdparty_files``, with colorama's metadata), and those are nobody's install."""
    import os
    import site

    paths = list(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        paths.append(user)
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return paths


def _installed(paths: list[str] | None = None) -> dict[str, importlib.metadata.Distribution]:
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions(path=install_paths() if paths is None else paths):
        name = dist.metadata.get("Name")
        if name:
            found.setdefault(canonical(name), dist)
    return found


def _requirements(dist: importlib.metadata.Distribution) -> list[tuple[str, bool]]:
    """``(canonical name, required)`` for each requirement of ``dist`` that applies here: required when its
    marker holds without an extra, optional when it holds only for one of the distribution's extras."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    extras = dist.metadata.get_all("Provides-Extra") or []
    for line in dist.requires or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append((canonical(req.name), True))
        elif any(req.marker.evaluate({"extra": extra}) for extra in extras):
            out.append((canonical(req.name), False))
    return out


def compare(pins: dict[str, str], lock_arg: str = str(LOCK), paths: list[str] | None = None) -> list[Finding]:
    """What in this environment (the distributions in ``paths``, by default :func:`install_paths`) differs from
    ``pins`` (the rules of the module's docstring), by name."""
    installed = _installed(paths)
    findings: dict[str, Finding] = {}
    required_by: dict[str, list[str]] = {}
    optional_of: dict[str, list[str]] = {}
    for name, dist in installed.items():
        for dep, required in _requirements(dist):
            (required_by if required else optional_of).setdefault(dep, []).append(name)
    for name, pinned in pins.items():
        dist = installed.get(name)
        if dist is not None:
            if name not in INSTALLERS and not same_version(dist.version, pinned):
                findings[name] = Finding(name, dist.version, pinned, f'pip install -c {lock_arg} "{name}=={pinned}"')
        elif name in required_by:
            who = ", ".join(sorted(required_by[name])[:3])
            findings[name] = Finding(name, f"not installed (required by {who})", pinned, f'pip install -c {lock_arg} "{name}=={pinned}"')
    for name, dist in installed.items():
        if name in pins or name in INSTALLERS or name == "envengineer":
            continue
        users = sorted(u for u in required_by.get(name, []) + optional_of.get(name, []) if u in pins)
        if users:
            findings[name] = Finding(
                name, f"{dist.version}, which the tests never ran beside {', '.join(users[:3])}", "not in the lock",
                f"pip uninstall -y {name}",
            )
    return [findings[k] for k in sorted(findings)]


def extra_requirements(pyproject: Path, extra: str) -> list[str]:
    """The requirements an install of ``.[extra]`` asks for: the project's dependencies and the extra's, with the
    extras it names of the project itself (``envengineer[train,...]``) expanded."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads(pyproject.read_text())["project"]
    name, extras = canonical(project["name"]), project.get("optional-dependencies", {})
    out, seen, todo = list(project.get("dependencies", [])), set(), [extra]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        if current not in extras:
            raise ValueError(f"{pyproject}: no extra {current!r} in [project.optional-dependencies]")
        seen.add(current)
        for line in extras[current]:
            req = Requirement(line)
            if canonical(req.name) == name:
                todo.extend(req.extras)
            else:
                out.append(line)
    return out


def unmet_requirements(pyproject: Path, extra: str, pins: dict[str, str], python: str = "3.11") -> list[str]:
    """Each requirement of ``.[extra]`` (markers evaluated for CPython ``python`` on Linux) that ``pins`` leaves
    out or pins outside its range; empty when the lock covers the extra."""
    from packaging.requirements import Requirement

    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    problems = []
    for line in extra_requirements(pyproject, extra):
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        pinned = pins.get(canonical(req.name))
        if pinned is None:
            problems.append(f"{line}: not in the lock")
        elif req.specifier and not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{line}: the lock pins {req.name}=={pinned}")
    return problems
