"""``envengineer serve MODEL``: an OpenAI-compatible server for a model folder or a model name.

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


@hookimpl
def register_commands(cli):
    register(cli)  # envengineer serve
