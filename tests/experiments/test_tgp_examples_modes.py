"""The Fig. 2 mode counter of tgp-examples (robustep.experiments.tgp_examples._modes)."""

import numpy as np

from robustep.experiments.tgp_examples import _modes


def _grid(n=121):
    g = np.linspace(-4, 4, n)
    F1, F2 = np.meshgrid(g, g, indexing="ij")
    return g, F1, F2


def test_two_separated_bumps_are_two_modes_highest_first():
    g, F1, F2 = _grid()
    p = np.exp(-((F1 - 2) ** 2 + (F2 - 2) ** 2)) + 0.5 * np.exp(-((F1 + 2) ** 2 + F2**2))
    modes = _modes(p, g, g)
    assert len(modes) == 2
    assert abs(modes[0][0] - 2) < 0.1 and abs(modes[0][1] - 2) < 0.1
    assert abs(modes[1][0] + 2) < 0.1 and abs(modes[1][2] - 0.5) < 0.02


def test_a_flat_ridge_cut_by_the_grid_is_one_mode():
    g, F1, F2 = _grid()
    # a long, almost flat ridge along f1 = f2 with tiny ripples that make several grid maxima
    p = np.exp(-4 * (F1 - F2) ** 2 - 0.01 * (F1 + F2) ** 2) * (1 + 1e-3 * np.cos(9 * F1))
    inner = p[1:-1, 1:-1]
    n_local = np.sum(
        (inner > p[:-2, 1:-1])
        & (inner > p[2:, 1:-1])
        & (inner > p[1:-1, :-2])
        & (inner > p[1:-1, 2:])
    )
    assert n_local >= 2  # the naive count would see several modes
    assert len(_modes(p, g, g)) == 1


def test_small_bumps_below_the_mass_threshold_are_ignored():
    g, F1, F2 = _grid()
    p = np.exp(-(F1**2 + F2**2)) + 1e-5 * np.exp(-((F1 - 3) ** 2 + (F2 - 3) ** 2) * 20)
    assert len(_modes(p, g, g)) == 1
