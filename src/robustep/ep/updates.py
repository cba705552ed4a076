"""Site update rules: given cavities, propose new (undamped) sites.

A site update rule is a function

    rule(likelihood, y, cavity_mean, cavity_var, site_precision, site_shift, power)
        -> (new_precision, new_shift, log_Z_tilted, info)

over arrays of the sites being updated; ``site_precision``/``site_shift`` are the
old site parameters (used by e.g. relaxed EP), ``info`` is a dict of per-site
arrays stored in :attr:`EPResult.site_info`.  The engine applies damping and the
safeguards; a variant (relaxed EP) overrides only this rule.
"""

from __future__ import annotations

import numpy as np


def moment_matching_update(
    likelihood, y, cavity_mean, cavity_var, site_precision, site_shift, power
):
    """Plain (fractional) EP moment matching, Jylänki et al. (2011) eqs. (14)–(15) with delta = 1.

    The tilted distribution p(y|f)^eta N(f | cavity) has moments (m_hat, v_hat);
    the new site satisfies  cavity * site^eta  ~  N(m_hat, v_hat), i.e.
    tau~ = (1/v_hat - 1/v_cav) / eta and nu~ = (m_hat/v_hat - m_cav/v_cav) / eta.
    """
    log_Z, m_hat, v_hat = likelihood.tilted_moments(y, cavity_mean, cavity_var, power)
    new_precision = (1.0 / v_hat - 1.0 / cavity_var) / power
    new_shift = (m_hat / v_hat - cavity_mean / cavity_var) / power
    return new_precision, new_shift, log_Z, {}


def tilted_natural_parameters(likelihood, y, cavity_mean, cavity_var, power):
    """Tilted log Z and natural parameters (precision, shift) and moments, all (n,)."""
    log_Z, m_hat, v_hat = likelihood.tilted_moments(y, cavity_mean, cavity_var, power)
    return log_Z, 1.0 / v_hat, m_hat / v_hat, m_hat, v_hat


def max_abs(*arrays) -> float:
    """Largest absolute entry over several arrays (0.0 for empty input)."""
    vals = [np.max(np.abs(a)) for a in arrays if np.size(a)]
    return float(max(vals)) if vals else 0.0
