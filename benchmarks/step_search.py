"""The label-noise step classifier's evidence search, counted evaluation by evaluation.

``GPClassifier(likelihood="step", label_noise=eps)`` with its defaults on the cells of
``benchmarks/stress.py --step-noise`` (XOR and smooth boundaries, 10/20/30% flipped
labels with eps equal to the flip rate, and XOR with 20% flips fitted with eps = 0.1;
n = 200 and 300, seeds 5-7: 42 fits).  For every fit it records the fitted length-scale,
log evidence, ``method_used_`` and seconds, and for every EP run of the fit whether it
was a search evaluation or the final fit, the stage it converged in (or failed), and its
sweeps.  ``--variant`` runs the fit as it was with an earlier design, for comparison
(the library has no switch for these; the benchmark replaces one method for the run):

* ``current``: the defaults;
* ``former-search``: the search evaluations run stage "damped" after a failed stage
  "accelerated" (the chain's stages 1-2, as before ``InferenceStrategy.search_stages``
  kept stage "accelerated" alone);
* ``site-units``: the step chain measures ``tol`` in site units (``tol_units="sites"``);
* ``site-weights``: stage "accelerated" chooses its mixing weights by the residuals in
  site units, not in the tolerance's marginal units;
* ``former-stage``: stage "accelerated" with memory 5 and 20 warm-up sweeps;
* ``no-restarts``: a run of stage "accelerated" that stops is not repeated from zero sites
  (``AcceleratedStage(restarts=0, search_restarts=0)``);
* ``search-restarts-2``: in a search evaluation, a run of stage "accelerated" that stops is
  repeated from zero sites twice, as in the final fit (``search_restarts=2``), not once;
* ``no-retry``: a search evaluation that fails is not tried again from the best point's
  state (``maximise_evidence(retry=False)``);
* ``normalised``: the optimiser of each search start sees the objective divided by the
  largest entry of its gradient at the start (at least 1; :func:`normalised`), so that
  L-BFGS-B's first step is at most one unit of log length-scale;
* ``no-probes``: a search evaluation far from every successful one (more than
  ``search_warm_jump``) restarts from zero sites as the others do, instead of not at all;
* ``last-warm``: each search evaluation starts from the last successful one's sites,
  however far it lies (``robustep.config(search_warm_jump=None)``);
* ``nearest-warm``: each search evaluation starts from the nearest successful one's
  sites, however near the last lies (``search_warm_jump`` of 1e-12);
* ``first-restarts``: a start's first evaluation restarts from zero sites after a run
  that stopped even while a fallback start would follow its failure
  (``robustep.config(search_first_restarts=True)``);
* ``no-divergence``, ``no-probe-patience``, ``no-early-stops``: a run of stage
  "accelerated" does not stop when it diverges (``AcceleratedStage(divergence=None)``),
  a probe's run does not stop for lack of progress from its warm start
  (``probe_start_patience=None``), or neither;
* ``no-stall``: a search start does not end when its evaluations stall near its best
  point (``robustep.config(search_stall_evaluations=None)``);
* ``raw-fallback-step``: a fallback start's first step is L-BFGS-B's raw gradient, not at
  most half a unit (``robustep.config(search_fallback_first_step=None)``);
* ``unit-fallback-step``: a fallback start's first step is at most one unit, not half a
  unit (``robustep.config(search_fallback_first_step=1.0)``);
* ``raw-first-step``: the first start's first step is L-BFGS-B's raw gradient, not at
  most a quarter unit (``robustep.config(search_first_step=None)``);
* ``retried-plain-proposal``: where stage "accelerated"'s memory holds no residual
  differences and the plain proposal is invalid, the proposal is evaluated three more times
  (its "pulls towards the plain proposal", which do not move it), as before the stage
  tried it once;
* ``fresh-memory``: a warm-started run of stage "accelerated" starts with an empty memory
  instead of its warm start's differences (``AcceleratedStage(reuse_differences=False)``);
* ``no-stones``: a search evaluation far from its warm start is not approached through
  stepping stones (``robustep.config(search_stone_step=None)``);
* ``damped-fallback``: a run of stage "accelerated" (of EP, not power EP) that fails is
  followed by plain damped parallel EP from zero sites (damping 0.3, no cavity safeguard,
  at most 300 sweeps, stopped when it hovers over windows of 20), whose result replaces it
  where it converges (:func:`damped_fallback`).

Every fit also counts its posterior factorisations (``_Context.count_factorisation``),
printed in the totals.

``--residuals`` runs the 42 fits (with ``--large``, those n = 2000 fits) as
``no-early-stops`` and prints, for each run of stage "accelerated" that they make, whether
it converged, and how many runs and sweeps each early stop would have cut at several
settings: the divergence rule (a residual after the warm-up at least F times the smallest
since the warm-up ended), and the probes' start patience (none of a warm-started probe's first P
sweeps 10% below its starting residual).

Variants combine with ``+`` (``--variant raw-fallback-step+no-early-stops``).

``--large`` runs the two n = 2000 fits of docs/reliability.md (XOR with 20% flips and the
smooth boundary with 10%, seed 5) instead, printing each fit; ``--large CELLS`` other
n = 2000 cells with eps equal to the flip rate, seed 5, named boundary and percentage
(``--large xor10,smooth30``).

``--seeds 8,9`` (or a range, ``8-9``) runs the small fits on other seeds, 14 fits per seed
(default 5-7, the 42 fits).

``--config NAME=VALUE`` runs everything under ``robustep.config(NAME=VALUE)`` (a variant's
own settings override it): ``--compare raw-first-step current --config
search_first_step=0.1`` compares the raw first step with a first step of 0.1.

``--compare A B`` runs two variants and prints the totals of seconds and sweeps of each and,
over the fits that end in stage "accelerated" in both (those with eps equal to the flip
rate, and all), the largest change of the length-scale (relative) and of the log
evidence.

``--probit`` also fits the default probit classifier (``GPClassifier()``) to each fit's
data, counts its posterior factorisations the same way, and prints per fit and in the
totals the step fit's factorisations over the probit fit's: a cost ratio that, unlike
seconds, does not depend on the machine's load.  It leaves out each evaluation's other
work (the kernel, its gradient, the evidence gradient's solves), which is a larger share
of the probit fit's time, so it runs above the seconds ratio.

``--probit-start`` (with ``--probit`` implied) tries another start for the search: each fit
first fits the default probit classifier and then starts the step fit's search at the
probit fit's kernel (``GPClassifier(likelihood="step", label_noise=eps,
kernel=probit.kernel_)``) instead of the default kernel.  It prints per fit and in the
totals the step fit's factorisations over the probit fit's, alone and with the probit fit
it needs counted.

``--fallback``: the searches that fail at their first evaluation (XOR with 20% flips
fitted with eps = 0.1, n = 100 and 150, seeds 0-7): each fit without the fallback starts
(``robustep.config(search_fallback_starts=0)``) and with the defaults.

Usage::

    python benchmarks/step_search.py                       # the current defaults
    python benchmarks/step_search.py --probit              # and the probit fits' cost
    python benchmarks/step_search.py --probit-start        # searches from the probit kernel
    python benchmarks/step_search.py --variant former-search
    python benchmarks/step_search.py --compare current last-warm
    python benchmarks/step_search.py --large --compare current last-warm
    python benchmarks/step_search.py --compare current site-weights
    python benchmarks/step_search.py --large --compare current former-stage   # n = 2000
    python benchmarks/step_search.py --large --runs   # each EP run of the n = 2000 fits
    python benchmarks/step_search.py --fallback
    python benchmarks/step_search.py --residuals   # and --large xor10,xor20,...,smooth30
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from robustep import GPClassifier, config

VARIANTS = (
    "current",
    "former-search",
    "site-units",
    "site-weights",
    "former-stage",
    "normalised",
    "no-restarts",
    "search-restarts-2",
    "no-retry",
    "no-probes",
    "last-warm",
    "nearest-warm",
    "first-restarts",
    "no-early-stops",
    "no-divergence",
    "no-probe-patience",
    "no-stall",
    "raw-fallback-step",
    "raw-first-step",
    "retried-plain-proposal",
    "fresh-memory",
    "no-stones",
    "unit-fallback-step",
    "damped-fallback",
)


@functools.cache
def _stress():
    """benchmarks/stress.py as a module, loaded once."""
    path = Path(__file__).resolve().parent / "stress.py"
    spec = importlib.util.spec_from_file_location("_stress_step_search", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: the n = 2000 cells of ``--large`` without a list
LARGE = "xor20,smooth10"


def cells(large=False, seeds=(5, 6, 7)):
    """(boundary, n, flip, seed, eps) of the 42 fits (14 per seed of ``seeds``), or with
    ``large`` n = 2000 fits at seed 5 with eps equal to the flip rate: ``True`` for
    :data:`LARGE`, else a string of comma-separated cells such as "xor10,smooth30"."""
    if large:
        names = LARGE if large is True else large
        out = []
        for name in names.split(","):
            boundary = name.rstrip("0123456789")
            if boundary not in ("xor", "smooth") or boundary == name:
                raise ValueError(
                    f"a large cell is xor or smooth and a flip percentage, got {name!r}"
                )
            flip = int(name[len(boundary) :]) / 100.0
            out.append((boundary, 2000, flip, 5, flip))
        return out
    out = [(b, n, f, s, f) for b in ("xor", "smooth") for f in (0.1, 0.2, 0.3)
           for n in (200, 300) for s in seeds]  # fmt: skip
    return out + [("xor", n, 0.2, s, 0.1) for n in (200, 300) for s in seeds]


def normalised(minimise):
    """``minimise`` (``robustep.estimators._optimizer.minimise``) on the objective divided by
    the largest entry of its gradient at the start (at least 1), the library's bounded
    first step with a bound of one unit (``maximise_evidence(first_step=1)``): the same
    stationary points, and L-BFGS-B's first step (the raw gradient, where every coordinate
    is bounded) at most one unit long in each coordinate; the value it returns is
    rescaled."""
    from robustep.estimators._search import _bounded_first_step

    def scaled_minimise(optimizer, objective, x0, bounds, **kwargs):
        scale = [1.0]
        x, value, message = minimise(
            optimizer, _bounded_first_step(objective, scale, 1.0), x0, bounds, **kwargs
        )
        return x, value / scale[0], message

    return scaled_minimise


def retried_plain_proposal(extrapolate):
    """``extrapolate`` (``robustep.ep.accelerated._extrapolate``) that, where the memory held
    no residual differences and it returns None, evaluates the plain proposal three more
    times, as the stage did before it tried an unmovable point once."""
    from robustep.ep import accelerated
    from robustep.linalg import InvalidSiteConfiguration

    def retried(ctx, ev, memory):
        new = extrapolate(ctx, ev, memory)  # adds ev's state to the memory first
        point = (ev.proposal_precision, ev.proposal_shift)
        if new is None and not memory.dF and all(np.all(np.isfinite(p)) for p in point):
            for _ in range(accelerated._SHRINKS):
                with contextlib.suppress(InvalidSiteConfiguration):
                    accelerated._evaluate(ctx, *point)
        return new

    return retried


def damped_fallback(run_accelerated, damping=0.3, max_sweeps=300, window=20):
    """``run_accelerated`` (``accelerated_expectation_propagation`` as the chain calls it)
    followed, where an EP run fails, by plain damped parallel EP from zero sites
    (``damping``, ``robust=False``: no cavity safeguard) stopped when it hovers; its
    result, with both runs' sweeps, where it converges."""
    from robustep.ep import chain

    plain_damped_ep = _stress().plain_damped_ep

    def with_fallback(K, y, likelihood, **options):
        res = run_accelerated(K, y, likelihood, **options)
        if res.converged or options.get("power", 1.0) != 1.0:
            return res
        plain = plain_damped_ep(
            K, y, likelihood, damping, tol=options["tol"], tol_units=options["tol_units"],
            max_iter=min(options["max_iter"], max_sweeps), callback=chain.hover_callback(window),
        )  # fmt: skip
        chosen = plain if plain.converged else res
        chosen.n_iter = int(res.n_iter) + int(plain.n_iter)
        return chosen

    return with_fallback


