"""Built-in engineers: API LLMs, the policy checkpoint, and non-LLM baselines."""

from envengineer.api import hookimpl


@hookimpl
def register_engineers(register):
    from envengineer.plugins.engineers import baselines, checkpoint, llm, practice

    for module in (llm, checkpoint, baselines, practice):
        for engineer in module.ENGINEERS:
            register(engineer)
