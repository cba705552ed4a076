"""benchmarks/step_search.py: its variants replace one method for a run and restore it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from robustep.ep import InferenceStrategy
from robustep.estimators import _binary_dense

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "step_search.py"


def _module():
    spec = importlib.util.spec_from_file_location("_step_search", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_variants_change_the_search_and_restore_it():
    step_search = _module()
    assert len(step_search.cells()) == 42
    chain = InferenceStrategy.auto(100, trial_damping=0.5, accelerate=True, tol_units="marginal")
    saved = (_binary_dense.DenseBinaryCore.infer, _binary_dense.DenseBinaryCore.optimise)
    with step_search.variant("former-search", []):
        assert chain.search_stages(1e-2).stages == ("accelerated", "damped")
    with step_search.variant("site-units", []):
        assert InferenceStrategy.auto(100, accelerate=True).tol_units == "sites"
    from robustep.ep import accelerated

    scaled = accelerated._in_tolerance_units
    with step_search.variant("site-weights", []):
        v = np.ones(4)
        assert accelerated._in_tolerance_units(None, None, v) is v
    assert accelerated._in_tolerance_units is scaled
    from robustep.estimators import _search

    with step_search.variant("normalised", []):
        assert _binary_dense.maximise_evidence.keywords == {"normalise": True}
    assert _binary_dense.maximise_evidence is _search.maximise_evidence
    with step_search.variant("no-retry", []):
        assert _binary_dense.maximise_evidence.keywords == {"retry": False}
    assert _binary_dense.maximise_evidence is _search.maximise_evidence
    with step_search.variant("no-restarts", []):
        assert accelerated._RESTARTS == 0
    assert accelerated._RESTARTS == 2
    with step_search.variant("former-stage", []):
        stage = InferenceStrategy.auto(100, accelerate=True).accelerated
        assert (stage.memory, stage.warmup) == (5, 20)
    stage = InferenceStrategy.auto(100, accelerate=True).accelerated
    assert (stage.memory, stage.warmup) == (10, 10)
    assert chain.search_stages(1e-2).stages == ("accelerated",)
    assert InferenceStrategy.auto(100, tol_units="marginal").tol_units == "marginal"
    assert (_binary_dense.DenseBinaryCore.infer,
            _binary_dense.DenseBinaryCore.optimise) == saved  # fmt: skip
    with pytest.raises(ValueError, match="variant"), step_search.variant("nope", []):
        pass
    assert _binary_dense.DenseBinaryCore.infer is saved[0]


def test_runs_are_recorded_per_fit():
    """One small fit under a variant records its search evaluations and final fit."""
    from robustep import GPClassifier

    step_search = _module()
    X, y = step_search._stress().step_noise_data("xor", 80, 0.2, 5)
    runs = []
    with step_search.variant("nearest-warm-zero", runs):
        GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert any(search for search, *_ in runs) and not runs[-1][0]
    assert all(isinstance(sweeps, int) and sweeps >= 0 for *_, sweeps in runs)
    assert np.all([stage in ("accelerated", "damped", "double_loop", "power", "ep")
                   for _, stage, _, _ in runs])  # fmt: skip