def _change_auto(strategy, change):
    """Make ``InferenceStrategy.auto`` return ``change(strategy)`` of what it chose
    (``variant`` restores it)."""
    auto = strategy.InferenceStrategy.auto.__func__

    def changed(cls, *args, **kwargs):
        return change(auto(cls, *args, **kwargs))

    strategy.InferenceStrategy.auto = classmethod(changed)


@contextlib.contextmanager
def variant(name, runs, lengths=None):
    """Run the fits as ``name`` (module docstring); every EP run of a fit is appended to
    ``runs`` as (search evaluation?, stage, converged, sweeps), and with ``lengths`` (a
    list) each search evaluation's length-scale to it."""
    from robustep.ep import accelerated, strategy
    from robustep.estimators import _binary_dense, _search

    if "+" in name:  # several variants at once: the first records, the others only change
        first, *others = name.split("+")
        with contextlib.ExitStack() as stack:
            stack.enter_context(variant(first, runs, lengths))
            for other in others:
                stack.enter_context(variant(other, []))
            yield
        return
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {name!r}")
    core = _binary_dense.DenseBinaryCore
    saved = {
        (core, "infer"): core.infer,
        (core, "optimise"): core.optimise,
        (strategy.InferenceStrategy, "search_stages"): strategy.InferenceStrategy.search_stages,
        (strategy.InferenceStrategy, "auto"): strategy.InferenceStrategy.__dict__["auto"],
    }
    infer = core.infer
    settings = contextlib.ExitStack()  # robustep.config overrides of the variant

    def recorded_infer(self, prior, init=None, search=False, **kwargs):
        res = infer(self, prior, init, search, **kwargs)
        runs.append((search, getattr(res, "method_used", "-"), bool(res.converged),
                     int(res.n_iter)))  # fmt: skip
        return res

    core.infer = recorded_infer
    if lengths is not None:
        saved[(core, "evaluate")] = core.evaluate
        evaluate = core.evaluate

        def recorded_evaluate(self, theta, *args, **kwargs):
            lengths.append(float(np.exp(theta[-1])))
            return evaluate(self, theta, *args, **kwargs)

        core.evaluate = recorded_evaluate
    if name == "former-search":
        stages = strategy.InferenceStrategy.search_stages

        def search_stages(self, damped_tol=None, probe=False):
            chosen = stages(self, damped_tol, probe)
            kept = tuple(s for s in self.stages if s in ("accelerated", "damped"))
            return dataclasses.replace(chosen, stages=kept) if "accelerated" in kept else chosen

        strategy.InferenceStrategy.search_stages = search_stages
    elif name == "site-units":
        _change_auto(strategy, lambda chosen: dataclasses.replace(chosen, tol_units="sites"))
    elif name == "site-weights":
        saved[(accelerated, "_in_tolerance_units")] = accelerated._in_tolerance_units
        accelerated._in_tolerance_units = lambda ctx, ev, v: v
    elif name in ("no-restarts", "search-restarts-2"):
        counts = (
            {"restarts": 0, "search_restarts": 0}
            if name == "no-restarts"
            else {"search_restarts": 2}
        )
        _change_auto(strategy, lambda chosen: dataclasses.replace(
            chosen, accelerated=dataclasses.replace(chosen.accelerated, **counts)))  # fmt: skip
    elif name == "no-retry":
        saved[(_binary_dense, "maximise_evidence")] = _binary_dense.maximise_evidence
        _binary_dense.maximise_evidence = functools.partial(
            _binary_dense.maximise_evidence, retry=False
        )
    elif name == "normalised":
        saved[(_search, "minimise")] = _search.minimise
        _search.minimise = normalised(_search.minimise)
    elif name == "former-stage":
        stage = strategy.AcceleratedStage(memory=5, warmup=20)
        _change_auto(strategy, lambda chosen: dataclasses.replace(chosen, accelerated=stage))
    elif name in ("no-early-stops", "no-divergence", "no-probe-patience"):
        off = {"no-early-stops": {"divergence": None, "probe_start_patience": None},
               "no-divergence": {"divergence": None},
               "no-probe-patience": {"probe_start_patience": None}}[name]  # fmt: skip
        _change_auto(strategy, lambda chosen: dataclasses.replace(
            chosen, accelerated=dataclasses.replace(chosen.accelerated, **off)))  # fmt: skip
    elif name == "no-probes":
        probing = strategy.InferenceStrategy.search_stages

        def no_probes(self, damped_tol=None, probe=False):
            return probing(self, damped_tol)

        strategy.InferenceStrategy.search_stages = no_probes
    elif name == "first-restarts":
        settings.enter_context(config(search_first_restarts=True))
    elif name == "no-stall":
        settings.enter_context(config(search_stall_evaluations=None))
    elif name == "raw-fallback-step":
        settings.enter_context(config(search_fallback_first_step=None))
    elif name == "unit-fallback-step":
        settings.enter_context(config(search_fallback_first_step=1.0))
    elif name == "no-stones":
        settings.enter_context(config(search_stone_step=None))
    elif name == "raw-first-step":
        settings.enter_context(config(search_first_step=None))
    elif name == "fresh-memory":
        _change_auto(strategy, lambda chosen: dataclasses.replace(
            chosen, accelerated=dataclasses.replace(chosen.accelerated,
                                                    reuse_differences=False)))  # fmt: skip
    elif name == "retried-plain-proposal":
        saved[(accelerated, "_extrapolate")] = accelerated._extrapolate
        accelerated._extrapolate = retried_plain_proposal(accelerated._extrapolate)
    elif name == "damped-fallback":
        from robustep.ep import chain

        saved[(chain, "accelerated_expectation_propagation")] = (
            chain.accelerated_expectation_propagation
        )
        chain.accelerated_expectation_propagation = damped_fallback(
            chain.accelerated_expectation_propagation
        )
    elif name in ("last-warm", "nearest-warm"):
        jump = None if name == "last-warm" else 1e-12
        settings.enter_context(config(search_warm_jump=jump))
    try:
        with settings:
            yield
    finally:
        for (owner, attr), value in saved.items():
            setattr(owner, attr, value)


