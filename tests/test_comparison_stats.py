"""The statistics of a comparison over seeds: Welch's test, the permutation test,
Holm's adjustment, the mean over rounds; and the seed-level table on a hand-made report."""

import itertools
import math
import statistics

import pytest

from envengineer.plugins.suite.arms.stats import area_under_rounds, holm, permutation_test, seed_test, seed_test_power, welch


# ------------------------------------------------------------------ two samples


def test_welch_on_a_hand_worked_case():
    # means 2 and 5, variances 1 and 1: se = √(2/3), t = −3/se, df = (2/3)² / (2 · (1/3)² / 2) = 4;
    # R's t.test(c(1,2,3), c(4,5,6)): t = −3.6742, df = 4, p = 0.02131, 95% CI −5.266958 … −0.733042
    test = welch([1, 2, 3], [4, 5, 6])
    assert test.difference == -3 and test.df == pytest.approx(4)
    assert test.t == pytest.approx(-3.674235, abs=1e-6) and test.p == pytest.approx(0.02131, abs=1e-5)
    assert (test.low, test.high) == (pytest.approx(-5.266958, abs=1e-6), pytest.approx(-0.733042, abs=1e-6))


def test_welch_with_unequal_variances_uses_the_satterthwaite_df():
    a, b = [10.0, 12.0, 17.0], [9.0, 9.5]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 2
    test = welch(a, b)
    assert test.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1))
    from scipy import stats

    assert test.t == pytest.approx((statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb))
    assert test.p == pytest.approx(2 * stats.t.sf(abs(test.t), test.df))
    half = stats.t.ppf(0.975, test.df) * math.sqrt(va + vb)
    assert test.high - test.difference == pytest.approx(half)


def test_welch_without_spread_or_with_one_seed_gives_no_test():
    flat = welch([20.0, 20.0, 20.0], [18.0, 18.0, 18.0])
    assert flat.difference == 2 and flat.p is None and flat.low is None and "sd 0" in flat.why
    single = welch([20.0], [18.0, 19.0])
    assert single.difference == pytest.approx(1.5) and single.p is None and "one seed" in single.why
    assert welch([], [1.0, 2.0]) is None


def test_the_permutation_test_with_three_seeds_each_has_twenty_splits():
    # completely separated: only the observed split and its mirror are as extreme, 2 / C(6, 3) = 0.1
    test = permutation_test([20.1, 20.5, 21.0], [18.0, 18.2, 19.9])
    assert (test.p, test.splits, test.exact, test.smallest) == (pytest.approx(0.1), 20, True, pytest.approx(0.1))
    assert permutation_test([5.0, 5.0, 5.0], [3.0, 3.0, 3.0]).p == pytest.approx(0.1)  # sd 0 both: still a test
    assert permutation_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).p == 1.0
    # {1, 2, 4} vs {3, 5, 6}: observed |2.33 − 4.67| = 2.33; of the 20 splits the ones with a sum ≤ 7
    # or ≥ 14 (sum of all 21): {1,2,3}=6, {1,2,4}=7 and their mirrors {4,5,6}, {3,5,6}: 4 of 20
    assert permutation_test([1.0, 2.0, 4.0], [3.0, 5.0, 6.0]).p == pytest.approx(4 / 20)


def test_the_permutation_test_enumerates_by_brute_force():
    a, b = [3.0, 7.5, 4.0, 9.0], [2.0, 1.0, 5.5]
    values, observed = a + b, abs(statistics.fmean(a) - statistics.fmean(b))
    hits = 0
    for split in itertools.combinations(range(7), 4):
        x = [values[i] for i in split]
        y = [values[i] for i in range(7) if i not in split]
        hits += abs(statistics.fmean(x) - statistics.fmean(y)) >= observed - 1e-12
    assert permutation_test(a, b).p == pytest.approx(hits / math.comb(7, 4))


