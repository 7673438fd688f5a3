"""The engineer benchmark (`envengineer engineers score`, docs/engineer-score.md): proposals scored for a recorded
round's checkpoint without training, on real runs of the simulated student (seconds)."""

import json
import math
from pathlib import Path

import pytest

from envengineer import hookimpl
from envengineer.plugins.engineers.baselines import Baseline

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "examples" / "sim-student" / "base.yaml"


class RestatingEngineer(Baseline):
    """Proposes every declared knob of every group at its current value: a non-empty proposal equal to the config."""

    name = "restating"
    description = "restates the current config (test only)"

    def propose(self, request):
        table = request.generator.knob_values(request.current_config)
        return self.reply(request.generator.knob_proposal({g: dict(knobs) for g, knobs in table.items()}), "restating.")


class HalfPredictor(Baseline):
    """Restates the config and, asked to predict, says 0.5 for every group it is asked about (test only)."""

    name = "half-predictor"
    description = "predicts 0.5 everywhere (test only)"
    asked: list = []

    def propose(self, request):
        return RestatingEngineer.propose(self, request)

    def ask(self, request, messages, schema=None):
        from envengineer.api import EngineerReply

        type(self).asked.append((request.seed, messages[-1]["content"], schema))
        groups = list(schema["properties"])
        return EngineerReply(text="my guess:\n\n```yaml\n" + json.dumps({g: 0.5 for g in groups}) + "\n```\n", model=self.name, calls=[])


class Alternating(Baseline):
    """Each call answers as the next engineer of ``order`` (test only): a critic asking twice gets one of each."""

    name = "alternating"
    description = "inverted's proposal, then learnability's, in turn (test only)"
    order = ("inverted", "learnability")
    seeds: list = []

    def propose(self, request):
        from envengineer.plugins.engineers.baselines import InvertedEngineer, LearnabilityEngineer

        type(self).seeds.append(request.seed)
        which = self.order[(len(type(self).seeds) - 1) % 2]
        engineer = {"inverted": InvertedEngineer, "learnability": LearnabilityEngineer}[which]
        return engineer(engineer.Options()).propose(request)


class AlternatingReversed(Alternating):
    name = "alternating-reversed"
    order = ("learnability", "inverted")
    seeds: list = []


class FailsFirst(Alternating):
    """Its first call fails for good (an API error after its retries), the next answers as learnability (test only)."""

    name = "fails-first"
    seeds: list = []

    def propose(self, request):
        from envengineer.api import EngineerCallError
        from envengineer.plugins.engineers.baselines import LearnabilityEngineer

        type(self).seeds.append(request.seed)
        if len(type(self).seeds) % 2 == 1:
            raise EngineerCallError("HTTP 503 after 4 retries", [{"model": "m", "attempt": 1, "error": "HTTP 503"}])
        return LearnabilityEngineer(LearnabilityEngineer.Options()).propose(request)



class TestEngineers:
    @hookimpl
    def register_engineers(self, register):
        register(RestatingEngineer)
        register(HalfPredictor)
        register(Alternating)
        register(AlternatingReversed)
        register(FailsFirst)


@pytest.fixture(scope="module")
def registry():
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(TestEngineers(), name="test-engineers")
    return Registry(pm)


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory, registry):
    """Two recorded sim-student runs (fixed, seeds 0 and 1), 3 rounds each."""
    from envengineer.loop.steps import run

    root = tmp_path_factory.mktemp("sim-runs")
    out = []
    for seed in (0, 1):
        folder = root / f"fixed-{seed}"
        run(BASE, registry=registry, output=str(folder), overrides=["engineer.name=fixed", f"seed={seed}", "rounds=3", "eval.sampled=0",
                                                                   "eval.benchmarks=[]"])
        out.append(folder)
    return out


def _score(registry, runs, engineers, cache, recorded=False, **settings):
    from envengineer.plugins.engineer_bench.recorded import ScoreSettings
    from envengineer.plugins.engineer_bench.scoring import score_runs

    return score_runs(registry, runs, engineers, ScoreSettings(**{"proposals": 2, "instances": 48, "draws": 8, **settings}), cache,
                      recorded=recorded)


