"""Plotting helpers the built-in plugins share (the run report, the suite's arms report, the engineer benchmark):
a figure on matplotlib's Agg canvas (imported only when plotting, never through pyplot's global state), its PNG
written atomically, a percent axis and the palette."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from envengineer.api import EnvEngineerError

PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#4b5563", "#b45309"]


def new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise EnvEngineerError("the report needs matplotlib: pip install 'envengineer[report]'") from None
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save_figure(fig: Any, path: Path) -> Path:
    from envengineer.api import atomic_open

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor="white")
    with atomic_open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return path


def percent_axis(ax: Any, top: float = 100) -> None:
    ax.set_ylim(0, top * 1.04)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0f}%")
