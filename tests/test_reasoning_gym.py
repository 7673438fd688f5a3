"""The reasoning-gym family (tasks/reasoning_gym): conformance, generation bytes and seeds, the
validator (reference answers, graded scores, hostile answers), the catalogue, the baselines on
its knob table, and a run config mixing it with a MAPF benchmark. Skips without the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from envengineer.design.step import design  # noqa: E402
from envengineer.errors import ConfigError  # noqa: E402
from envengineer.design.evidence import Evidence  # noqa: E402
from envengineer.design.prompts import build_request  # noqa: E402
from envengineer.tasks.reasoning_gym import catalogue  # noqa: E402
from envengineer.tasks.reasoning_gym.generator import DEFAULT_SYSTEM_PROMPT  # noqa: E402
from envengineer.tasks.reasoning_gym.knobs import RGConfig  # noqa: E402
from envengineer.testing import assert_task_conforms  # noqa: E402

TASK = "reasoning-gym"


@pytest.fixture(scope="module")
def task():
    from envengineer.testing import load_task

    return load_task(TASK)


@pytest.fixture(scope="module")
def records(task):
    generator, _ = task
    return generator.generate(generator.default_config(), n=60, seed=0).records


def _generate(tmp_path: Path, seed: int, name: str, hash_seed: str | None = None) -> bytes:
    out = tmp_path / name
    env = {**os.environ}
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    cli = Path(sys.executable).with_name("envengineer")
    command = [str(cli)] if cli.exists() else [sys.executable, "-c", "from envengineer.cli.commands import main; main()"]
    subprocess.run([*command, "generate", TASK, "--n", "60", "--seed", str(seed), "--output", str(out)],
                   check=True, capture_output=True, env=env)
    return out.read_bytes()


# ------------------------------------------------------------------ conformance and generation


def test_the_family_conforms():
    assert_task_conforms(TASK, n=18, fuzz=120, hash_seeds=(4242,))


def test_generate_is_byte_identical_and_seeds_share_no_item(tmp_path):
    first = _generate(tmp_path, 0, "a.jsonl")
    assert _generate(tmp_path, 0, "b.jsonl", hash_seed="12345") == first  # a second time, under another PYTHONHASHSEED
    seed0 = [json.loads(line) for line in first.splitlines()]
    seed1 = [json.loads(line) for line in _generate(tmp_path, 1, "c.jsonl").splitlines()]
    assert len(seed0) == 60 and {r["dataset"] for r in seed0} == set(catalogue.DEFAULT_DATASETS)
    for dataset in ("maze", "shortest_path"):
        questions0 = {r["question"] for r in seed0 if r["dataset"] == dataset}
        questions1 = {r["question"] for r in seed1 if r["dataset"] == dataset}
        assert questions0 and questions1 and not questions0 & questions1, dataset


def test_records_are_plain_json_with_what_the_scorer_needs(records):
    record = records[0]
    assert set(record) == {"id", "dataset", "levels", "question", "answer", "metadata"}
    assert json.loads(json.dumps(record)) == record
    assert record["levels"] == {"num_terms": 0, "num_digits": 0} and record["dataset"] == "chain_sum"


def test_the_catalogue_matches_the_curricula_and_prompts_stay_short(task):
    from reasoning_gym.factory import create_curriculum

    generator, _ = task
    for name, entry in catalogue.CATALOGUE.items():
        curriculum = create_curriculum(name)
        assert list(entry.caps) == list(curriculum.attributes), name
        for attr, cap in entry.caps.items():
            assert 0 <= cap < len(curriculum.attributes[attr].levels), (name, attr)
    top = {name: {"ratio": 1 / 6, **catalogue.CATALOGUE[name].caps} for name in catalogue.DEFAULT_DATASETS}
    hard = generator.generate(RGConfig.model_validate({"datasets": top}), n=36, seed=3).records
    assert max(len(r["question"]) for r in hard) <= 1600


# ------------------------------------------------------------------ the validator


def test_reference_answers_score_valid_and_optimal_through_solve_and_score(tmp_path):
    instances, answers, verdicts = tmp_path / "i.jsonl", tmp_path / "a.jsonl", tmp_path / "v.jsonl"
    instances.write_bytes(_generate(tmp_path, 5, "i.jsonl"))
    cli = Path(sys.executable).with_name("envengineer")
    command = [str(cli)] if cli.exists() else [sys.executable, "-c", "from envengineer.cli.commands import main; main()"]
    subprocess.run([*command, "solve", TASK, "--instances", str(instances), "--output", str(answers)], check=True, capture_output=True)
    subprocess.run([*command, "score", TASK, "--instances", str(instances), "--responses", str(answers), "--output", str(verdicts)],
                   check=True, capture_output=True)
    lines = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert len(lines) == 60 and all(v["valid"] and v["optimal"] for v in lines), [v for v in lines if not v["valid"]][:3]


def test_a_shortest_path_detour_is_valid_but_not_optimal(task, records):
    generator, validator = task
    record = next(r for r in records if r["dataset"] == "shortest_path" and r["answer"] != "infeasible")
    moves = record["answer"].split()
    back = {"up": "down", "down": "up", "left": "right", "right": "left"}
    detour = [moves[0], back[moves[0]], *moves]  # a step out and back: legal, two moves longer
    verdict = validator.score(record, f"thinking...<answer>{' '.join(detour)}</answer>")
    assert verdict.valid and not verdict.optimal and verdict.failure is None and verdict.score == 0.5
    assert validator.score(record, generator.reference_answer(record)).optimal


def test_failures_and_graded_scores(task, records):
    _, validator = task
    chain = next(r for r in records if r["dataset"] == "chain_sum")
    assert validator.score(chain, "no tags here").failure == "no_answer"
    assert validator.score(chain, "<answer>" + "1" * 300 + "</answer>").failure == "too_long"
    wrong = validator.score(chain, f"<answer>9{chain['answer']}</answer>")  # substring credit: wrong, score kept
    assert wrong.failure == "wrong" and 0 < wrong.score < 1
    assert validator.score(chain, "<answer>abc</answer>").failure == "rejected"
    # the last answer counts
    assert validator.score(chain, f"<answer>x</answer> then <answer>{chain['answer']}</answer>").optimal
    knights = next(r for r in records if r["dataset"] == "knights_knaves")
    terms = knights["metadata"]["knight_knave_terms"]
    good, bad = terms["knight"], terms["knave"]
    first, rest = knights["answer"].split(", and ", 1)  # the first person right, the others swapped
    swapped = rest.replace(f"a {good}", "a \0").replace(f"a {bad}", f"a {good}").replace("a \0", f"a {bad}")
    verdict = validator.score(knights, f"<answer>{first}, and {swapped}</answer>")
    assert not verdict.valid and verdict.failure == "partial" and 0.3 < verdict.score < 1
    hanoi = next(r for r in records if r["dataset"] == "tower_of_hanoi")
    first_move = hanoi["answer"].splitlines()[0]
    partial = validator.score(hanoi, f"<answer>{first_move}</answer>")  # a legal move that does not solve it
    assert partial.failure == "partial" and partial.score == 0.05


def test_the_answer_ends_at_the_first_closing_tag_after_the_last_opening_one(task, records):
    generator, validator = task
    chain = next(r for r in records if r["dataset"] == "chain_sum")
    oracle = chain["answer"]
    for response in (f"<answer>{oracle}</answer></answer>", f"<answer>x</answer><answer>{oracle}</answer> </answer>",
                     f"<answer><answer>{oracle}</answer>", f"<answer>{oracle}</answer> then <answer>unclosed"):
        assert validator.score(chain, response).optimal, response
    response = f"<answer>{oracle}</answer></answer> more"
    assert generator.answer_end(chain, response, "full") == len(f"<answer>{oracle}</answer>")
    assert validator.score(chain, "</answer><answer>").failure == "no_answer"


def test_a_scorer_raising_on_the_answer_is_the_models_failure_and_on_the_oracle_the_scorers(task):
    from envengineer.tasks.reasoning_gym.knobs import default_table

    generator, validator = task
    record = generator.generate(RGConfig(datasets=default_table(["prime_factorization"])), n=1, seed=0).records[0]
    oracle = record["answer"]
    assert " × " in oracle
    formats = [oracle.replace(" × ", " * "), oracle.replace(" × ", " x "), oracle.replace(" × ", ", "), oracle + ".",
               f"The answer is {oracle}", "457.0"]
    for text in formats:  # prime_factorization's scorer raises on each: a format mistake of the model
        verdict = validator.score(record, f"<answer>{text}</answer>")
        assert (verdict.failure, verdict.score) == ("rejected", 0.0), text
    assert "scorer_error" in validator.failure_types and "rejected" in validator.failure_types
    broken = {**record, "answer": "not a factorization"}  # the scorer cannot grade its own oracle: its failure
    assert validator.score(broken, f"<answer>{formats[0]}</answer>").failure == "scorer_error"


def test_scoring_prints_nothing(task, records, capfd):
    _, validator = task
    hanoi = next(r for r in records if r["dataset"] == "tower_of_hanoi")
    capfd.readouterr()
    verdict = validator.score(hanoi, "<answer>Move disk 1 from Peg 99 to Peg 3</answer>")  # its scorer prints
    assert verdict.failure is not None
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    print("still captured")  # the streams are back
    assert capfd.readouterr().out == "still captured\n"


def test_hostile_answers_get_a_verdict_within_a_second_and_execute_nothing(task, records, tmp_path):
    _, validator = task
    marker = tmp_path / "executed"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    hostile = ["9" * 20_000, "(" * 20_000, "[" * 10_000 + "]" * 10_000, code, f"eval({code!r})", "9**9**9**9", "1e999999"]
    for record in records[::10]:
        for text in hostile:
            for response in (text, f"<answer>{text}</answer>", f"<answer>{text[:200]}</answer>"):
                started = time.perf_counter()
                verdict = validator.score(record, response)
                assert time.perf_counter() - started < 1.0
                assert 0.0 <= verdict.score <= 1.0 and verdict.failure in (None, *validator.failure_types)
    assert not marker.exists()


# ------------------------------------------------------------------ the catalogue and the config


def test_a_dataset_outside_the_catalogue_is_refused_with_the_list():
    from envengineer.testing import load_task

    with pytest.raises(ConfigError) as caught:
        load_task(TASK, {"datasets": ["chain_sum", "n_queens"]})
    message = str(caught.value)
    assert "n_queens" in message and "evals the answer" in message
    assert all(name in message for name in catalogue.CATALOGUE)
    with pytest.raises(ValueError, match="not in the vetted catalogue"):
        RGConfig.model_validate({"datasets": {"countdown": {"ratio": 1.0}}})


def test_options_choose_the_datasets_and_the_system_prompt(task):
    from envengineer.testing import load_task

    generator, _ = load_task(TASK, {"datasets": "chain_sum,gcd", "system_prompt": "Answer in <answer></answer>."})
    assert list(generator.default_config().datasets) == ["chain_sum", "gcd"]
    assert [k.name for k in generator.knobs] == ["ratio", "num_terms", "num_digits", "value"]
    record = generator.generate(generator.default_config(), n=4, seed=0).records[0]
    assert generator.render(record)[0] == {"role": "system", "content": "Answer in <answer></answer>."}
    default, _ = task
    assert default.render(record)[0]["content"] == DEFAULT_SYSTEM_PROMPT
    assert default.answer_end(record, "a <answer>5</answer> trailing") == len("a <answer>5</answer>")
    assert "num_terms" in default.guidelines() and "maze" in default.design_brief(64)


def test_projection_keeps_each_dataset_to_its_levels_and_caps(task):
    generator, _ = task
    projection = generator.project({"datasets": {"maze": {"grid_size": 3, "dist": 2, "rows": 1}, "n_queens": {"ratio": 1}}},
                                   generator.default_config())
    maze = projection.config.datasets["maze"].model_dump()
    assert maze["grid_size"] == 0 and maze["dist"] == 2 and "rows" not in maze
    reasons = " ".join(c.reason for c in projection.changes)
    assert "cap 0" in reasons and "not a level of maze" in reasons and "unknown group" in reasons


def _depth(statement) -> int:
    return 1 if statement[0] in ("telling-truth", "lying") else 1 + max(_depth(s) for s in statement[1:])


def _width(statement) -> int:
    if statement[0] in ("telling-truth", "lying"):
        return 0
    return max([len(statement) - 1 if statement[0] in ("and", "or") else 0, *(_width(s) for s in statement[1:])])


#: What each catalogue attribute draws, read off an item's metadata (the quantity its ``draws`` names).
DRAWN = {
    ("chain_sum", "num_terms"): lambda m: [m["num_terms"]],
    ("chain_sum", "num_digits"): lambda m: [m["num_digits"]],
    ("maze", "dist"): lambda m: [m["shortest_path_length"]],
    ("maze", "grid_size"): lambda m: [m["grid_size"]],
    ("shortest_path", "rows"): lambda m: [len(m["matrix"])],
    ("shortest_path", "cols"): lambda m: [len(m["matrix"][0])],
    ("knights_knaves", "n_people"): lambda m: [len(m["statements"])],
    ("knights_knaves", "depth_constraint"): lambda m: [max(map(_depth, m["statements"]))],
    ("knights_knaves", "width_constraint"): lambda m: [max(map(_width, m["statements"]))],
    ("mini_sudoku", "empty"): lambda m: [sum(cell == 0 for row in m["puzzle"] for cell in row)],
    ("tower_of_hanoi", "num_disks"): lambda m: [m["num_disks"]],
    ("tower_of_hanoi", "num_pegs"): lambda m: [m["num_pegs"]],
    ("gcd", "num_terms"): lambda m: [len(m["numbers"])],
    ("gcd", "value"): lambda m: m["numbers"],
    ("lcm", "numbers"): lambda m: [len(m["numbers"])],
    ("lcm", "value"): lambda m: m["numbers"],
    ("leg_counting", "num_animals"): lambda m: [len(m["animals"])],
    ("leg_counting", "num_instances"): lambda m: list(m["animals"].values()),
    ("count_bits", "n"): lambda m: [m["number"]],
    ("base_conversion", "base"): lambda m: [m["source_base"], m["target_base"]],
    ("base_conversion", "value"): lambda m: [m["decimal_value"]],
    ("prime_factorization", "value"): lambda m: [m["number"]],
    ("fraction_simplification", "value"): lambda m: [m["simplified_numerator"], m["simplified_denominator"]],
    ("fraction_simplification", "factor"): lambda m: [m["factor"]],
}


def test_what_each_level_draws_is_what_the_guidelines_and_docs_say(task):
    """Per catalogue attribute and level up to the cap (the others at 0, 120 seeds): every drawn value lies in the range
    the guidelines state, the draws reach into both ends of it (a scalar: its value is the largest drawn), a level differs
    from the one below, and a level marked as repeating the one below gives the very same items (also with every other
    attribute at its cap). docs/reasoning-gym.md's table states the same."""
    from envengineer.tasks.reasoning_gym.items import describe_levels, item_seed, level_ranges, make_item, repeated_levels

    from reasoning_gym.coaching.attributes import ScalarAttributeDefinition
    from reasoning_gym.factory import create_curriculum

    generator, _ = load_task_all()
    guidelines = generator.guidelines()
    docs = (Path(__file__).resolve().parents[1] / "docs" / "reasoning-gym.md").read_text()
    assert set(DRAWN) == {(name, attr) for name, entry in catalogue.CATALOGUE.items() for attr in entry.caps}
    seeds = [item_seed(11, "levels", i) for i in range(120)]
    repeats = []
    for name, entry in catalogue.CATALOGUE.items():
        assert set(entry.draws) == set(entry.caps), name
        for attr, cap in entry.caps.items():
            described = describe_levels(name, attr)
            assert f"`{attr}` (0-{cap}): {entry.draws[attr]}; per level {described}" in guidelines, (name, attr)
            assert f"| {name} | `{attr}` | {entry.draws[attr]} | {described} |" in docs, (name, attr)
            scalar = isinstance(create_curriculum(name).attributes[attr], ScalarAttributeDefinition)
            ranges, repeated = level_ranges(name, attr), set(repeated_levels(name, attr))
            below = None
            for level, (low, high) in enumerate(ranges):
                items = [make_item(name, {attr: level}, seed) for seed in seeds]
                drawn = [value for item in items for value in DRAWN[(name, attr)](item["metadata"])]
                where = (name, attr, level, (low, high), min(drawn), max(drawn))
                if scalar:  # a count, or a bound a statement may reach (knights_knaves' depth and width)
                    assert low == high and max(drawn) == high, where
                else:
                    assert low <= min(drawn) and max(drawn) <= high, where
                    assert min(drawn) <= low + (high - low) / 4 and max(drawn) >= high - (high - low) / 4, where
                if level in repeated:
                    assert ranges[level - 1] == (low, high) and items == below, where
                    tops = {a: c for a, c in entry.caps.items() if a != attr}
                    assert [make_item(name, {**tops, attr: level}, s) for s in seeds[:20]] == \
                        [make_item(name, {**tops, attr: level - 1}, s) for s in seeds[:20]], where
                    assert f"{level}: {low}–{high} (the same items as level {level - 1})" in described
                    repeats.append(f"{name}.{attr}")
                elif below is not None:
                    assert ranges[level - 1] != (low, high) and items != below, where
                below = items
    # every ensure_interval attribute capped at its last level repeats the one below there (the caps stay: lowering
    # one would change a frozen set; test_lowering_a_repeated_top_level_would_change_a_frozen_set)
    assert repeats == ["maze.dist", "mini_sudoku.empty", "gcd.value", "lcm.value", "leg_counting.num_instances", "count_bits.n",
                       "base_conversion.base", "base_conversion.value", "prime_factorization.value",
                       "fraction_simplification.value", "fraction_simplification.factor"]


