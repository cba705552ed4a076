"""Hypothesis settings profiles for the property-based tests.

"default": few examples, so that the property tests add only seconds to ``make test``;
"slow": many more (``HYPOTHESIS_PROFILE=slow pytest -m slow tests/test_properties_*.py``).
Both are derandomised (a fixed seed per test), so a failure in CI reproduces locally.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow], database=None
)
settings.register_profile("default", max_examples=15, **_COMMON)
settings.register_profile("slow", max_examples=400, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: examples of the slow-marked variants of the tests (run with ``pytest -m slow``)
SLOW_EXAMPLES = 400 if os.environ.get("HYPOTHESIS_PROFILE") == "slow" else 100
