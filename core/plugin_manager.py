"""The plugin manager factory: built-ins, then third-party entry points, then a check.

No manager is built at import time: each caller (and each test) gets a fresh one.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import pluggy

from envengineer import hookspecs
from envengineer.errors import RegistrationError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "envengineer"
LOAD_ENV = "ENVENGINEER_LOAD_PLUGINS"
BLOCK_ENV = "ENVENGINEER_BLOCK_PLUGINS"

#: Built-in plugins, registered exactly like third-party ones.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "envengineer.tasks.mapf_frozenlake.plugin",
    "envengineer.tasks.reasoning_gym.plugin",
    "envengineer.tasks.gridwalk.plugin",
    "envengineer.plugins.context_modules",
    "envengineer.plugins.engineers",
    "envengineer.plugins.policies", "envengineer.plugins.trainers",
    "envengineer.plugins.simulated",
)


@dataclass
class LoadReport:
    """What the factory loaded, skipped and failed to load."""

    loaded: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (who, error)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with the load report attached."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.load_report = LoadReport()
        #: plugin name -> where it came from ("builtin" or "distribution version")
        self.origins: dict[str, str] = {}


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def create_plugin_manager(
    *,
    builtins: Iterable[str] | None = None,
    entry_points: bool = True,
    block: Iterable[str] = (),
    environ: dict[str, str] | None = None,
) -> PluginManager:
    """Build a plugin manager.

    :param builtins: module names of built-in plugins (default :data:`BUILTIN_PLUGINS`).
    :param entry_points: load third-party plugins from the ``envengineer`` entry-point group.
    :param block: plugin names to leave out: a built-in's module name or short name
        (``mapf_frozenlake`` for ``envengineer.tasks.mapf_frozenlake.plugin``), or a
        third-party entry point's name.
    :param environ: where to read ``ENVENGINEER_LOAD_PLUGINS`` (a comma-separated
        allow-list of third-party entry-point names; empty means none) and
        ``ENVENGINEER_BLOCK_PLUGINS`` (more names to block). Defaults to ``os.environ``.
    """
    env = os.environ if environ is None else environ
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    blocked = set(block) | set(_split(env.get(BLOCK_ENV)))
    report = pm.load_report

    for module_name in BUILTIN_PLUGINS if builtins is None else builtins:
        short = module_name.removesuffix(".plugin").rsplit(".", 1)[-1]
        if module_name in blocked or short in blocked:
            report.blocked.append(module_name)
            continue
        module = importlib.import_module(module_name)
        pm.register(module, name=module_name)
        pm.origins[module_name] = "builtin"
        report.loaded.append(module_name)

    if entry_points:
        allow = None if LOAD_ENV not in env else set(_split(env.get(LOAD_ENV)))
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "?"
            who = f"{ep.name} (from distribution {dist})"
            if ep.name in blocked or (allow is not None and ep.name not in allow):
                report.blocked.append(who)
                continue
            if pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
                pm.origins[ep.name] = f"{dist} {ep.dist.version if ep.dist else ''}".strip()
            except Exception as exc:  # a broken plugin must not take the others down
                message = f"{type(exc).__name__}: {exc}"
                report.failed.append((who, message))
                logger.warning("could not load plugin %s: %s", who, message)
                continue
            report.loaded.append(who)

    try:
        pm.check_pending()  # a misspelled hook name fails loudly
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) if getattr(exc, "plugin", None) is not None else "?"
        raise RegistrationError(f"plugin {name!r} ({pm.origins.get(name, 'runtime')}): {exc}") from None
    logger.debug("plugins loaded: %s; blocked: %s", report.loaded, report.blocked)
    return pm