def test_inverted_scores_below_fixed_and_learnability_above(registry, sim_runs, tmp_path):
    result = _score(registry, sim_runs, ["learnability", "inverted"], tmp_path / "cache")
    summary = result["summary"]
    reference = summary["reference"]["kept_per_budget"]["mean"]
    assert summary["inverted"]["kept_per_budget"]["mean"] < reference < summary["learnability"]["kept_per_budget"]["mean"]
    # at every seed (run), not only on average; and the interval excludes 0
    assert summary["inverted"]["runs_below_fixed"] == 2 and summary["learnability"]["runs_above_fixed"] == 2
    assert summary["inverted"]["vs_fixed_kept_per_budget"]["ci95"][1] < 0 < summary["learnability"]["vs_fixed_kept_per_budget"]["ci95"][0]
    # the inverted engineer moves budget to the all-right and all-wrong groups
    assert summary["inverted"]["all_right"]["mean"] + summary["inverted"]["all_wrong"]["mean"] > \
        summary["reference"]["all_right"]["mean"] + summary["reference"]["all_wrong"]["mean"]
    lines = result["lines"]
    rounds = sum(len(r["rounds"]) for r in result["runs"])
    assert rounds == 6 and len(lines) == rounds * (1 + 2 * 2)
    assert all(line["fallback"] is False for line in lines)


def test_a_proposal_identical_to_fixed_scores_as_fixed(registry, sim_runs, tmp_path):
    result = _score(registry, sim_runs, ["fixed", "restating", "learnability"], tmp_path / "cache")
    reference = {(l["run"], l["round"]): l for l in result["lines"] if l["engineer"] == "reference"}
    keys = ("kept_per_budget", "learnability", "mixed", "all_right", "all_wrong", "success", "by_group")
    for line in result["lines"]:
        if line["engineer"] in ("fixed", "restating"):
            ref = reference[line["run"], line["round"]]
            assert line["config"] == ref["config"]
            assert {k: line[k] for k in keys} == {k: ref[k] for k in keys}
            assert line["vs_fixed"] == {"kept_per_budget": 0.0, "learnability": 0.0, "mixed": 0.0}
    restating = [l for l in result["lines"] if l["engineer"] == "restating"]
    assert restating and all(not l["fallback"] for l in restating)  # applied (the whole table), not a fallback
    # the restated share counts them; learnability's moved configs are not restatements
    summary = result["summary"]
    assert summary["restating"]["restated"] == 1.0 and summary["fixed"]["restated"] == 1.0
    assert summary["learnability"]["restated"] < 1.0 and "restated" not in summary["reference"]
    # every proposal records what it moved per group; a restatement moves nothing, so none is uniform
    assert all(set(l["moves"]) == set(l["by_group"]) for l in restating) and summary["restating"]["uniform"] == 0.0
    # and the comparison can fail: learnability's configs differ, and so do its scores
    assert any(l["kept_per_budget"] != reference[l["run"], l["round"]]["kept_per_budget"]
               for l in result["lines"] if l["engineer"] == "learnability")


def test_the_cache_makes_a_second_scoring_draw_nothing(registry, sim_runs, tmp_path):
    cache = tmp_path / "cache"
    first = _score(registry, sim_runs[:1], ["learnability", "inverted"], cache)
    assert first["cost"]["samples_drawn"] > 0
    # within one scoring, configs sharing instances (the reference and fixed-like proposals, repeated deterministic
    # proposals) are read back
    assert first["cost"]["instances_from_cache"] > 0
    again = _score(registry, sim_runs[:1], ["learnability", "inverted"], cache)
    assert again["cost"]["samples_drawn"] == 0 and again["cost"]["instances_sampled"] == 0
    assert again["lines"] == first["lines"]
    # other sampling settings are other entries
    more = _score(registry, sim_runs[:1], ["learnability"], cache, draws=4)
    assert more["cost"]["samples_drawn"] > 0