def test_lowering_a_repeated_top_level_would_change_a_frozen_set(monkeypatch):
    """Why the repeated top levels keep their caps: with any one of them a level lower, a frozen set's recipe gives
    other records (the levels are drawn from 0 to the caps)."""
    from dataclasses import replace

    from envengineer.tasks.reasoning_gym import benchmarks
    from envengineer.tasks.reasoning_gym.items import repeated_levels

    builders = {"rg-val": benchmarks.build_validation, "rg-hard": benchmarks.build_hard, "rg-transfer": benchmarks.build_transfer}
    frozen = {name: build() for name, build in builders.items()}
    for name, entry in catalogue.CATALOGUE.items():
        for attr, cap in entry.caps.items():
            if cap not in repeated_levels(name, attr):
                continue
            monkeypatch.setitem(catalogue.CATALOGUE, name, replace(entry, caps={**entry.caps, attr: cap - 1}))
            assert any(build() != frozen[set_name] for set_name, build in builders.items()), (name, attr)
            monkeypatch.setitem(catalogue.CATALOGUE, name, entry)


def load_task_all():
    from envengineer.testing import load_task

    return load_task(TASK, {"datasets": list(catalogue.CATALOGUE)})


# ------------------------------------------------------------------ the size cap against the longer-answer credit


