"""Every row of the bad-input table (docs/reliability.md, "Bad input") raises as listed.

The rows live in benchmarks/bad_input.py, which also prints the table; each row is a call
with one bad argument, the exception class it must raise and a pattern its message must
contain (what is wrong and what to do).
"""

import re

import pytest

from _benchmarks import load_benchmark

bad_input = load_benchmark("bad_input", "robustep_bench_bad_input")

CASES = bad_input.all_cases()


def test_case_ids_are_unique_and_cover_every_entry_point():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    entries = {c.entry.split(".")[0] for c in CASES}
    for entry in [
        "GPClassifier",
        "BayesPointMachine",
        "StudentTProcessClassifier",
        "StudentTGPRegressor",
        "expectation_propagation",
        "likelihoods",
        "mrf",
        "datasets",
    ]:
        assert entry in entries


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_raises_a_clear_error(case):
    with pytest.raises(case.exc) as info:
        case.call()
    message = " ".join(str(info.value).split())
    assert re.search(case.match, message), message
    # no bare internal errors dressed up as a documented type
    assert type(info.value).__name__ not in ("IndexError", "KeyError", "UnicodeDecodeError")


def test_outcome_flags_a_wrong_answer():
    """The table marks a row whose call raises nothing, or raises something else."""
    quiet = bad_input.Case("f", "nothing raised", lambda: None, ValueError, "x")
    wrong = bad_input.Case("f", "wrong type", lambda: int("x"), TypeError, "x")
    right = bad_input.Case("f", "right", lambda: int("x"), ValueError, "invalid literal")
    assert bad_input.outcome(quiet) == ("no exception", "", False)
    assert bad_input.outcome(wrong)[2] is False
    assert bad_input.outcome(right)[:1] == ("ValueError",) and bad_input.outcome(right)[2]