def run(
    name, verbose=True, large=False, show_runs=False, seeds=(5, 6, 7), probit=False,
    probit_start=False,
):  # fmt: skip
    """The 42 fits (or with ``large`` the n = 2000 ones, :func:`cells`) as variant
    ``name``: a list of per-fit dicts; ``show_runs`` prints each fit's EP runs and their
    sweeps; ``probit`` also counts the default probit fit's factorisations on each fit's
    data (outside the variant); ``probit_start`` fits the probit classifier first and
    starts the step fit's search at its kernel (and implies ``probit``)."""
    from robustep.ep import engine

    data = _stress().step_noise_data
    fits = []
    count = engine._Context.count_factorisation
    factorisations = [0]

    def counted(ctx):
        factorisations[0] += 1
        return count(ctx)

    engine._Context.count_factorisation = counted
    try:
        for cell in cells(large, seeds):
            fits.append(
                _fit(name, cell, data, factorisations, verbose, show_runs, probit, probit_start)
            )
    finally:
        engine._Context.count_factorisation = count
    return fits


def _fit(name, cell, data, factorisations, verbose, show_runs, probit=False, probit_start=False):
    """One fit of :func:`run`; ``factorisations`` is the counter :func:`run` installed."""
    boundary, n, flip, seed, eps = cell
    X, y = data(boundary, n, flip, seed)
    probit_fit = {}
    if probit or probit_start:
        factorisations[0] = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probit_est = GPClassifier().fit(X, y)
        probit_fit["probit_factorisations"] = factorisations[0]
    kernel = dict(kernel=probit_est.kernel_) if probit_start else {}
    runs, lengths = [], []
    factorisations[0] = 0
    with variant(name, runs, lengths), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est = GPClassifier(likelihood="step", label_noise=eps, **kernel).fit(X, y)
        seconds = time.perf_counter() - t0
    fit = dict(cell=(boundary, n, flip, seed, eps), seconds=seconds, runs=runs,
               factorisations=factorisations[0],
               ell=float(est.kernel_.k2.length_scale),
               lml=float(est.log_marginal_likelihood_value_),
               method=est.method_used_, converged=bool(est.converged_),
               probit_start=probit_start, **probit_fit)  # fmt: skip
    if verbose:
        against = ""
        if probit_fit:
            step, base = fit["factorisations"], fit["probit_factorisations"]
            against = f"; probit fit {base} factorisations, step / probit {step / base:.1f}x"
            if probit_start:
                against += f", with the probit fit {(step + base) / base:.1f}x"
        print(f"{boundary:6s} n={n} flips {flip:.0%} eps {eps:g} seed {seed}: "
              f"{seconds:6.2f} s, ell {fit['ell']:.4f}, log evidence {fit['lml']:.4f}, "
              f"{fit['method']}, {sum(r[3] for r in runs)} sweeps, "
              f"{fit['factorisations']} factorisations{against}", flush=True)  # fmt: skip
        if show_runs:
            at = iter(lengths)
            print("    EP runs (length-scale: sweeps): " + ", ".join(
                f"{next(at):.3g}: {sweeps}{'' if ok else ' failed'}" if search
                else f"final: {sweeps}" for search, _, ok, sweeps in runs),
                flush=True)  # fmt: skip
    return fit


