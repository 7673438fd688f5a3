"""One run of a suite in its own process: ``python -m envengineer.plugins.suite.worker JOB.json``.

``envengineer suite --jobs N`` starts one of these per run, N at a time; ``--launcher ray|slurm``
starts one per run on a cluster node (:mod:`envengineer.plugins.suite.launch.jobs`). The job file holds the
run's resolved config (seed and output already set), the log file to write the run's console
output to, and the file to write the outcome to: ``{"ok": true}`` or ``{"ok": false, "error":
...}``; optionally ``where`` (a file to note the node and process in when the run starts), ``cwd``
(the folder the run's relative paths are read from: on a cluster, the suite's own) and ``env``
(variables set for the run, e.g. ``RAY_ADDRESS=local`` so that a trainer's own Ray stays
inside the run's reservation; the Ray address the run sees is noted in ``where``). The run is the same :class:`~envengineer.loop.steps.Loop` as ``envengineer run`` and an
in-process suite run: resumable, with the same results.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from envengineer.errors import EnvEngineerError


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m envengineer.plugins.suite.worker JOB.json", file=sys.stderr)
        return 2
    _exit_with_parent()
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    result_path, log_path = Path(job["result"]), Path(job["log"])
    _started(job)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as log:
        from rich.console import Console

        console = Console(file=log, width=120, force_terminal=False, no_color=True)
        outcome: dict = {"ok": True}
        code = 0
        try:
            from envengineer.loop.steps import Loop, print_table
            from envengineer.registry import load_registry
            from envengineer.loop.runconfig import parse_run_config, resolve

            registry = load_registry()
            config = parse_run_config(job["config"], "suite run")
            if job.get("suite"):  # excluded from the config's dump: the job carries it beside
                from envengineer.loop.runconfig import SuiteSection

                config = config.model_copy(update={"suite": SuiteSection.model_validate(job["suite"])})
            loop = Loop(resolve(config, registry), registry, console)
            print_table(loop.run_all(), console, loop.cfg.eval.validation)
        except Exception as exc:  # reported to the suite, which records it and goes on with the others
            config_error = isinstance(exc, EnvEngineerError)
            outcome = {"ok": False, "error": str(exc) if config_error else f"{type(exc).__name__}: {exc}"}
            if not config_error:
                outcome["traceback"] = traceback.format_exc()
            log.write(traceback.format_exc())
            code = 1
    from envengineer.fileio import write_json

    write_json(result_path, outcome)
    return code


def _started(job: dict) -> None:
    """Go to the folder the suite ran in (the config's relative paths), set the job's variables, and
    note where the run runs (the suite's status line shows the node)."""
    import os
    import socket

    if job.get("cwd"):
        os.chdir(job["cwd"])

    os.environ.update({str(k): str(v) for k, v in (job.get("env") or {}).items()})
    if job.get("where"):
        from envengineer.fileio import write_json

        write_json(Path(job["where"]), {"host": socket.gethostname(), "pid": os.getpid(), "ray_address": os.environ.get("RAY_ADDRESS")})


def _exit_with_parent() -> None:
    """End this run when the suite that started it is gone (killed outright): a suite started again
    must not find this run still writing its folder. The run resumes from its last finished step."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="suite-parent-watch", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
