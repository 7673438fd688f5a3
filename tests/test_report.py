"""`envengineer report` and `envengineer compare` on hand-built run directories."""

import csv
import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from envengineer.cli.commands import app
from envengineer.plugins.report.page import render_html
from envengineer.plugins.report.view import load_run_view

pytest.importorskip("matplotlib")

SIZES = ("3x3", "4x4", "5x5", "6x6", "7x7", "8x8", "9x9", "10x10")
SUBSETS = ("wr_025", "wr_050", "wr_075")
BENCHES = ("mapf-3agents", "mapf-4agents", "mapf-5agents")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

runner = CliRunner()


def rates(n, valid, optimal, failures=None):
    vr, orate = valid / n, optimal / n
    return {
        "n": n, "valid": valid, "optimal": optimal,
        "valid_rate": round(vr, 6), "optimal_rate": round(orate, 6),
        "valid_se": round(math.sqrt(vr * (1 - vr) / n), 6), "optimal_se": round(math.sqrt(orate * (1 - orate) / n), 6),
        "failures": dict(sorted((failures or {}).items())),
    }


def summary(level, dims=("size",), n=20):
    """A Summary.to_dict(): valid rate falls with size/subset; ``level`` lifts everything."""
    by = {}
    total = {"n": 0, "valid": 0, "optimal": 0, "failures": {}}
    keys = {"size": SIZES, "subset": SUBSETS, "hole_ratio": ("0.1", "0.2")}
    for dim in dims:
        by[dim] = {}
        for i, key in enumerate(keys[dim]):
            valid = max(0, min(n, round(n * (level - 0.08 * i))))
            optimal = round(valid * 0.75)
            bad = n - valid
            failures = {k: v for k, v in {"conflict": bad // 2, "goal": bad - bad // 2}.items() if v}
            by[dim][key] = rates(n, valid, optimal, failures)
            if dim == dims[0]:
                total["n"] += n
                total["valid"] += valid
                total["optimal"] += optimal
                for k, v in failures.items():
                    total["failures"][k] = total["failures"].get(k, 0) + v
    return {"overall": rates(total["n"], total["valid"], total["optimal"], total["failures"]), "by": by}


def gen_config(shift):
    ratios = [0.125] * 8
    ratios[0] -= shift
    ratios[-1] += shift
    return {"sizes": {s: {"ratio": r, "hole_ratio": 0.1 + 0.02 * i, "wait_ratio": 0.3} for i, (s, r) in enumerate(zip(SIZES, ratios))}}


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def make_run(root, name, engineer, rounds=3, finished=3, level=0.5, bench_rounds=("last",), base_bench=True):
    """A run directory in the loop's layout; only ``finished`` of ``rounds`` rounds exist."""
    run = root / name
    run.mkdir(parents=True)
    (run / "run.yaml").write_text(yaml.safe_dump({
        "name": name, "task": {"name": "mapf-frozenlake", "agents": 2}, "rounds": rounds, "seed": 0, "budget": 4000,
        "context": {"preset": "V6"}, "engineer": {"name": engineer}, "trainer": {"name": "trl", "epochs": 3},
        "policy": {"name": "tiny"}, "eval": {"validation": "mapf-2agents-val", "benchmarks": list(BENCHES)},
    }, sort_keys=False))
    history = [{"round": None, "step": "base_eval", "time": "2026-01-01T00:00:00Z", "duration_s": 3.5}]
    write_json(run / "base" / "eval" / "summary.json", summary(level, ("size", "hole_ratio")))
    if base_bench:
        for b, bench in enumerate(BENCHES):
            write_json(run / "base" / "bench" / bench / "summary.json", summary(level - 0.1 * (b + 1), ("subset", "size")))
    for r in range(finished):
        d = run / f"round-{r:02d}"
        d.mkdir()
        (d / "config.yaml").write_text(yaml.safe_dump(gen_config(0.01 * r)))
        (d / "train").mkdir()
        (d / "train" / "curves.jsonl").write_text("".join(
            json.dumps({"step": s, "reward_mean": 0.2 + 0.05 * r + 0.01 * s, "reward_std": 0.1, "zero_std_frac": 0.5 - 0.02 * s,
                        "kl": 0.001 * s, "completion_length": 40 + s, "loss": None, "learning_rate": 1e-4}) + "\n"
            for s in range(1, 6)
        ))
        write_json(d / "eval" / "summary.json", {**summary(level + 0.1 * (r + 1), ("size", "hole_ratio")), "settings": {"temperature": 0.0, "max_tokens": 256}})
        if "all" in bench_rounds or ("last" in bench_rounds and r == finished - 1):
            for b, bench in enumerate(BENCHES):
                write_json(d / "bench" / bench / "summary.json", summary(level + 0.1 * (r + 1) - 0.1 * (b + 1), ("subset", "size")))
        (d / "engineer").mkdir()
        (d / "engineer" / "summary.md").write_text(f"Round {r}: large maps fail on <conflicts>. Moving budget to 10x10.\n")
        (d / "engineer" / "projection.yaml").write_text(yaml.safe_dump({
            "changes": [{"field": "sizes.10x10.ratio", "proposed": 0.5, "applied": 0.3, "reason": "ratios renormalised to 1"}],
            "accepted": ["sizes.10x10.hole_ratio"], "config": gen_config(0.01 * (r + 1)), "fallback": r == 1,
            "reason": "unusable YAML" if r == 1 else "",
        }))
        for step in ("generate", "train", "eval", "design"):
            history.append({"round": r, "step": step, "time": "2026-01-01T00:10:00Z", "duration_s": 60.0})
    (run / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return run


def check_png(path):
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_MAGIC
    image = imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100


# ------------------------------------------------------------------ report


def test_report_writes_html_and_valid_pngs(tmp_path):
    run = make_run(tmp_path, "v6-heuristic", "heuristic")
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "report.html" in result.output
    page = (run / "report.html").read_text()
    images = sorted((run / "report").glob("*.png"))
    assert {p.name for p in images} == {"rates.png", "rates_by_size.png", "failures.png", "config.png", "training.png", "bench.png"}
    for image in images:
        check_png(image)
        assert f'src="report/{image.name}"' in page
    assert not list(run.glob(".*.tmp")) and not list((run / "report").glob(".*.tmp"))
    # run config at the top, then the tables
    assert page.index("Run config") < page.index("Validation")
    assert "v6-heuristic" in page and "heuristic" in page and "mapf-2agents-val" in page
    assert "temperature=0.0, max_tokens=256" in page  # the evaluation's sampling settings
    assert '<span class="badge ok">complete</span>' in page
    last = json.loads((run / "round-02" / "eval" / "summary.json").read_text())
    assert f"{100 * last['overall']['valid_rate']:.1f}%" in page
    assert f"{100 * last['by']['size']['10x10']['optimal_rate']:.1f}%" in page
    assert "sizes.10x10.ratio" in page and "ratios renormalised to 1" in page
    assert "&lt;conflicts&gt;" in page and "<conflicts>" not in page  # engineer text is escaped
    assert "fallback" in page and "unusable YAML" in page
    bench = json.loads((run / "round-02" / "bench" / "mapf-4agents" / "summary.json").read_text())
    total = sum(100 * bench["by"]["subset"][s]["valid_rate"] for s in SUBSETS)
    assert f"{total:.1f}" in page
    for heading in ("Failure types", "Generator config per round", "Training", "Engineer", "Benchmarks", "Timeline"):
        assert heading in page


def test_report_of_a_partial_run(tmp_path):
    run = make_run(tmp_path, "crashed", "random", rounds=5, finished=1, bench_rounds=(), base_bench=False)
    (run / "round-01" / "train").mkdir(parents=True)  # started, nothing evaluated yet
    (run / "round-01" / "train" / "curves.jsonl").write_text('{"step": 1, "reward_mean": 0.3}\n{"step": 2, "rew')
    (run / "history.jsonl").open("a").write('{"round": 1, "step": "gen')  # cut by the crash
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    assert "partial: 1 of 5 rounds evaluated" in page
    assert "Benchmarks" not in page
    assert "line 2" in page  # the cut lines are reported, not fatal
    names = {p.name for p in (run / "report").glob("*.png")}
    assert "bench.png" not in names and {"rates.png", "training.png", "config.png"} <= names
    for image in (run / "report").glob("*.png"):
        check_png(image)


def test_report_with_base_only_and_bad_dir(tmp_path):
    run = tmp_path / "fresh"
    (run / "base" / "eval").mkdir(parents=True)
    (run / "base" / "eval" / "summary.json").write_text(json.dumps(summary(0.4)))
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    assert "No validation summary" not in (run / "report.html").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["report", str(empty)])
    assert result.exit_code != 0 and "not a run directory" in str(result.exception)


def test_report_removes_stale_plots(tmp_path):
    run = make_run(tmp_path, "r", "fixed")
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    for bench_dir in run.glob("*/bench"):
        for f in bench_dir.rglob("summary.json"):
            f.unlink()
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    assert not (run / "report" / "bench.png").exists()
    assert "bench.png" not in (run / "report.html").read_text()


# ------------------------------------------------------------------ compare


def _bench_expected(run, stage, bench):
    s = json.loads((run / stage / "bench" / bench / "summary.json").read_text())
    return {
        "valid_sum": sum(100 * s["by"]["subset"][k]["valid_rate"] for k in SUBSETS),
        "optimal_sum": sum(100 * s["by"]["subset"][k]["optimal_rate"] for k in SUBSETS),
        "valid": 100 * s["overall"]["valid_rate"],
        "optimal": 100 * s["overall"]["optimal_rate"],
    }


def test_compare_csv_and_markdown_hold_the_files_values(tmp_path):
    a = make_run(tmp_path, "v6", "heuristic", level=0.5, bench_rounds=("all",))
    b = make_run(tmp_path, "fixed", "fixed", level=0.4, finished=2, bench_rounds=())  # no round benched: base
    out_csv, out_md = tmp_path / "table.csv", tmp_path / "table.md"
    result = runner.invoke(app, ["compare", str(a), str(b), "--output", str(out_csv)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "v6" in result.output and "fixed" in result.output and "3 agents" in result.output
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["run"] for r in rows] == ["v6", "fixed"] and [r["engineer"] for r in rows] == ["heuristic", "fixed"]
    for row, run, stage in ((rows[0], a, "round-02"), (rows[1], b, "base")):
        for bench, agents in zip(BENCHES, (3, 4, 5)):
            expected = _bench_expected(run, stage, bench)
            assert float(row[f"{agents} agents valid Σ"]) == pytest.approx(expected["valid_sum"], abs=1e-3)
            assert float(row[f"{agents} agents optimal Σ"]) == pytest.approx(expected["optimal_sum"], abs=1e-3)
            assert float(row[f"{agents} agents valid %"]) == pytest.approx(expected["valid"], abs=1e-3)
            assert float(row[f"{agents} agents optimal %"]) == pytest.approx(expected["optimal"], abs=1e-3)
    last_b = json.loads((b / "round-01" / "eval" / "summary.json").read_text())
    assert float(rows[1]["validation valid %"]) == pytest.approx(100 * last_b["overall"]["valid_rate"], abs=1e-3)
    assert "bench: base" in rows[1]["from"] and "val: 01" in rows[1]["from"]
    assert "bench: 02" in rows[0]["from"]

    assert runner.invoke(app, ["compare", str(a), str(b), "--output", str(out_md)]).exit_code == 0
    md = out_md.read_text()
    assert md.startswith("| run | engineer | 3 agents valid Σ")
    expected = _bench_expected(a, "round-02", "mapf-5agents")
    assert f"| {expected['valid_sum']:.1f} |" in md


def test_compare_missing_values_show_a_dash(tmp_path):
    a = make_run(tmp_path, "v6", "heuristic")
    bare = make_run(tmp_path, "nobench", "random", finished=1, bench_rounds=(), base_bench=False)
    out = tmp_path / "t.md"
    result = runner.invoke(app, ["compare", str(a), str(bare), "--output", str(out)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    line = next(l for l in out.read_text().splitlines() if l.startswith("| nobench"))
    assert line.count("| – ") == 12  # 3 benchmarks × 4 columns
    assert "–" in result.output
    out_csv = tmp_path / "t.csv"
    assert runner.invoke(app, ["compare", str(bare), "--output", str(out_csv)]).exit_code == 0
    row = next(csv.DictReader(out_csv.open()))
    assert row["3 agents valid %"] == "" and row["validation valid %"] != ""


def test_compare_rejects_unknown_output_suffix(tmp_path):
    a = make_run(tmp_path, "v6", "heuristic")
    result = runner.invoke(app, ["compare", str(a), "--output", str(tmp_path / "t.txt")])
    assert result.exit_code != 0 and ".md or .csv" in str(result.exception)


def test_import_stays_light():
    import subprocess
    import sys

    code = "import sys, envengineer.plugins.report.page, envengineer.plugins.report.compare, envengineer.plugins.report.view; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_report_survives_odd_files(tmp_path):
    run = make_run(tmp_path, "odd", "heuristic", finished=2)
    write_json(run / "round-00" / "eval" / "summary.json", {"overall": {"n": 0, "valid_rate": None}})  # no "by", no rates
    write_json(run / "round-01" / "eval" / "summary.json", [1, 2, 3])  # not a summary
    (run / "round-01" / "config.yaml").write_text("sizes: [unclosed")
    (run / "round-00" / "engineer" / "projection.yaml").write_text("just a string\n")
    (run / "round-00" / "train" / "curves.jsonl").write_text('{"step": 1, "reward_mean": null}\n{"reward_mean": 0.5, "reward_std": null}\n')
    write_json(run / "base" / "bench" / "mapf-3agents" / "summary.json", {"overall": {"n": 10, "valid_rate": 0.5}, "by": {"subset": {"wr_025": {}}}})
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    assert "Could not read" in page and "not a summary" in page and "not valid YAML" in page
    for image in (run / "report").glob("*.png"):
        check_png(image)
    assert runner.invoke(app, ["compare", str(run), "--output", str(tmp_path / "t.csv")]).exit_code == 0


def test_error_messages_keep_square_brackets(tmp_path):
    """Rich markup must not eat text in brackets (file names, extras such as envengineer[report])."""
    import subprocess
    import sys

    missing = tmp_path / "run[report].yaml"
    code = "import sys; from envengineer.cli.commands import main; sys.argv = ['envengineer', 'run', sys.argv[1]]; main()"
    result = subprocess.run([sys.executable, "-c", code, str(missing)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "run[report].yaml" in result.stderr


def test_report_pairs_each_round_with_the_base_on_the_same_instances(tmp_path):
    run = make_run(tmp_path, "paired", "heuristic", rounds=2, finished=2)

    def verdicts(stage, valid):
        lines = [json.dumps({"id": f"i{k}", "valid": v}) for k, v in enumerate(valid)]
        (run / stage / "eval" / "verdicts.jsonl").write_text("\n".join(lines) + "\n")

    verdicts("base", [True, False, False, True, False, False])
    verdicts("round-00", [True, True, True, False, True, True])  # +4 −1
    verdicts("round-01", [True, False])  # other instances: no pairing
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    page = (run / "report.html").read_text()
    assert "+4 −1 (p = 0.375)" in page  # 2 * P(X <= 1), X ~ Bin(5, 1/2) = 2 * 6/32
    assert page.count("(p = ") == 1


# ------------------------------------------------------------------ failed experiments


def _set_designs(run, outcomes):
    """Rewrite each round's design record: ``outcomes[r]`` = (fell back, reason, halted) in history.jsonl."""
    lines = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    for line in lines:
        if line["step"] == "design":
            fell, reason, halted = outcomes[line["round"]]
            line.update(fallback=fell, reason=reason, **({"halted": True} if halted else {}))
    (run / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _banner(page):
    start = page.find('<section id="fallbacks"')
    return page[start:page.index("</section>", start)] if start >= 0 else None


def test_a_run_whose_every_design_fell_back_is_flagged_as_a_failed_experiment(tmp_path):
    run = make_run(tmp_path, "no-key", "openai")
    why = "engineer call failed: engineer.openai: set the API key in the environment variable OPENAI_API_KEY"
    _set_designs(run, {0: (True, "the answer was empty", False), 1: (True, "unusable YAML", False), 2: (True, why, False)})
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    banner = _banner(page)
    assert banner is not None and 'class="alarm"' in banner
    assert "FAILED EXPERIMENT: all 3 design step(s) fell back" in banner and "fixed baseline" in banner
    assert "OPENAI_API_KEY" in banner  # the last reason, not the first
    assert page.index('id="fallbacks"') < page.index('id="validation"')  # above everything else


def test_a_run_stopped_by_max_fallbacks_says_so(tmp_path):
    run = make_run(tmp_path, "stopped", "openai", rounds=3, finished=2)
    _set_designs(run, {0: (False, "", False), 1: (True, "engineer call failed: 404 model not found", True)})
    banner = _banner(render_html(load_run_view(run), {}))
    assert "stopped by design.max_fallbacks after 1 of 2 design step(s) fell back" in banner
    assert "404 model not found" in banner and 'class="alarm"' in banner


def test_some_fallbacks_get_a_warning_and_none_get_no_banner(tmp_path):
    run = make_run(tmp_path, "mixed", "openai")  # round 1's projection.yaml records a fallback
    banner = _banner(render_html(load_run_view(run), {}))
    assert 'class="alarm warn"' in banner and "1 of 3 design steps fell back" in banner and "unusable YAML" in banner
    assert "FAILED" not in banner
    _set_designs(run, {r: (False, "", False) for r in range(3)})  # history.jsonl outranks projection.yaml
    assert _banner(render_html(load_run_view(run), {})) is None


# ------------------------------------------------------------------ the validation set's aggregate


def _section(page, name):
    start = page.index(f'<section id="{name}"')
    return page[start:page.index("</section>", start)]


def test_report_shows_the_validation_sets_declared_aggregate(tmp_path):
    """mapf-2agents-val declares the paper's "Sum over subsets": summary.json holds it, and the report
    shows it in the per-round validation table and beside the benchmarks' sums."""
    run = make_run(tmp_path, "val-sum", "heuristic", rounds=2, finished=2)
    sums = {}
    for stage in ("base", "round-00", "round-01"):
        path = run / stage / "eval" / "summary.json"
        data = json.loads(path.read_text())
        by_subset = summary(0.6 if stage == "base" else 0.7, ("subset",))["by"]["subset"]
        data["by"]["subset"] = by_subset
        recorded = {m: round(sum(by_subset[k][f"{m}_rate"] for k in SUBSETS), 6) for m in ("valid", "optimal")}
        data["sum_over_subsets"] = recorded  # as evaluation records the declared aggregate
        path.write_text(json.dumps(data))
        sums[stage] = recorded
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    page = (run / "report.html").read_text()
    validation = _section(page, "validation")
    table = validation[:validation.index("</table>")]  # the per-round table
    assert ">Σ valid</th>" in table and ">Σ optimal</th>" in table
    for stage, recorded in sums.items():
        for metric in ("valid", "optimal"):
            assert f">{100 * recorded[metric]:.1f}</td>" in table, (stage, metric)
    assert "Sum over subsets, the per-subset rates added up in percent (out of 300)" in validation
    bench = _section(page, "benchmarks")
    assert "mapf-2agents-val, the validation set" in bench
    own = bench[bench.index("the validation set"):]
    own = own[:own.index("</table>")]
    assert ">Σ valid</th>" in own and f">{100 * sums['round-01']['valid']:.1f}</td>" in own
    assert bench.index("the validation set") < bench.index("mapf-3agents")


def test_report_without_a_validation_aggregate_adds_no_column(tmp_path):
    run = make_run(tmp_path, "no-sum", "heuristic", rounds=1, finished=1)  # validation summaries without subsets
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    page = (run / "report.html").read_text()
    assert "Σ valid" not in _section(page, "validation") and "the validation set" not in page


def test_the_pages_commands_run_as_written(tmp_path, monkeypatch):
    """docs/reports.md's shell blocks, run in order from a clone's root (here: the runs go to tmp_path):
    they make the runs they report on and compare, and what they print is what the page says."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "reports.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", page, flags=re.S)
    commands = [line for block in blocks for line in block.splitlines() if line.startswith("envengineer ")]
    assert [c.split()[1] for c in commands] == ["run", "report", "run", "run", "compare"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(root / "examples")
    runner = CliRunner()
    for command in commands:
        done = runner.invoke(app, shlex.split(command)[1:])
        assert done.exit_code == 0, (command, done.output[-2000:])
        if command.startswith("envengineer report"):
            assert "wrote runs/sim-heuristic/report.html and 6 plots in runs/sim-heuristic/report" in " ".join(done.output.split())
    table = (tmp_path / "results.md").read_text()
    for row, figures in {"sim-heuristic": ("24.4", "24.2"), "sim-fixed": ("21.5", "21.2"), "sim-random": ("21.2", "21.5")}.items():
        cells = next(line for line in table.splitlines() if line.startswith(f"| {row} |")).split(" | ")
        assert (cells[4], cells[6]) == figures, cells  # mapf-2agents-test valid %, validation valid %
        assert f"`{row}` {figures[1]}% and {figures[0]}%" in page
