"""bench/engineer_scale.py's registered rules (docs/results-engineer-scale.md): the interface each model is expanded
in, part 2's engineer and part 3's interface, on hand-made cells; and the report written from cell files."""

import json
from pathlib import Path

from conftest import import_bench

REPO = Path(__file__).resolve().parents[1]
BIG, SMALL, TINY = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"


def _bench():
    return import_bench("engineer_scale")


def cell(model, interface, mean, fallback=0.0, restate=0.0, decoding="greedy"):
    return {"label": f"{model}--{interface}--{decoding}", "model": model, "interface": interface, "decoding": decoding,
            "parameters": 1e9, "proposals": 12, "rounds": 12, "fallback": fallback, "restate": restate,
            "vs_fixed": {"mean": mean, "ci95": [mean - 1, mean + 1]}, "runs_above": 1, "runs_below": 1}


def test_the_registered_picks():
    bench = _bench()
    cells = [cell(BIG, "config", 0.5, restate=0.9), cell(BIG, "changes", 0.5, restate=0.2), cell(BIG, "decisions", 2.0, fallback=0.5),
             cell(SMALL, "config", 0.1), cell(SMALL, "decisions", 1.0, fallback=0.3), cell(SMALL, "decisions-read", 0.3),
             cell(TINY, "config", -1.0), cell(TINY, "changes", -2.0)]
    chosen = bench.picks(cells)
    # the expansion ignores fallback; a tie goes to the lower restate share
    assert chosen["expansion"] == {BIG: "decisions", SMALL: "decisions", TINY: "config"}
    # part 2: the 1.5B's best cell under 25% fallback (decisions has 50%), the restate tie-break again
    assert chosen["part2"]["model"] == BIG and chosen["part2"]["interface"] == "changes" and chosen["part2"]["vs_fixed"] == 0.5
    # part 3: the 0.5B's best greedy cell under 25% fallback
    assert chosen["part3"]["interface"] == "decisions-read"
    # a sampled 1.5B cell above the greedy ones is part 2's pick (any decoding), not the expansion's
    chosen = bench.picks(cells + [cell(BIG, "changes", 3.0, decoding="critic")])
    assert chosen["part2"]["decoding"] == "critic" and chosen["expansion"][BIG] == "decisions"
    # no usable 1.5B cell above fixed: the 0.5B's; none of either: the 1.5B's highest all the same, said so
    low = [cell(BIG, "config", -0.5), cell(BIG, "changes", -0.2), cell(SMALL, "changes", 0.4), cell(SMALL, "config", 0.4, fallback=0.3)]
    assert bench.picks(low)["part2"]["model"] == SMALL and bench.picks(low)["part2"]["interface"] == "changes"
    none = [cell(BIG, "config", -0.5), cell(BIG, "changes", -0.2), cell(SMALL, "changes", -0.4)]
    assert bench.picks(none)["part2"]["interface"] == "changes" and "all the same" in bench.picks(none)["part2"]["why"]
    assert bench.picks(none)["part3"]["interface"] == "changes"
    assert bench.picks([cell(SMALL, "decisions", 1.0, fallback=0.5)])["part3"]["interface"] == "config"


def test_the_report_reads_the_cell_files(tmp_path):
    bench = _bench()
    (tmp_path / "cells").mkdir()
    rules = {"label": "rules", "cells": [{**cell(None, None, 0.0), "label": "fixed"}, {**cell(None, None, 2.0), "label": "learnability"}]}
    (tmp_path / "cells" / "rules.json").write_text(json.dumps(rules))
    # the Brier as the scoring writes it: its mean with an interval, 0.5's and the evidence copy's beside it
    brier = {"brier": {"mean": 0.265, "ci95": [0.209, 0.329]}, "brier_half": 0.212, "brier_evidence": 0.004}
    for c in ({**cell(BIG, "config", 0.5), "brier": brier, "per_proposal": {"wall_s": 90.0, "server_cpu_s": 170.0}},
              cell(SMALL, "config", -0.5)):
        (tmp_path / "cells" / f"{c['label']}.json").write_text(json.dumps(
            {"label": c["label"], "cells": [c], **{k: c[k] for k in ("model", "parameters", "interface", "decoding")}}))
    table, text = bench.report(tmp_path)
    assert table.row_count == 4
    scale = (tmp_path / "scale.md").read_text()
    assert "| 0.265 (0.212; 0.004) |" in scale and "| 90, 170 |" in scale
    assert f"part 2's engineer: {BIG} `config` greedy (+0.50" in text and "part 3's interface for the 0.5B: `config`" in text
    assert json.loads((tmp_path / "picks.json").read_text())["part2"]["model"] == BIG
    assert text in (tmp_path / "scale.md").read_text() and (tmp_path / "scale.png").stat().st_size > 0


