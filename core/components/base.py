"""The base of every component: a name, a description and an ``Options`` pydantic model (its section
of the run config). The registry validates a section against ``Options`` and instantiates the class
with the result, so each plugin owns its own schema and an error reads
``engineer.openai.model: Field required``."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


def retired_options(**why: str) -> Any:
    """A ``mode="before"`` validator for an ``Options`` model that refuses options which were
    removed or moved, each with its own message (``{value}`` in it stands for the value given),
    so an old config gets a way forward instead of "extra inputs are not permitted".

    Use it as a class attribute: ``_retired = retired_options(time_budget_s="was removed: ...")``.
    """

    def refuse(cls: type, data: Any) -> Any:
        if isinstance(data, dict):
            for key, message in why.items():
                if key in data:
                    value = data[key]
                    raise ValueError(f"{key}: " + message.format(value=str(value).lower() if isinstance(value, bool) else value))
        return data

    return model_validator(mode="before")(classmethod(refuse))


class NoOptions(BaseModel):
    """Options model of a component that takes none."""

    model_config = ConfigDict(extra="forbid")


class Component:
    """Base of every registered component: a name, a description, an options model."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if options is not None else self.Options()
