"""One design step of a model served by llama.cpp, on real V6 prompts, beside this machine's limits.

The engineer is the ``openai-compatible`` one, structured (the config schema as ``response_format``, which
llama-server enforces), greedy; the prompts are the V6 context of a recorded run (by default the simulated
student's MAPF run of examples/llm-engineer/sim-base.yaml, made here in seconds: 3.1-3.5k prompt tokens for
Qwen's tokenizer). The rounds' design steps go to one server in order, as a run makes them, so each step after
the first finds the previous step's prompt in the server's slot and reuses the prefix they share (llama.cpp's
prompt cache); each step is then asked again with the cache off (``cache_prompt: false``) to measure what the
reuse saved.

Beside the figures, the two limits they are measured against, on the same threads: the prefill's matmul limit
(2 x parameters x prompt tokens at this machine's measured float32 GEMM rate; llama.cpp's quantised kernels use
integer dot products and may beat it) and the decode's bandwidth limit (the weights read once per token at the
measured copy bandwidth).

    python bench/design_step.py                                        # the 1.5B, 2 threads, rounds 0-2
    python bench/design_step.py --model qwen2.5-coder-0.5b-instruct --threads 1 --json out.json

Needs: ``envengineer serve --server llama.cpp --build`` and ``envengineer models MODEL --fetch``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
#: llama-server's per-request timing lines: "prompt eval time = X ms / N tokens", "eval time = X ms / N tokens".
TIMING = re.compile(r"(prompt eval|eval) time =\s*([\d.]+) ms /\s*(\d+) tokens")


def gemm_gflops(threads: int, n: int = 1536, repeats: int = 5) -> float:
    """The best float32 GEMM rate (n x n x n) on ``threads`` threads, GFLOP/s."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * n**3 / best / 1e9


def copy_bandwidth(threads: int, mib: int = 512, repeats: int = 5) -> float:
    """The best copy bandwidth (bytes read + written) of a ``mib`` MiB array on ``threads`` threads, GB/s."""
    import torch

    torch.set_num_threads(threads)
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * 4 / best / 1e9


