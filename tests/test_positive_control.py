"""The positive control: on the simulated student (examples/sim-student) an engineer that reads the
training signal must beat the fixed environment at every seed, and a broken engineer (its proposals
ignored or projected away) must not; learnability computed from the previous round's evidence (stale by
one round, which still beats fixed) and the inverted engineer must lose to learnability at every seed.
About a minute on 2 cores, so a broken engineer is caught in CI (docs/simulated-student.md#in-ci says what
the control can and cannot catch)."""

import dataclasses
from pathlib import Path

import pytest

from envengineer import hookimpl
from envengineer.plugins.engineers.baselines import Baseline, LearnabilityEngineer
from envengineer.plugins.suite.arms.runs import read_verdicts
from envengineer.plugins.suite.arms.paired import paired

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "examples" / "sim-student" / "base.yaml"
SEEDS = (0, 1, 2)


class IgnoredEngineer(Baseline):
    """Proposes nothing the generator reads: every field unknown, so the projection keeps the config."""

    name = "ignored"
    description = "a broken engineer: its proposals never reach the config"

    def propose(self, request):
        return self.reply({"shares": {g: 1.0 for g in request.generator.groups()}}, "ignored: a wrong field name.")


class ProjectedAwayEngineer(Baseline):
    """Proposes values that are all out of bounds or not numbers: the projection clips them back."""

    name = "projected-away"
    description = "a broken engineer: its proposals are projected away"

    def propose(self, request):
        table = request.generator.knob_values(request.current_config)
        return self.reply(request.generator.knob_proposal({g: {k: "n/a" for k in knobs} for g, knobs in table.items()}), "projected away.")


class StaleLearnabilityEngineer(LearnabilityEngineer):
    """learnability on the evidence of the round before the one just finished (stale by one round), applied to
    the current config; nothing at the first design step, which has no earlier round."""

    name = "stale-learnability"
    description = "a broken engineer: learnability computed from the previous round's evidence"

    def propose(self, request):
        ev = request.evidence
        if not ev.history:
            return self.reply({}, "stale: no earlier round to read yet.")
        last = ev.history[-1]
        stale = dataclasses.replace(ev, round=last.round, config=last.config, report=last.report, signal=last.signal,
                                    history=ev.history[:-1])
        return super().propose(dataclasses.replace(request, evidence=stale))


class Broken:
    @hookimpl
    def register_engineers(self, register):
        register(IgnoredEngineer)
        register(ProjectedAwayEngineer)
        register(StaleLearnabilityEngineer)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from envengineer.loop.steps import run
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(Broken(), name="broken-engineers")
    registry = Registry(pm)
    root = tmp_path_factory.mktemp("sim-student")
    out = {}
    for engineer in ("fixed", "learnability", "ignored", "projected-away", "stale-learnability", "inverted"):
        for seed in SEEDS:
            folder = root / f"{engineer}-{seed}"
            run(BASE, registry=registry, output=str(folder), overrides=[f"engineer.name={engineer}", f"seed={seed}", "eval.sampled=0"])
            out[engineer, seed] = folder
    return out


def _last_round(folder: Path) -> Path:
    return sorted(folder.glob("round-*"))[-1]


def _against(runs, engineer, seed, where="eval", reference="fixed"):
    arm = read_verdicts(_last_round(runs[engineer, seed]) / where / "verdicts.jsonl")
    base = read_verdicts(_last_round(runs[reference, seed]) / where / "verdicts.jsonl")
    return paired(arm, base, "valid")


def _against_fixed(runs, engineer, seed, where="eval"):
    return _against(runs, engineer, seed, where)


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
@pytest.mark.parametrize("seed", SEEDS)
def test_learnability_beats_fixed_at_every_seed(runs, seed):
    result = _against_fixed(runs, "learnability", seed)
    assert result.gained > result.lost and result.p < 0.01, str(result)
    held_out = _against_fixed(runs, "learnability", seed, "bench/mapf-2agents-test")
    assert held_out.gained > held_out.lost and held_out.p < 0.01, str(held_out)


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
@pytest.mark.parametrize("engineer", ["ignored", "projected-away"])
def test_a_broken_engineer_does_not_pass_the_control(runs, engineer):
    for seed in SEEDS:
        result = _against_fixed(runs, engineer, seed)
        assert not (result.gained > result.lost and result.p < 0.01), (engineer, seed, str(result))
        config = (runs[engineer, seed] / "round-05" / "config.yaml").read_text()
        assert config == (runs["fixed", seed] / "round-05" / "config.yaml").read_text()


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
@pytest.mark.parametrize("engineer", ["stale-learnability", "inverted"])
@pytest.mark.parametrize("seed", SEEDS)
def test_stale_and_inverted_learnability_lose_to_learnability_at_every_seed(runs, engineer, seed):
    """The control tightened: reading the evidence one round late, or turning learnability's rule around, must
    show as a loss to learnability, paired on the same instances, at every seed (validation and held-out test)."""
    for where in ("eval", "bench/mapf-2agents-test"):
        result = _against(runs, "learnability", seed, where, reference=engineer)
        assert result.gained > result.lost and result.p < 0.01, (engineer, seed, where, str(result))


def test_the_pages_commands_write_to_folders_of_their_own():
    """docs/simulated-student.md: every `run` and `suite` command of the page writes its own folder (a run
    whose output is the suite's folder would mix its round folders with the suite's tables)."""
    import re
    import shlex

    import yaml

    page = (REPO / "docs" / "simulated-student.md").read_text()
    lines = [line for block in re.findall(r"```bash\n(.*?)```", page, flags=re.S) for line in block.replace("\\\n", " ").splitlines()]
    outputs = []
    for line in lines:
        words = shlex.split(line)
        if words[:2] == ["envengineer", "suite"]:
            outputs.append(words[words.index("--output") + 1])
        elif words[:2] == ["envengineer", "run"]:
            config = yaml.safe_load((REPO / words[2]).read_text())
            overrides = dict(w.split("=", 1) for w in words[3:] if "=" in w and not w.startswith("-"))
            outputs.append(overrides.get("output") or config.get("output") or f"runs/{overrides.get('name', config['name'])}")
    assert len(outputs) >= 3 and "runs/sim-student" in outputs
    assert len(set(outputs)) == len(outputs), outputs