def _longest_fitting(validator, record, padded):
    """The most pads that fit the size cap: its verdict, and the verdict with one pad more."""
    from envengineer.tasks.reasoning_gym.validator import ANSWER_FACTOR, MIN_ANSWER_CHARS

    cap = max(MIN_ANSWER_CHARS, ANSWER_FACTOR * len(record["answer"]))
    k = 0
    while len(padded(k + 1)) <= cap:
        k += 1
    return k, validator.score(record, f"<answer>{padded(k)}</answer>"), validator.score(record, f"<answer>{padded(k + 1)}</answer>")


def test_a_solved_tower_of_hanoi_answer_fits_the_size_cap_only_under_4x_the_optimal_moves(task):
    """valid_at 0.06 reads "solved": an answer padded with legal back-and-forth moves of disk 1 stays valid up to the
    size cap, which it reaches below 4x the optimal move count (a score above 0.25, far from 0.06); one pair more is
    too_long. Every level combination up to the caps, 10 items each."""
    generator, validator = task
    caps = catalogue.CATALOGUE["tower_of_hanoi"].caps
    ratios = []
    for disks in range(caps["num_disks"] + 1):
        for pegs in range(caps["num_pegs"] + 1):
            config = RGConfig.model_validate({"datasets": {"tower_of_hanoi": {"ratio": 1.0, "num_disks": disks, "num_pegs": pegs}}})
            for record in generator.generate(config, n=10, seed=disks * 3 + pegs).records:
                meta = record["metadata"]
                start, other = meta["start_peg"], next(p for p in range(1, meta["num_pegs"] + 1) if p != meta["start_peg"])
                pair = f"Move disk 1 from Peg {start} to Peg {other}\nMove disk 1 from Peg {other} to Peg {start}"
                k, fits, over = _longest_fitting(validator, record, lambda k: "\n".join([pair] * k + [record["answer"]]))
                optimal = meta["solution_length"]
                assert fits.valid and not fits.optimal and fits.score == pytest.approx(optimal / (optimal + 2 * k)), record["id"]
                assert over.failure == "too_long"
                ratios.append((optimal + 2 * k) / optimal)
    assert 3.5 < min(ratios) and max(ratios) < 4


