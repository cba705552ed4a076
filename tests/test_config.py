import pytest

import robustep
from robustep import config, get_config


def test_override_is_scoped_and_restored():
    before = get_config().quadrature_points
    with config(quadrature_points=before + 7) as settings:
        assert settings.quadrature_points == before + 7
        assert get_config().quadrature_points == before + 7
        with config(jitter=1e-3):
            assert get_config().quadrature_points == before + 7
            assert get_config().jitter == 1e-3
    assert get_config().quadrature_points == before


def test_restored_after_exception():
    before = get_config().jitter
    with pytest.raises(RuntimeError), config(jitter=0.5):
        raise RuntimeError("boom")
    assert get_config().jitter == before


def test_unknown_setting_lists_valid_names():
    with pytest.raises(TypeError, match="valid settings are"), config(not_a_setting=1):
        pass


def test_top_level_exports():
    for name in ("GPClassifier", "StudentTGPRegressor", "BayesPointMachine",
                 "StudentTProcessClassifier"):  # fmt: skip
        assert hasattr(robustep, name)