def test_the_monte_carlo_permutation_test_is_seeded_and_close_to_the_exact_one():
    a, b = [float(x) for x in range(10)], [x + 2.5 for x in range(10)]  # C(20, 10) = 184,756 splits
    exact = permutation_test(a, b, limit=200_000)
    sampled = permutation_test(a, b)
    assert exact.exact and exact.splits == 184_756 and not sampled.exact and sampled.splits == 20_000
    assert sampled.p == permutation_test(a, b).p  # the same values, the same p
    assert sampled.p == pytest.approx(exact.p, abs=0.01)


# ------------------------------------------------------------------ families and summaries


def test_holm_on_a_hand_worked_example():
    # sorted: 0.005 × 4 = 0.02; 0.01 × 3 = 0.03; 0.03 × 2 = 0.06; 0.04 × 1 = 0.04 → kept at 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, None, 0.01]) == [pytest.approx(0.5), None, pytest.approx(0.02)]  # None is not counted
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6]) and holm([0.7]) == [0.7] and holm([]) == []
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_the_mean_over_rounds():
    assert area_under_rounds([10.0, 20.0, 30.0, 40.0]) == 25.0
    assert area_under_rounds([10.0, None, 30.0]) is None and area_under_rounds([]) is None


# ------------------------------------------------------------------ the seed-level table on a hand-made report


def report(values: dict[str, list[tuple[float, list[float]]]], verdicts: dict[str, list[str]] | None = None):
    """Arms of one validation set: per seed (last-round valid rate, every round's valid rate); the first arm
    is the baseline. ``verdicts``: per arm, per seed, 'V' solved / '.' not, for the paired tests."""
    from envengineer.plugins.report.drawn import BenchView
    from envengineer.plugins.report.view import RunView, Stage
    from envengineer.plugins.suite.arms.runs import Arm, ArmRun, ArmsReport, SetResult

    arms = []
    for index, (label, seeds) in enumerate(values.items()):
        runs = []
        for seed, (last, curve) in enumerate(seeds):
            rounds = [Stage(f"{i:02d}", i, eval={"overall": {"valid_rate": v / 100}}) for i, v in enumerate(curve)]
            view = RunView(None, {}, [], Stage("base", None, eval={"overall": {"valid_rate": 0.99}}), rounds)
            marks = (verdicts or {}).get(label, [""] * len(seeds))[seed]
            result = SetResult({"overall": {"valid_rate": last / 100}},
                               {f"i{k}": {"valid": c == "V", "optimal": False} for k, c in enumerate(marks)})
            runs.append(ArmRun(seed, view, {"validation": result}))
        arms.append(Arm(label, label, runs, len(seeds), baseline=index == 0))
    return ArmsReport("t", arms, [("validation", BenchView("val", "val"))], arms[0])