def test_a_longer_shortest_path_is_valid_while_it_fits_the_size_cap(task):
    """A valid longer path gets 0.5 (valid) only while it fits max(256, 4 x the oracle's characters): an oracle of
    64+ characters lets through about 3-5x its moves, a shorter one more (the 256 floor). On rg-val's and rg-hard's
    shortest paths and 60 more at the caps."""
    from envengineer.tasks.reasoning_gym.benchmarks import FOLDER

    generator, validator = task
    records = [json.loads(line) for name in ("rg-val", "rg-hard") for line in (FOLDER / f"{name}.jsonl").read_text().splitlines()]
    top = RGConfig.model_validate({"datasets": {"shortest_path": {"ratio": 1.0, **catalogue.CATALOGUE["shortest_path"].caps}}})
    records += generator.generate(top, n=60, seed=0).records
    seen = long = 0
    for record in records:
        if record["dataset"] != "shortest_path" or record["answer"] == "infeasible":
            continue
        matrix = record["metadata"]["matrix"]
        rows, cols = len(matrix), len(matrix[0])
        r, c = next((i, j) for i in range(rows) for j in range(cols) if matrix[i][j] == "*")
        free = {"up down": r > 0 and matrix[r - 1][c] != "X", "down up": r + 1 < rows and matrix[r + 1][c] != "X",
                "left right": c > 0 and matrix[r][c - 1] != "X", "right left": c + 1 < cols and matrix[r][c + 1] != "X"}
        pair = next(p for p, ok in free.items() if ok)
        k, fits, over = _longest_fitting(validator, record, lambda k: " ".join([pair] * k + [record["answer"]]))
        assert (fits.valid, fits.optimal, fits.score) == (True, False, 0.5) and over.failure == "too_long"
        moves = len(record["answer"].split())
        if len(record["answer"]) >= 64:
            assert 2.5 < (moves + 2 * k) / moves < 5.5
            long += 1
        seen += 1
    assert seen >= 20 and long >= 5


