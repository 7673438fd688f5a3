"""One run as a page people want to read: report.html plus the PNGs it shows.

Everything comes from the run directory (see :mod:`envengineer.plugins.report.view`), so a report
can be made at any time, of a partial run too: sections without data say so and are
otherwise left out. What is drawn per group, per knob and per benchmark is what the run's
task declares; the task (or any plugin) adds sections of its own through the
``report_sections`` hook. The plots are in :mod:`envengineer.plugins.report.plots` (matplotlib,
imported only when plotting), the page in :mod:`envengineer.plugins.report.html`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import EnvEngineerError
from envengineer.plugins.report.html import IMAGE_DIR, render_html
from envengineer.plugins.report.plots import PLOTS, plots_of
from envengineer.plugins.report.view import RunView, load_run_view

__all__ = ["IMAGE_DIR", "PLOTS", "PLOT_NAMES", "REPORT_HTML", "Report", "render_html", "task_sections", "write_report"]

REPORT_HTML = "report.html"

#: Plot files this module may write besides ``rates_by_<grouping>.png``; ones not made this time are removed (stale).
PLOT_NAMES = tuple(name for name, _ in PLOTS if name is not None)


@dataclass
class Report:
    html: Path
    images: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def task_sections(run: RunView, pm: Any, problems: list[str]) -> list[tuple[str, str]]:
    """The (title, HTML) sections every ``report_sections`` hook implementation returns for
    ``run``, in registration order; one that raises or returns something else is noted in
    ``problems`` and skipped."""
    if pm is None:
        return []
    sections: list[tuple[str, str]] = []
    for impl in reversed(pm.hook.report_sections.get_hookimpls()):  # pluggy keeps them last-first
        kwargs = {"run": run, "generator": run.generator}
        try:
            result = impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})
            items = [(str(title), str(body)) for title, body in (result or [])]
        except Exception as exc:  # noqa: BLE001 - a plugin's section must not cost the whole report
            problems.append(f"plugin {impl.plugin_name}: report_sections failed: {type(exc).__name__}: {exc}")
            continue
        sections.extend(items)
    return sections


def _readable(*paths: Path) -> None:
    """Give report files the usual mode (0666 less umask): they are meant to be shared or served."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    for path in paths:
        os.chmod(path, 0o666 & ~mask)


def write_report(run_dir: str | Path, registry: Any) -> Report:
    """Write ``RUN_DIR/report.html`` and its PNGs in ``RUN_DIR/report/``, each atomically.

    ``registry`` resolves the run's task and benchmarks and holds the plugins whose
    ``report_sections`` add to the page (the command's: the installed plugins)."""
    from envengineer.fileio import write_text

    run = load_run_view(run_dir, registry)
    image_dir = run.path / IMAGE_DIR
    problems = list(run.problems)
    images: dict[str, Path] = {}
    for name, plot in plots_of(run):
        try:
            written = plot(run, image_dir / name)
        except EnvEngineerError:
            raise
        except Exception as exc:  # one odd file must not cost the whole report
            problems.append(f"plot {name}: {type(exc).__name__}: {exc}")
            written = None
        if written is not None:
            images[name] = written
    if image_dir.is_dir():
        for stale in [*(image_dir / n for n in PLOT_NAMES), *image_dir.glob("rates_by_*.png")]:
            if stale.name not in images and stale.is_file():
                stale.unlink()
    sections = task_sections(run, getattr(registry, "pm", None), problems)
    html_path = run.path / REPORT_HTML
    write_text(html_path, render_html(run, images, problems, sections))
    _readable(html_path, *images.values())
    return Report(html=html_path, images=list(images.values()), problems=problems)
