"""Inference strategies: which EP algorithms a fit runs, in which order, and with what budget.

An :class:`InferenceStrategy` is the one value an inference core receives.  It names

* the stages of the ``method="auto"`` chain (:mod:`robustep.ep.chain`) and their order:
  ``"ep"`` (parallel EP stopped when it stalls), ``"damped"`` (damped parallel EP),
  ``"power"`` (damped parallel power EP, a different approximation), ``"double_loop"``
  (Heskes & Zoeter 2002; Jylänki et al. 2011 §4) and ``"accelerated"`` (Anderson-accelerated
  parallel EP, :mod:`robustep.ep.accelerated`; the label-noise step likelihood's first
  stage);
* the stall rule of the ``"ep"`` stage (``patience``);
* the damping policy of the ``"damped"`` stage (:class:`AdaptiveDamping`; a block as long
  as the budget gives plain damped sweeps);
* the power and damping of the ``"power"`` stage (:class:`PowerStage`);
* the memory, warm-up and hover window of the ``"accelerated"`` stage
  (:class:`AcceleratedStage`);
* the options of the double-loop stage, and of a method that runs the engine once
  (:class:`DoubleLoop`);
* the run budget: ``max_iter`` sweeps and ``max_factorisations`` posterior factorisations
  per stage, and ``fallback_factorisations`` for the double loop.

:class:`AdaptiveDamping` is the one implementation of adaptive damping: blocks of
``block`` sweeps starting at damping ``start``, each warm-started from the last; after a
block whose last site change did not reach a new minimum the damping moves halfway to 1.
The binary classifier (``damping="adaptive"``), stage ``"damped"`` of the chain and nested
EP for multi-class classification all run it.

The engine's ``double_loop`` argument combines two flags (whether the run may switch to
the double loop, and whether a stall halves the step first).  :class:`DoubleLoop` names
the four combinations as modes and :meth:`DoubleLoop.engine_options` translates them,
in one place, to the arguments of :func:`robustep.ep.expectation_propagation`:

================  ===================  ====================================================
mode              engine double_loop   what an engine run does
================  ===================  ====================================================
"on_stall"        None                 robust parallel sweeps; on a stall halve the step
                                       (twice), then switch to the double loop
"after_init"      True                 ``n_parallel_init`` parallel sweeps, then the double
                                       loop
"off"             False                robust parallel sweeps only, no step halving
"stop_on_stall"   "never"              as "on_stall", but a stall ends the run
================  ===================  ====================================================
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from robustep.ep.engine import _check_tol_units

__all__ = [
    "STAGES",
    "STAGE_NAMES",
    "AcceleratedStage",
    "AdaptiveDamping",
    "DampingSchedule",
    "DoubleLoop",
    "InferenceStrategy",
    "PowerStage",
]

#: the stages of the ``method="auto"`` chain, in the order of :meth:`InferenceStrategy.auto`
STAGES = ("ep", "damped", "double_loop", "power")
#: every stage a strategy may name: :data:`STAGES` and ``"accelerated"``
STAGE_NAMES = (*STAGES, "accelerated")

_ENGINE_DOUBLE_LOOP = {"on_stall": None, "after_init": True, "off": False, "stop_on_stall": "never"}


def _is_int(value, low):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def _sites(res):
    """The warm start of the next block: a copy of the result's sites."""
    return (np.array(res.site_precision, dtype=float), np.array(res.site_shift, dtype=float))


def _last_change(res):
    """The largest site change of a run's last sweep (inf when it made none)."""
    changes = res.history.get("max_change", [])
    return float(changes[-1]) if len(changes) else np.inf


