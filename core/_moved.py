"""The modules' old import paths, kept working.

Until release 0.1 the core was one flat folder (``envengineer.rundir``, ``envengineer.suite_manifest``, ...).
Each old name in :data:`MOVED` imports the module at its new place: the same module object (``import
envengineer.rundir`` is ``envengineer.store.rundir``), so its names, and a patch through either path, are one.
Nothing is imported until an old name is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import Any

#: old module -> its module now
MOVED: dict[str, str] = {f"envengineer.{old}": f"envengineer.{new}" for old, new in {
    "declarations": "components.declarations", "knobs": "components.knobs", "contract": "design.contract",
    "training": "components.training", "metrics": "components.metrics", "model_shape": "components.model_shape",
    "model_folder": "components.model_folder", "gpus": "components.gpus",
    "rundir": "store.rundir", "benchmarks": "store.benchmarks",
    "evidence": "design.evidence", "context": "design.context", "prompts": "design.prompts",
    "proposals": "design.proposals", "structured": "design.structured", "budget": "design.budget",
    "runconfig": "loop.runconfig", "evaluation": "loop.evaluation", "signal": "loop.signal",
    "lifecycle": "loop.lifecycle", "payloads": "loop.payloads", "replay": "loop.replay", "trackers": "loop.trackers",
    "taskops": "loop.taskops", "doctor": "loop.preflight",
    "runview": "plugins.report.view", "drawn": "plugins.report.drawn", "compare": "plugins.report.compare",
    "report": "plugins.report.page", "report_html": "plugins.report.html", "report_plots": "plugins.report.plots",
    "suite": "plugins.suite.tables", "suite_model": "plugins.suite.model", "suite_manifest": "plugins.suite.manifest",
    "suite_plan": "plugins.suite.plan", "suite_runner": "plugins.suite.local", "suite_worker": "plugins.suite.worker",
    "launchers": "plugins.suite.launch.base", "suite_launch": "plugins.suite.launch.jobs",
    "suite_launch_ray": "plugins.suite.launch.ray", "suite_launch_slurm": "plugins.suite.launch.slurm",
    "suite_launch_nodes": "plugins.suite.launch.nodes", "suite_arms": "plugins.suite.arms.runs",
    "suite_stats": "plugins.suite.arms.seeds", "suite_paired": "plugins.suite.arms.paired",
    "suite_plots": "plugins.suite.arms.plots", "suite_report": "plugins.suite.arms.page",
    "comparison_stats": "plugins.suite.arms.stats", "memory": "plugins.gpu.plan",
    "engineer_score": "plugins.score.engineer_score",
}.items()}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module at its new place (see the module's docstring)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}  # old name -> the module's own spec, while the import system loads it

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module(MOVED[spec.name])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        # the import system set the module's __spec__ to the old name's (always): put its own back
        module.__spec__ = self._specs.pop(module.__spec__.name)


def forward(package: str, module: str) -> Any:
    """A PEP 562 ``__getattr__`` for ``package``, a package that was the module now at ``module``: its old names,
    looked up there when imported (a patch goes there, not on the package)."""

    def __getattr__(name: str) -> Any:
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
