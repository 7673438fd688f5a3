"""Plot what TensorBoard serves for a run: its own server on the run's event files, the scalar
endpoints its dashboard draws from, one panel per tag.

    python scripts/tensorboard_figure.py runs/quickstart --out tb.png
    python scripts/tensorboard_figure.py runs/quickstart --tag validation/valid_rate --tag train/loss

Starts TensorBoard (``tensorboard.program``, the same server ``tensorboard --logdir`` runs) on
127.0.0.1 at a free port, asks it for ``/data/plugin/scalars/tags`` and, per tag,
``/data/plugin/scalars/scalars`` (the JSON the Scalars dashboard plots: wall time, step, value),
prints the points as a table and draws them with matplotlib. This is not a screenshot of the
dashboard (it needs no browser); the numbers are the ones the dashboard shows. A tag that no run
holds is an error naming the tags there are.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

DEFAULT_TAGS = ("validation/valid_rate", "train/loss")


def serve(log_dir: Path):
    """TensorBoard's server on ``log_dir``: its base URL once it has read the event files."""
    from tensorboard import program

    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir", str(log_dir), "--host", "127.0.0.1", "--port", "0", "--load_fast", "false",
                          "--reload_interval", "0"])
    return board.launch()


def get(url: str, path: str, **query: str):
    address = url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
    with urllib.request.urlopen(address, timeout=30) as response:
        return json.loads(response.read())


def scalars(url: str, wanted: list[str], attempts: int = 60) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``{tag: {run: [(step, value), ...]}}`` for each wanted tag, as the server returns them (it reads
    the files in a thread of its own: asked again until every wanted tag is there, or a minute passed)."""
    tags: dict = {}
    for _ in range(attempts):
        tags = get(url, "/data/plugin/scalars/tags")
        if all(any(tag in run_tags for run_tags in tags.values()) for tag in wanted):
            break
        time.sleep(1)
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for tag in wanted:
        runs = [run for run, run_tags in tags.items() if tag in run_tags]
        if not runs:
            there = sorted({t for run_tags in tags.values() for t in run_tags})
            raise SystemExit(f"no run holds the tag {tag!r}; TensorBoard has: {', '.join(there) or 'nothing'}")
        out[tag] = {run: [(int(step), float(value)) for _, step, value in get(url, "/data/plugin/scalars/scalars", run=run, tag=tag)]
                    for run in runs}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run directory (its tb/ folder is read) or a folder of event files")
    parser.add_argument("--tag", action="append", help=f"scalar tags to draw (default: {', '.join(DEFAULT_TAGS)})")
    parser.add_argument("--out", type=Path, default=Path("tensorboard.png"))
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    log_dir = args.run_dir / "tb" if (args.run_dir / "tb").is_dir() else args.run_dir
    if not log_dir.is_dir():
        raise SystemExit(f"{log_dir}: no such folder")
    url = serve(log_dir)
    wanted = args.tag or list(DEFAULT_TAGS)
    data = scalars(url, wanted)
    console = Console()
    for tag, runs in data.items():
        table = Table(title=f"{tag} (served by TensorBoard at {url})")
        for column in ("run", "step", "value"):
            table.add_column(column, justify="right")
        for run, points in runs.items():
            for step, value in points:
                table.add_row(run, str(step), f"{value:.4g}")
        console.print(table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(5.5 * len(data), 3.6), squeeze=False)
    for ax, (tag, runs) in zip(axes[0], data.items()):
        for run, points in runs.items():
            steps, values = zip(*points)
            ax.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3, label=run)
        ax.set_title(tag)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(runs) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(f"{args.run_dir.resolve().name}: the scalars TensorBoard serves (x: the round for validation/*, the optimiser step for train/*)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
