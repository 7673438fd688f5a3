"""What the commands of one ``envengineer`` invocation share (tox 4's ``State`` is the model).

The command line makes one :class:`CommandState` and hands it to every ``register_commands``
implementation, so a plugin's command gets the registry and the consoles from it instead of building
its own. The expensive part, the registry of the installed plugins, is built on first use
(``envengineer --help`` never builds it) and kept until the invocation ends.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable

from envengineer.display import Console

if TYPE_CHECKING:
    from envengineer.registry import Registry


class CommandState:
    """The consoles the commands print to, and the registry, built on first use."""

    def __init__(self) -> None:
        #: standard output's console and standard error's (each follows the terminal's width at print time)
        self.console = Console()
        self.err_console = Console(stderr=True)
        self._registry: Registry | None = None

    @property
    def registry(self) -> Registry:
        """The installed plugins' registry (:func:`envengineer.registry.load_registry`), built on first use."""
        if self._registry is None:
            from envengineer import registry  # looked up now: a test's patch of load_registry reaches it

            self._registry = registry.load_registry()
        return self._registry

    def reset(self) -> None:
        """Forget what was built: the command line calls it as each invocation starts (a test invokes the
        same app many times, each with the plugins it patched in)."""
        self._registry = None

    def command(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, whose first parameter receives this state, as a typer command of its other parameters:
        ``cli.command("plan")(state.command(plan_command))`` for a command written at a module's top level.
        Its name, docstring and module stay ``function``'s."""
        signature = inspect.signature(function)
        first, *rest = signature.parameters

        @functools.wraps(function)
        def command(*args: Any, **kwargs: Any) -> Any:
            return function(self, *args, **kwargs)

        command.__signature__ = signature.replace(parameters=[signature.parameters[p] for p in rest])  # type: ignore[attr-defined]
        command.__annotations__ = {k: v for k, v in function.__annotations__.items() if k != first}
        return command