def test_the_seed_table_tests_each_arm_against_the_baseline_with_holm_across_arms():
    from envengineer.plugins.report.compare import to_csv, to_markdown
    from envengineer.plugins.suite.arms.seeds import seed_table

    rep = report({
        "fixed": [(20.0, [10.0, 20.0]), (21.0, [12.0, 21.0]), (22.0, [14.0, 22.0])],
        "good": [(30.0, [20.0, 30.0]), (31.0, [24.0, 31.0]), (33.0, [30.0, 33.0])],
        "same": [(20.5, [10.0, 20.5]), (21.5, [10.0, 21.5]), (21.0, [10.0, 21.0])],
    })
    table = seed_table(rep)
    rows = {(r["figure"], r["arm"]): r for r in table.rows}
    assert list(rows) == [("validation (val) valid %", "good"), ("validation (val) valid %", "same"),
                          ("validation (val) valid, mean over rounds %", "good"),
                          ("validation (val) valid, mean over rounds %", "same")]
    good = rows[("validation (val) valid %", "good")]
    expected = welch([30.0, 31.0, 33.0], [20.0, 21.0, 22.0])
    assert good["diff"] == pytest.approx(31.333333 - 21.0) and good["seeds"] == "3 vs 3"
    assert (good["low"], good["high"], good["df"]) == (expected.low, expected.high, expected.df)
    assert good["perm_p"] == "0.100"  # 3 vs 3, separated: 2 / 20
    assert good["welch_p"] == f"{expected.p:.3f}" == "0.001"
    same = rows[("validation (val) valid %", "same")]
    assert same["diff"] == 0 and same["welch_p"] == "1.000"
    # Holm over the two arms: the smaller p times 2 (0.0012 -> 0.0025), the larger kept at least that (1)
    assert good["welch_holm"] == f"{2 * expected.p:.3f}" == "0.002" and same["welch_holm"] == "1.000"
    assert good["perm_holm"] == "0.200" and same["perm_holm"] == "1.000"
    # the mean over rounds: fixed 15, 16.5, 18; good 25, 27.5, 31.5 (the base evaluation's 99 left out)
    auc = rows[("validation (val) valid, mean over rounds %", "good")]
    assert auc["arm_mean"].mean == pytest.approx(28.0) and auc["base_mean"].mean == pytest.approx(16.5)
    assert auc["diff"] == pytest.approx(11.5)
    assert "20 splits, so its smallest two-sided p is 0.1 and it cannot reach 0.05" in table.note
    assert "| validation (val) valid % | good | 3 vs 3 | 31.3 ± 1.5 | 21.0 ± 1.0 | 10.3 |" in to_markdown(table)
    header = to_csv(table).splitlines()[0]
    assert header == ("figure,arm,seeds (arm vs baseline),mean (arm),mean (arm) sd,mean (arm) n,mean (baseline),mean (baseline) sd,"
                             "mean (baseline) n,difference (points),95% CI low,95% CI high,Welch df,Welch p,Welch p (Holm),"
                             "permutation p,permutation p (Holm),remark")


def test_the_seed_table_says_why_there_is_no_test():
    from envengineer.plugins.suite.arms.seeds import seed_table

    rep = report({"fixed": [(20.0, [20.0]), (20.0, [20.0])], "flat": [(25.0, [25.0]), (25.0, [25.0])],
                  "single": [(30.0, [30.0])]})
    rows = {(r["figure"], r["arm"]): r for r in seed_table(rep).rows}
    flat, single = rows[("validation (val) valid %", "flat")], rows[("validation (val) valid %", "single")]
    assert flat["diff"] == 5.0 and flat["low"] is None and flat["welch_p"] == "–" and "sd 0 in both" in flat["remark"]
    assert flat["perm_p"] == "0.333"  # 2 vs 2: 6 splits, the observed one and its mirror
    assert single["diff"] == 10.0 and single["welch_p"] == "–" and single["perm_p"] == "–" and "one seed" in single["remark"]
    assert seed_table(report({"fixed": [(20.0, [20.0])]})) is None  # nothing to compare


def test_the_pooled_sign_tests_are_holm_adjusted_across_the_arms():
    from envengineer.components.metrics import sign_test
    from envengineer.plugins.suite.arms.paired import paired_tables

    rep = report({"fixed": [(0.0, [0.0])] * 2, "a": [(0.0, [0.0])] * 2, "b": [(0.0, [0.0])] * 2},
                 {"fixed": ["V.....", "V....."], "a": ["VVVVVV", "VVVVV."], "b": ["VV....", "......"]})
    pooled, _ = paired_tables(rep)
    rows = {r["arm"]: r for r in pooled.rows}
    # a: +5 −0 and +4 −0 -> +9 −0; b: +1 −0 and +0 −1 -> +1 −1
    pa, pb = sign_test(9, 0), sign_test(1, 1)
    assert rows["a"]["validation:valid"] == f"+9 −0 (n 12), p = {pa:.3f}"
    assert rows["a"]["validation:valid:holm"] == f"{2 * pa:.3f}" and rows["b"]["validation:valid:holm"] == "1.000"
    assert "validation:valid:holm" not in rows["fixed vs itself"]  # the noise floor is not one of the family
    assert [c.header for c in pooled.columns][1:3] == ["validation (val) valid", "validation (val) valid Holm p"]


