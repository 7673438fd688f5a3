"""The report, compare, suite and the engineer's context draw whatever a run's task declares
(issue 10), shown on a recorded run of the arith example (examples/envengineer-arith, registered
at runtime, with two benchmarks of its own declared here), also with the MAPF plugin blocked,
and on a run whose task is not installed (generic fallbacks from the files)."""

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from envengineer.components import Aggregate, Benchmark, Grouping, Policy
from envengineer.hookspecs import hookimpl
from envengineer.plugin_manager import create_plugin_manager
from envengineer.registry import Registry
from conftest import import_arith

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()


_arith_module = import_arith


#: Two evaluation sets of the arith task (beside the package's own arith-val), declared as a third party would: subsets on a record
#: field ``part``; the validation set averages its subsets, the benchmark adds them up.
PARTS = Grouping("part", title="part", order=("even", "odd"))
VAL = Benchmark("arith-parts", "arith", "arith validation", Path("arith-parts.jsonl"), "", subsets=PARTS,
                aggregate=Aggregate("mean_over_parts", "Mean over parts", how="mean"))
HARD = Benchmark("arith-hard", "arith", "long sums", Path("arith-hard.jsonl"), "", subsets=PARTS,
                 aggregate=Aggregate("sum_over_parts", "Sum over parts", how="sum"), label="hard sums", order=1)


class ArithSets:
    @hookimpl
    def register_benchmarks(self, register):
        register(VAL)
        register(HARD)


def arith_registry(block_mapf=False):
    pm = create_plugin_manager(entry_points=False, environ={"ENVENGINEER_BLOCK_PLUGINS": "mapf_frozenlake"} if block_mapf else {})
    pm.register(_arith_module(), name="arith")
    pm.register(ArithSets(), name="arith-sets")
    return Registry(pm)


@pytest.fixture
def registry_arith():
    return arith_registry()


class Echo(Policy):
    """A policy that answers every prompt with the reference answer, except every ``miss``-th."""

    name = "echo"

    def __init__(self, generator, records, miss):
        super().__init__()
        self.answers = [generator.reference_answer(r) if i % miss else "<answer>1</answer>" for i, r in enumerate(records)]

    def failed_calls(self):
        return []

    def sample(self, prompts, n=1):
        return [[self.answers.pop(0)] for _ in prompts]


def _eval(folder, generator, validator, bench, miss, seed):
    from envengineer.loop.evaluation import evaluate, failing_examples, write_eval

    records = generator.generate(generator.default_config(), n=24, seed=seed).records
    for i, record in enumerate(records):
        record["part"] = PARTS.order[i % 2]
    result = evaluate(Echo(generator, records, miss), generator, validator, records, benchmark=bench)
    write_eval(folder, result, failing_examples(result, generator))