def summary(name, fits):
    """The search evaluations by stage and outcome, and the totals."""
    search = [r for f in fits for r in f["runs"] if r[0]]
    failed = [r[3] for r in search if not r[2]]
    by_stage = Counter((r[1], "converged" if r[2] else "failed") for r in search)
    stages = ", ".join(f"{s} {outcome}: {k}" for (s, outcome), k in sorted(by_stage.items()))
    print(f"\n{name}: {len(fits)} fits, {sum(f['seconds'] for f in fits):.1f} s, "
          f"{sum(r[3] for f in fits for r in f['runs'])} sweeps, "
          f"{sum(f['factorisations'] for f in fits)} factorisations; "
          f"{sum(f['method'] == 'accelerated' and f['converged'] for f in fits)} converged "
          f"in stage accelerated")  # fmt: skip
    print(
        f"search evaluations: {len(search)} ({stages}); failed ones: {len(failed)}, "
        f"median {np.median(failed) if failed else 0:.0f} sweeps each"
    )
    if fits and all("probit_factorisations" in f for f in fits):
        print(probit_line(fits))
        if all(f["probit_start"] for f in fits):
            print(probit_line(fits, with_probit=True))


def probit_line(fits, bound=3.0, with_probit=False):
    """One line: each fit's factorisations over the default probit fit's on the same data
    (a ratio that does not depend on the machine's load), their median and largest, and
    the fits above ``bound``; ``with_probit`` counts the probit fit's own factorisations
    in the step fit's (``--probit-start``, whose step fit needs the probit fit)."""
    ratios = [
        (f["factorisations"] + with_probit * f["probit_factorisations"])
        / f["probit_factorisations"]
        for f in fits
    ]
    above = [(r, f["cell"]) for r, f in zip(ratios, fits, strict=True) if r > bound]
    listed = "; ".join(
        f"{b} n={n} flips {flip:.0%} eps {eps:g} seed {seed}: {r:.1f}x"
        for r, (b, n, flip, seed, eps) in sorted(above, reverse=True)
    )
    counted = "step and probit" if with_probit else "step"
    return (
        f"factorisations against the probit fit's: {sum(f['probit_factorisations'] for f in fits)} "
        f"in the probit fits; {counted} / probit per fit: median {np.median(ratios):.2f}x, "
        f"{min(ratios):.2f}-{max(ratios):.2f}x; above {bound:g}x: {len(above)} of {len(fits)}"
        + (f" ({listed})" if listed else "")
    )


