"""The command line: the typer app and the commands of the core (:mod:`~envengineer.cli.commands`);
the built-in plugins add theirs (``report``, ``compare``, ``suite``, ``doctor``, ``plan``, ``engineers``)
through the ``register_commands`` hook, as any plugin does.

``envengineer.cli`` was one module until 0.1: ``app``, ``main`` and its other names are still importable
from here, looked up in :mod:`envengineer.cli.commands` when imported.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    import importlib

    commands = importlib.import_module("envengineer.cli.commands")
    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