@dataclasses.dataclass(frozen=True)
class DoubleLoop:
    """How an engine run uses the double loop (module docstring: the four modes).

    Attributes
    ----------
    mode : "on_stall", "after_init", "off" or "stop_on_stall".
    n_parallel_init : int >= 0
        Parallel sweeps before the double loop ("after_init"), or at least this many before
        a stall counts ("on_stall", "stop_on_stall").
    max_inner : int >= 1
        Inner-loop iterations per outer update of the double loop.
    """

    mode: str = "on_stall"
    n_parallel_init: int = 10
    max_inner: int = 2

    def __post_init__(self):
        if self.mode not in _ENGINE_DOUBLE_LOOP:
            raise ValueError(
                f"DoubleLoop.mode must be one of {sorted(_ENGINE_DOUBLE_LOOP)}, got {self.mode!r}"
            )
        if not _is_int(self.n_parallel_init, 0):
            raise ValueError(
                f"DoubleLoop.n_parallel_init must be an integer >= 0, got {self.n_parallel_init!r}"
            )
        if not _is_int(self.max_inner, 1):
            raise ValueError(
                f"DoubleLoop.max_inner must be an integer >= 1, got {self.max_inner!r}"
            )

    @property
    def runs(self) -> bool:
        """Whether an engine run with this mode may switch to the double loop."""
        return self.mode in ("on_stall", "after_init")

    def engine_options(self) -> dict:
        """Keyword arguments of :func:`robustep.ep.expectation_propagation` for this mode."""
        return {
            "double_loop": _ENGINE_DOUBLE_LOOP[self.mode],
            "n_parallel_init": int(self.n_parallel_init),
            "max_inner": int(self.max_inner),
        }


class DampingSchedule:
    """The damping of each block of an adaptive-damping run, given the last block's outcome.

    ``next_block()`` gives ``(damping, sweeps)`` for the next block, or None once
    ``max_iter`` sweeps are used; ``record(n_iter, last_change)`` reports the block that ran
    (its sweeps and its last largest site change): when that change is not below the
    smallest so far the damping moves halfway to 1.
    """

    def __init__(self, policy: AdaptiveDamping, max_iter: int):
        self.damping = float(policy.start)
        self.block = int(policy.block)
        self.max_iter = int(max_iter)
        self.used = 0
        self.best = np.inf

    def next_block(self):
        if self.used >= self.max_iter:
            return None
        return self.damping, min(self.block, self.max_iter - self.used)

    def record(self, n_iter, last_change):
        self.used += int(n_iter)
        if not last_change < self.best:
            self.damping = 0.5 * (1.0 + self.damping)
        self.best = min(self.best, last_change)


@dataclasses.dataclass(frozen=True)
class AdaptiveDamping:
    """Adaptive damping: blocks of ``block`` sweeps from damping ``start``; the damping moves
    halfway to 1 after a block without a new smallest last site change.

    Attributes
    ----------
    start : float in [0, 1)
        Damping of the first block (the weight kept on the old site values).
    block : int >= 1
        Sweeps per block.
    """

    start: float = 0.5
    block: int = 50

    def __post_init__(self):
        if not (
            isinstance(self.start, numbers.Real)
            and not isinstance(self.start, bool)
            and 0.0 <= self.start < 1.0
        ):
            raise ValueError(f"AdaptiveDamping.start must be in [0, 1), got {self.start!r}")
        if not _is_int(self.block, 1):
            raise ValueError(f"AdaptiveDamping.block must be an integer >= 1, got {self.block!r}")

    @classmethod
    def nested_ep(cls) -> AdaptiveDamping:
        """The policy of nested EP (multi-class classification): from damping 0.3, since
        undamped parallel nested EP oscillates for large kernel amplitudes
        (docs/derivations/multiclass.md §3)."""
        return cls(start=0.3, block=50)

    def schedule(self, max_iter: int) -> DampingSchedule:
        """A fresh :class:`DampingSchedule` for a run of at most ``max_iter`` sweeps."""
        return DampingSchedule(self, max_iter)

    def run(self, run_block, max_iter, init=None, *, max_factorisations=None, warm_state=_sites):
        """Run blocks until one converges, one makes no sweep, or the budget is used.

        run_block : ``run_block(damping, max_iter, init, max_factorisations)`` runs one
            block (an engine call) and returns its result (``converged``, ``n_iter``,
            ``history["max_change"]``, and ``n_factorisations`` when a factorisation
            budget is given).
        max_iter : sweeps in all, over the blocks.
        init : the first block's warm start; later blocks start from
            ``warm_state(previous result)`` (default: its sites).
        max_factorisations : None (no limit) or the factorisations of all blocks together;
            each block gets what is left.

        Returns the last block's result with ``n_iter`` the sweeps of all blocks (None when
        ``max_iter`` < 1); a block that makes no sweep ends the run with the previous
        block's result, whose state it did not change.
        """
        schedule = self.schedule(max_iter)
        left = max_factorisations
        res = swept = None  # swept: the latest block that made at least one sweep
        while (step := schedule.next_block()) is not None:
            damping, sweeps = step
            res = run_block(damping, sweeps, init, left)
            n_iter = int(res.n_iter)
            schedule.record(n_iter, _last_change(res))
            if left is not None:
                left -= res.n_factorisations
            if n_iter == 0 and swept is not None:
                # no sweep (the robust step was blocked at once): the state is the previous
                # block's end state, whose history holds its residual (an empty history
                # would read as an infinite residual)
                res = swept
                break
            if res.converged or n_iter == 0 or (left is not None and left <= 0):
                break
            swept = res
            init = warm_state(res)
        if res is not None:
            res.n_iter = schedule.used
        return res


