"""Numerical settings with one home.

Every tolerance, jitter and quadrature size used by the library is read from
:func:`get_config`; :func:`config` overrides them inside a ``with`` block
(thread- and task-safe through :mod:`contextvars`)::

    with robustep.config(quadrature_points=64, jitter=1e-8):
        ...
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class Settings:
    """Numerical settings.

    Attributes
    ----------
    jitter : float
        First diagonal jitter (relative to the mean diagonal) tried when a
        Cholesky factorisation fails.
    max_jitter_tries : int
        Number of tenfold jitter increases before giving up.
    quadrature_points : int
        Gauss–Hermite nodes for log-space quadrature of smooth tilted distributions.
    student_t_quadrature_points : int
        Nodes per integration panel for the (possibly bimodal) Student-t tilted distribution.
    min_cavity_precision : float
        A cavity precision at or below this fraction of the marginal (reference)
        precision is treated as invalid: that site is not updated and is reported.
    """

    jitter: float = 1e-10
    max_jitter_tries: int = 8
    quadrature_points: int = 48
    student_t_quadrature_points: int = 40
    min_cavity_precision: float = 1e-12


# Settings is a frozen dataclass, so sharing one default instance is safe.
_current: contextvars.ContextVar[Settings] = contextvars.ContextVar(
    "robustep_settings",
    default=Settings(),  # noqa: B039
)


def get_config() -> Settings:
    """Return the settings in force."""
    return _current.get()


@contextlib.contextmanager
def config(**overrides) -> Iterator[Settings]:
    """Override numerical settings inside a ``with`` block.

    Unknown names raise ``TypeError`` listing the valid ones.
    """
    valid = {f.name for f in dataclasses.fields(Settings)}
    unknown = set(overrides) - valid
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; valid settings are {sorted(valid)}")
    token = _current.set(dataclasses.replace(_current.get(), **overrides))
    try:
        yield _current.get()
    finally:
        _current.reset(token)