def test_group_figures_are_unbiased():
    from envengineer.plugins.engineer_bench.statistics import instance_figures

    s, g = 8, 4
    for p in (0.1, 0.37, 0.8):
        expected = {key: 0.0 for key in ("mixed", "all_right", "all_wrong", "learnability")}
        for k in range(s + 1):
            weight = math.comb(s, k) * p**k * (1 - p) ** (s - k)
            figures = instance_figures(k, s, g)
            assert figures["mixed"] + figures["all_right"] + figures["all_wrong"] == pytest.approx(1)
            for key in expected:
                expected[key] += weight * figures[key]
        assert expected["all_right"] == pytest.approx(p**g)
        assert expected["all_wrong"] == pytest.approx((1 - p) ** g)
        assert expected["mixed"] == pytest.approx(1 - p**g - (1 - p) ** g)
        assert expected["learnability"] == pytest.approx(p * (1 - p))


def test_a_run_without_rounds_is_refused_by_name(registry, tmp_path):
    from envengineer.plugins.engineer_bench.recorded import ScoreSettings
    from envengineer.plugins.engineer_bench.scoring import score_runs
    from envengineer.errors import InputError

    empty = tmp_path / "empty-run"
    empty.mkdir()
    (empty / "run.yaml").write_text((REPO / "examples" / "sim-student" / "base.yaml").read_text())
    with pytest.raises(InputError, match="empty-run: no recorded round with a checkpoint and evidence"):
        score_runs(registry, [empty], ["fixed"], ScoreSettings(), tmp_path / "cache")
    with pytest.raises(InputError, match="not-a-run: not a run directory"):
        score_runs(registry, [tmp_path / "not-a-run"], ["fixed"], ScoreSettings(), tmp_path / "cache")


def test_the_command_end_to_end(sim_runs, tmp_path, capsys, monkeypatch):
    from envengineer.cli.commands import main

    out = tmp_path / "out"
    main(["engineers", "score", str(sim_runs[0]), "--engineer", "inverted", "--samples", "1", "--instances", "16", "--draws", "4",
          "--output", str(out)])
    printed = capsys.readouterr().out
    assert "engineer benchmark" in printed and "inverted" in printed and "reference" in printed
    data = json.loads((out / "score.json").read_text())
    assert data["settings"] == {"proposals": 1, "instances": 16, "draws": 4, "seed": 0, "predictions": 0, "cache": str(out / "cache")}
    assert set(data["summary"]) == {"reference", "inverted"}
    lines = [json.loads(line) for line in (out / "proposals.jsonl").read_text().splitlines()]
    assert len(lines) == 3 * 2 and {l["instances"] for l in lines} == {16}
    assert (out / "score.png").stat().st_size > 0
    assert any((out / "cache").rglob("*.json"))
    # the tables again from the files alone (an archive), the restated share among them
    main(["engineers", "report", str(out)])
    again = capsys.readouterr().out
    table = again.split("share of the budget")[0]
    assert "K=1 proposals, M=16 instances, S=4 draws" in " ".join(again.split()) and "inverted" in table
    assert table == printed.split("share of the budget")[0]
    # a score.json written before the restated share was summarised: computed from its lines, the rest kept
    stored = json.loads((out / "score.json").read_text())
    assert stored["summary"]["inverted"]["restated"] == 0.0
    del stored["summary"]["inverted"]["restated"]
    stored["summary"]["inverted"]["proposals"] = 99
    (out / "score.json").write_text(json.dumps(stored))
    from envengineer.plugins.engineer_bench.output import read_results

    back = read_results(out)
    assert back["summary"]["inverted"]["restated"] == 0.0 and back["summary"]["inverted"]["proposals"] == 99
    # a folder the benchmark did not write, and a broken proposals file: refused by name, exit status 2
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "score.json").write_text('{"settings": ')
    (tmp_path / "other-json").mkdir()
    (tmp_path / "other-json" / "score.json").write_text('{"settings": {}}')
    for broken, message in ((tmp_path / "empty", "empty/score.json: no such file (not a folder that `envengineer engineers score"),
                            (tmp_path / "cut", "cut/score.json: not valid JSON"),
                            (tmp_path / "other-json", "other-json/score.json: not an engineer-benchmark result (no runs, engineers, summary)")):
        broken.mkdir(exist_ok=True)
        with pytest.raises(SystemExit) as exited:
            main(["engineers", "report", str(broken)])
        assert exited.value.code == 2 and message in " ".join(capsys.readouterr().err.split())
    (out / "proposals.jsonl").write_text((out / "proposals.jsonl").read_text() + "{cut\n")
    with pytest.raises(SystemExit) as exited:
        main(["engineers", "report", str(out)])
    assert exited.value.code == 2 and "proposals.jsonl, line 7: not valid JSON" in " ".join(capsys.readouterr().err.split())
    # the run keeps its slice, and its report shows it as a section with the run's own plot
    from envengineer.plugins.report.page import write_report
    from envengineer.registry import load_registry

    record = json.loads((sim_runs[0] / "engineer-score" / "out.json").read_text())
    assert record["output"] == str(out.resolve()) and set(record["summary"]) == {"reference", "inverted"}
    assert record["summary"]["inverted"]["proposals"] == 3 and record["rounds"] == [0, 1, 2]
    assert (sim_runs[0] / "report" / "engineer-score-out.png").stat().st_size > 0
    page = write_report(sim_runs[0], load_registry()).html.read_text()
    assert "Engineer benchmark: out" in page and "<td>inverted</td>" in page and 'src="report/engineer-score-out.png"' in page
    assert not (sim_runs[1] / "engineer-score").exists()  # only the runs scored
    # an unknown engineer: one red line naming it and the registered ones, exit status 2, nothing scored
    with pytest.raises(SystemExit) as exited:
        main(["engineers", "score", str(sim_runs[0]), "--engineer", "nope", "--output", str(tmp_path / "other")])
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unknown engineer 'nope'" in err and "learnability" in err and "inverted" in err
    assert not (tmp_path / "other").exists()
    with pytest.raises(SystemExit) as exited:
        main(["engineers", "score", str(tmp_path / "missing"), "--engineer", "fixed", "--output", str(tmp_path / "other")])
    assert exited.value.code == 2
    assert "missing: not a run directory" in " ".join(capsys.readouterr().err.split())
    # the section comes through the report_sections hook: with the plugin blocked, the report leaves it out
    monkeypatch.setenv("ENVENGINEER_BLOCK_PLUGINS", "envengineer.plugins.engineer_bench")
    page = write_report(sim_runs[0], load_registry()).html.read_text()
    assert "Engineer benchmark" not in page and "engineer-score-out.png" not in page