def test_sampled_pass1_is_read_defensively():
    from envengineer.plugins.suite.arms.seeds import sampled

    block = sampled({"overall": {}, "sampled": {"n": 4, "temperature": 1.0, "pass1": 0.25, "by": {"size": {"3x3": 0.5}}}})
    assert block.pass1 == 0.25 and block.n == 4 and block.by == {"size": {"3x3": 0.5}}
    assert sampled({"sampled": {"n": 4, "temperature": 1.0, "pass1": 0.25}}).by == {}
    for summary in (None, {}, {"sampled": None}, {"sampled": "x"}, {"sampled": {"n": 4, "temperature": 1.0}},
                    {"sampled": {"n": 4, "temperature": 1.0, "pass1": "high"}}, {"sampled": {"n": 0, "temperature": 1, "pass1": 0.1}},
                    {"sampled": {"n": 4, "temperature": 1.0, "pass1": 0.3, "by": "none"}}, []):
        assert sampled(summary) is None, summary


# ------------------------------------------------------------------ paired by seed


def test_the_seed_test_on_a_hand_worked_case():
    # differences 1, 2, 3, -0.5, 4, 2, 1, 3: sum 15.5 (mean 1.9375), sum of the magnitudes 16.5. A sign pattern's
    # |sum| reaches 15.5 only with every sign as observed (15.5) or with -0.5 flipped (16.5): any other flip moves
    # the sum by at least 2. With their mirrors, 4 of the 256 patterns: p = 4 / 256
    test = seed_test([1.0, 2.0, 3.0, -0.5, 4.0, 2.0, 1.0, 3.0])
    assert test.mean == pytest.approx(1.9375) and test.patterns == 256 and test.smallest == pytest.approx(2 / 256)
    assert test.p == pytest.approx(4 / 256)
    # t interval: sd of the differences, t(0.975, 7) = 2.364624
    half = 2.364624252 * statistics.stdev([1.0, 2.0, 3.0, -0.5, 4.0, 2.0, 1.0, 3.0]) / math.sqrt(8)
    assert (test.low, test.high) == (pytest.approx(1.9375 - half, abs=1e-6), pytest.approx(1.9375 + half, abs=1e-6))


def test_the_seed_test_enumerates_every_sign_pattern_by_brute_force():
    values = [0.12, -0.03, 0.05, 0.08, -0.01, 0.02]
    observed = abs(statistics.fmean(values))
    hits = sum(abs(statistics.fmean([s * v for s, v in zip(signs, values)])) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(values)))
    assert seed_test(values).p == pytest.approx(hits / 64)
    # every seed one sign: the smallest p of n seeds, 2 / 2^n; one seed: no test; none: None
    assert seed_test([0.1, 0.2, 0.05, 0.3]).p == pytest.approx(2 / 16)
    assert seed_test([0.1]).p is None and "one seed" in seed_test([0.1]).why
    assert seed_test([]) is None
    assert seed_test([0.0, 0.0, 0.0]).p == 1.0
    with pytest.raises(ValueError, match="21 seeds"):
        seed_test([0.1] * 21)


def test_the_seed_tests_power_rises_with_the_effect_and_holds_its_level_at_no_effect():
    # at no effect the share of p <= alpha is at most alpha (the exact test is conservative: its p takes the
    # values k / 2^n); all-positive draws at a large effect give the smallest p, 2/256 < 0.0167
    null = seed_test_power(0.0, 0.04, 8, 0.05)
    assert null <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)
    powers = [seed_test_power(e, 0.04, 8, 0.05 / 3) for e in (0.02, 0.05, 0.10)]
    assert powers[0] < powers[1] < powers[2] and powers[2] > 0.95
    assert seed_test_power(0.10, 0.04, 8, 0.001) == 0.0  # below the smallest p 8 seeds can give