def test_a_compact_cell_is_its_decoding_under_the_context_budget():
    import argparse

    bench = _bench()
    args = argparse.Namespace(analysis_chars=400, max_tokens=1024, temperature=0.7, compact_tokens=2048, samples=2, instances=32, draws=4)
    full, compact = (bench.llm_section("m", "http://127.0.0.1:1", "decisions", d, args) for d in ("greedy", "greedy-compact"))
    assert compact == {**full, "max_prompt_tokens": 2048} and "max_prompt_tokens" not in full
    critic = bench.llm_section("m", "http://127.0.0.1:1", "changes", "critic-compact", args)
    assert critic["name"] == "critic" and critic["engineer"]["max_prompt_tokens"] == 2048 and critic["engineer"]["temperature"] == 0.7


def test_part_2s_manifests_run_the_picked_engineer_as_its_cell_ran():
    """examples/llm-engineer-qwen: every LLM arm is one engineer, the one picks.json names for part 2, with the options
    its scale-curve cell sent (bench/engineer_scale.py's llm_section), through the llama-server engineer; the donor arm
    reads the next seed of llm-v6 under the output the manifest's comment names; eight seeds, each its own policy seed."""
    import argparse

    from envengineer.plugins.suite.tables import plan

    bench = _bench()
    pick = json.loads((REPO / "bench/results/engineer-scale/picks.json").read_text())["part2"]
    args = argparse.Namespace(analysis_chars=400, max_tokens=1024, temperature=0.7, compact_tokens=2048, samples=2, instances=32, draws=4)
    cell = bench.llm_section(pick["model"], "http://127.0.0.1:1", pick["interface"], pick["decoding"], args)
    for name in ("sim", "gw"):
        out = f"runs/llm-engineer-qwen/{name}"
        suite = plan([REPO / f"examples/llm-engineer-qwen/{name}-suite.yaml"], output=out)
        arms = {e.arm: e for e in suite.entries}
        assert set(arms) == {"fixed", "learnability", "rlve", "window", "fixed-band", "llm-v6", "llm-v6-donor", "llm-no-f"}
        assert all(tuple(e.seeds) == tuple(range(8)) for e in arms.values())
        assert all(e.seed_configs[s].policy["seed"] == s for e in arms.values() for s in range(8))
        engineers = [c.engineer for a in ("llm-v6", "llm-v6-donor", "llm-no-f") for c in (arms[a].config, *arms[a].seed_configs.values())]
        assert all(engineer == engineers[0] for engineer in engineers)
        engineer, served = engineers[0], cell
        if cell["name"] == "critic":  # the wrapper as the cell ran it, around the served model
            assert engineer["name"] == "critic"
            assert {k: engineer.get(k) for k in ("proposals", "instances", "draws", "seed")} == \
                {k: cell[k] for k in ("proposals", "instances", "draws", "seed")}
            engineer, served = engineer["engineer"], cell["engineer"]
        assert engineer["name"] == "llama-server" and engineer["model"] == pick["model"] and engineer["threads"] == 2
        for key in ("structured", "interface", "read_first", "analysis_chars", "max_tokens", "max_retries", "temperature", "seed"):
            assert engineer.get(key) == served.get(key), key
        assert all(e.config.context["order"] == "stable-first" for e in arms.values())
        donor = arms["llm-v6-donor"].config.context["options"]["F"]
        assert donor == {"donor": f"{out}/llm-v6/seed-{{other_seed}}", "donor_seeds": 8}
        assert f"--output {out} --only llm-v6" in (REPO / f"examples/llm-engineer-qwen/{name}-suite.yaml").read_text()
        assert "F" not in arms["llm-no-f"].config.context["modules"]
        if name == "gw":
            assert {(e.config.budget_mode, e.config.budget, e.config.rounds) for e in arms.values()} == {("kept_prompts", 96, 6)}
