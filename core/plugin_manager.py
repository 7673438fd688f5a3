"""The plugin manager factory: built-ins, then third-party entry points, then a check.

No manager is built at import time: each caller (and each test) gets a fresh one.

A plugin is checked before it is registered (:meth:`PluginManager.hook_problems`): a function
marked ``@hookimpl`` whose name is no hook (``register_generator`` for ``register_generators``),
or an unmarked one named like a hook it does not implement, is reported with the plugin's name,
the wrong name and the closest hook. An installed plugin with such a problem is left out and its
error logged once per process (the other plugins and every command keep working); registering
one by hand (``pm.register``, the conformance kit's ``plugins=[...]``) raises :class:`HookNameError`.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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
    "envengineer.tasks.verifiers.plugin",
    "envengineer.plugins.context_modules",
    "envengineer.plugins.engineers",
    "envengineer.plugins.policies", "envengineer.plugins.trainers",
    "envengineer.plugins.simulated", "envengineer.plugins.trackers",
    "envengineer.plugins.serve",
    # the commands that read runs, run suites and plan GPUs: plugins of the core's own (docs/architecture.md)
    "envengineer.plugins.report", "envengineer.plugins.suite", "envengineer.plugins.gpu", "envengineer.plugins.engineer_bench",
)


@dataclass
class LoadReport:
    """What the factory loaded, skipped and failed to load."""

    loaded: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (who, error)


class HookNameError(RegistrationError):
    """A plugin names a hook that does not exist (or forgot ``@hookimpl`` on one): ``problems`` says which and
    what was probably meant."""

    def __init__(self, plugin: str, problems: list[str]) -> None:
        self.plugin, self.problems = plugin, problems
        super().__init__(f"plugin {plugin!r}: {'; '.join(problems)}")


#: failures already logged in this process: each is logged once, however many managers are built
_LOGGED: set[tuple[str, str]] = set()


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with the load report attached, checking hook names as plugins register."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.load_report = LoadReport()
        #: plugin name -> where it came from ("builtin" or "distribution version")
        self.origins: dict[str, str] = {}

    def hook_names(self) -> list[str]:
        """The hooks specified so far (``register_generators``, ``on_run_end``, ...)."""
        return sorted(name for name, caller in vars(self.hook).items()
                      if isinstance(caller, pluggy.HookCaller) and caller.has_spec())

    def hook_problems(self, plugin: Any) -> list[str]:
        """What is wrong with ``plugin``'s hook names, one sentence each (empty: nothing).

        A function marked ``@hookimpl`` whose name (or ``specname``) is no hook, unless it is an
        ``optionalhook``; and a function the plugin itself defines, not marked, named exactly like
        a hook or like one closely (``difflib``: a typo) with the hook's prefix (``register_``,
        ``on_``, ``report_``), when the plugin implements no hook of that name. Nothing is checked
        before the hooks are specified."""
        hooks = self.hook_names()
        if not hooks:
            return []
        marked: dict[str, str] = {}  # attribute -> the hook it implements
        for attribute in dir(plugin):
            opts = self.parse_hookimpl_opts(plugin, attribute)
            if opts is not None and not opts.get("optionalhook"):
                marked[attribute] = opts.get("specname") or attribute
        problems = []
        for attribute, hook in marked.items():
            if hook not in hooks:
                problems.append(f"{attribute} is marked @hookimpl but no hook is named {hook!r}{_did_you_mean(hook, hooks)}")
        implemented = set(marked.values())
        prefixes = tuple({hook.split("_", 1)[0] + "_" for hook in hooks})
        module = plugin.__name__ if inspect.ismodule(plugin) else None
        for attribute in dir(plugin):
            if attribute in marked or attribute.startswith("_") or not attribute.startswith(prefixes):
                continue
            value = getattr(plugin, attribute, None)
            if not inspect.isroutine(value) or (module is not None and getattr(value, "__module__", None) != module):
                continue  # not a function, or one the module imported
            close = difflib.get_close_matches(attribute, hooks, n=1, cutoff=0.85)
            if not close or close[0] in implemented:
                continue
            if close[0] == attribute:
                problems.append(f"{attribute} is not marked @hookimpl, so it is never called (from envengineer import hookimpl)")
            else:
                problems.append(f"{attribute} looks like hook {close[0]!r} but is neither marked @hookimpl nor named like it: "
                                f"did you mean {close[0]}?")
        return problems

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        """pluggy's ``register``, refusing a plugin with :meth:`hook_problems` (:class:`HookNameError`) before any of
        its hooks is added."""
        problems = self.hook_problems(plugin)
        if problems:
            raise HookNameError(name or self.get_canonical_name(plugin), problems)
        return super().register(plugin, name)


def _did_you_mean(name: str, hooks: list[str]) -> str:
    close = difflib.get_close_matches(name, hooks, n=1, cutoff=0.6)
    return f": did you mean {close[0]}?" if close else f" (the hooks: {', '.join(hooks)})"


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
                if pm.get_plugin(ep.name) is not None:  # pluggy refused one hook after adding others: none of it stays
                    pm.unregister(name=ep.name)
                message = "; ".join(exc.problems) if isinstance(exc, HookNameError) else f"{type(exc).__name__}: {exc}"
                report.failed.append((who, message))
                if (who, message) not in _LOGGED:  # once per process, however many managers are built
                    _LOGGED.add((who, message))
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
