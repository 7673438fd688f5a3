"""A screenshot of TensorBoard's dashboard for a run, on a machine with no browser installed.

    pip install kaleido==0.2.1 pymupdf          # a headless Chromium in a wheel, and a PDF rasteriser
    python scripts/tensorboard_screenshot.py runs/quickstart --out tb.png
    python scripts/tensorboard_screenshot.py runs/quickstart --tags 'validation/valid_rate|train/loss'

TensorBoard's own server (``tensorboard --logdir``'s) serves the run's event files at a free port on
127.0.0.1; the Scalars dashboard, filtered to ``--tags`` (a regular expression), is loaded by the
headless Chromium that kaleido 0.2.1 ships, inside a page of the same size, printed to PDF by
Chromium, and the PDF rasterised to PNG. kaleido exists to export plotly figures: this script runs a
copy of its Chromium with one addition to the copy's page script (a request carrying ``page_url``
shows that page in a full-size frame and lets Chromium print it), so nothing installed is changed.
Used for docs/trackers.md; not a dependency of envengineer.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tensorboard_figure import serve  # noqa: E402

#: Prepended to kaleido's render(): a request whose data has ``page_url`` shows that page instead of a figure.
PAGE_HOOK = r"""function render (info, mapboxAccessToken, topojsonURL) {
  if (info.format === 'pdf' && info.data && info.data.page_url) {
    const w = info.width, h = info.height;
    document.getElementById("head-style").innerHTML =
      `@page { size: ${w}px ${h}px; margin: 0 } html, body { margin: 0; padding: 0; background: white; overflow: hidden }
       iframe { border: 0; display: block }`;
    const frame = document.createElement('iframe');
    frame.src = info.data.page_url; frame.width = w; frame.height = h;
    document.body.innerHTML = '';
    document.body.appendChild(frame);
    return new Promise((resolve) => setTimeout(() => resolve({code: 0, message: 'Success', pdfBgColor: 'white',
      format: 'pdf', result: null, width: w, height: h, scale: 1}), info.data.wait_ms));
  }
"""
RENDER = "function render (info, mapboxAccessToken, topojsonURL) {\n"


def page_pdf(url: str, width: int, height: int, wait_ms: int, workdir: Path) -> bytes:
    """Chromium's print of ``url`` at ``width`` × ``height`` pixels, ``wait_ms`` after it started loading."""
    import kaleido
    from kaleido.scopes.plotly import PlotlyScope

    executable = workdir / "executable"
    shutil.copytree(Path(kaleido.__file__).parent / "executable", executable, symlinks=True)
    script = executable / "js" / "kaleido_scopes.js"
    text = script.read_text()
    if text.count(RENDER) != 1:
        raise SystemExit(f"{script}: kaleido's render() not found: this needs kaleido 0.2.1")
    script.write_text(text.replace(RENDER, PAGE_HOOK))
    stub = workdir / "plotly-stub.js"  # kaleido loads plotly.js at start-up; the page needs none
    stub.write_text("window.Plotly = {version: '0.0.0'};\n")

    class PageScope(PlotlyScope):
        @classmethod
        def executable_path(cls):
            return str(executable / "kaleido")

        def _json_dumps(self, value):
            return json.dumps(value)

    scope = PageScope(plotlyjs=str(stub), disable_gpu=True)
    scope.chromium_args = (*scope.chromium_args, "--no-sandbox")
    try:
        response = scope._perform_transform({"page_url": url, "wait_ms": wait_ms}, format="pdf", width=width, height=height, scale=1)
    finally:
        scope._shutdown_kaleido()
    if response.get("code") != 0 or not response.get("result"):
        raise SystemExit(f"Chromium did not print the page: {response.get('message')}")
    result = response["result"]
    return base64.b64decode(result) if isinstance(result, str) else result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run directory (its tb/ folder is read) or a folder of event files")
    parser.add_argument("--tags", default="validation/valid_rate|train/loss", help="the dashboard's tag filter (a regular expression)")
    parser.add_argument("--out", type=Path, default=Path("tensorboard.png"))
    parser.add_argument("--width", type=int, default=1500)
    parser.add_argument("--height", type=int, default=700)
    parser.add_argument("--wait-s", type=float, default=25.0, help="seconds the dashboard gets to load before the print")
    args = parser.parse_args()

    import urllib.parse

    import pymupdf

    log_dir = args.run_dir / "tb" if (args.run_dir / "tb").is_dir() else args.run_dir
    if not log_dir.is_dir():
        raise SystemExit(f"{log_dir}: no such folder")
    base = serve(log_dir)
    url = f"{base}#scalars&_smoothingWeight=0&tagFilter={urllib.parse.quote(f'^({args.tags})$', safe='')}"
    with tempfile.TemporaryDirectory(prefix="tb-shot-") as workdir:
        pdf = page_pdf(url, args.width, args.height, int(args.wait_s * 1000), Path(workdir))
    page = pymupdf.open(stream=pdf, filetype="pdf")[0]
    page.get_pixmap(dpi=96).save(str(args.out))
    print(f"wrote {args.out} (TensorBoard at {base}, tags ^({args.tags})$)")


if __name__ == "__main__":
    main()
