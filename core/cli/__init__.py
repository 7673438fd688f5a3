"""The command line: the typer app and the commands of the core (:mod:`~envengineer.cli.commands`);
the built-in plugins add theirs (``report``, ``compare``, ``suite``, ``doctor``, ``plan``, ``engineers``)
through the ``register_commands`` hook, as any plugin does.
"""