def test_spearman_matches_the_textbook():
    from envengineer.plugins.engineer_bench.statistics import spearman

    # scipy.stats.spearmanr([1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 6]): 0.8696565534786727, p 0.02437689168569078 (ties, t approximation)
    got = spearman([1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 6])
    assert got["n"] == 6 and got["rho"] == pytest.approx(0.869657, abs=1e-6) and got["p"] == pytest.approx(0.0244, abs=1e-6)
    assert spearman([1, 2], [2, 1])["rho"] is None


def test_recorded_scores_the_config_trained_next_with_its_gain(registry, sim_runs, tmp_path):
    from envengineer.fileio import read_yaml
    from envengineer.store.rundir import RunDir

    result = _score(registry, sim_runs, ["inverted"], tmp_path / "cache", proposals=1, instances=16, draws=4, recorded=True)
    recorded = [l for l in result["lines"] if l["engineer"] == "recorded"]
    assert len(recorded) == 2 * 2  # rounds 0 and 1 of each run have a next round; the last has none
    for line in recorded:
        run = RunDir(line["run"])
        now = json.loads(run.eval_summary(line["round"]).read_text())["overall"]["valid_rate"]
        after = json.loads(run.eval_summary(line["round"] + 1).read_text())["overall"]["valid_rate"]
        assert line["next_gain"]["validation"] == pytest.approx(after - now, abs=1e-6)
        assert line["arm"] == "fixed" and line["config"] == read_yaml(run.config_path(line["round"] + 1))
        assert line["vs_fixed"]["kept_per_budget"] == 0.0  # a fixed run trains next on the config it had
    assert result["predictive"]["kept_per_budget ~ validation"]["n"] == 4


def test_the_answers_that_decide_a_kept_prompt(registry, sim_runs):
    from dataclasses import replace

    from envengineer.plugins.engineer_bench.recorded import load_recorded_run

    run = load_recorded_run(registry, sim_runs[0])
    assert run.group_size == 8  # no prefilter: the GRPO group (num_generations)
    screened = replace(run, trainer=registry.create("trainer", "simulated", {"prefilter_samples": 4}))
    assert screened.group_size == 4  # a prefilter keeps the prompts whose 4 screening answers are mixed
    kept_mode = replace(run, trainer=registry.create("trainer", "simulated", {"num_generations": 6}), config={**run.config, "budget_mode": "kept_prompts"})
    assert kept_mode.group_size == 6


