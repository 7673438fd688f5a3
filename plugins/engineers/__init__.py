"""Built-in engineers: API LLMs, the policy checkpoint, and non-LLM baselines."""

from envengineer.hookspecs import hookimpl


@hookimpl
def register_engineers(register):
    from envengineer.plugins.engineers import baselines, checkpoint, llm

    for module in (llm, checkpoint, baselines):
        for engineer in module.ENGINEERS:
            register(engineer)