def matrix_parameters(gguf: Path) -> tuple[int, int]:
    """(parameters a token's forward pass multiplies by, bytes of the weights it reads): every tensor but the
    token embedding table, whose one row per token is read and not multiplied."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    params = sum(int(t.n_elements) for t in reader.tensors if t.name != "token_embd.weight")
    weight_bytes = sum(int(t.n_bytes) for t in reader.tensors if t.name != "token_embd.weight")
    return params, weight_bytes


#: The simulated student's run per task: (task section, validation set) in place of sim-base.yaml's MAPF ones.
SIM_TASKS = {"mapf-frozenlake": ({"name": "mapf-frozenlake", "agents": 2}, "mapf-2agents-val"),
             "grid-walk": ({"name": "grid-walk"}, "grid-walk-val")}


def recorded_run(path: str | None, task: str, work: Path) -> Path:
    """``path``, or the simulated student's run of examples/llm-engineer/sim-base.yaml on ``task``, made in ``work``."""
    import yaml

    if path:
        return Path(path)
    config = yaml.safe_load((REPO / "examples/llm-engineer/sim-base.yaml").read_text())
    config["task"], config["eval"]["validation"] = SIM_TASKS[task]
    config["eval"]["benchmarks"] = []
    (work / "sim.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    out = work / "sim-run"
    subprocess.run([sys.executable, "-m", "envengineer.cli.commands", "run", str(work / "sim.yaml"), "--output", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def start_server(model: str, threads: int, ctx: int, log: Path) -> Any:
    """llama-server for ``model`` on a free port, answering /health (``envengineer.plugins.serve.llama_server.LlamaServer``:
    in this process's group, so a bench killed with its group takes its server along); its log at ``log``."""
    from envengineer.api import ConfigError
    from envengineer.plugins.serve.llama_server import LlamaServer

    try:
        return LlamaServer(model, threads=threads, ctx_size=ctx, log=log).start()
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None


def server_timings(log: Path, seen: int) -> tuple[dict[str, Any], int]:
    """The llama-server log's timings of the request after line ``seen``: prefill and decode (ms, tokens)."""
    lines = log.read_text(errors="replace").splitlines()
    found: dict[str, Any] = {}
    for line in lines[seen:]:
        match = TIMING.search(line)
        if match:
            kind = "prefill" if match.group(1) == "prompt eval" else "decode"
            found[kind] = {"ms": float(match.group(2)), "tokens": int(match.group(3))}
    return found, len(lines)


def one_step(run: Path, round_: int, context: dict[str, Any], url: str, model: str, max_tokens: int, cache: bool, out: Path,
             interface: str = "config", analysis_chars: int | None = None) -> dict[str, Any]:
    from envengineer.api import load_registry
    from envengineer.design.evidence import load_evidence
    from envengineer.design.prompts import build_request
    from envengineer.design.step import design

    registry = load_registry()
    evidence = load_evidence(run, round_, registry)
    request = build_request(evidence, registry, context)
    engineer = registry.create("engineer", "openai-compatible", {
        "model": model, "base_url": url + "/v1", "structured": True, "interface": interface, "max_tokens": max_tokens,
        "analysis_chars": analysis_chars,
        "temperature": 0.0,
        "timeout": 1200.0, "max_retries": 0, "api_key_env": None, "extra_body": {"cache_prompt": cache},
    })
    started = time.monotonic()
    outcome = design(engineer, request, out_dir=out, reask=0, summarize=False)
    wall = time.monotonic() - started
    call = json.loads((out / "calls.jsonl").read_text().splitlines()[0])
    restated = (not outcome.fallback) and outcome.projection.config == request.current_config
    return {
        "round": round_, "cache": cache, "wall_s": round(wall, 1), "prompt_tokens": call["usage"].get("prompt_tokens"),
        "cached_tokens": call["usage"].get("cached_tokens", 0), "completion_tokens": call["usage"].get("completion_tokens"),
        "outcome": "fallback" if outcome.fallback else ("restated" if restated else "applied, changed"),
        "reason": outcome.reason[:120] if outcome.fallback else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--run", help="a recorded run (default: the simulated student's run of --task, made here)")
    parser.add_argument("--task", default="mapf-frozenlake", choices=sorted(SIM_TASKS),
                        help="the simulated student's task when no --run is given (grid-walk's V6 prompts: 2.2-2.9k tokens)")
    parser.add_argument("--out", help="keep each step's folder (prompt.md, response.md, calls.jsonl) here")
    parser.add_argument("--rounds", default="0,1,2")
    parser.add_argument("--preset", default="V6")
    parser.add_argument("--order", default="paper", choices=("paper", "stable-first"),
                        help="the context's order (stable-first: what stays the same between rounds first, for the prompt cache)")
    parser.add_argument("--interface", default="config", choices=("config", "changes", "decisions"),
                        help="the structured reply's shape: the whole config, the settings that change, or words per group")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--analysis-chars", type=int, default=None, help="the analysis string's maxLength (default: unbounded)")
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--no-cold", action="store_true", help="skip the cache-off repeat of each step")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--target-s", type=float, default=90.0)
    args = parser.parse_args()
    from envengineer.plugins._shared.models import MODELS

    console = Console(width=max(Console().width, 180))
    gguf = MODELS[args.model].source()
    params, weight_bytes = matrix_parameters(gguf)
    gflops, bandwidth = gemm_gflops(args.threads), copy_bandwidth(args.threads)
    console.print(f"{args.model}: {params / 1e9:.2f} B multiplied parameters, {weight_bytes / 1e9:.2f} GB of weights read "
                  f"per token; this machine on {args.threads} thread(s): float32 GEMM {gflops:.0f} GFLOP/s, copy "
                  f"{bandwidth:.1f} GB/s")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="design-step-") as tmp:
        work = Path(tmp)
        run = recorded_run(args.run, args.task, work)
        steps = Path(args.out) if args.out else work
        log = work / "llama-server.log"
        started = time.monotonic()
        server = start_server(args.model, args.threads, args.ctx, log)
        url = server.url
        load_s = time.monotonic() - started
        seen = 0
        try:
            for round_ in [int(r) for r in args.rounds.split(",")]:
                for cache in (True,) if args.no_cold else (True, False):
                    row = one_step(run, round_, {"preset": args.preset, "order": args.order}, url, args.model,
                                   args.max_tokens, cache, steps / f"r{round_}-{'warm' if cache else 'cold'}", args.interface,
                                   args.analysis_chars)
                    timings, seen = server_timings(log, seen)
                    row.update({f"{k}_{f}": v[f] for k, v in timings.items() for f in ("ms", "tokens")})
                    rows.append(row)
                    console.print(row)
        finally:
            server.stop()
    table = Table(title=f"design step: {args.model}, llama-server on {args.threads} thread(s), {args.preset} ({args.order} "
                        f"order), structured ({args.interface}, analysis ≤ {args.analysis_chars or '∞'} chars), greedy (server load {load_s:.1f} s)")
    for column in ("round", "prompt cache", "prompt tok", "reused", "prefilled", "prefill tok/s", "matmul limit tok/s",
                   "new tok", "decode tok/s", "bandwidth limit tok/s", "step s", f"≤ {args.target_s:.0f} s", "outcome"):
        table.add_column(column, justify="right")
    prefill_limit = gflops * 1e9 / (2 * params)
    decode_limit = bandwidth * 1e9 / weight_bytes
    for row in rows:
        prefill = row.get("prefill_tokens", 0)
        prefill_rate = prefill / (row["prefill_ms"] / 1e3) if row.get("prefill_ms") else float("nan")
        decode_rate = row.get("decode_tokens", 0) / (row["decode_ms"] / 1e3) if row.get("decode_ms") else float("nan")
        row.update({"prefill_tok_s": round(prefill_rate, 1), "decode_tok_s": round(decode_rate, 1)})
        table.add_row(str(row["round"]), "on" if row["cache"] else "off", str(row["prompt_tokens"]),
                      str(row["cached_tokens"]), str(prefill), f"{prefill_rate:.0f}", f"{prefill_limit:.0f}",
                      str(row["completion_tokens"]), f"{decode_rate:.1f}", f"{decode_limit:.1f}", f"{row['wall_s']:.1f}",
                      "yes" if row["wall_s"] <= args.target_s else "no", row["outcome"])
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": args.model, "threads": args.threads, "run": args.run or f"simulated student, {args.task}",
            "preset": args.preset, "order": args.order,
            "interface": args.interface, "analysis_chars": args.analysis_chars, "multiplied_parameters": params,
            "weight_bytes": weight_bytes, "gemm_gflops": round(gflops, 1), "copy_gb_s": round(bandwidth, 2),
            "prefill_limit_tok_s": round(prefill_limit, 1), "decode_limit_tok_s": round(decode_limit, 1),
            "server_load_s": round(load_s, 1), "steps": rows, "load_average": os.getloadavg(),
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