def _is_fraction(value, low, high, closed_high):
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    return low <= value <= high if closed_high else low <= value < high


@dataclasses.dataclass(frozen=True)
class PowerStage:
    """Stage ``"power"`` of the chain: parallel power EP with power ``power`` and a fixed
    ``damping``, plain robust sweeps (no step halving, no double loop).

    Power EP (Minka 2004; fractional EP, Jylänki et al. 2011 eqs. 14-15) with power
    alpha < 1 minimises an alpha-divergence locally instead of KL(p || q): its fixed points
    are a *different approximation* from EP's (for the label-noise step likelihood its
    log Z was 1.3-2.2 nats below EP's, docs/reliability.md), found where EP's are not.

    Attributes
    ----------
    power : float in (0, 1]
        The power alpha of every site.
    damping : float in [0, 1)
        Weight kept on the old site values at every sweep.
    accelerate : bool
        First run power EP with Anderson mixing
        (:func:`robustep.ep.accelerated.accelerated_expectation_propagation` with
        ``power``, the options of the strategy's :class:`AcceleratedStage`, to the
        strategy's ``damped_tol``): the same fixed point in fewer sweeps (27 against 46 on
        the misspecified step model at n = 2000, ``benchmarks/step_fixed_points.py
        --power``).  The step classifier's power-EP search sets it
        (:meth:`InferenceStrategy.power_search`).
    plain : bool
        With ``accelerate``, the plain damped sweeps still run, from the stage's start,
        where the accelerated run fails; False ends the stage there (a search evaluation,
        which the search abandons instead).
    """

    power: float = 0.5
    damping: float = 0.5
    accelerate: bool = False
    plain: bool = True

    def __post_init__(self):
        if not _is_fraction(self.power, 0.0, 1.0, True) or self.power == 0:
            raise ValueError(f"PowerStage.power must be in (0, 1], got {self.power!r}")
        if not _is_fraction(self.damping, 0.0, 1.0, False):
            raise ValueError(f"PowerStage.damping must be in [0, 1), got {self.damping!r}")
        for name in ("accelerate", "plain"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"PowerStage.{name} must be a bool, got {getattr(self, name)!r}")


