"""vLLM's offline engine run in a child process, for the ``vllm`` policy and the
``checkpoint``/``base`` engineers.

One call of :func:`generate` is one child process: it loads the model with ``vllm.LLM``,
answers every request (``LLM.chat`` for chat-message prompts, rendered with
``chat_template_kwargs``; ``LLM.generate`` for plain strings), writes the texts and token
counts to a JSON file and exits. When the call returns, the process that held the model
and its KV cache is gone, and so is every byte of GPU memory it held, whatever vLLM's own
teardown does: the loop's next step (a verl or TRL training round) gets the whole GPU. The
parent never imports vllm (nor torch, for this).

Why ``subprocess`` running ``python -m envengineer.plugins._shared.vllm_child JOB RESULT`` rather
than ``multiprocessing`` with the ``spawn`` context:

- vLLM starts processes of its own (the V1 engine core, tensor-parallel workers). A
  ``multiprocessing`` child re-imports the parent's ``__main__`` (the CLI, pytest, a user's
  script) and carries multiprocessing's own state into vLLM's; a plain interpreter started
  with ``-m`` carries nothing but the environment. The child starts its own session, so
  the parent can end vLLM's grandchildren along with it (a killed child would otherwise
  leave an engine core holding the GPU).
- The job and the answer are JSON files (prompts, sampling settings, texts, counts):
  nothing is pickled, and a child that dies leaves no half-read pipe message behind.
- The exit status and the child's output are plain: its stdout and stderr (vLLM logs to
  stdout) are read by a thread into a bounded tail, and an error names the exception type
  and message the child raised, or the exit code it died with (a signal, e.g. SIGKILL from
  the kernel's OOM killer), with the last lines of that output. The parent waits on the
  process itself, so a dead child is noticed at once, never waited on forever.

Failing loudly: before the child starts, :func:`wait_for_memory` waits (``memory_wait_minutes``)
until every GPU the engine will use has ``gpu_memory_utilization`` × its memory free (vLLM 0.24
refuses to start below that), and fails with the numbers and the processes holding the memory
otherwise. The child leads a process group of its own (:mod:`envengineer.processes`); a
child silent for ``stall_timeout_minutes`` (no output line) is ended with its whole group, as is
one whose parent is interrupted.

Without vllm the child answers with :class:`VllmNotInstalled` (``pip install
"envengineer[vllm]"``). The tests run this module against ``tests/fake_vllm``, a stand-in of
vLLM's public API on CPU; the real engine needs a CUDA GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import EnvEngineerError, Gpu, GpuProcess, read_processes, visible_gpus
from envengineer.processes import Stalled, end_group, sigterm_as_interrupt, start, watch  # core-internal: process groups

INSTALL_HINT = 'pip install "envengineer[vllm]" (or "envengineer[train,verl]", which includes vLLM); vLLM needs a CUDA GPU'
TAIL_LINES = 40
#: Seconds a child that has written its answer gets to exit (vLLM tears down its engine core).
EXIT_GRACE_S = 120.0
#: vLLM 0.24's ``LLM(gpu_memory_utilization=...)`` default.
VLLM_DEFAULT_UTILIZATION = 0.92
#: Seconds between two readings of the GPUs' free memory while waiting for it.
MEMORY_POLL_S = 5.0


class ChildLimits(BaseModel):
    """How long a vLLM child may wait for GPU memory and stay silent (the options of every component that runs one)."""

    model_config = ConfigDict(extra="forbid")

    memory_wait_minutes: float = Field(
        10, ge=0, description="wait this long for the GPU memory vLLM needs (gpu_memory_utilization × total) to be free, then fail",
    )
    stall_timeout_minutes: float = Field(30, ge=0, description="end the vLLM child when it prints nothing for this long (0: never)")


class VllmChildError(EnvEngineerError):
    """The vLLM child process raised, or died before answering."""

    def __init__(self, message: str, *, error_type: str | None = None, returncode: int | None = None, output_tail: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
        self.returncode = returncode
        self.output_tail = output_tail


class VllmNotInstalled(VllmChildError):
    """vllm cannot be imported in the child process."""


# ------------------------------------------------------------------------ the parent


def engine_kwargs(
    model: str, *, tensor_parallel_size: int = 1, gpu_memory_utilization: float | None = None, max_model_len: int | None = None,
    dtype: str = "auto", enforce_eager: bool = False, seed: int = 0,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` (None: vLLM's default)."""
    kwargs: dict[str, Any] = {"model": str(model), "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                              "enforce_eager": enforce_eager, "seed": seed}
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    return kwargs


def request(prompt: list[dict[str, str]] | str, *, n: int = 1, seed: int | None = None) -> dict[str, Any]:
    """One prompt of a job: chat messages (``LLM.chat``) or a plain string (``LLM.generate``)."""
    if isinstance(prompt, str):
        return {"kind": "text", "prompt": prompt, "n": n, "seed": seed}
    return {"kind": "chat", "prompt": [dict(m) for m in prompt], "n": n, "seed": seed}


def generate(
    engine: dict[str, Any], requests: Sequence[dict[str, Any]], *, temperature: float, top_p: float, max_tokens: int,
    chat_template_kwargs: dict[str, Any] | None = None, what: str = "vllm", limits: ChildLimits | None = None,
    json_schema: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``requests`` (see :func:`request`) in one child process; ``json_schema``: every answer is
    decoded under it (vLLM's structured outputs, ``SamplingParams(structured_outputs=StructuredOutputsParams(json=...))``).

    Returns one ``{"texts": [...], "prompt_tokens": int, "completion_tokens": [...]}`` per
    request, in order. ``what`` prefixes error messages (``policy.vllm``, ``engineer.checkpoint``).
    Raises :class:`VllmNotInstalled`, or :class:`VllmChildError` when the GPU memory never came free,
    or the child raised, died or stalled.
    """
    if not requests:
        return []
    limits = limits or ChildLimits()
    wait_for_memory(engine, wait_s=limits.memory_wait_minutes * 60, what=what)
    job = {
        "engine": engine,
        "requests": list(requests),
        "sampling": {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens},
        "chat_template_kwargs": chat_template_kwargs,
    }
    if json_schema is not None:
        job["json_schema"] = json_schema
    with tempfile.TemporaryDirectory(prefix="envengineer-vllm-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        returncode, tail, stalled = _run_child(job_path, result_path, stall_timeout_s=limits.stall_timeout_minutes * 60 or None)
        result = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else None
    log = "".join(tail).rstrip()
    where = f"\nlast lines of its output:\n{log}" if log else " (it wrote no output)"
    if stalled is not None and result is None:
        raise VllmChildError(f"{what}: the vLLM child process stalled: {stalled} (stall_timeout_minutes: "
                             f"{limits.stall_timeout_minutes:g}); it and every process it started were ended{where}",
                             returncode=returncode, output_tail=log)
    if result is not None and "error" in result:
        error = result["error"]
        if error.get("missing_vllm"):
            raise VllmNotInstalled(f"{what}: vllm is not installed ({error['type']}: {error['message']}); {INSTALL_HINT}",
                                   error_type=error["type"], returncode=returncode, output_tail=log)
        raise VllmChildError(f"{what}: the vLLM child process raised {error['type']}: {error['message']}{where}",
                             error_type=error["type"], returncode=returncode, output_tail=log)
    if returncode != 0 or result is None:
        raise VllmChildError(f"{what}: the vLLM child process exited with code {returncode}{_signal_note(returncode)} "
                             f"before answering{where}", returncode=returncode, output_tail=log)
    outputs = result["outputs"]
    if len(outputs) != len(requests):
        raise VllmChildError(f"{what}: the vLLM child process answered {len(outputs)} of {len(requests)} prompts", returncode=returncode)
    return outputs


#: The vLLM release the ``verl`` extra pins and ``tests/fake_vllm`` follows.
TESTED_VLLM = "0.24.0"


def vllm_check() -> Any:
    """``envengineer doctor``'s line for vLLM in this Python (the one the child runs)."""
    from envengineer.api import package_check, version

    return package_check("vllm", version("vllm"), tested=TESTED_VLLM, install=INSTALL_HINT)


# ------------------------------------------------------------------ GPU memory before the start


def _stderr(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[yellow]{message}[/]", highlight=False, markup=True)


def memory_shortfall(gpus: Sequence[Gpu], utilization: float, tensor_parallel_size: int) -> list[tuple[Gpu, float]]:
    """The GPUs among the first ``tensor_parallel_size`` visible ones with less than ``utilization`` × their memory free,
    each with the MiB vLLM needs there."""
    short = []
    for gpu in list(gpus)[:tensor_parallel_size]:
        needed = utilization * gpu.total_mib
        if gpu.free_mib < needed:
            short.append((gpu, needed))
    return short


def wait_for_memory(
    engine: dict[str, Any], *, wait_s: float, what: str, reader: Callable[[], list[Gpu] | None] = visible_gpus,
    holders: Callable[[], list[GpuProcess]] = read_processes, sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic, poll_s: float = MEMORY_POLL_S, notify: Callable[[str], None] | None = None,
) -> None:
    """Wait up to ``wait_s`` until the GPUs the engine uses have the memory vLLM will ask for at its start
    (``gpu_memory_utilization`` × total on each of its ``tensor_parallel_size`` GPUs: vLLM refuses to start with less
    free), or raise :class:`VllmChildError` with the numbers and who holds the memory. No driver (a CPU machine):
    nothing to wait for."""
    utilization = float(engine.get("gpu_memory_utilization") or VLLM_DEFAULT_UTILIZATION)
    tp = int(engine.get("tensor_parallel_size") or 1)
    started, told = clock(), False
    while True:
        gpus = reader()
        if not gpus:
            return
        short = memory_shortfall(gpus, utilization, tp)
        if not short:
            return
        lines = [f"GPU {gpu.index} ({gpu.name}): {gpu.free_mib / 1024:.1f} GiB free of {gpu.total_mib / 1024:.1f} GiB, "
                 f"needs {needed / 1024:.1f} GiB (gpu_memory_utilization {utilization:g} × {gpu.total_mib / 1024:.1f} GiB)"
                 for gpu, needed in short]
        if clock() - started >= wait_s:
            break
        if not told:  # the wait can be long: say once what it waits for
            (notify or _stderr)(f"{what}: waiting up to {wait_s / 60:g} minutes for GPU memory before starting vLLM: " + "; ".join(lines))
            told = True
        sleep(poll_s)
    uuids = {gpu.uuid for gpu, _ in short}
    held = [f"pid {p.pid} {p.name} ({p.used_mib / 1024:.1f} GiB)" for p in holders() if p.gpu_uuid in uuids]
    raise VllmChildError(
        f"{what}: vLLM would not start: after waiting {wait_s / 60:g} minutes (memory_wait_minutes), "
        + "; ".join(lines) + ". " + (f"Held by: {', '.join(held)}. " if held else "nvidia-smi names no process holding it. ")
        + "Lower gpu_memory_utilization, end what holds the memory, or wait longer (memory_wait_minutes)."
    )


def _signal_note(returncode: int | None) -> str:
    if returncode is None:
        return ""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if number is None:
        return ""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return ""
    oom = ", e.g. the kernel's out-of-memory killer" if name == "SIGKILL" else ""
    return f" (killed by {name}{oom})"


def _run_child(job_path: Path, result_path: Path, *, stall_timeout_s: float | None = None) -> tuple[int | None, deque[str], Stalled | None]:
    """Start the child, keep the tail of its output, wait for it; end its whole process group afterwards.
    Returns the exit code, the tail and, when it stalled, the :class:`Stalled` it was ended for."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    lines = [0]  # output lines so far: the child's sign of life
    proc = start(
        [sys.executable, "-m", "envengineer.plugins._shared.vllm_child", str(job_path), str(result_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ),
    )

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            tail.append(raw.decode("utf-8", "replace"))
            lines[0] += 1

    reader = threading.Thread(target=read, name="vllm-child-output", daemon=True)
    reader.start()
    stalled: Stalled | None = None
    returncode: int | None = None
    try:
        with sigterm_as_interrupt():
            try:
                returncode = watch(proc, activity=lambda: lines[0], stall_timeout_s=stall_timeout_s, done=result_path.exists)
            except Stalled as exc:
                stalled = exc
            if returncode is None and stalled is None:  # answered: give it a while to shut vLLM down, then end it
                try:
                    returncode = proc.wait(timeout=EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
    finally:  # interrupted, stalled, or vLLM's own processes left behind: the child's whole group goes
        end_group(proc, grace_s=10.0)
        if returncode is None:
            returncode = proc.poll()
        reader.join(timeout=5.0)
        if proc.stdout is not None and not reader.is_alive():
            proc.stdout.close()
    return returncode, tail, stalled


# ------------------------------------------------------------------------- the child


def _is_missing_vllm(exc: BaseException) -> bool:
    return isinstance(exc, ImportError) and (getattr(exc, "name", None) or "").split(".")[0] == "vllm"


def run_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Answer a job with vllm (in the child process)."""
    from vllm import LLM, SamplingParams

    sampling = job["sampling"]
    requests = job["requests"]
    llm = LLM(**job["engine"])
    outputs: list[dict[str, Any] | None] = [None] * len(requests)
    for kind in ("chat", "text"):
        index = [i for i, r in enumerate(requests) if r["kind"] == kind]
        if not index:
            continue
        structured: dict[str, Any] = {}
        if job.get("json_schema") is not None:
            from vllm.sampling_params import StructuredOutputsParams

            structured["structured_outputs"] = StructuredOutputsParams(json=job["json_schema"])
        params = [SamplingParams(n=requests[i]["n"], temperature=sampling["temperature"], top_p=sampling["top_p"],
                                 max_tokens=sampling["max_tokens"], seed=requests[i]["seed"], **structured) for i in index]
        prompts = [requests[i]["prompt"] for i in index]
        if kind == "chat":
            answers = llm.chat(prompts, sampling_params=params, use_tqdm=False, chat_template_kwargs=job["chat_template_kwargs"])
        else:
            answers = llm.generate(prompts, sampling_params=params, use_tqdm=False)
        for i, answer in zip(index, answers):
            outputs[i] = {
                "texts": [c.text for c in answer.outputs],
                "prompt_tokens": len(answer.prompt_token_ids or []),
                "completion_tokens": [len(c.token_ids) for c in answer.outputs],
            }
    del llm
    return outputs  # type: ignore[return-value]


def _write(path: Path, payload: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    job_path, result_path = map(Path, (argv if argv is not None else sys.argv[1:]))
    job = json.loads(job_path.read_text(encoding="utf-8"))
    try:
        outputs = run_job(job)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        sys.stdout.flush()
        traceback.print_exc()
        _write(result_path, {"error": {
            "type": type(exc).__name__, "message": " ".join(str(exc).split())[:2000],
            "missing_vllm": _is_missing_vllm(exc), "traceback": traceback.format_exc()[-4000:],
        }})
        return 1
    _write(result_path, {"outputs": outputs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
