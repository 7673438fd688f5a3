"""The verdicts of docs/results-frontier-seeds.md's predictions P1-P5, read mechanically from the analysis.

``python bench/frontier_seeds_verdicts.py runs/frontier-seeds/steps.json`` after ``bench/frontier_steps.py
runs/frontier-seeds --primary seeds --tests learnability:fixed learnability:strongest rlve:fixed
learnability:learnability-instances`` has written that file. Each prediction is checked by the falsification rule
the page registered before the runs (its section "Predictions"), nothing else:

- P1 ``learnability`` does not beat ``fixed`` on the k9-k10 target (falsified if it beats it);
- P2 ``learnability`` does not beat the strongest baseline, and the strongest is ``rlve``;
- P3 ``rlve`` beats ``fixed`` on the target, with at most two thirds of its mean difference from 3x3 and 4x4 walks
  (the target is balanced over grid sizes, so the mean difference is the mean of the per-size differences and a
  size's share is its difference over their sum);
- P4 ``learnability`` beats ``learnability-instances`` on the target;
- P5 on the never-trained target no arm's mean exceeds 2% and no comparison is "beats" either way.

"Beats" is the registered one: the seed-level sign-flip test, Holm within the target's family, adjusted p < 0.05
with the mean difference of that sign. The figures each verdict rests on are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_engineer_claims import markdown  # noqa: E402  (bench/llm_engineer_claims.py, beside this file)

from envengineer.fileio import write_text  # noqa: E402

TARGET, BEYOND = "k9-k10 target", "k11-k12 never trained"
TARGET_PARTS = "bench:grid-walk-target"
SMALL_SIZES = ("size=3", "size=4")
ALPHA = 0.05


def _row(report: dict[str, Any], family: str, a: str, b: str) -> dict[str, Any] | None:
    return next((t for t in report["tests"] if t["family"] == family and t["a"] == a and t["b"] == b), None)


def _beats(row: dict[str, Any] | None, sign: int = 1) -> bool:
    """A beats B (``sign`` 1) or B beats A (-1) by the seed-level test, Holm-adjusted within the family."""
    if row is None or row.get("mean_diff") is None or row.get("p_seeds_holm") is None:
        return False
    return sign * row["mean_diff"] > 0 and row["p_seeds_holm"] < ALPHA


def _figures(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not in the analysis"
    interval = f" [{100 * row['interval'][0]:+.1f}, {100 * row['interval'][1]:+.1f}]" if row.get("interval") else ""
    p = row.get("p_seeds_holm")
    return (f"{row['a']} − {row['b']}: {100 * row['mean_diff']:+.1f} points{interval}, p (Holm) "
            + ("—" if p is None else f"{p:.3g}"))


def small_share(report: dict[str, Any], a: str, b: str) -> tuple[float | None, dict[str, float]]:
    """The share of A − B's mean difference on the target that comes from 3x3 and 4x4 walks, and each size's mean
    difference (points); None when the per-size differences sum to zero or below (no positive difference to share)."""
    entry = next((t for t in report.get("parts", {}).get(TARGET_PARTS, {}).get("tests", []) if t["a"] == a and t["b"] == b), None)
    if entry is None:
        return None, {}
    sizes = {part: value["mean"] for part, value in entry["parts"].items() if part.startswith("size=") and value["mean"] is not None}
    total = sum(sizes.values())
    share = sum(sizes.get(part, 0.0) for part in SMALL_SIZES) / total if total > 0 else None
    return share, {part: 100 * value for part, value in sizes.items()}


def verdicts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """P1-P5 as registered: each with ``held`` (True, False) and the figures it rests on."""
    if any(t.get("primary") != "seeds" for t in report["tests"]):
        raise SystemExit("the analysis was not run with --primary seeds: the registered test is the seed-level one")
    out: list[dict[str, Any]] = []
    t1 = _row(report, TARGET, "learnability", "fixed")
    out.append({"prediction": "P1", "claim": "learnability does not beat fixed (k9-k10 target)", "held": t1 is not None and not _beats(t1),
                "figures": _figures(t1) + ("; |difference| < 4 points as expected" if t1 and abs(100 * t1["mean_diff"]) < 4
                                           else "; |difference| ≥ 4 points, beyond the expectation" if t1 else "")})
    strongest = next((t.get("strongest_baseline") for t in report["tests"] if t["family"] == TARGET), None)
    t2 = _row(report, TARGET, "learnability", strongest) if strongest else None
    out.append({"prediction": "P2", "claim": "learnability does not beat the strongest baseline, and the strongest is rlve",
                "held": t2 is not None and not _beats(t2) and strongest == "rlve",
                "figures": f"strongest: {strongest}; " + _figures(t2)})
    t3 = _row(report, TARGET, "rlve", "fixed")
    share, sizes = small_share(report, "rlve", "fixed")
    out.append({"prediction": "P3", "claim": "rlve beats fixed, at most two thirds of it from 3x3 and 4x4 walks",
                "held": _beats(t3) and share is not None and share <= 2 / 3,
                "figures": _figures(t3) + "; by size " + ", ".join(f"{p.split('=')[1]}x{p.split('=')[1]} {v:+.1f}" for p, v in sizes.items())
                + ("; 3x3+4x4 share " + (f"{share:.0%}" if share is not None else "— (no positive difference)"))})
    t4 = _row(report, TARGET, "learnability", "learnability-instances")
    out.append({"prediction": "P4", "claim": "learnability beats learnability-instances (k9-k10 target)", "held": _beats(t4),
                "figures": _figures(t4)})
    means = {arm: 100 * statistics.fmean(entry["beyond"].values()) for arm, entry in report["arms"].items() if entry.get("beyond")}
    beyond_rows = [t for t in report["tests"] if t["family"] == BEYOND]
    either = [f"{t['a']} − {t['b']}" for t in beyond_rows if _beats(t) or _beats(t, -1)]
    out.append({"prediction": "P5", "claim": "on the never-trained target no arm's mean exceeds 2%, no comparison beats either way",
                "held": bool(means) and max(means.values()) <= 2.0 and not either,
                "figures": "means " + ", ".join(f"{a} {m:.1f}%" for a, m in means.items())
                + ("; beats either way: " + ", ".join(either) if either else "; no comparison beats either way")})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps", type=Path, help="the steps.json bench/frontier_steps.py wrote (run with --primary seeds)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table as markdown here")
    args = parser.parse_args()
    if not args.steps.is_file():
        raise SystemExit(f"{args.steps}: no such file (run bench/frontier_steps.py first)")
    rows = verdicts(json.loads(args.steps.read_text()))
    table = Table(title=f"{args.steps}: the registered predictions, by their falsification rules", title_justify="left")
    for column in ("", "prediction", "held", "the figures"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["prediction"], row["claim"], "held" if row["held"] else "FALSIFIED", row["figures"])
    Console(soft_wrap=False).print(table)
    if args.markdown:
        write_text(args.markdown, markdown(table))
    sys.exit(0)


if __name__ == "__main__":
    main()