def make_arith_run(root, registry, name="arith-run"):
    """A recorded arith run in the loop's layout: base and two rounds evaluated on arith-parts,
    the last round benched on arith-hard, the second config with more addends."""
    generator, validator = registry.task("arith")
    run = root / name
    run.mkdir(parents=True)
    (run / "run.yaml").write_text(yaml.safe_dump({
        "name": name, "task": {"name": "arith"}, "rounds": 2, "seed": 0, "budget": 24,
        "context": {"preset": "V6"}, "engineer": {"name": "heuristic"}, "trainer": {"name": "trl"},
        "policy": {"name": "tiny"}, "eval": {"validation": "arith-parts", "benchmarks": ["arith-hard"]},
    }, sort_keys=False))
    _eval(run / "base" / "eval", generator, validator, VAL, 2, 1)
    configs = [generator.default_config().model_dump(), generator.default_config().model_dump()]
    configs[1]["groups"]["3d"]["terms"] = 5
    history = []
    for r, config in enumerate(configs):
        d = run / f"round-{r:02d}"
        d.mkdir()
        (d / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        _eval(d / "eval", generator, validator, VAL, 3 + r, 1)
        if r == 1:
            _eval(d / "bench" / "arith-hard", generator, validator, HARD, 4, 2)
        (d / "engineer").mkdir()
        (d / "engineer" / "summary.md").write_text(f"Round {r}: 3d sums fail; more addends there.\n")
        history += [{"round": r, "step": s, "time": "2026-01-01T00:00:00Z", "duration_s": 1.0} for s in ("generate", "train", "eval", "design")]
    (run / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return run


def check_png(path):
    assert path.read_bytes()[:8] == PNG_MAGIC


MAPF_WORDS = ("map size", "wr_025", "agents", "out of 300", "hole", "paper")


def test_the_report_draws_the_arith_runs_groupings_knobs_and_benchmark(tmp_path, registry_arith):
    from envengineer.plugins.report.page import write_report
    from envengineer.plugins.report.view import load_run_view

    run_dir = make_arith_run(tmp_path, registry_arith)
    report = write_report(run_dir, registry_arith)
    names = {p.name for p in report.images}
    assert names == {"rates.png", "rates_by_digits.png", "failures.png", "config.png", "bench.png"}, names
    for image in report.images:
        check_png(image)
    assert not report.problems
    page = report.html.read_text()
    # groupings: the declared titles, the validation set's subsets, the primary's plot
    for heading in ("by digits per term", "by addends", "by part", 'src="report/rates_by_digits.png"'):
        assert heading in page, heading
    # the benchmark: its label, its subsets, its aggregate and its "out of" from 2 subsets
    bench = json.loads((run_dir / "round-01" / "bench" / "arith-hard" / "summary.json").read_text())
    assert "<h3>hard sums <span class='se'>arith-hard</span></h3>" in page
    assert "even valid" in page and "Σ valid" in page
    assert f"{100 * bench['sum_over_parts']['valid']:.1f}" in page
    assert "Σ: Sum over parts, the per-subset rates added up in percent (out of 200)." in page
    for word in MAPF_WORDS:
        assert word not in page.split("</style>", 1)[1].replace(str(run_dir), ""), word
    # knobs: one heatmap per declared knob, groups × rounds, from the declared table
    run = load_run_view(run_dir, registry_arith)
    layout = run.knob_layout()
    assert (layout.table, layout.knobs, layout.groups, layout.declared) == ("groups", ("ratio", "terms"), ("1d", "2d", "3d"), True)
    assert [layout.values(s.config)["3d"]["terms"] for s in run.rounds] == [2, 5]


def test_compare_and_the_suite_use_the_benchmarks_label_and_aggregate(tmp_path, registry_arith):
    from envengineer.plugins.report.compare import compare_runs, rich_tables, to_csv, to_markdown
    from envengineer.loop.runconfig import RunConfig
    from envengineer.plugins.report.view import load_run_view
    from envengineer.plugins.suite import tables as S

    a = make_arith_run(tmp_path, registry_arith, "a")
    comparison = compare_runs([load_run_view(a, registry_arith)])
    rows = list(csv.DictReader(to_csv(comparison).splitlines()))
    bench = json.loads((a / "round-01" / "bench" / "arith-hard" / "summary.json").read_text())
    assert float(rows[0]["hard sums valid Σ"]) == pytest.approx(100 * bench["sum_over_parts"]["valid"], abs=1e-3)
    assert float(rows[0]["hard sums optimal %"]) == pytest.approx(100 * bench["overall"]["optimal_rate"], abs=1e-3)
    assert "out of 200" in to_markdown(comparison) and "300" not in to_markdown(comparison)
    assert rich_tables(comparison)[0].title.startswith("comparison: Σ over subsets")

    config = RunConfig.model_validate({**yaml.safe_load((a / "run.yaml").read_text()), "suite": {"table": "arith"}})
    entry = S.SuiteEntry(Path("a.yaml"), config, [S.SuiteRun(config, 0, a, S.FINISHED)])
    table = S.tables(S.Suite(tmp_path / "suite", [entry]), registry_arith)["arith"]
    row = next(csv.DictReader(to_csv(table).splitlines()))
    assert float(row["arith-hard valid Σ"]) == pytest.approx(100 * bench["sum_over_parts"]["valid"], abs=1e-3)
    assert "Sum over parts" in table.note and "out of 200" in table.note


def test_a_mean_aggregate_is_out_of_100_and_computed_from_the_subsets_when_not_recorded():
    from envengineer.plugins.report.drawn import BenchView

    view = BenchView.of("arith-parts", VAL)
    summary = {"overall": {}, "by": {"part": {"even": {"valid_rate": 0.5}, "odd": {"valid_rate": 0.25}}}}
    assert (view.symbol, view.out_of(), view.figure(summary, "valid")) == ("mean", 100, 37.5)
    del summary["by"]["part"]["odd"]
    assert view.figure(summary, "valid") is None  # a partial mean never passes for a full one
    assert BenchView.of("x", None).figure(summary, "valid") is None


def test_the_context_of_an_arith_run_shows_its_groups_and_knobs(tmp_path, registry_arith):
    from envengineer.design.context import compose_context
    from envengineer.design.evidence import load_evidence

    run_dir = make_arith_run(tmp_path, registry_arith)
    text = compose_context(registry_arith, "V6", load_evidence(run_dir, 1, registry_arith))
    assert "3d" in text and "terms" in text and "digits" in text.lower()
    assert "agents" not in text and "hole" not in text


def test_report_and_compare_work_on_an_arith_run_with_the_mapf_plugin_blocked(tmp_path, monkeypatch):
    from envengineer.cli import commands as cli
    import envengineer.registry

    monkeypatch.setenv("ENVENGINEER_BLOCK_PLUGINS", "mapf_frozenlake")
    registry = arith_registry(block_mapf=True)
    assert "mapf-frozenlake" not in registry.names("generator") and not any(b.startswith("mapf") for b in registry.names("benchmark"))
    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: registry)  # the commands' state builds it
    run_dir = make_arith_run(tmp_path, registry)
    result = runner.invoke(cli.app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "skipped" not in result.output
    page = (run_dir / "report.html").read_text()
    assert "by digits per term" in page and "hard sums" in page
    out = tmp_path / "t.csv"
    result = runner.invoke(cli.app, ["compare", str(run_dir), "--output", str(out)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "hard sums" in result.output
    assert "hard sums valid Σ" in next(csv.reader(out.open()))


def test_a_run_whose_task_is_not_installed_is_drawn_from_its_files(tmp_path, registry_arith, registry):
    """Recorded with arith installed, read where only the built-ins are: a note, the summaries'
    own ``by`` keys, the knob table found in the configs, the benchmark under its name."""
    from envengineer.plugins.report.page import write_report
    from envengineer.plugins.report.view import load_run_view

    run_dir = make_arith_run(tmp_path, registry_arith)
    run = load_run_view(run_dir, registry)
    assert run.task == "arith" and run.generator is None
    assert any("task 'arith' is not installed" in p for p in run.problems)
    assert [d.name for d in run.dimensions()] == ["digits", "part", "addends"]
    layout = run.knob_layout()
    assert (layout.table, set(layout.knobs), layout.declared) == ("groups", {"ratio", "terms"}, False)
    report = write_report(run_dir, registry)
    assert {p.name for p in report.images} >= {"rates_by_digits.png", "config.png", "bench.png"}
    page = report.html.read_text()
    assert "not installed" in page and "by digits" in page and "arith-hard" in page and "Σ" not in page


def test_a_task_adds_its_own_report_sections(tmp_path, registry_arith):
    from envengineer.plugins.report.page import write_report

    seen = []

    class Sections:
        @hookimpl
        def report_sections(self, run, generator):
            seen.append((run.task, generator.name if generator else None))
            return [("Carries", "<p>carry <b>analysis</b></p>")] if run.task == "arith" else []

    class Broken:
        @hookimpl
        def report_sections(self, run):
            raise RuntimeError("boom")

    registry_arith.pm.register(Sections(), name="arith-report")
    registry_arith.pm.register(Broken(), name="broken-report")
    run_dir = make_arith_run(tmp_path, registry_arith)
    report = write_report(run_dir, registry_arith)
    page = report.html.read_text()
    assert seen == [("arith", "arith")]
    assert '<section id="task-carries"><h2>Carries</h2><p>carry <b>analysis</b></p></section>' in page
    assert '<a href="#task-carries">Carries</a>' in page
    assert any("broken-report: report_sections failed: RuntimeError: boom" in p for p in report.problems)
    assert page.index('id="benchmarks"') < page.index('id="task-carries"') < page.index('id="timeline"')


def test_knob_layouts_for_top_level_knobs_and_for_undeclared_ones():
    from envengineer.components import Knob
    from envengineer.plugins.report.drawn import KnobLayout, knob_layout

    flat = SimpleNamespace(knobs=(Knob("level", 1, 5, 1, integer=True, harder="up"),), knob_table=None, groups=lambda: ("all",))
    layout = knob_layout(flat, [{"level": 2}])
    assert (layout.table, layout.knobs) == (None, ("level",))
    assert layout.values({"level": 3, "other": "x"}) == {KnobLayout.ROW: {"level": 3}} and layout.values({"x": 1}) is None
    found = knob_layout(None, [{"name": "c", "depth": 2, "flag": True}, {"depth": 4}])
    assert (found.table, found.knobs, found.declared) == (None, ("depth",), False)
    assert knob_layout(None, [{"name": "c"}]) is None
