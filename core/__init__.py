"""envengineer: RL training loops whose environment is redesigned by an engineer between rounds.

Importing this package stays light: no torch, transformers, trl, verl, vllm,
openai or google-genai. Those load inside the plugins that need them.
"""

from envengineer.errors import EnvEngineerError, ConfigError, InputError
from envengineer.hookspecs import hookimpl
from envengineer.plugin_manager import create_plugin_manager
from envengineer.registry import Registry, load_registry

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EnvEngineerError",
    "InputError",
    "Registry",
    "__version__",
    "create_plugin_manager",
    "hookimpl",
    "load_registry",
]
