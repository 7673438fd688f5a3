"""Paired comparisons of two evaluations on the same instances."""

import math

import pytest

from envengineer.components.metrics import paired_change, sign_test


def minlike_p(gained: int, lost: int) -> float:
    """Two-sided binomial(n, 1/2) p-value: the probability of outcomes no likelier than the observed one."""
    n = gained + lost
    prob = [math.comb(n, i) / 2**n for i in range(n + 1)]
    return min(1.0, sum(q for q in prob if q <= prob[gained] * (1 + 1e-12)))


@pytest.mark.parametrize("gained,lost", [(0, 0), (1, 0), (5, 0), (3, 3), (34, 19), (19, 34), (28, 11), (200, 150)])
def test_sign_test_matches_the_binomial_definition(gained, lost):
    assert sign_test(gained, lost) == pytest.approx(minlike_p(gained, lost) if gained + lost else 1.0)


def test_paired_change_counts_flips_only():
    before = [True, False, False, True, False]
    after = [True, True, False, False, True]
    change = paired_change(before, after)
    assert (change["gained"], change["lost"]) == (2, 1)
    assert change["p"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="4 items before, 5 after"):
        paired_change(before[:4], after)
