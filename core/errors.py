"""Errors meant for users: the CLI prints them without a traceback."""


class EnvEngineerError(Exception):
    """Base class for every error envengineer reports to a user."""


class ConfigError(EnvEngineerError):
    """A configuration (run config, generator config, plugin section) is invalid.

    The message names the field, e.g. ``engineer.openai.model: field required``.
    """


class InputError(EnvEngineerError):
    """An input file is missing or malformed; the message names the file and line."""


class RegistrationError(EnvEngineerError):
    """A plugin registered something wrong, or two plugins registered one name."""


class UnknownComponentError(EnvEngineerError):
    """A run config or command named a component that no plugin registered."""


class ValidatorError(EnvEngineerError):
    """A task's validator raised while scoring a response; the message names the task, the record,
    the response and the command that reproduces it."""
