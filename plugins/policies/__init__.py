"""Built-in policies: Hugging Face models (transformers, vLLM), the embedded tiny model, API models."""

from envengineer.api import hookimpl


@hookimpl
def register_policies(register):
    from envengineer.plugins.policies.openai_compatible import OpenAICompatiblePolicy
    from envengineer.plugins.policies.tiny import TinyPolicy
    from envengineer.plugins.policies.transformers_policy import TransformersPolicy
    from envengineer.plugins.policies.vllm_policy import VllmPolicy

    for policy in (TransformersPolicy, VllmPolicy, TinyPolicy, OpenAICompatiblePolicy):
        register(policy)


@hookimpl
def register_commands(cli, state):
    from envengineer.plugins.policies import cli as commands

    commands.register(cli, state)  # envengineer pretrain: the tiny policy's base model


@hookimpl
def doctor_checks(components):
    """vLLM for the ``vllm`` policy (its child process runs this Python)."""
    from envengineer.plugins.policies.vllm_policy import VllmPolicy
    from envengineer.plugins._shared.vllm_child import vllm_check

    if components is None or any(isinstance(component, VllmPolicy) for component in components):
        return [vllm_check()]
    return []