@dataclasses.dataclass(frozen=True)
class AcceleratedStage:
    """Stage ``"accelerated"`` of the chain: parallel EP with Anderson mixing
    (:func:`robustep.ep.accelerated.accelerated_expectation_propagation`).

    Attributes
    ----------
    memory : int >= 1
        Residual differences kept for the extrapolation.
    warmup : int >= 0
        Robust damped sweeps before the first extrapolation.
    damping : float in [0, 1)
        Damping of the warm-up sweeps and of the sweeps that replace a rejected point.
    window : int >= 1
        The stage stops when its smallest residual over the last ``window`` sweeps is not
        10% below the smallest over the ``window`` before.
    warm_window : int >= 1
        The same window for a run from a warm start, which then starts again from zero
        sites (with the warm-up): a warm start from hyperparameters far away (an
        optimiser's trial step) converged more slowly than zero sites.
    restarts : int >= 0
        Runs from zero sites after a run that stopped (hovered or blocked): a warm-started
        run once from zero sites with the warm-up, a run from zero sites again with twice
        the warm-up (:func:`robustep.ep.accelerated.accelerated_expectation_propagation`).
    search_restarts : int >= 0
        The same in an evaluation of an evidence search
        (:meth:`InferenceStrategy.search_stages`; none in a probe): one, so that a failing
        evaluation (the search backs off from it) costs fewer sweeps (4818 against 5293
        with two on the step classifier's 42 fits at n = 200-300, whose optima stay within
        2.1e-4 in log evidence: ``python benchmarks/step_search.py --compare current
        search-restarts-2``); at n = 2000 the searches that try far-off length-scales
        gain most (docs/reliability.md, "Cost of the step classifier").
    divergence : float > 1 or None
        A run stops at a sweep after its warm-up whose residual is this multiple of the
        run's smallest or more (it diverges; None: never); a run from zero sites is then
        repeated as after a hover (``restarts``).  20: on the 547 runs of the step
        classifier's 42 fits at n = 200-300 and six fits at n = 2000, no run that
        converged had a residual more than 9.7 times the smallest before it (after the
        warm-up), and 9 of the 66 that failed passed 20 times, with 181 sweeps still to
        go (``python benchmarks/step_search.py --residuals``, and with ``--large``).
    start_patience : int >= 1 or None
        A run from a warm start stops when none of its first ``start_patience`` sweeps has
        a residual 10% below the warm start's (None: never).
    probe_start_patience : int >= 1 or None
        The same in a probe (:meth:`InferenceStrategy.search_stages`): 8, so that a far
        trial point whose residual does not fall is abandoned after 8 sweeps, not after
        the ``2 * warm_window`` of the hover rule: on the same fits it stops none of the
        25 probes' warm runs that converged and 1 of the 14 that failed, 12 sweeps
        before its end (``--residuals``).
    after_power : bool
        Where every EP stage failed and stage ``"power"`` converges, this stage runs once
        more, from power EP's fixed point (no restarts); where that run converges the
        chain's result is EP's fixed point (``method_used == "accelerated"``), not power
        EP's.  Power EP's sites are close to EP's where the two fixed points are near,
        and on the misspecified label-noise step cells EP converged from them where it
        failed from zero sites (docs/reliability.md, "Cost of the step classifier").
    reuse_differences : bool
        A run warm-started from a result of this stage (an evidence search's previous
        evaluation, the final fit's best state) starts its memory from that run's
        residual and proposal differences instead of empty
        (``accelerated_expectation_propagation(reuse_differences=True)``): nearby
        hyperparameters give nearly the same fixed-point map, so its first sweep already
        extrapolates.  The fixed points are the same.  On the step classifier's 42 fits
        28 make fewer posterior factorisations and 13 more, to optima within 1.3% in
        length-scale; 41 of them make 747 fewer in all (at most 28 more in one fit),
        while the search of one misspecified fit takes another path, through
        length-scales where its evaluations fail (1249 factorisations
        against 146; docs/reliability.md, "Cost of the step classifier": ``python
        benchmarks/step_search.py --compare fresh-memory+no-stones+unit-fallback-step
        no-stones+unit-fallback-step``, measured before the search's stepping stones).

    On the label-noise step likelihood's 42 fits at n = 200 and 300
    (``benchmarks/step_search.py``) memory 5 with 20 warm-up sweeps costs about the same;
    at n = 2000 the damped warm-up diverges after about 13 sweeps at the starting kernel
    of the smooth-boundary cell, where 10 warm-up sweeps and the extrapolation converge,
    and memory 5 hovered in the final refinement to ``tol`` where memory 10 converged
    (docs/reliability.md, "Cost of the step classifier").
    """

    memory: int = 10
    warmup: int = 10
    damping: float = 0.6
    window: int = 20
    warm_window: int = 10
    restarts: int = 2
    search_restarts: int = 1
    divergence: float | None = 20.0
    start_patience: int | None = None
    probe_start_patience: int | None = 8
    after_power: bool = True
    reuse_differences: bool = True

    def __post_init__(self):
        for name, low in (("memory", 1), ("warmup", 0), ("window", 1), ("warm_window", 1),
                          ("restarts", 0), ("search_restarts", 0)):  # fmt: skip
            if not _is_int(getattr(self, name), low):
                raise ValueError(
                    f"AcceleratedStage.{name} must be an integer >= {low}, "
                    f"got {getattr(self, name)!r}"
                )
        for name in ("start_patience", "probe_start_patience"):
            value = getattr(self, name)
            if value is not None and not _is_int(value, 1):
                raise ValueError(
                    f"AcceleratedStage.{name} must be None or an integer >= 1, got {value!r}"
                )
        for name in ("after_power", "reuse_differences"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(
                    f"AcceleratedStage.{name} must be True or False, got {getattr(self, name)!r}"
                )
        dv = self.divergence
        if dv is not None and not (_is_fraction(dv, 1.0, np.inf, False) and dv > 1):
            raise ValueError(f"AcceleratedStage.divergence must be None or > 1, got {dv!r}")
        if not _is_fraction(self.damping, 0.0, 1.0, False):
            raise ValueError(f"AcceleratedStage.damping must be in [0, 1), got {self.damping!r}")

    def engine_options(self) -> dict:
        """Keyword arguments of
        :func:`robustep.ep.accelerated.accelerated_expectation_propagation` for a final
        fit's run of this stage (a search's runs take ``search_stages``' copy)."""
        return {
            "memory": self.memory,
            "warmup": self.warmup,
            "damping": self.damping,
            "window": self.window,
            "warm_window": self.warm_window,
            "restarts": self.restarts,
            "divergence": self.divergence,
            "start_patience": self.start_patience,
            "reuse_differences": self.reuse_differences,
        }


@dataclasses.dataclass(frozen=True)
class InferenceStrategy:
    """Which EP algorithms an inference runs, in which order, and its budget.

    Attributes
    ----------
    stages : tuple of "ep", "damped", "power", "double_loop", "accelerated"
        The stages of the ``method="auto"`` chain, in the order they are tried
        (:func:`robustep.ep.chain.run_chain`); each starts from the caller's warm start.
    max_iter : int >= 1
        Sweeps allowed per stage (inner iterations for the double loop), and for a method
        that runs the engine once.
    max_factorisations : int >= 0 or None
        Posterior factorisations allowed per stage (None: no limit); the blocks of the
        ``"damped"`` stage share theirs.
    patience : int >= 1
        Stage ``"ep"`` stops after this many sweeps without a new smallest residual (by
        10%), and makes at least this many.
    damping : AdaptiveDamping
        The policy of stage ``"damped"``.
    power : PowerStage
        The power and damping of stage ``"power"``.
    accelerated : AcceleratedStage
        The options of stage ``"accelerated"``.
    fallback : DoubleLoop
        The engine options of stage ``"double_loop"`` (its mode must switch to the double
        loop: "after_init" or "on_stall").
    fallback_factorisations : int >= 0 or None
        Posterior factorisations allowed to stage ``"double_loop"`` (None: as
        ``max_factorisations``); the smaller of the two applies.
    single_run : DoubleLoop
        The engine options of a method that runs the engine once (``method="ep"`` or
        ``"fractional"``).
    damped_tol : float > 0 or None
        Site tolerance of stages ``"damped"`` and ``"accelerated"`` (None: the run's
        ``tol``).  Damped sweeps converge linearly at a rate near the damping, so a looser
        tolerance saves most of their sweeps; :meth:`search_stages` sets it for the
        evaluations of a search, whose best state the final fit then refines to the
        estimator's ``tol``.
    resume : bool
        When the warm start is a result of this chain (it has ``method_used``), begin at
        the stage that result converged in, skipping the stages before it (except
        ``"accelerated"``, which fails cheaply): at nearby hyperparameters they fail again
        (on the label-noise step likelihood stage "ep" spent 20-70 sweeps per search
        evaluation before stage "damped" converged).
        :meth:`search_stages` sets it.
    trial_damping : float in [0, 1) or None
        Stage ``"damped"`` first tries plain sweeps at this lighter damping (at most
        ``max_iter`` sweeps and ``2 * max_iter`` factorisations, stopped when it hovers:
        :func:`robustep.ep.chain.hover_callback` with windows of ``2 * patience`` sweeps)
        and runs ``damping`` from the stage's start only if that fails.
        Damped sweeps converge linearly at a rate that grows with the damping: on the
        label-noise step likelihood 0.5 needed 2-2.5x fewer sweeps than 0.8 where it
        converged (docs/reliability.md).  None: ``damping`` only.
    tol_units : "sites" or "marginal"
        How every stage measures the residual that ``tol`` bounds
        (:func:`robustep.ep.expectation_propagation`): "sites", the largest change of a
        site's natural parameters; "marginal", the largest change it makes to q's
        marginal, relative for the variance and in standard deviations for the mean.
        The label-noise step likelihood's chain uses "marginal": its site precisions
        grow with n (hundreds at n = 300, 10⁵ at n = 2000), where an absolute
        change of 1e-4 is below what the factorisation resolves.
    """

    stages: tuple = STAGES
    max_iter: int = 1000
    max_factorisations: int | None = None
    patience: int = 20
    damping: AdaptiveDamping = AdaptiveDamping()
    power: PowerStage = PowerStage()
    accelerated: AcceleratedStage = AcceleratedStage()
    fallback: DoubleLoop = DoubleLoop("after_init", n_parallel_init=10, max_inner=10)
    fallback_factorisations: int | None = None
    single_run: DoubleLoop = DoubleLoop()
    damped_tol: float | None = None
    resume: bool = False
    trial_damping: float | None = None
    tol_units: str = "sites"

    def __post_init__(self):
        stages = self.stages
        if isinstance(stages, str) or not isinstance(stages, (tuple, list)):
            raise ValueError(f"stages must be a tuple of stage names, got {stages!r}")
        unknown = [s for s in stages if s not in STAGE_NAMES]
        if unknown or not stages or len(set(stages)) != len(stages):
            raise ValueError(
                f"stages must be distinct names from {STAGE_NAMES} (at least one), got {stages!r}"
            )
        object.__setattr__(self, "stages", tuple(stages))
        if not _is_int(self.max_iter, 1):
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        mf = self.max_factorisations
        if mf is not None and not _is_int(mf, 0):
            raise ValueError(f"max_factorisations must be None or an integer >= 0, got {mf!r}")
        if not _is_int(self.patience, 1):
            raise ValueError(f"patience must be a positive integer, got {self.patience!r}")
        if not isinstance(self.damping, AdaptiveDamping):
            raise TypeError(f"damping must be an AdaptiveDamping, got {self.damping!r}")
        if not isinstance(self.power, PowerStage):
            raise TypeError(f"power must be a PowerStage, got {self.power!r}")
        if not isinstance(self.accelerated, AcceleratedStage):
            raise TypeError(f"accelerated must be an AcceleratedStage, got {self.accelerated!r}")
        ff = self.fallback_factorisations
        if ff is not None and not _is_int(ff, 0):
            raise ValueError(f"fallback_factorisations must be None or an integer >= 0, got {ff!r}")
        for name in ("fallback", "single_run"):
            if not isinstance(getattr(self, name), DoubleLoop):
                raise TypeError(f"{name} must be a DoubleLoop, got {getattr(self, name)!r}")
        dt = self.damped_tol
        if dt is not None and not (_is_fraction(dt, 0.0, np.inf, False) and dt > 0):
            raise ValueError(f"damped_tol must be None or a number > 0, got {dt!r}")
        td = self.trial_damping
        if td is not None and not _is_fraction(td, 0.0, 1.0, False):
            raise ValueError(f"trial_damping must be None or in [0, 1), got {td!r}")
        if not isinstance(self.resume, bool):
            raise TypeError(f"resume must be a bool, got {self.resume!r}")
        _check_tol_units(self.tol_units)
        if not self.fallback.runs:
            raise ValueError(
                "fallback is the double-loop stage: its mode must be 'after_init' or "
                f"'on_stall', got {self.fallback.mode!r}"
            )

    @property
    def runs_double_loop(self) -> bool:
        """Whether the chain has the double-loop stage."""
        return "double_loop" in self.stages

    @property
    def double_loop_factorisations(self) -> int | None:
        """The factorisation budget of stage ``"double_loop"``: the smaller of
        ``max_factorisations`` and ``fallback_factorisations`` (None: no limit)."""
        budgets = [
            b for b in (self.max_factorisations, self.fallback_factorisations) if b is not None
        ]
        return min(budgets) if budgets else None

    @staticmethod
    def _damped_stage(max_iter: int) -> AdaptiveDamping:
        """Stage ``"damped"`` of :meth:`auto` and :meth:`search_run`: plain sweeps at damping
        0.8 (one block as long as the budget; an invalid budget is reported by the
        strategy)."""
        return AdaptiveDamping(start=0.8, block=int(max_iter) if _is_int(max_iter, 1) else 1)

    @classmethod
    def auto(
        cls,
        max_iter: int = 1000,
        trial_damping: float | None = None,
        accelerate: bool = False,
        tol_units: str = "sites",
    ) -> InferenceStrategy:
        """The estimators' ``method="auto"`` (docs/reliability.md, "method='auto'"):

        1. ``"ep"``: parallel EP, stopped when it stalls (patience 20);
        2. ``"damped"``: parallel EP at damping 0.8, plain sweeps;
        3. ``"double_loop"``: 10 parallel sweeps then the double loop with 10 inner
           iterations, at most ``2 * max_iter`` factorisations;
        4. ``"power"``: parallel power EP with alpha = 0.5 at damping 0.5, plain sweeps (a
           different approximation, :class:`PowerStage`).

        Each stage has ``max_iter`` sweeps; stages 1, 2 and 4 no factorisation limit.
        ``trial_damping``: stage 2 first tries this lighter damping (the attribute).
        ``accelerate``: stage 1 is ``"accelerated"`` instead of ``"ep"`` (Anderson-accelerated
        parallel EP, :class:`AcceleratedStage`; for the label-noise step likelihood, where
        it converged in 20-50 sweeps where damped EP needed 100-700).
        ``tol_units``: how every stage measures its residual (the attribute).
        Stages 1-3 look for EP's fixed point, cheapest first (measured on the hard cells of
        benchmarks/stress.py); power EP comes last because it changes the approximation:
        it is used only where none of them finds EP's fixed point.
        """
        first = "accelerated" if accelerate else "ep"
        return cls(
            stages=(first, *STAGES[1:]),
            max_iter=max_iter,
            damping=cls._damped_stage(max_iter),
            power=PowerStage(power=0.5, damping=0.5),
            fallback_factorisations=2 * int(max_iter) if _is_int(max_iter, 1) else None,
            trial_damping=trial_damping,
            tol_units=tol_units,
        )

    @classmethod
    def search_run(cls, max_iter: int | None = None) -> InferenceStrategy:
        """An EP run inside a hyperparameter search, from :func:`robustep.get_config`.

        Such a run is discarded when it does not converge within a small budget, so it fails
        cheaply and never starts the double loop: the chain is stages 1-2 of :meth:`auto`
        (``"ep"``, ``"damped"``) and a single engine run stops at a stall (mode
        "stop_on_stall").  The power stage is left out: its log evidence is that of
        another approximation, and one search must compare evidences of one
        approximation (a failed evaluation makes the search back off instead).
        ``max_iter`` sweeps (default ``search_max_iter``) and
        ``search_factorisations_per_sweep * max_iter`` posterior factorisations per stage.
        """
        from robustep._config import get_config

        settings = get_config()
        if max_iter is None:
            max_iter = settings.search_max_iter
        return cls(
            stages=("ep", "damped"),
            max_iter=max_iter,
            max_factorisations=settings.search_factorisations_per_sweep * max_iter,
            damping=cls._damped_stage(max_iter),
            single_run=DoubleLoop("stop_on_stall"),
        )

    def search_stages(
        self, damped_tol: float | None = None, probe: bool = False
    ) -> InferenceStrategy:
        """This strategy for the evaluations of an evidence search: the same budgets, only
        the stages that look for EP's fixed point by parallel sweeps (``"ep"``,
        ``"accelerated"``, ``"damped"``), stages ``"damped"`` and ``"accelerated"`` to
        ``damped_tol`` (None: the run's tol), and ``resume``: a warm start from the
        previous evaluation begins at the stage that converged there.  A chain with stage
        ``"accelerated"`` keeps only that stage.

        The double loop is left out because an evaluation that needs it is better
        abandoned (the search backs off) than paid for with up to ``2 * max_iter``
        factorisations, and power EP because its evidence is that of another
        approximation (a search compares evidences of one).  On the label-noise step
        likelihood a failing evaluation of the classifier's search ran both for nothing
        (docs/reliability.md, "The label-noise step likelihood").  Stage ``"damped"``
        after a failed stage ``"accelerated"`` is left out for the same reason: on the 42
        step-classifier fits of docs/reliability.md ("Cost of the step classifier") it
        converged in 11 of 490 search evaluations, and a failed evaluation cost a median
        88 sweeps with it against 29 without; without it the searches end at the same
        optima (length-scale within 0.9%), in half the time (``python
        benchmarks/step_search.py --compare current former-search``).  Stage
        ``"accelerated"`` makes ``accelerated.search_restarts`` runs from zero sites after a
        run that stopped, none for a ``probe``: an evaluation far from every successful one
        (an optimiser's far trial step), which the search abandons cheaply where it
        fails (a probe's runs stop also after ``accelerated.probe_start_patience`` sweeps
        without progress from the warm start).
        """
        stages = tuple(s for s in self.stages if s in ("ep", "accelerated", "damped"))
        if "accelerated" in stages:
            stages = ("accelerated",)
        stage = self.accelerated
        accelerated = dataclasses.replace(
            stage,
            restarts=0 if probe else stage.search_restarts,
            start_patience=stage.probe_start_patience if probe else stage.start_patience,
        )
        return dataclasses.replace(
            self, stages=stages or ("ep",), damped_tol=damped_tol, resume=True,
            accelerated=accelerated,
        )  # fmt: skip

    def power_search(
        self, damped_tol: float | None = None, probe: bool = False
    ) -> InferenceStrategy:
        """This strategy for the evaluations of an evidence search on *power EP's*
        evidence: stage ``"power"`` alone, Anderson-accelerated and without its plain
        sweeps (``PowerStage(accelerate=True, plain=False)``), to ``damped_tol``, with the
        accelerated stage's search options of :meth:`search_stages` (its restarts; none
        in a ``probe``).

        The step classifier's search runs it where every evaluation of its EP search
        failed (``robustep.config(search_power_fallback=True)``; docs/reliability.md,
        "Cost of the step classifier"): one search still compares the evidences of one
        approximation, power EP's.
        """
        searched = self.search_stages(damped_tol=damped_tol, probe=probe)
        power = dataclasses.replace(self.power, accelerate=True, plain=False)
        return dataclasses.replace(searched, stages=("power",), power=power)

    def power_fit(self) -> InferenceStrategy:
        """This strategy for the final fit after a search on power EP's evidence
        (:meth:`power_search`): stage ``"power"`` alone, Anderson-accelerated, then its
        plain sweeps where that fails.  EP's own stages are not run: the kernel maximises
        power EP's evidence, and at the step classifier's longer length-scales EP had no
        fixed point (``benchmarks/step_fixed_points.py``)."""
        power = dataclasses.replace(self.power, accelerate=True, plain=True)
        return dataclasses.replace(self, stages=("power",), power=power, resume=False)

    def engine_options(self) -> dict:
        """Keyword arguments of :func:`robustep.ep.expectation_propagation` (or of an engine
        that passes them on) for a method that runs the engine once: the double-loop mode
        of ``single_run``, ``max_iter`` and ``max_factorisations``."""
        return {
            **self.single_run.engine_options(),
            "max_iter": int(self.max_iter),
            "max_factorisations": self.max_factorisations,
        }