def compare(a, b, large=False, seeds=(5, 6, 7)):
    fa = run(a, verbose=large, large=large, seeds=seeds)
    fb = run(b, verbose=large, large=large, seeds=seeds)
    summary(a, fa)
    summary(b, fb)
    for x, y in zip(fa, fb, strict=True):
        if abs(y["lml"] - x["lml"]) > 1e-2:  # another local maximum of the evidence
            print(f"{x['cell']}: {a} length-scale {x['ell']:.4g}, log evidence "
                  f"{x['lml']:.4f}; {b} {y['ell']:.4g}, {y['lml']:.4f}")  # fmt: skip
    changes = [y["factorisations"] - x["factorisations"] for x, y in zip(fa, fb, strict=True)]
    worst, *_ = order = sorted(range(len(changes)), key=changes.__getitem__, reverse=True)
    others = [changes[i] for i in order[1:]]
    print(f"{b} against {a}, posterior factorisations fit by fit: {sum(c < 0 for c in changes)} "
          f"fits fewer, {sum(c == 0 for c in changes)} as many, {sum(c > 0 for c in changes)} "
          f"more; the largest rise {changes[worst]:+d} ({fa[worst]['cell']}: "
          f"{fa[worst]['factorisations']} to {fb[worst]['factorisations']}), the next "
          f"{max(others, default=0):+d}; without the first, {sum(others):+d} in all")  # fmt: skip
    pairs = [(x, y) for x, y in zip(fa, fb, strict=True)
             if x["method"] == y["method"] == "accelerated"]  # fmt: skip
    for label, chosen in (
        ("eps equal to the flip rate", [p for p in pairs if p[0]["cell"][2] == p[0]["cell"][4]]),
        ("all", pairs),
    ):
        if not chosen:
            print(f"no fit ({label}) ends in stage accelerated in both")
            continue
        d_ell = max(abs(y["ell"] - x["ell"]) / x["ell"] for x, y in chosen)
        d_lml = max(abs(y["lml"] - x["lml"]) for x, y in chosen)
        print(
            f"{b} against {a}, the {len(chosen)} fits ({label}) that end in stage "
            f"accelerated in both: length-scale within {d_ell:.1%}, log evidence within "
            f"{d_lml:.1e}"
        )