def test_recorded_kept_is_checked_against_what_the_trainer_found(registry, sim_runs, tmp_path):
    result = _score(registry, sim_runs, [], tmp_path / "cache", proposals=1, instances=64, draws=8, recorded=True)
    recorded = [l for l in result["lines"] if l["engineer"] == "recorded"]
    for line in recorded:
        signal = json.loads((Path(line["run"]) / f"round-{line['round'] + 1:02d}" / "train" / "signal.json").read_text())
        assert line["next_mixed"] == signal["overall"]["mixed"]
    calibration = result["predictive"]["kept_per_budget ~ mixed prompts the trainer found next"]
    assert calibration["n"] == len(recorded) == 4
    # the same checkpoint on the same config: the prediction is within sampling error of the trainer's count
    assert abs(calibration["mean_predicted"] - calibration["mean_measured"]) < 0.35 * calibration["mean_measured"]


def test_self_prediction_is_scored_by_brier_against_what_the_reference_measured(registry, sim_runs, tmp_path):
    """--predict: an engineer with a model is asked, on the round's own context, for the checkpoint's sampled success
    per group; a prediction of 0.5 everywhere scores exactly the no-knowledge reference; a rule-based engineer is not asked."""
    from envengineer.plugins.engineer_bench.predictions import brier, parse_prediction, prediction_schema

    HalfPredictor.asked.clear()
    result = _score(registry, sim_runs[:1], ["half-predictor", "inverted"], tmp_path / "cache", proposals=1, predictions=2)
    lines = result["predictions"]
    assert {l["engineer"] for l in lines} == {"half-predictor"}  # inverted has no model: nothing asked
    assert len(lines) == 3 * 2 and {l["round"] for l in lines} == {0, 1, 2}
    references = {l["round"]: l for l in result["lines"] if l["engineer"] == "reference"}
    for line in lines:
        measured = {g: c["success"] for g, c in references[line["round"]]["by_group"].items()}
        assert line["measured"] == measured and line["predicted"] == {g: 0.5 for g in measured}
        assert line["brier"] == line["brier_half"] == pytest.approx(sum((0.5 - v) ** 2 for v in measured.values()) / len(measured), abs=1e-6)
        assert line["brier_evidence"] is not None  # the round's training signal, copied, as the other reference
    summary = result["self_prediction"]["half-predictor"]
    assert summary["asked"] == summary["usable"] == 6 and summary["distinct"] >= 1
    assert summary["brier"]["mean"] == pytest.approx(summary["brier_half"], abs=1e-6)
    # the two asks of one round carry different seeds, and the question names every group and the sampling
    seeds = [seed for seed, _, _ in HalfPredictor.asked]
    assert len(set(seeds[:2])) == 2
    question, schema = HalfPredictor.asked[0][1], HalfPredictor.asked[0][2]
    assert "at the training temperature" in question and all(g in question for g in schema["required"])
    assert schema == prediction_schema(schema["required"])
    # untrusted replies: each refused with its reason, never a crash
    groups = ["3x3", "4x4"]
    assert parse_prediction("```yaml\n{3x3: 0.2, 4x4: 1}\n```", groups) == ({"3x3": 0.2, "4x4": 1.0}, "")
    for text, why in (("", "empty"), ("{3x3: 0.2}", "no number for 4x4"), ("{3x3: 2, 4x4: 0}", "not a number in [0, 1]"),
                      ("{3x3: .nan, 4x4: 0}", "not a number"), ("[1, 2]", "mapping"), ("{3x3: &a 1, 4x4: *a}", "")):
        predicted, problem = parse_prediction(text, groups)
        assert predicted is None and why in problem, (text, problem)
    assert brier({"a": 1.0, "b": 0.0}, {"a": 0.5}) == 0.25


