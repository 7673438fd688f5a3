"""The vetted catalogue: the reasoning-gym datasets this family trains and evaluates on.

Measured on reasoning-gym 0.1.25 (docs/reasoning-gym.md). A dataset is in when its scorer
executes nothing from the answer (no ``eval``, no sympy parsing), grades its own oracle answer as valid
(it may raise on a malformed answer, e.g. prime_factorization's on ``2 * 3`` or ``457.0``: the
validator counts that as the model's ``rejected``), has an oracle answer, generates the same bytes under any ``PYTHONHASHSEED`` and takes
milliseconds per item. Per entry:

- ``caps``: the highest curriculum level per attribute (the config keeps each level in
  ``0..cap``); chosen so that prompts stay under ~1.5k characters with every attribute at its
  cap (and, for tower_of_hanoi, so that the oracle answer stays short). An ``ensure_interval``
  attribute at its last level draws what the level below draws (reasoning-gym clips the level-(L+1)
  value it reads at the last one): maze's ``dist``, mini_sudoku's ``empty``, gcd's and lcm's ``value``,
  leg_counting's ``num_instances``, count_bits' ``n``, base_conversion's ``base`` and ``value``,
  prime_factorization's ``value`` and fraction_simplification's ``value`` and ``factor`` have their cap
  there, so their top level repeats the one below item for item. Their caps stay: lowering any of them
  would change a frozen set (rg-val, rg-hard or rg-transfer draw levels up to the caps); the guidelines
  and docs/reasoning-gym.md mark the repeated levels (items.describe_levels);
- ``draws``: per attribute, the quantity whose range its level sets (the guidelines show it with
  the range of each level);
- ``valid_at``: the score from which an answer counts as valid (1.0 unless the scorer rates a
  correct but non-optimal answer lower); an answer is optimal at 1.0;
- ``partial_at``: scores in ``[partial_at, valid_at)`` are the scorer's own partial credit
  (failure ``partial``); lower non-zero scores are ``wrong`` (e.g. the base scorer's substring
  credit: gold ``5``, answer ``15`` -> 0.5). None: every non-zero score below ``valid_at`` is ``wrong``.

Nothing here imports reasoning_gym.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    caps: dict[str, int]
    draws: dict[str, str]
    valid_at: float = 1.0
    partial_at: float | None = None
    note: str = ""


CATALOGUE: dict[str, Entry] = {
    "chain_sum": Entry(
        caps={"num_terms": 10, "num_digits": 9},
        draws={"num_terms": "terms in the sum", "num_digits": "digits of every operand (one count per item)"},
        note="sum and difference of integers; decimal scorer (sign, commas, trailing decimals tolerated), substring credit otherwise",
    ),
    "maze": Entry(
        caps={"dist": 3, "grid_size": 0},
        draws={"dist": "steps of the shortest path (a maze is redrawn until it is in the range)", "grid_size": "side of the square grid"},
        note="fewest steps from start to goal in a character maze; base scorer (exact, substring credit); grid_size level 1 draws grids up to 50x50 (prompts up to 2.7k characters)",
    ),
    "shortest_path": Entry(
        caps={"rows": 1, "cols": 0},
        draws={"rows": "rows of the grid", "cols": "columns of the grid"},
        valid_at=0.5,
        note="a shortest path of moves through a grid; the scorer gives 1.0 to any valid path of the oracle's length and 0.5 to a valid longer one",
    ),
    "knights_knaves": Entry(
        caps={"n_people": 3, "depth_constraint": 1, "width_constraint": 1},
        draws={"n_people": "people", "depth_constraint": "the deepest nesting a statement may have",
               "width_constraint": "the most sub-statements an and/or may join"},
        partial_at=0.3,
        note="who is a knight and who a knave; 0.3 + 0.7 x (share of people right) when some are right",
    ),
    "mini_sudoku": Entry(
        caps={"empty": 4},
        draws={"empty": "empty cells of the 4x4 grid"},
        partial_at=1e-9,
        note="a 4x4 sudoku; 1.0 for the solution in the oracle's layout, 0.9 x (share of cells right) otherwise, less for a longer answer",
    ),
    "tower_of_hanoi": Entry(
        caps={"num_disks": 1, "num_pegs": 2},
        draws={"num_disks": "disks", "num_pegs": "pegs"},
        valid_at=0.06,
        partial_at=0.05,
        note="moves that solve the puzzle: 1.0 at the optimal move count, optimal/used above it, 0.05 for legal moves that do not solve it; "
        "valid when solved (0.06 is just above 0.05): the size cap (4x the oracle's characters) keeps a solved answer under 4x the "
        "optimal count, so it scores above 0.25; num_disks level 2 would draw up to 10 disks (oracle answers up to 1023 moves)",
    ),
    "gcd": Entry(caps={"num_terms": 3, "value": 3}, draws={"num_terms": "numbers", "value": "each number"},
                 note="greatest common divisor; base scorer"),
    "lcm": Entry(caps={"numbers": 3, "value": 3}, draws={"numbers": "numbers", "value": "each number"},
                 note="least common multiple; base scorer"),
    "leg_counting": Entry(caps={"num_animals": 35, "num_instances": 9},
                          draws={"num_animals": "kinds of animal", "num_instances": "animals of each kind"},
                          note="total legs of a list of animals; base scorer"),
    "count_bits": Entry(caps={"n": 4}, draws={"n": "the number"}, note="1 bits in an integer's binary form; base scorer"),
    "base_conversion": Entry(caps={"base": 4, "value": 3},
                             draws={"base": "the source and the target base (two different ones)", "value": "the number"},
                             note="an integer from one base to another; base scorer"),
    "prime_factorization": Entry(
        caps={"value": 3}, draws={"value": "the number to factorize"}, partial_at=0.5,
        note="prime factors; 0.5 when their product is right but the factors are not, 0.01 for anything else",
    ),
    "fraction_simplification": Entry(
        caps={"value": 3, "factor": 3}, partial_at=0.1,
        draws={"value": "numerator and denominator of the fraction in lowest terms", "factor": "the factor both are multiplied by"},
        note="a fraction in lowest terms; 0.1 when the numerator or denominator is the unsimplified one, 0.05/0.01 otherwise",
    ),
}

#: The family's default datasets (the ``datasets`` option).
DEFAULT_DATASETS: tuple[str, ...] = ("chain_sum", "maze", "shortest_path", "knights_knaves", "mini_sudoku", "tower_of_hanoi")

#: Datasets kept out, and why (measured on reasoning-gym 0.1.25). The others of the package are
#: simply not vetted yet.
EXCLUDED: dict[str, str] = {
    "n_queens": "its scorer evals the answer",
    "string_insertion": "its scorer evals the answer",
    "spiral_matrix": "its scorer evals the answer",
    "binary_matrix": "its scorer evals the answer",
    "number_sorting": "its scorer evals the record's own answer on every call (the model's answer is only JSON-parsed): "
    "scoring an instance file would run the file's answer field as code",
    "countdown": "its scorer parses the answer with sympy (9**9**9**9 ran past 20 s)",
    "puzzle24": "its scorer parses the answer with sympy",
    "simple_integration": "its scorer parses the answer with sympy",
    "intermediate_integration": "its scorer parses the answer with sympy",
    "polynomial_equations": "an item takes ~10 ms and up to ~0.5 s to generate (sympy's solve; its scorer only float()s the answer)",
    "polynomial_multiplication": "its scorer parses the answer with sympy; its output depends on PYTHONHASHSEED",
    "boxnet": "no oracle answer",
    "propositional_logic": "no oracle answer",
    "codeio": "its output depends on PYTHONHASHSEED",
    "isomorphic_strings": "its output depends on PYTHONHASHSEED",
    "knight_swap": "its output depends on PYTHONHASHSEED",
    "list_functions": "its output depends on PYTHONHASHSEED; no curriculum",
    "ransom_note": "its output depends on PYTHONHASHSEED",
    "word_ladder": "its output depends on PYTHONHASHSEED",
    "graph_color": "no oracle answer",
    "rubiks_cube": "no oracle answer",
    "rush_hour": "no oracle answer",
    "sokoban": "takes seconds per item",
    "acre": "no curriculum",
    "composite": "no curriculum (a mix of other datasets)",
    "gsm_symbolic": "no curriculum",
}


def refusal(names: list[str] | tuple[str, ...]) -> str:
    """The message refusing datasets outside the catalogue: the catalogue, and why others are out."""
    unknown = ", ".join(names)
    why = "; ".join(f"{name}: {reason}" for name, reason in EXCLUDED.items())
    return (
        f"dataset(s) {unknown} not in the vetted catalogue of the reasoning-gym family "
        f"(catalogue: {', '.join(CATALOGUE)}). Kept out: {why}. Any other reasoning-gym dataset is not vetted yet "
        "(docs/reasoning-gym.md says how a dataset is vetted)."
    )


def attributes(name: str) -> tuple[str, ...]:
    """The curriculum attributes (the level knobs) of a catalogue dataset, in its order."""
    return tuple(CATALOGUE[name].caps)
