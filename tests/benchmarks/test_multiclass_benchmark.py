"""benchmarks/multiclass.py --digits: the digits table at a small size, with the subset
search of the multinomial core engaged, prints one row per model with finite numbers."""

from __future__ import annotations

import math

from _benchmarks import load_benchmark


def _suite():
    return load_benchmark("multiclass", "_multiclass_benchmark")


def test_digits_table_rows(capsys):
    from robustep import config

    suite = _suite()
    Xtr, Xte, ytr, yte = suite.digits_split(80)
    assert Xtr.shape == (80, 64) and len(yte) == 1797 - 80
    assert set(ytr) == set(range(10))
    with config(multinomial_search_subset=40, multinomial_subset_maxiter=2):
        suite.digits(80, with_sklearn=False)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| robustep")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert all(math.isfinite(float(v)) for v in cells[1:6])
    assert cells[7].startswith(tuple("0123456789")) and " on 40 + " in cells[7]
