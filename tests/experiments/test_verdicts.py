"""Verdicts follow from the numbers shown beside them."""

from __future__ import annotations

import numpy as np
import pytest

from robustep.experiments import tgp_evidence, tgp_fixed

EP_BEST = {"mean": "EP", "std": "EP", "lpd": "EP"}


def test_tgp_fixed_unconverged_reference_is_not_yes():
    agrees, key = tgp_fixed.verdict(EP_BEST, 1.74)
    assert agrees is None
    assert "R-hat max 1.74" in key and "reference not converged" in key


@pytest.mark.parametrize("rhat", [np.nan, np.inf])
def test_tgp_fixed_unknown_rhat_is_not_yes(rhat):
    assert tgp_fixed.verdict(EP_BEST, rhat)[0] is None


def test_tgp_fixed_converged_reference_decides_by_ranking():
    agrees, key = tgp_fixed.verdict(EP_BEST, 1.02)
    assert agrees is True and "3 of 3" in key and "not converged" not in key
    agrees, key = tgp_fixed.verdict({"mean": "EP", "std": "VB", "lpd": "EP"}, 1.02)
    assert agrees is False and "2 of 3" in key


NEAR = {"1": {"sigma": 1.1, "nu": 0.9}, "2": {"sigma": 0.8, "nu": 1.5}}


def test_tgp_evidence_far_map_ratio_is_not_yes():
    far = {"1": {"sigma": 1.1, "nu": 0.9}, "2": {"sigma": 0.8, "nu": 314.0}}
    agrees, key = tgp_evidence.verdict(0.1, 0.3, -0.1, False, far)
    assert agrees is None and "ex. 2 nu x314" in key
    assert tgp_evidence.verdict(0.1, 0.3, -0.1, False, {"1": {"sigma": 0.2, "nu": 1}})[0] is None


def test_tgp_evidence_rules():
    assert tgp_evidence.verdict(0.1, 0.3, -0.1, False, NEAR)[0] is True
    assert tgp_evidence.verdict(0.1, -0.3, 0.1, False, NEAR)[0] is False  # EP not above fEP
    assert tgp_evidence.verdict(0.9, 0.3, -0.1, False, NEAR)[0] is False  # ex. 1 not close
    assert tgp_evidence.verdict(np.inf, 0.3, -0.1, False, NEAR)[0] is False
    agrees, key = tgp_evidence.verdict(0.1, 0.0, 0.0, True, NEAR)
    assert agrees is None and "untestable" in key
    assert "ex. 1 MAE vs AIS 0.100" in key


def test_tgp_fixed_report_with_unconverged_mcmc_says_partly(tmp_path):
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(3, 20))
    preds = {"MCMC": dict(zip(("mean", "std", "lpd"), truth, strict=True))}
    for i, name in enumerate(tgp_fixed.METHODS):  # EP is the closest in every statistic
        off = 0.01 if name == "EP" else 0.1 * (i + 1)
        preds[name] = dict(zip(("mean", "std", "lpd"), truth + off, strict=True))
    results = {"n": 20, "predictions": preds, "mcmc_rhat": {"log_l": 1.74, "log_s": 1.02}}
    s = tgp_fixed.report(results, tmp_path)
    assert s.agrees is None and "R-hat max 1.74" in s.measured
    assert "reference not converged" in s.key_number
    results["mcmc_rhat"] = {"log_l": 1.03, "log_s": 1.02}
    assert tgp_fixed.report(results, tmp_path).agrees is True


def test_tgp_examples_verdict_needs_a_converged_reference():
    from robustep.experiments import tgp_examples

    assert tgp_examples.verdict(True, True, 2, 1.03) == (True, "MCMC R-hat max 1.03")
    agrees, text = tgp_examples.verdict(True, True, 2, 1.74)
    assert agrees is None and "R-hat max 1.74" in text and "not converged" in text
    agrees, text = tgp_examples.verdict(True, True, 2, np.nan)
    assert agrees is None and "unknown" in text
    # the findings that do not use MCMC still refute the claim on their own
    assert tgp_examples.verdict(True, False, 1, 1.74)[0] is False
    assert tgp_examples.verdict(False, False, 1, 1.02)[0] is False
    assert tgp_examples.verdict(False, True, 2, 1.02)[0] is None


def test_tgp_examples_rhat_max():
    from robustep.experiments.tgp_examples import mcmc_rhat_max

    assert mcmc_rhat_max({"rhat": {"a": 1.01, "b": 1.3}}) == 1.3
    assert np.isnan(mcmc_rhat_max({"rhat": {"a": 1.01, "b": float("nan")}}))
    assert np.isnan(mcmc_rhat_max({}))