def test_the_exclusion_reasons_of_number_sorting_and_polynomial_equations_hold(tmp_path):
    """number_sorting's scorer evals the record's answer, never the model's; polynomial_equations' scorer reads the
    answer with float(), not sympy (a power tower is scored at once)."""
    import reasoning_gym

    assert "record's own answer" in catalogue.EXCLUDED["number_sorting"]
    assert "float()" in catalogue.EXCLUDED["polynomial_equations"]
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x') or ['1']"
    sorting = reasoning_gym.create_dataset("number_sorting", seed=3, size=1)
    item = sorting[0]
    assert sorting.score_answer(item["answer"], item) == 1.0
    assert sorting.score_answer(code, item) == 0.0 and not marker.exists()  # the model's answer: JSON, never run
    sorting.score_answer("['1']", {**item, "answer": code})  # the record's answer: run
    assert marker.exists()
    equations = reasoning_gym.create_dataset("polynomial_equations", seed=3, size=1)
    item = equations[0]
    assert equations.score_answer(item["answer"], item) == 1.0
    started = time.perf_counter()
    assert equations.score_answer("9**9**9**9", item) == 0.0 and time.perf_counter() - started < 0.1


# ------------------------------------------------------------------ baselines


def _request(registry, generator, config, valid_rates, n=20):
    def rates(valid):
        return {"n": n, "valid": valid, "optimal": valid, "valid_rate": valid / n, "optimal_rate": valid / n,
                "failures": {"wrong": n - valid} if n > valid else {}}

    by = {g: rates(round(r * n)) for g, r in valid_rates.items()}
    report = {"overall": rates(sum(v["valid"] for v in by.values()) // len(by)), "by": {"dataset": by}}
    evidence = Evidence(task=generator, round=0, rounds_total=3, config=config.model_dump(), report=report,
                        failure_types=("no_answer", "wrong"), history=[])
    return build_request(evidence, registry, {"modules": ["F"]})


def test_heuristic_eases_a_collapsed_dataset_and_hardens_a_saturated_one(registry):
    generator = registry.create("generator", TASK, {"name": TASK, "datasets": ["chain_sum", "maze", "knights_knaves"]})
    config = generator.project({"datasets": {"chain_sum": {"num_terms": 2, "num_digits": 2}, "maze": {"dist": 2},
                                             "knights_knaves": {"n_people": 1}}}, generator.default_config()).config
    request = _request(registry, generator, config, {"chain_sum": 1.0, "maze": 0.0, "knights_knaves": 0.5})
    outcome = design(registry.create("engineer", "heuristic"), request)
    assert not outcome.fallback, outcome.reason
    after = {name: row.model_dump() for name, row in outcome.config.datasets.items()}
    assert after["chain_sum"]["num_terms"] == 3 and after["chain_sum"]["num_digits"] == 3  # saturated: one level harder
    assert after["maze"]["dist"] == 1 and after["maze"]["grid_size"] == 0  # collapsed: one level easier (grid_size at 0)
    assert after["knights_knaves"]["n_people"] == 1
    assert abs(sum(row["ratio"] for row in after.values()) - 1) < 1e-6


def test_heuristic_never_passes_a_dataset_cap(registry):
    generator = registry.create("generator", TASK, {"name": TASK, "datasets": ["maze", "chain_sum"]})
    config = generator.project({"datasets": {"maze": {"dist": 3}}}, generator.default_config()).config
    outcome = design(registry.create("engineer", "heuristic"), _request(registry, generator, config, {"maze": 1.0, "chain_sum": 0.5}))
    assert outcome.config.datasets["maze"].model_dump()["dist"] == 3 and outcome.config.datasets["maze"].model_dump()["grid_size"] == 0


# ------------------------------------------------------------------ run configs


def test_a_run_mixing_reasoning_gym_with_a_mapf_benchmark_is_refused(registry):
    from envengineer.loop.runconfig import check_eval_sets, parse_run_config

    config = parse_run_config({"name": "mix", "task": {"name": TASK}, "engineer": {"name": "heuristic"},
                               "policy": {"name": "tiny"}, "trainer": {"name": "trl"},
                               "eval": {"validation": "mapf-2agents-val", "benchmarks": []}})
    with pytest.raises(ConfigError) as caught:
        check_eval_sets(config, registry, TASK)
    assert "mapf-2agents-val" in str(caught.value) and "mapf-frozenlake" in str(caught.value) and TASK in str(caught.value)


# ------------------------------------------------------------------ frozen benchmarks

RG_SETS = ("rg-val", "rg-hard", "rg-transfer", "rg-chain-sum-val")


def test_the_frozen_sets_verify_and_rebuild_identically(registry):
    from envengineer.store.benchmarks import build, verify
    from envengineer.fileio import read_jsonl

    assert verify(registry, list(RG_SETS)) == []
    assert build(registry, list(RG_SETS), check=True) == []
    sizes = {name: len(list(read_jsonl(registry.benchmark(name).path))) for name in RG_SETS}
    assert sizes == {"rg-val": 240, "rg-hard": 120, "rg-transfer": 120, "rg-chain-sum-val": 400}
    val = list(read_jsonl(registry.benchmark("rg-val").path))
    assert {r["dataset"] for r in val} == set(catalogue.DEFAULT_DATASETS)
    transfer = {r["dataset"] for r in read_jsonl(registry.benchmark("rg-transfer").path)}
    assert transfer and not transfer & set(catalogue.DEFAULT_DATASETS) and transfer <= set(catalogue.CATALOGUE)
    for record in read_jsonl(registry.benchmark("rg-hard").path):
        caps = catalogue.CATALOGUE[record["dataset"]].caps
        assert all(level >= min(cap, cap // 2 + 1) for level, cap in ((record["levels"][a], c) for a, c in caps.items()))
    assert registry.get("generator", TASK).validation_benchmark == "rg-val"


def test_the_sets_rebuild_identically_under_another_hash_seed(tmp_path):
    cli = Path(sys.executable).with_name("envengineer")
    command = [str(cli)] if cli.exists() else [sys.executable, "-c", "from envengineer.cli.commands import main; main()"]
    done = subprocess.run([*command, "bench", "build", *RG_SETS, "--check"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "777", "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("identical") == len(RG_SETS)


@pytest.mark.parametrize("name", RG_SETS)
def test_reference_answers_on_the_frozen_sets_score_100_percent_valid(registry, name):
    from envengineer.fileio import read_jsonl

    spec = registry.benchmark(name)
    generator, validator = registry.task(spec.task, dict(spec.options))
    records = list(read_jsonl(spec.path))
    for record in records:
        generator.check_record(record)
    verdicts = [validator.score(r, generator.reference_answer(r)) for r in records]
    assert all(v.valid and v.optimal for v in verdicts), [(r["id"], v.failure) for r, v in zip(records, verdicts) if not v.valid][:3]


def test_a_hanging_scorer_is_cut_off_by_the_net_and_the_net_is_far_above_any_vetted_scorer():
    """bounded_call returns None (a scorer_error) for a scorer past its limit; the limit is a net for hangs
    (30 s), not a budget a loaded machine could reach."""
    import threading

    from envengineer.tasks.reasoning_gym.validator import SCORE_TIME_LIMIT, bounded_call

    release = threading.Event()
    assert bounded_call(lambda answer, item: release.wait(5) and 1.0, "a", {}, 0.05) is None
    release.set()
    assert bounded_call(lambda answer, item: 1.0, "a", {}, 0.05) == 1.0
    assert SCORE_TIME_LIMIT >= 30
