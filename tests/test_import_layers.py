"""The import layers of the three packages: core (``core/``, ``envengineer``), built-in plugins
(``plugins/``, ``envengineer.plugins``) and built-in tasks (``tasks/``, ``envengineer.tasks``).

- Built-in plugins and tasks import the core only through :mod:`envengineer.api`, so what they use
  is what a third-party plugin can use too; the few exceptions are listed in :data:`CORE_INTERNAL`,
  each with its reason, and marked ``# core-internal: <why>`` on the import itself.
- The core never imports a plugin or a task, except the built-in plugins it registers
  (:data:`envengineer.plugin_manager.BUILTIN_PLUGINS`, by name, through ``importlib``): neither by an
  ``import`` statement nor by a module name in a string (``importlib.import_module("envengineer.plugins.x")``).
- No import cycle anywhere among the three packages' modules.

Every ``.py`` file of the three folders is read (its AST), recursively, and every import in it counts, at
the top of a module, inside a function or under ``if TYPE_CHECKING:``: an import moved into a function to
dodge a cycle or a layer is still the cycle or the layer crossed. Relative imports are resolved;
``from package import name`` is an import of ``package.name`` when that is a module, else of ``package``.
Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit imports do not count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: folder -> the package it is installed as (pyproject.toml's [tool.setuptools.package-dir])
PACKAGES = {"core": "envengineer", "plugins": "envengineer.plugins", "tasks": "envengineer.tasks"}
API = "envengineer.api"
BUILTIN_ROOTS = ("envengineer.plugins", "envengineer.tasks")

#: Core modules a built-in plugin or task imports directly, not through envengineer.api:
#: (the importing file, relative to the repository; the core module) -> why it is not public API.
CORE_INTERNAL: dict[tuple[str, str], str] = {
    ("plugins/trainers/verl_launch.py", "envengineer.processes"):
        "process groups (start, watch, end_group, sigterm_as_interrupt): the suite runner's plumbing, shared with "
        "the verl launcher; names too generic for envengineer.api",
    ("plugins/_shared/vllm_child.py", "envengineer.processes"):
        "process groups, as for verl_launch.py: the vLLM child leads a group the parent ends as a whole",
}

#: Plugin or task modules the core names as such, other than the built-in plugins, with why.
CORE_NAMES_BUILTIN: dict[str, str] = {
    "envengineer.plugins": "core/design/prompts.py reads the shipped prompt templates (plugins/prompts/*.md) "
                           "through importlib.resources",
}

#: Cycles known and accepted (each a sorted tuple of module names), with why. None today: the last three were
#: broken by moving what both sides needed into a module of its own (mapf_frozenlake/shares.py,
#: reasoning_gym/items.py and validator.py, policies/hf.py and tiny_model.py).
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}

#: Built-in plugins that are the framework's own commands (reports, suites, GPU planning, the engineer benchmark):
#: shipped as plugins so the core stays minimal and each can be blocked or replaced, they read runs and drive the
#: loop through the core's modules, as pytest's built-in plugins use _pytest's. They may import any core module but
#: the command line (envengineer.cli): a command they add goes through the register_commands hook.
CORE_PLUGINS = ("envengineer.plugins.report", "envengineer.plugins.suite", "envengineer.plugins.gpu",
                "envengineer.plugins.engineer_bench")

#: The core's layers, lowest first: a module imports modules of its own layer or below, never above
#: (docs/architecture.md). Each entry names modules or packages (a package: every module in it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("envengineer.errors", "envengineer.fileio", "envengineer.hookspecs", "envengineer.processes")),
    ("components", ("envengineer.components",)),
    ("registry", ("envengineer.plugin_manager", "envengineer.registry", "envengineer.display")),
    ("store", ("envengineer.store",)),
    ("design", ("envengineer.design",)),
    ("loop", ("envengineer.loop",)),
    ("cli", ("envengineer.cli",)),
    ("facade", ("envengineer.api", "envengineer.testing")),
)


@dataclass(frozen=True)
class Import:
    target: str  # the module imported
    line: int
    text: str  # the statement's first line, comment included
    typing_only: bool = False  # under ``if TYPE_CHECKING:``: read by type checkers, never run


def typing_only_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) branch, its else excluded."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            found |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return found


def module_files(repo: Path = REPO, packages: dict[str, str] = PACKAGES) -> dict[str, Path]:
    """Module name -> its file, over every ``.py`` under the packages' folders."""
    found: dict[str, Path] = {}
    for folder, package in packages.items():
        for path in sorted((repo / folder).rglob("*.py")):
            parts = list(path.relative_to(repo / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(path: Path, module: str, modules: set[str]) -> list[Import]:
    """The modules of ``modules`` that ``path`` (the module ``module``) imports, anywhere in it."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str | None:  # name, else its longest prefix that is a module
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found: list[Import] = []
    tree = ast.parse(source, filename=str(path))
    typing_only = typing_only_nodes(tree)
    for node in ast.walk(tree):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [known(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else known(base) for alias in node.names]
        for target in dict.fromkeys(targets):
            if target is not None and target != module:
                found.append(Import(target, node.lineno, lines[node.lineno - 1], id(node) in typing_only))
    return found


def import_graph(repo: Path = REPO, packages: dict[str, str] = PACKAGES) -> dict[str, list[Import]]:
    files = module_files(repo, packages)
    return {module: imports(path, module, set(files)) for module, path in files.items()}


def is_builtin(module: str) -> bool:
    return any(module == root or module.startswith(root + ".") for root in BUILTIN_ROOTS)


def relative(module: str, repo: Path = REPO) -> str:
    return module_files(repo)[module].relative_to(repo).as_posix()


def layer_violations(graph: dict[str, list[Import]], files: dict[str, Path], repo: Path = REPO,
                     allowed: dict[tuple[str, str], str] = CORE_INTERNAL) -> list[str]:
    """Built-in plugins' and tasks' imports of the core other than through envengineer.api (and the allowed ones)."""
    problems = []
    for module, found in sorted(graph.items()):
        if not is_builtin(module):
            continue
        where = files[module].relative_to(repo).as_posix()
        own = any(module == root or module.startswith(root + ".") for root in CORE_PLUGINS)
        for imp in found:
            if is_builtin(imp.target) or imp.target == API:
                continue
            if own and imp.target.partition(".")[0] == "envengineer" and layer_of(imp.target) not in (None, "cli"):
                continue  # a core plugin (CORE_PLUGINS) uses the core's modules, the command line's excepted
            if (where, imp.target) not in allowed:
                problems.append(f"{where}:{imp.line} imports {imp.target}: import it from {API} (or list it in CORE_INTERNAL, "
                                f"with why): {imp.text.strip()}")
            elif "core-internal:" not in imp.text.partition("#")[2]:
                problems.append(f"{where}:{imp.line} imports {imp.target} without a '# core-internal: <why>' comment")
    return problems


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> str | None:
    """The core layer ``module`` belongs to, or None (the package root, a plugin, a task)."""
    for name, members in layers:
        if any(module == m or module.startswith(m + ".") for m in members):
            return name
    return None


def upward_imports(graph: dict[str, list[Import]], files: dict[str, Path], repo: Path = REPO,
                   layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Core modules importing a module of a higher layer; a core module in no layer (a new one) is named too.
    An import under ``if TYPE_CHECKING:`` is not one: it gives a signature its types and never runs."""
    rank = {name: index for index, (name, _) in enumerate(layers)}
    problems = []
    for module, found in sorted(graph.items()):
        if is_builtin(module) or module == "envengineer":
            continue
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{files[module].relative_to(repo).as_posix()}: {module} is in no layer; add it to LAYERS")
            continue
        for imp in found:
            if imp.typing_only:
                continue
            theirs = layer_of(imp.target, layers)
            if theirs is not None and rank[theirs] > rank[mine]:
                problems.append(f"{files[module].relative_to(repo).as_posix()}:{imp.line} ({mine}) imports {imp.target} "
                                f"({theirs}), a higher layer: {imp.text.strip()}")
    return problems


def cycles(graph: dict[str, list[Import]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; imports under
    ``if TYPE_CHECKING:`` never run, so they close no cycle."""
    edges = {v: sorted({imp.target for imp in found if imp.target in graph and not imp.typing_only}) for v, found in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges) + 100))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def describe(graph: dict[str, list[Import]], component: list[str]) -> str:
    edges = [f"{a}:{imp.line} imports {imp.target}" for a in component for imp in graph[a] if imp.target in component]
    return " <-> ".join(component) + " (" + "; ".join(edges) + ")"


def builtin_plugins() -> tuple[str, ...]:
    from envengineer.plugin_manager import BUILTIN_PLUGINS

    return BUILTIN_PLUGINS


def named_builtins(path: Path) -> list[tuple[int, str]]:
    """The plugin and task modules a core file names in a string (a module name, whole), with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_builtin(node.value) \
                and all(part.isidentifier() for part in node.value.split(".")):
            found.append((node.lineno, node.value))
    return found


# ---------------------------------------------------------------- the repository's packages


def test_every_module_of_the_three_packages_is_read():
    files = module_files()
    assert "envengineer.components" in files and API in files
    assert "envengineer.plugins.trainers.trl_grpo" in files and "envengineer.tasks.mapf_frozenlake.plugin" in files
    assert all(module.startswith("envengineer") for module in files)
    assert len([m for m in files if is_builtin(m)]) > 50  # subpackages included (plugins/*/, tasks/*/)


def test_builtin_plugins_and_tasks_import_the_core_only_through_the_api():
    files = module_files()
    problems = layer_violations(import_graph(), files)
    assert not problems, "\n".join(problems)


def test_the_listed_core_internal_imports_are_still_made():
    """An exception no longer needed is taken off CORE_INTERNAL, so that it cannot come back unnoticed."""
    graph, files = import_graph(), module_files()
    made = {(files[m].relative_to(REPO).as_posix(), imp.target) for m, found in graph.items() for imp in found}
    assert not set(CORE_INTERNAL) - made, f"no longer imported; remove them from CORE_INTERNAL: {sorted(set(CORE_INTERNAL) - made)}"


#: Top-level modules and packages of plugins/ that are not plugins, with why. Every other one is a built-in plugin.
NOT_PLUGINS: dict[str, str] = {
    "_shared": "helpers several built-in plugins use (a helper one plugin uses lives in that plugin's package)",
}


def test_every_top_level_module_of_plugins_is_a_registered_plugin():
    """A plugin and a helper are told apart at a glance (docs/architecture.md): each top-level module or package
    of plugins/ is a built-in plugin (in BUILTIN_PLUGINS, with hook implementations), but the listed ones."""
    import importlib

    from envengineer.hookspecs import PROJECT

    folder = REPO / "plugins"
    top = sorted({p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
                 | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()})
    assert not set(NOT_PLUGINS) - set(top), f"gone; remove them from NOT_PLUGINS: {sorted(set(NOT_PLUGINS) - set(top))}"
    builtins = set(builtin_plugins())
    problems = []
    for name in top:
        module = f"envengineer.plugins.{name}"
        if name in NOT_PLUGINS:
            assert module not in builtins, f"{module} is registered: take it off NOT_PLUGINS"
            continue
        marked = [n for n, value in vars(importlib.import_module(module)).items() if hasattr(value, f"{PROJECT}_impl")]
        if module not in builtins or not marked:
            problems.append(f"plugins/{name}: " + ("not in BUILTIN_PLUGINS" if module not in builtins else "no @hookimpl")
                            + ": a helper goes into the package of the plugin that uses it, or into plugins/_shared/")
    assert not problems, "\n".join(problems)


def test_the_core_imports_no_plugin_or_task_but_the_builtins_it_registers():
    builtins = set(builtin_plugins())
    files = module_files()
    assert builtins <= set(files), f"built-in plugins without a module: {sorted(builtins - set(files))}"
    graph = import_graph()
    problems = [f"{relative(m)}:{imp.line} imports {imp.target}" for m, found in sorted(graph.items()) if not is_builtin(m)
                for imp in found if is_builtin(imp.target) and imp.target not in builtins]
    for module, path in sorted(files.items()):
        if not is_builtin(module):
            problems += [f"{relative(module)}:{line} names {name!r}" for line, name in named_builtins(path)
                         if name not in builtins and name not in CORE_NAMES_BUILTIN]
    assert not problems, "the core reaches into plugins or tasks:\n" + "\n".join(problems)


def test_the_core_imports_only_its_own_layer_or_lower():
    """components <- registry <- store <- design <- loop <- cli <- api (docs/architecture.md)."""
    problems = upward_imports(import_graph(), module_files())
    assert not problems, "\n".join(problems)


def test_the_core_packages_are_the_layers():
    files = module_files()
    core = [m for m in files if not is_builtin(m) and m != "envengineer"]
    assert {layer_of(m) for m in core} == {name for name, _ in LAYERS}
    assert len([m for m in core if layer_of(m) in ("components", "store", "design", "loop", "cli")]) > len(core) * 0.7
    # the flat folder is gone: the top level holds the base, the registry, the facade and nothing else
    top = sorted(m for m in core if m.count(".") == 1 and not files[m].name == "__init__.py")
    assert top == sorted(["envengineer.api", "envengineer.display", "envengineer.errors",
                          "envengineer.fileio", "envengineer.hookspecs", "envengineer.plugin_manager",
                          "envengineer.processes", "envengineer.registry", "envengineer.testing"]), top


def test_no_import_cycle_anywhere():
    graph = import_graph()
    found = [c for c in cycles(graph) if tuple(c) not in KNOWN_CYCLES]
    assert not found, "import cycles:\n" + "\n".join(describe(graph, c) for c in found)


def test_the_known_cycles_are_still_cycles():
    """A known cycle that was broken is taken off the list, so that it cannot come back unnoticed."""
    current = {tuple(c) for c in cycles(import_graph())}
    assert not set(KNOWN_CYCLES) - current, f"no longer cycles; remove them from KNOWN_CYCLES: {sorted(set(KNOWN_CYCLES) - current)}"


def test_the_api_is_light_and_every_name_resolves():
    """``import envengineer.api`` loads no heavy package, no plugin and no task, nor the modules of its lazy names
    (unless ``import envengineer`` loads them anyway); every name of ``__all__`` resolves, the lazy ones each time
    from their module."""
    code = textwrap.dedent(
        """
        import sys
        import envengineer
        before = set(sys.modules)
        import envengineer.api as api
        heavy = [m for m in ("torch", "transformers", "trl", "verl", "vllm", "openai", "google.genai", "datasets", "wandb",
                             "mlflow", "tensorboard", "ray", "submitit", "reasoning_gym", "verifiers") if m in sys.modules]
        print("HEAVY", heavy)
        print("BUILTIN", sorted(m for m in sys.modules if m.startswith(("envengineer.plugins", "envengineer.tasks"))))
        print("LAZY", sorted(set(api._LAZY.values()) & (set(sys.modules) - before)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out and "BUILTIN []" in out and "LAZY []" in out, out

    import envengineer.api as api

    assert len(api.__all__) == len(set(api.__all__))
    assert set(api._LAZY) <= set(api.__all__) and not set(api._LAZY) & set(vars(api)), "a lazy name is imported eagerly too"
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert set(api.__all__) <= set(dir(api))


def test_a_lazy_name_is_looked_up_in_its_module_at_each_import(monkeypatch):
    import envengineer.registry

    monkeypatch.setattr(envengineer.registry, "load_registry", lambda: "patched")
    from envengineer.api import load_registry

    assert load_registry() == "patched"


# ---------------------------------------------------------------- the checker itself, on a made-up tree


def fake_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


FAKE = {"core": "envengineer", "plugins": "envengineer.plugins", "tasks": "envengineer.tasks"}


def test_the_checker_finds_a_cycle_and_its_modules(tmp_path):
    fake_tree(tmp_path, {
        "core/__init__.py": "",
        "core/a.py": "from envengineer.b import x\n",
        "core/b.py": "def f():\n    from envengineer import c\n",
        "core/c.py": "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import envengineer.a\n",
        "core/d.py": "from envengineer.a import y\nfrom envengineer.d import z\nimport os\n",
        "core/e.py": "from typing import TYPE_CHECKING\nfrom envengineer.d import w\nif TYPE_CHECKING:\n    from envengineer.e import v\n    import envengineer.d\n",
        "plugins/__init__.py": "",
        "plugins/p/__init__.py": "from .q import x\n",
        "plugins/p/q.py": "from envengineer.plugins.p import y\n",
    })
    graph = import_graph(tmp_path, FAKE)
    assert [imp.target for imp in graph["envengineer.d"]] == ["envengineer.a"]  # itself and other packages do not count
    assert [(imp.target, imp.typing_only) for imp in graph["envengineer.e"]] == [("envengineer.d", False), ("envengineer.d", True)]
    assert cycles(graph) == [["envengineer.a", "envengineer.b", "envengineer.c"], ["envengineer.plugins.p", "envengineer.plugins.p.q"]]
    assert "envengineer.b:2 imports envengineer.c" in describe(graph, ["envengineer.a", "envengineer.b", "envengineer.c"])


def test_the_checker_finds_a_plugin_reaching_past_the_api(tmp_path):
    fake_tree(tmp_path, {
        "core/__init__.py": "", "core/api.py": "", "core/design/budget.py": "", "core/processes.py": "",
        "plugins/__init__.py": "",
        "plugins/ok.py": "from envengineer.api import Cut\nfrom envengineer import api\nfrom envengineer.plugins import other\n",
        "plugins/other.py": "",
        "plugins/x/__init__.py": "",
        "plugins/x/deep.py": "def f():\n    from envengineer.design.budget import Cut\n",
        "plugins/x/top.py": "from envengineer import hookimpl\n",
        "plugins/x/marked.py": "from envengineer.processes import start  # core-internal: because\n",
        "plugins/x/unmarked.py": "from envengineer.processes import start\n",
        "tasks/__init__.py": "",
        "tasks/t/plugin.py": "import envengineer.design.budget\n",
    })
    allowed = {("plugins/x/marked.py", "envengineer.processes"): "why", ("plugins/x/unmarked.py", "envengineer.processes"): "why"}
    problems = layer_violations(import_graph(tmp_path, FAKE), module_files(tmp_path, FAKE), tmp_path, allowed)
    assert [p.split(" imports ")[0] for p in problems] == [
        "plugins/x/deep.py:2", "plugins/x/top.py:1", "plugins/x/unmarked.py:1", "tasks/t/plugin.py:1"]
    assert "without a '# core-internal: <why>' comment" in problems[2]


def test_the_checker_finds_an_upward_import_and_a_module_in_no_layer(tmp_path):
    fake_tree(tmp_path, {
        "core/__init__.py": "", "core/errors.py": "",
        "core/components/__init__.py": "", "core/components/base.py": "from envengineer.loop.steps import Loop\n",
        "core/loop/__init__.py": "", "core/loop/steps.py": "from envengineer.components.base import Component\n",
        "core/components/roles.py": "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                    "    from envengineer.loop.steps import Loop\nelse:\n    from envengineer.loop import steps\n"
                                    "def f():\n    from envengineer.loop.steps import Loop\n",
        "core/stray.py": "",
        "plugins/__init__.py": "", "tasks/__init__.py": "",
    })
    problems = upward_imports(import_graph(tmp_path, FAKE), module_files(tmp_path, FAKE), tmp_path)
    assert any("core/components/base.py:1 (components) imports envengineer.loop.steps (loop), a higher layer" in p for p in problems), problems
    assert any("envengineer.stray is in no layer" in p for p in problems), problems
    assert not any("core/loop/steps.py" in p for p in problems)  # downward is fine
    # under `if TYPE_CHECKING:` an upward import types a signature and is allowed; its else branch and a function's are not
    assert sorted(p.split(" (components)")[0] for p in problems if "roles.py" in p) == [
        "core/components/roles.py:6", "core/components/roles.py:8"], problems