def fallback():
    """Without and with the fallback starts (module docstring)."""
    data = _stress().step_noise_data
    print(
        "| n | seed | without: search succeeded | method_used_ | s | with: starts | "
        "method_used_ | length-scale | s |\n|" + "---|" * 9
    )
    for n in (100, 150):
        for seed in range(8):
            X, y = data("xor", n, 0.2, seed)
            row = [n, seed]
            for starts in (0, None):
                settings = {} if starts is None else {"search_fallback_starts": starts}
                with config(**settings), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    est = GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
                    seconds = time.perf_counter() - t0
                result = est.optimizer_result_
                if starts == 0:
                    row += [result.success, est.method_used_, f"{seconds:.1f}"]
                else:
                    row += [result.n_starts, est.method_used_,
                            f"{est.kernel_.k2.length_scale:.3g}", f"{seconds:.1f}"]  # fmt: skip
            print("| " + " | ".join(str(v) for v in row) + " |", flush=True)


def residual_traces(large=False):
    """Every run of stage "accelerated" in the fits as ``no-early-stops``: a list of dicts
    with the run's residuals (its start's first), warm-up, status, and whether it was a
    probe's run (no restarts in a search evaluation) from a warm start."""
    from robustep.ep import accelerated, chain

    traces, probe = [], [False]
    run_engine, iterate = chain.accelerated_expectation_propagation, accelerated._iterate

    def tagged_engine(*args, **kwargs):
        probe[0] = kwargs.get("restarts") == 0
        return run_engine(*args, **kwargs)

    def recorded_iterate(ctx, ev, memory, warmup, window, damping, stops):
        first, start = ctx.n_iter, ev.residual
        out, status = iterate(ctx, ev, memory, warmup, window, damping, stops)
        traces.append(dict(residuals=[start, *ctx.history["residual"][first:]],
                           warmup=warmup, status=status,
                           warm_probe=probe[0] and warmup == 0))  # fmt: skip
        return out, status

    chain.accelerated_expectation_propagation = tagged_engine
    accelerated._iterate = recorded_iterate
    try:
        run("no-early-stops", verbose=large, large=large)
    finally:
        chain.accelerated_expectation_propagation = run_engine
        accelerated._iterate = iterate
    return traces