def test_self_prediction_through_an_openai_compatible_server(registry, sim_runs, tmp_path, fake_llm, monkeypatch):
    """The prediction asked of a real SDK client: the request carries response_format json_schema over the groups,
    and the server's JSON answer is parsed and scored."""
    import yaml

    from envengineer.plugins.engineer_bench.recorded import REFERENCE

    first = _score(registry, sim_runs[:1], [], tmp_path / "cache", proposals=1, recorded=True)
    groups = list(next(l for l in first["lines"] if l["engineer"] == REFERENCE and l["round"] == 0)["by_group"])
    answer = json.dumps({g: 0.25 for g in groups})
    fake_llm.script = [fake_llm.Step(answer)]
    options = tmp_path / "served.yaml"
    options.write_text(yaml.safe_dump({"engineer": {"name": "openai-compatible", "model": "served", "base_url": fake_llm.url + "/v1",
                                                    "max_retries": 0}}))
    result = _score(registry, sim_runs[:1], [str(options)], tmp_path / "cache", proposals=1, predictions=1)
    round0 = [l for l in result["predictions"] if l["round"] == 0]
    assert len(round0) == 1 and round0[0]["engineer"] == "served"
    asked = [r["body"] for r in fake_llm.requests if r["body"].get("response_format")]
    assert asked and asked[0]["response_format"]["type"] == "json_schema"
    assert set(asked[0]["response_format"]["json_schema"]["schema"]["required"]) == set(groups)
    assert round0[0]["predicted"] == {g: 0.25 for g in groups} and round0[0]["brier"] is not None
    assert not fake_llm.schema_errors


def _critic_step(registry, run, tmp_path, inner, **options):
    """One design step of a critic over ``inner`` on round 1 of ``run``, checked applied: the request, the outcome, the
    step's calls and the critic's record among them."""
    from envengineer.design.step import design
    from envengineer.loop.replay import offline_request, run_config

    critic = registry.create("engineer", "critic", {"engineer": inner, "cache_dir": str(tmp_path / "critic-cache"), **options})
    request = offline_request(registry, run, 1, critic, run_config(run))
    outcome = design(critic, request, out_dir=tmp_path / "design", reask=0, summarize=False)
    assert not outcome.fallback, outcome.reason
    calls = [json.loads(line) for line in (tmp_path / "design" / "calls.jsonl").read_text().splitlines()]
    return request, outcome, calls, next(c["critic"] for c in calls if "critic" in c)


@pytest.mark.parametrize("inner, chosen", [("alternating", 2), ("alternating-reversed", 1)])
def test_the_critic_applies_the_proposal_the_instrument_scores_highest(registry, sim_runs, tmp_path, inner, chosen):
    """The critic asks its engineer K = 2 times (two sampling seeds), scores both configs for the round's checkpoint
    on its own draws, and applies learnability's over inverted's whichever came first; the design step applies it."""
    request, outcome, calls, record = _critic_step(registry, sim_runs[0], tmp_path, {"name": inner}, proposals=2, instances=48, draws=8)
    scores = {s["proposal"]: s["kept_per_budget"] for s in record["scores"]}
    assert record["chosen"] == chosen and scores[chosen] > scores[3 - chosen]
    assert f"critic: proposal {chosen} of 2 applied" in (tmp_path / "design" / "response.md").read_text()
    from envengineer.plugins.engineers.baselines import LearnabilityEngineer

    own = LearnabilityEngineer(LearnabilityEngineer.Options()).propose(request)
    assert outcome.config == request.generator.project(own.proposal, request.current_config).config
    seeds = registry.get("engineer", inner).seeds[-2:]
    assert len(set(seeds)) == 2 and request.seed not in seeds  # two sampling seeds, neither the request's own


def test_the_critic_without_a_run_to_score_falls_back_and_says_why(registry, tmp_path):
    from dataclasses import replace

    from envengineer.design.step import design

    from envengineer.api import DesignRequest

    critic = registry.create("engineer", "critic", {"engineer": {"name": "learnability"}})
    generator = registry.create("generator", "grid-walk", {}, where="task")

    request = DesignRequest(evidence=None, context="", prompt="p", current_config=generator.default_config(), generator=generator)
    with pytest.raises(Exception, match="a critic of a critic"):
        registry.create("engineer", "critic", {"engineer": {"name": "critic"}})
    outcome = design(critic, replace(request), out_dir=tmp_path / "d", reask=0, summarize=False)
    assert outcome.fallback and "names no run directory" in outcome.reason


