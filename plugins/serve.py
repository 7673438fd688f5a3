"""``envengineer serve MODEL``: an OpenAI-compatible server for a model folder or a model name;
``envengineer models [NAME]``: the models known by name, or one made into its folder now.

The model is resolved as everywhere else (``envengineer.plugins.models.resolve_model``: a
folder as given, or a name such as ``smollm2-135m-instruct`` converted into the cache on first
use), then ``transformers serve`` runs it on 127.0.0.1 (its ``/v1/chat/completions``,
``/health``); this process becomes that server (``os.execvp``), so Ctrl-C or a signal stops it.
Point the ``openai-compatible`` engineer (or policy) at it with ``base_url:
http://127.0.0.1:PORT/v1`` and ``model:`` the folder the command prints.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from envengineer.hookspecs import hookimpl


def serve_command(model: str, port: int = 8011, host: str = "127.0.0.1", device: str = "cpu") -> list[str]:
    """The ``transformers serve`` command line for ``model`` (a folder or a model name, resolved)."""
    from envengineer.plugins.models import resolve_model

    folder = resolve_model(model)
    exe = shutil.which("transformers")
    if exe is None:
        from envengineer.errors import ConfigError

        raise ConfigError("envengineer serve needs the `transformers` command (pip install \"transformers[serving]\")")
    return [exe, "serve", str(folder), "--host", host, "--port", str(port), "--device", device]


def register(cli: Any) -> None:
    import typer

    @cli.command("serve")
    def serve(
        model: str = typer.Argument(..., help="a model folder or a model name (e.g. smollm2-135m-instruct)"),
        port: int = typer.Option(8011, "--port", min=1, max=65535, help="port on the host"),
        host: str = typer.Option("127.0.0.1", "--host", help="listen address (default: this machine only)"),
        device: str = typer.Option("cpu", "--device", help="torch device for transformers serve (cpu, cuda:0, auto)"),
        print_only: bool = typer.Option(False, "--print", help="print the command and exit"),
    ) -> None:
        """Serve a model with an OpenAI-compatible API (transformers serve) for the openai-compatible engineer."""
        argv = serve_command(model, port=port, host=host, device=device)
        folder = argv[2]
        print(" ".join(argv) if print_only else
              f"serving {folder} on http://{host}:{port}/v1 (engineer openai-compatible: base_url http://{host}:{port}/v1, model {folder})",
              file=sys.stdout if print_only else sys.stderr, flush=True)
        if print_only:
            return
        os.execvp(argv[0], argv)


def models_table() -> Any:
    """A rich table of :data:`envengineer.plugins.models.MODELS`: package, folder, license."""
    import importlib.metadata

    from rich.table import Table

    from envengineer.plugins.models import MODELS, model_record

    table = Table(title="models by name (accepted wherever a model folder is)")
    for column in ("name", "package", "folder", "license", "what"):
        table.add_column(column, overflow="fold")
    for name, model in MODELS.items():
        try:
            package = f"{model.distribution} {importlib.metadata.version(model.distribution)}"
        except importlib.metadata.PackageNotFoundError:
            package = f"not installed: {model.install}"
        folder = model.folder()
        where = f"{folder}" if model_record(folder) else f"{folder} (made on first use)"
        table.add_row(name, package, where, model.license, model.description)
    return table


def register_models(cli: Any) -> None:
    import typer

    @cli.command("models")
    def models(
        name: str = typer.Argument(None, help="a model name: make its folder now (if needed) and print its path"),
    ) -> None:
        """The models known by name (`smollm2-135m-instruct`), or one model's folder, converted on first use."""
        from rich.console import Console

        from envengineer.errors import ConfigError
        from envengineer.plugins.models import MODELS, resolve_model

        if name is None:
            Console().print(models_table())
            return
        if name not in MODELS:
            raise ConfigError(f"models: unknown model name {name!r}; known: {', '.join(MODELS)}")
        print(resolve_model(name))


@hookimpl
def register_commands(cli):
    register(cli)  # envengineer serve
    register_models(cli)  # envengineer models