def _worst_rise(trace):
    """The largest residual after the warm-up of ``trace`` over the smallest before it
    since the warm-up ended (the divergence rule's ratio), and the first sweep at which
    each ratio is reached: a list of (sweep, ratio)."""
    r, w = trace["residuals"], trace["warmup"]
    if len(r) <= w + 1:
        return []
    smallest, out = r[w], []
    for k in range(w + 1, len(r)):
        out.append((k, r[k] / smallest))
        smallest = min(smallest, r[k])
    return out


def _divergence_stop(trace, factor):
    """The sweep at which the divergence rule with ``factor`` stops ``trace``, or None."""
    return next((k for k, ratio in _worst_rise(trace) if ratio >= factor), None)


def _start_patience_stop(trace, patience):
    """The sweep at which a start patience stops ``trace`` (a warm probe's), or None."""
    r = trace["residuals"]
    if len(r) <= patience or min(r[1 : patience + 1]) < 0.9 * r[0]:
        return None
    return patience


def residuals(large=False):
    """The early-stop table of ``--residuals`` (module docstring)."""
    traces = residual_traces(large)
    converged = [t for t in traces if t["status"] == "converged"]

    def ratio(t):
        return max((q for _, q in _worst_rise(t)), default=0.0)

    failed = [t for t in traces if t["status"] != "converged"]
    swept = sum(len(t["residuals"]) - 1 for t in failed)
    print(f"\n{len(traces)} runs of stage accelerated: {len(converged)} converged, "
          f"{len(failed)} failed ({swept} sweeps); largest residual after the warm-up over "
          f"the smallest before it since the warm-up, in a run that converged: "
          f"{max(map(ratio, converged), default=0.0):.3g}")  # fmt: skip
    print("| rule | setting | converged runs stopped | failed runs stopped | sweeps cut |\n|"
          + "---|" * 5)  # fmt: skip
    rules = [("divergence", f, traces, _divergence_stop) for f in (5, 10, 20, 50)]
    probes = [t for t in traces if t["warm_probe"]]
    rules += [("probe start patience", p, probes, _start_patience_stop) for p in (4, 6, 8, 10)]
    for name, setting, chosen, stop in rules:
        cut = [(t, stop(t, setting)) for t in chosen]
        cut = [(t, k) for t, k in cut if k is not None and k < len(t["residuals"]) - 1]
        ok = sum(t["status"] == "converged" for t, _ in cut)
        swept = sum(len(t["residuals"]) - 1 - k for t, k in cut if t["status"] != "converged")
        print(f"| {name} | {setting} | {ok} of {sum(t['status'] == 'converged' for t in chosen)}"
              f" | {len(cut) - ok} of {sum(t['status'] != 'converged' for t in chosen)} "
              f"| {swept} |")  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variant", default="current", help=f"one of {', '.join(VARIANTS)}, or several joined by +"
    )
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two variants")
    parser.add_argument("--fallback", action="store_true", help="the fallback starts' cells")
    parser.add_argument(
        "--runs",
        action="store_true",
        help="print each fit's EP runs (search evaluations, final fit)",
    )
    parser.add_argument(
        "--large",
        nargs="?",
        const=True,
        default=False,
        metavar="CELLS",
        help=f"n = 2000 fits instead of the 42 (minutes each): {LARGE}, or the cells given",
    )
    parser.add_argument(
        "--residuals",
        action="store_true",
        help="what the early stops of stage accelerated would cut (no-early-stops runs)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="run under robustep.config(NAME=VALUE) (VALUE in JSON; repeatable), e.g. "
        "--config search_first_step=0.1; a variant's own settings override it",
    )
    parser.add_argument(
        "--probit",
        action="store_true",
        help="also count the default probit fit's factorisations on each fit's data, and "
        "print the step fit's over the probit fit's",
    )
    parser.add_argument(
        "--probit-start",
        action="store_true",
        help="fit the default probit classifier first and start the step fit's search at "
        "its kernel; print the step fit's factorisations over the probit fit's, alone and "
        "with the probit fit counted",
    )
    parser.add_argument(
        "--seeds",
        default="5-7",
        help="the small fits' seeds (default 5-7, the 42 fits), a range A-B or comma-separated",
    )
    args = parser.parse_args(argv)
    stress = _stress()
    seeds = stress.parse_seeds(parser, args.seeds)
    with stress._settings(parser, args.config):
        if args.residuals:
            residuals(large=args.large)
        elif args.fallback:
            fallback()
        elif args.compare:
            compare(*args.compare, large=args.large, seeds=seeds)
        else:
            fits = run(
                args.variant, large=args.large, show_runs=args.runs, seeds=seeds,
                probit=args.probit, probit_start=args.probit_start,
            )  # fmt: skip
            summary(args.variant, fits)


if __name__ == "__main__":
    main()