def test_a_failed_call_costs_the_critic_that_proposal_not_the_step(registry, sim_runs, tmp_path):
    _, _, calls, record = _critic_step(registry, sim_runs[0], tmp_path, {"name": "fails-first"}, instances=16, draws=4)
    assert record["chosen"] == 2 and "the call failed: HTTP 503" in record["unscored"]["1"]
    assert any(c.get("error") == "HTTP 503" for c in calls)  # the failed call is on record


def test_an_llm_proposal_records_its_tokens_and_seconds_and_a_rule_none(registry, sim_runs, tmp_path, fake_llm):
    """Each LLM proposal's line carries what its calls cost (usage summed over re-asks and failed calls, seconds): the figures a
    busy machine cannot change; a rule engineer's line carries none."""
    import yaml

    options = tmp_path / "served.yaml"
    options.write_text(yaml.safe_dump({"engineer": {"name": "openai-compatible", "model": "served", "base_url": fake_llm.url + "/v1",
                                                    "max_retries": 0}}))
    result = _score(registry, sim_runs[:1], [str(options), "fixed"], tmp_path / "cache", proposals=1)
    served = [l for l in result["lines"] if l["engineer"] == "served"]
    assert served  # their replies fail here (the server's default answer is empty): failed calls cost tokens too
    assert all(l["usage"]["prompt_tokens"] > 0 and l["latency_s"] >= 0 for l in served)
    from fake_llm_server import PROMPT_TOKENS

    chats = [r for r in fake_llm.requests if r["path"].endswith("/chat/completions")]
    assert sum(l["usage"]["prompt_tokens"] for l in served) == PROMPT_TOKENS * len(chats)  # every call, re-asks included
    assert all("usage" not in l for l in result["lines"] if l["engineer"] == "fixed")


def test_context_options_laid_over_the_runs_reach_every_engineers_prompt(registry, sim_runs, tmp_path, fake_llm):
    """ScoreSettings.context lays options over each run's own context (the scale curve's order: stable-first): the
    prompt an engineer is sent is the one the loop would build with them, and the run's own options stay."""
    import yaml

    from envengineer.design.evidence import load_evidence
    from envengineer.design.prompts import build_request
    from envengineer.loop.replay import run_config

    options = tmp_path / "served.yaml"
    options.write_text(yaml.safe_dump({"engineer": {"name": "openai-compatible", "model": "served", "base_url": fake_llm.url + "/v1",
                                                    "max_retries": 0}}))
    sent = {}
    for order in (None, "stable-first"):
        fake_llm.requests.clear()
        result = _score(registry, sim_runs[:1], [str(options)], tmp_path / f"cache-{order}", proposals=1,
                        context={"order": order} if order else None)
        first = next(r["body"] for r in fake_llm.requests if r["path"].endswith("/chat/completions"))
        sent[order] = next(m["content"] for m in first["messages"] if m["role"] == "user")
        assert result["settings"].get("context") == ({"order": order} if order else None)
    own = run_config(sim_runs[0]).get("context") or {}
    expected = build_request(load_evidence(sim_runs[0], 0, registry), registry, {**own, "order": "stable-first"})
    assert sent["stable-first"] == next(m["content"] for m in expected.messages if m["role"] == "user")
    assert sent["stable-first"] != sent[None]


def test_the_command_lays_context_options_over_the_runs_and_refuses_a_bad_one(sim_runs, tmp_path, capsys):
    from envengineer.cli.commands import main

    out = tmp_path / "out"
    main(["engineers", "score", str(sim_runs[0]), "--engineer", "fixed", "--samples", "1", "--instances", "8", "--draws", "2",
          "--context", "order=stable-first", "--output", str(out)])
    assert json.loads((out / "score.json").read_text())["settings"]["context"] == {"order": "stable-first"}
    for bad, said in (("order", "expected KEY=VALUE"), ("colour=red", "colour")):
        with pytest.raises(SystemExit) as exited:
            main(["engineers", "score", str(sim_runs[0]), "--engineer", "fixed", "--samples", "1", "--instances", "8", "--draws", "2",
                  "--context", bad, "--output", str(tmp_path / "other")])
        assert exited.value.code == 2
        assert said in " ".join(capsys.readouterr().err.split())
