"""The command line: the typer app and the commands of the core (:mod:`~envengineer.cli.commands`);
the built-in plugins add theirs (``report``, ``compare``, ``suite``, ``doctor``, ``plan``, ``engineers``)
through the ``register_commands`` hook, as any plugin does.

``envengineer.cli`` was one module until 0.1: ``app``, ``main`` and its other names are still importable
from here, looked up in :mod:`envengineer.cli.commands` when imported.
"""

from envengineer._moved import forward

__getattr__ = forward(__name__, "envengineer.cli.commands")
