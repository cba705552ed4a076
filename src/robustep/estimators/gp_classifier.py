"""Binary and multi-class Gaussian process classification with EP and its variants.

``GPClassifier`` is the public scikit-learn estimator; it composes private cores that
return a fitted state and never write onto it (as scikit-learn's ``_gpc.py``):

* two classes: :func:`robustep.estimators._binary_dense.fit_dense` (the dense prior, in
  numpy or on a PyTorch ``device``) or :func:`robustep.estimators._binary_sparse.fit_sparse`
  (the FITC prior of ``inducing_points``, in memory or over Dask chunks), each returning a
  :class:`robustep.estimators._binary.BinaryFit`;
* more than two classes: :func:`robustep.estimators._multiclass.fit_multiclass`, the
  multinomial probit with nested EP or one-vs-rest over binary ``GPClassifier`` clones.

``fit`` validates the input, picks the core, and sets the estimator's fitted attributes
from the returned state in one place; the prediction methods validate X and delegate to
the state.

Model: latent f ~ GP(0, k), labels y ∈ {-1, +1} (two original labels mapped to ±1,
``classes_[1]`` is +1) with

* ``likelihood="probit"``: p(y|f) = Φ(y f);
* ``likelihood="step"``: p(y|f) = ε + (1 - 2ε) Θ(y f), ε = ``label_noise``
  (Qi & Guo, long version, eq. 8).

Predictive probability of ``classes_[1]`` at x* with latent N(μ*, σ*²):
probit Φ(μ*/√(1 + σ*²)) (Rasmussen & Williams eq. 3.80); step ε + (1 - 2ε) Φ(μ*/σ*).
"""

from __future__ import annotations

import numbers
from types import SimpleNamespace

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from robustep._validation import binary_labels
from robustep._validation import validate_data as _validate_data
from robustep.estimators import _binary, _device, _learner, _multiclass, _sparse
from robustep.estimators._search import reports_progress, warn_if_stuck

__all__ = ["GPClassifier"]

_METHODS = ("auto", "ep", "damped", "power", "rep", "laplace")
#: fitted attributes set by validate_data before the fit's cores run
_KEEP = ("n_features_in_", "feature_names_in_")


def _validate(estimator, X, y="no_validation", reset=True):
    kwargs = dict(ensure_2d=True, dtype="numeric", reset=reset)
    if _validate_data is not None:
        return _validate_data(estimator, X, y, **kwargs)
    return estimator._validate_data(X, y, **kwargs)  # pragma: no cover


def _two_integer_labels(y):
    """``(classes_, y_pm)`` when y (n,) is a numeric array with exactly two integer values
    (what ``binary_labels`` returns for such targets, without scikit-learn's
    ``type_of_target``, about a millisecond per call); None otherwise (full validation)."""
    if not (isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "biuf"):
        return None
    classes = np.unique(y)
    if classes.size != 2:
        return None
    if y.dtype.kind == "f" and not (np.all(np.isfinite(classes)) and np.all(classes % 1 == 0)):
        return None  # non-integer floats are continuous targets: binary_labels says so
    return classes, np.where(y == classes[1], 1.0, -1.0)


class GPClassifier(ClassifierMixin, BaseEstimator):
    """Gaussian-process classifier, two or more classes, by EP and its robust variants.

    Two classes: a binary latent GP with EP, damped EP, power EP, relaxed EP (REP) or the
    Laplace approximation.  More than two: the multinomial probit with nested EP (one latent
    GP per class), or one binary classifier per class (``multi_class``).

    Parameters
    ----------
    kernel : sklearn kernel, default ``ConstantKernel(1.0) * RBF(1.0)``
        Prior covariance; cloned, never modified (the fitted copy is ``kernel_``).
    likelihood : {"probit", "step"}
        Φ(y f), or the noisy step ε + (1 - 2ε) Θ(y f) (Qi & Guo eq. 8).
    label_noise : float in [0, 0.5)
        ε of the step likelihood (binary: must be 0 for "probit").  More than two classes
        with "probit" and the (dense) multinomial model: the label-noise multinomial
        probit p(y = k | f) = ε/(c-1) + (1 - εc/(c-1)) P_mnp(k | f), a label replaced by
        one of the other classes with probability ε (general c x c sites, O(c^3 n^3)
        per iteration instead of O(c n^3); docs/derivations/multiclass.md, "Label-noise
        multinomial probit"); ε = 0 is plain nested EP.
    method : {"auto", "ep", "damped", "power", "rep", "laplace"}, default "auto"
        "auto": EP found by the chain of :mod:`robustep.ep.chain` (parallel EP,
        then damped EP at 0.8, then the double loop, stopping at the first that
        converges; only if none does, power EP with alpha = 0.5, a different
        approximation; ``method_used_`` says which; a ConvergenceWarning only if all
        fail, naming what was tried).  The same approximation as "ep" unless
        ``method_used_ == "power"`` (docs/reliability.md, "method='auto'").  With
        ``likelihood="step"`` the first stage is Anderson-accelerated parallel EP
        (``method_used_ == "accelerated"``, the same fixed points in fewer sweeps), and the
        dense model's evidence search keeps the kernel amplitude (a ConstantKernel
        factor) fixed: the step likelihood depends on f only through its sign, so the
        evidence does not depend on it (docs/reliability.md, "Cost of the step
        classifier").  Where every evaluation of that search fails in EP (a
        ``label_noise`` below the share of flipped labels can leave EP without a fixed
        point), the search runs again on power EP's evidence and the fit is power EP's
        approximation (``method_used_ == "power"``, ``optimizer_result_.approximation ==
        "power"``; ``robustep.config(search_power_fallback=False)`` keeps the start and
        warns instead).
        "ep": EP (robust parallel EP with the double-loop fallback of the engine);
        "damped": EP with damping
        ``damping`` (weight on the old site) or,
        with ``damping="adaptive"``, restarts in blocks of 50 sweeps that move the
        damping halfway to 1 whenever the largest site change did not shrink during
        a block; "power": power EP with u = ``power`` (long version Appendix C);
        "rep": relaxed EP with penalty c = ``relaxation`` (§3–4, Appendix B);
        "laplace": Laplace approximation at the posterior mode.
    damping : float in [0, 1) or "adaptive"
        Used by ``method="damped"`` only.
    power : float in (0, 1]
        Used by ``method="power"`` only.
    relaxation : float >= 0
        Penalty weight c of REP (c -> inf gives EP).  Used by ``method="rep"`` only.
    schedule : {"parallel", "sequential"}
        EP site update schedule.
    max_iter : int
        Maximum EP sweeps (Newton iterations for Laplace).
    tol : float
        Convergence tolerance on the largest change of site natural parameters.  With
        ``likelihood="step"`` and ``method="auto"`` the change is measured in units of q's
        marginals (relative change of a marginal's variance, change of its mean in
        standard deviations; ``tol_units="marginal"`` of
        :func:`robustep.ep.expectation_propagation`): the step likelihood's site
        precisions grow with n, to 10⁵ at n = 2000.
    optimizer : "fmin_l_bfgs_b", callable or None
        Maximise the approximate log marginal likelihood over the kernel's log
        hyperparameters (and the inducing inputs, see ``optimize_inducing``) with its
        analytic gradient; None keeps the kernel fixed.  A callable is called as
        ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)`` like
        scikit-learn's GaussianProcessClassifier (``obj_func(theta, eval_gradient=True)``
        returns the negative evidence and its gradient; ``bounds`` is a (k, 2) array,
        ±inf for the inducing inputs), e.g. to cap the search's iterations.
    n_restarts_optimizer : int
        Extra optimiser starts drawn log-uniformly within the kernel's bounds.
    random_state : int, RandomState or None
        Seeds the optimiser restarts.
    device : None or str
        None: numpy on the CPU.  A PyTorch device ("cpu", "cuda", "cuda:1"): the kernel
        matrix, the EP posterior factorisations and the evidence gradient run there
        (EP methods, dense model; needs ``pip install robustep[torch]``); predictions
        return numpy.  More than two classes: one-vs-rest uses the device, the
        multinomial core runs in numpy.  See docs/architecture.md, "Array backends".
    dtype : {"float64", "float32"}
        Floating-point type on ``device`` (ignored with ``device=None``).
    prior : {"dense", "diagonal_plus_low_rank"}, default "dense"
        How the dense model holds its prior covariance K = kernel(X) (the same model, the
        same numbers).  "dense": the n x n matrix, O(n^3) per EP iteration.
        "diagonal_plus_low_rank": K = diag(d) + U U^T read off a kernel whose covariance
        has that form (WhiteKernel plus DotProduct or ConstantKernel terms, each optionally
        times a ConstantKernel, e.g. ``WhiteKernel() + DotProduct()``: d = noise level,
        U = [sigma_0 1, X]), with O(n r^2) posteriors and evidence gradients
        (robustep.posterior.low_rank); a ValueError names the supported kernels for any
        other.  EP methods in numpy, binary or one-vs-rest, without ``inducing_points``.
        See docs/architecture.md, "How to add a prior representation".
    inducing_points : None, int or array of shape (m, n_features)
        None: the dense model.  An int m: a sparse FITC model (docs/derivations/sparse.md)
        with m inducing inputs at k-means centres of X (``MiniBatchKMeans`` seeded by
        ``random_state``); an array: those inducing inputs.  O(n m^2) per EP sweep, no
        n x n array; methods "auto", "ep", "damped", "power", "rep", parallel schedule
        only.  More than two classes: "multinomial" gives each class's latent GP the
        FITC prior on the same inducing inputs (nested EP in O(n c^2 m^2 + c^3 m^3) per
        iteration, docs/derivations/multiclass.md §8); "one_vs_rest" fits one binary
        sparse model per class (each with its own inducing inputs when optimised).
        ``fit`` also accepts ``dask.array`` X (and y) chunked by rows (posterior/_dask.py;
        binary or one-vs-rest).
    optimize_inducing : bool
        With an ``optimizer`` and ``inducing_points``, optimise the inducing inputs jointly
        with the kernel hyperparameters (analytic gradient); False keeps them fixed.  The
        multinomial model optimises its one shared set of inducing inputs the same way.
    inducing_power : "auto" or float in (0, 1], default "auto"
        With ``inducing_points``: the power α of power EP on the pseudo-point posterior
        (Bui, Yan & Turner 2017; docs/derivations/sparse.md §8), applied to each exact
        factor p(y_i | f_i) while p(f_i | u) is kept exact.  1: FITC-EP; towards 0: the
        variational free energy (Titsias' VFE).  "auto": α = 0.5 when the inducing inputs
        are optimised (``optimize_inducing`` with an ``optimizer``), X is in memory and the
        method is "auto", "ep" or "damped"; α = 1 otherwise (fixed inducing inputs, Dask
        X, methods "power" and "rep", the multinomial model).  The reason: with free
        inducing inputs the FITC-EP evidence rewards an over-fitted model (Bauer, van der
        Wilk & Rasmussen 2016).  With m = 64 optimised inducing inputs α = 1 drove the
        amplitude to 1343 on a synthetic set, to its bound 1e5 on Spambase and to 4.6e4 on
        Pima (n = 2000, 2000, 500; dense EP: 1.43, 39.6, 3.6), α = 0.5 to 1.38, 120 and
        3.43, with test log loss 0.3853, 0.1488, 0.4915 against dense EP's 0.3842, 0.1392,
        0.4901 and α = 1's 0.4307, 0.1438, 0.5407 (``python benchmarks/learning.py --parts
        alpha --full``; docs/guide/large-data.md).  The fitted α is ``inducing_power_``.
        Not the fractional ``power`` η of method "power", which tempers the sites under
        the fixed FITC prior; a number α < 1 needs method "auto", "ep" or "damped",
        in-memory X, and with more than two classes ``multi_class="one_vs_rest"``.
        ``site_precision_`` / ``site_shift_`` are then the effective factors of f_i whose
        removal gives the leave-one-out cavity
        (``robustep.ep.pseudo_point.PseudoPointEPResult.latent_view``).
    multi_class : {"auto", "multinomial", "one_vs_rest"}
        Used only when y has more than two classes (two classes: the binary model above,
        whatever this says).  "multinomial": one latent GP per class (sharing ``kernel``)
        with the multinomial probit likelihood and nested EP (Riihimäki, Jylänki & Vehtari
        2013; estimators/_multiclass.py), for likelihood="probit", methods "auto" and
        "ep" (nested EP with adaptive damping) or "damped" (``damping``) and the parallel
        schedule, dense or with ``inducing_points`` (numpy, whatever ``device``);
        "one_vs_rest": one binary GPClassifier per class, probabilities normalised over
        the classes (as scikit-learn's); "auto": "multinomial" where those settings allow it, else
        "one_vs_rest".  Fitted: ``multi_class_``, and ``estimators_`` for one-vs-rest.
    multi_class_kernel : {"shared", "per_class"}
        The multinomial model's kernel (more than two classes; ignored otherwise, and by
        one-vs-rest, whose binary fits have their own kernels anyway).  "shared": the c
        latent GPs share ``kernel`` and its hyperparameters.  "per_class": each class gets
        its own copy of ``kernel``'s hyperparameters (starting from ``kernel``'s values),
        optimised jointly with the analytic evidence gradient; ``kernel_`` is then a
        CompoundKernel of the c fitted kernels in the order of ``classes_`` (as for
        one-vs-rest), and ``log_marginal_likelihood`` takes its (c p,) theta.  Dense model
        only (not with ``inducing_points``).

    learner : {"auto", "full_batch", "stochastic"} or StochasticLearner, default "auto"
        What learns the kernel hyperparameters and the inducing inputs of the sparse model
        (two classes, one-vs-rest's binary fits, or the sparse multinomial model).
        "full_batch": the evidence search
        above (each evaluation a full O(n m^2) EP run).  "stochastic" or a
        :class:`~robustep.StochasticLearner` (its parameters: batch size, epochs, held-out
        split and early stopping, ``max_time``): stochastic power EP with Adam steps on
        minibatch gradients of the power-EP energy, an epoch costing about one EP sweep
        (docs/derivations/stochastic_ep.md); needs ``inducing_points`` and the
        optimizer; ``n_restarts_optimizer`` does not apply.  The posterior is then
        one EP fit at the learned values on all the training points.  The multinomial
        model's learner (tied sites only, in-memory X) learns under pairwise probit
        factors Φ((f_y − f_k)/√2), one site per class
        (docs/derivations/stochastic_multiclass.md), and its final fit is nested EP for
        the multinomial probit.  "auto": the
        stochastic learner with ``inducing_points``, ``optimizer="fmin_l_bfgs_b"`` and at
        least ``robustep.get_config().stochastic_learner_min_n`` training points
        (10000), the full-batch search otherwise.  A ``dask.array`` X is read block by
        block (tied sites; at most ``stochastic_validation_max_rows`` held-out rows,
        computed once), and the final EP fit runs over its chunks (FITC-EP: α = 1).  A
        default fit at n = 1e4 (1e5), 2-d, m = 64, on an idle 2-core machine: 2.5 s
        (36 s) with the stochastic learner, 55 s (not run) with the full-batch search
        (``python benchmarks/learning.py --parts estimators --full``;
        docs/guide/large-data.md, "Learning at scale").
    verbose : bool, default False
        Print one line per evaluation of the hyperparameter search to stderr (evaluation
        count, failures, approximate log evidence, elapsed time), or one line per epoch of
        the stochastic learner (steps, energy estimate, held-out log loss, elapsed time,
        time left); quiet otherwise.  The same lines are INFO records of the
        ``robustep.search`` logger.

    Attributes
    ----------
    kernel_, classes_ (2,), X_train_ (n, d), converged_, n_iter_,
    log_marginal_likelihood_value_, site_precision_ (n,), site_shift_ (n,),
    relaxation_b_ (n,) (REP only; zero where REP did not relax), n_features_in_,
    method_used_ ("ep", "accelerated", "damped", "double_loop" or "power" for
    ``method="auto"``, else ``method``),
    inducing_points_ ((m, d) fitted inducing inputs, or None for the dense model; with Dask
    inputs ``X_train_`` is the Dask array),
    inducing_power_ (float: the power α the sparse model ran with, ``inducing_power``
    resolved; None for the dense model),
    optimizer_result_ (the evidence search's
    :class:`~robustep.estimators._search.SearchResult`, whose ``approximation`` is
    "power" where the step classifier's search ran on power EP's evidence, or the
    stochastic learner's, whose ``stopped`` says why it stopped: "converged",
    "early_stopping", "max_epochs", "max_time" or "interrupted"; None without a search),
    learner_ ("full_batch" or "stochastic": what learned the hyperparameters),
    history_ (the stochastic learner's epochs, one dict each: ``epoch``, ``steps``,
    ``energy`` (mean minibatch estimate of the power-EP energy), ``validation_log_loss``
    (with a held-out split), ``elapsed`` (s); None otherwise), n_epochs_ (int or None).

    Incremental learning: :meth:`partial_fit` (binary, ``inducing_points``) continues the
    stochastic learner over batches; its posterior is the learner's q(u) over the inducing
    values (no pass over earlier batches), ``log_marginal_likelihood_value_`` the last
    batch's energy estimate, and the site and leave-one-out attributes are not set.

    Leave-one-out diagnostics (EP methods "auto", "ep", "damped", "power", "rep"; binary,
    dense or ``inducing_points``; :mod:`robustep.diagnostics`): ``loo_log_predictive_`` (n,)
    log p(y_i | y_-i) from the cavities q / t~_i (Opper & Winther 2000; Vehtari et al.
    2016), its mean :meth:`loo_score`, and ``outlier_scores_`` (n,) = -loo_log_predictive_ (the LOO
    surprise of the observed label: log 2 = 0.69 is a coin flip, 3.0 is a LOO probability
    of 0.05), ``loo_approximate_`` (n,) bool: values whose cavity q / t~_i was improper
    (EP's own cavity used, optimistic; ``loo_score`` warns).  Not set for "laplace"
    (``loo_score`` raises).  More than two classes: the multinomial model (dense, sparse,
    label noise) takes p(y_i | y_-i) from the cavity of its c-dimensional site
    (:func:`robustep.diagnostics.multiclass_loo`; a uniform guess scores log c),
    one-vs-rest normalises its binary fits' LOO probabilities as ``predict_proba`` does.

    Notes
    -----
    With the optimiser, each evaluation warm-starts the inference from the previous
    evaluation's state (EP's sites, Laplace's K^-1 f) and the fitted state is the best
    evaluation itself (no separate final run), so ``n_iter_`` counts the sweeps of that
    warm-started run (possibly 0).  BLAS threads are limited during the fit as
    ``robustep.config(blas_threads=...)`` says (one thread for n <= 2000 by default).

    The evidence of REP is EP's evidence formula evaluated at REP's sites; its
    gradient is the explicit gradient of that formula (``log_Z_gradient``), which
    is exact at an EP fixed point and an approximation at REP's (REP's sites are not
    a stationary point of EP's evidence); see docs/derivations/rep.md.
    """

    _parameter_constraints: dict = {
        "kernel": [Kernel, None],
        "likelihood": [StrOptions({"probit", "step"})],
        "label_noise": [Interval(numbers.Real, 0.0, 0.5, closed="left")],
        "method": [StrOptions(set(_METHODS))],
        "damping": [Interval(numbers.Real, 0.0, 1.0, closed="left"), StrOptions({"adaptive"})],
        "power": [Interval(numbers.Real, 0.0, 1.0, closed="right")],
        "relaxation": [Interval(numbers.Real, 0.0, None, closed="left")],
        "schedule": [StrOptions({"parallel", "sequential"})],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "optimizer": [StrOptions({"fmin_l_bfgs_b"}), callable, None],
        "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["boolean"],
        "multi_class": [StrOptions({"auto", "multinomial", "one_vs_rest"})],
        "multi_class_kernel": [StrOptions({"shared", "per_class"})],
        "device": [str, None],
        "dtype": [StrOptions({"float64", "float32"})],
        "prior": [StrOptions({"dense", "diagonal_plus_low_rank"})],
        "inducing_points": [None, numbers.Integral, "array-like"],
        "optimize_inducing": ["boolean"],
        "inducing_power": [Interval(numbers.Real, 0.0, 1.0, closed="right"), StrOptions({"auto"})],
        "learner": [StrOptions(set(_learner.LEARNER_NAMES)), _learner.StochasticLearner],
    }

    def __init__(
        self,
        kernel=None,
        *,
        likelihood="probit",
        label_noise=0.0,
        method="auto",
        damping=0.5,
        power=0.8,
        relaxation=10.0,
        schedule="parallel",
        max_iter=1000,
        tol=1e-4,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        random_state=None,
        verbose=False,
        multi_class="auto",
        multi_class_kernel="shared",
        device=None,
        dtype="float64",
        prior="dense",
        inducing_points=None,
        optimize_inducing=True,
        inducing_power="auto",
        learner="auto",
    ):
        self.kernel = kernel
        self.likelihood = likelihood
        self.label_noise = label_noise
        self.method = method
        self.damping = damping
        self.power = power
        self.relaxation = relaxation
        self.schedule = schedule
        self.max_iter = max_iter
        self.tol = tol
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.random_state = random_state
        self.verbose = verbose
        self.multi_class = multi_class
        self.multi_class_kernel = multi_class_kernel
        self.device = device
        self.dtype = dtype
        self.prior = prior
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.inducing_power = inducing_power
        self.learner = learner

    # ------------------------------------------------------------------ tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True  # > 2 classes: estimators/_multiclass.py
        return tags

    # -------------------------------------------------------------------- fit
    @reports_progress
    def fit(self, X, y):
        """Fit the GP classifier.

        X : array (n, d) (or a ``dask.array`` chunked by rows, with ``inducing_points``);
        y : array (n,) with two or more distinct labels.  Returns ``self``.
        """
        self._validate_params()
        self.__dict__.pop("_stream", None)  # fit starts afresh after partial_fit
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError("kernel must be a sklearn.gaussian_process.kernels.Kernel")
        if _sparse.is_dask_input(X):  # Dask arrays: the sparse model over X's row chunks
            X, y, self.n_features_in_ = _sparse.validate_dask(self, X, y, classifier=True)
        else:
            X, y = _validate(self, X, y, reset=True)
        like = None
        if self.device is not None:  # binary, dense EP only (estimators/_device.py)
            like = _device.check_fit(self, y)
        params = SimpleNamespace(**self.get_params(deep=False))
        labels = _two_integer_labels(y)  # two integer labels: binary (no type_of_target)
        if self.inducing_power not in ("auto", 1) and self.inducing_points is None:
            raise ValueError("inducing_power applies to the sparse model: pass inducing_points, "
                             "or inducing_power='auto' for the dense model")  # fmt: skip
        if self.prior != "dense" and self.inducing_points is not None:
            raise ValueError(f"prior={self.prior!r} is a dense-model representation: pass "
                             "inducing_points=None, or prior='dense'")  # fmt: skip
        if labels is None and _multiclass.n_distinct_classes(y) > 2:
            if self.prior != "dense" and self.multi_class != "one_vs_rest":
                raise ValueError(f"prior={self.prior!r} is binary only; with more than two "
                                 "classes pass multi_class='one_vs_rest'")  # fmt: skip
            if self.inducing_power not in ("auto", 1) and self.multi_class != "one_vs_rest":
                raise ValueError("inducing_power < 1 is binary only; with more than two "
                                 "classes pass multi_class='one_vs_rest'")  # fmt: skip
            if _sparse.is_dask_input(X) and self.multi_class != "one_vs_rest":
                raise ValueError("Dask inputs with more than two classes need "
                                 "multi_class='one_vs_rest' (binary sparse fits); compute X "
                                 "into memory for the multinomial model")  # fmt: skip
            classes, state = _multiclass.fit_multiclass(params, X, y, self._fit_binary_clone)
            state.attributes["inducing_power_"] = self._multiclass_inducing_power(state)
        else:
            classes, y_pm = binary_labels(y, type(self).__name__) if labels is None else labels
            state = self._fit_binary(params, X, y_pm, like)
        for name in list(vars(self)):  # fitted attributes of a previous fit
            if name.endswith("_") and not name.startswith("_") and name not in _KEEP:
                delattr(self, name)
        self.classes_ = classes
        attributes = {**_learner.fitted_attributes(None), **state.attributes}
        for name, value in attributes.items():
            setattr(self, name, value)
        self._state = state
        state.warn_if_not_converged(self)
        warn_if_stuck(self.optimizer_result_, state.advice)
        return self

    def _fit_binary(self, params, X, y_pm, like):
        """The binary core's fitted state: sparse with ``inducing_points``, else dense."""
        from robustep.estimators import _binary_dense, _binary_sparse

        likelihood = _binary.make_likelihood(params)
        X = X if _sparse.is_dask_input(X) else np.asarray(X, dtype=float)
        kernel = _binary.starting_kernel(self.kernel)
        learner = _learner.resolve(
            self.learner, n=X.shape[0], sparse=self.inducing_points is not None,
            optimizer=self.optimizer, dask=_sparse.is_dask_input(X),
        )  # fmt: skip
        if self.inducing_points is not None:  # sparse FITC model
            state = _binary_sparse.fit_sparse(params, X, y_pm, likelihood, kernel, learner)
        else:
            state = _binary_dense.fit_dense(params, X, y_pm, likelihood, kernel, like)
            state.attributes["inducing_power_"] = None
        state.attributes["X_train_"] = X
        return state

    def _multiclass_inducing_power(self, state):
        """``inducing_power_`` of a multi-class fit: one-vs-rest's binary fits' α (they
        resolve ``inducing_power`` alike), 1 for the sparse multinomial model (FITC-EP,
        which has no power-α version), None for the dense one."""
        if state.attributes.get("multi_class_") == "one_vs_rest":
            return state.attributes["estimators_"][0].inducing_power_
        return None if self.inducing_points is None else 1.0

    def _fit_binary_clone(self, X, y):
        """One-vs-rest's binary fit: a fitted clone of this (unfitted) estimator."""
        return clone(self).fit(X, y)

    @available_if(_learner.has_partial_fit)
    @reports_progress
    def partial_fit(self, X, y, classes=None):
        """One pass of the stochastic learner over a batch (binary, ``inducing_points``).

        As scikit-learn's incremental estimators: the first call needs ``classes`` (the two
        labels, whose order gives ``classes_``) and fixes the model: the inducing inputs
        (k-means centres of this first batch for an int ``inducing_points``, which must
        not exceed the batch's size), the K_mm jitter and the starting kernel.  Every call
        runs one epoch of stochastic power EP with tied sites over its batch, continuing
        the average site, the kernel hyperparameters (learned when ``optimizer`` is not
        None), the inducing inputs (``optimize_inducing``) and the Adam state; the
        average site stands for every point seen so far.  The learner's parameters come
        from ``learner`` when it is a :class:`~robustep.StochasticLearner` (its
        ``validation_fraction`` and ``early_stopping`` do not apply), else its defaults.
        ``fit`` starts afresh.

        X : (b, d); y : (b,) labels among ``classes``.  Returns ``self``.
        """
        from robustep.estimators import _binary_sparse

        first = not hasattr(self, "_stream")
        if first:
            self._validate_params()
            _binary_sparse.check_stream(self, classes)
        _learner.check_batch_in_memory(X)
        X, y = _validate(self, X, y, reset=first)
        stream = _binary_sparse.partial_fit(self, self._stream if not first else None,
                                            np.asarray(X, dtype=float), y, classes)  # fmt: skip
        for name in list(vars(self)):
            if name.endswith("_") and not name.startswith("_") and name not in _KEEP:
                delattr(self, name)
        for name, value in stream.fit.attributes.items():
            setattr(self, name, value)
        self._state, self._stream = stream.fit, stream
        return self

    # --------------------------------------------------------------- predict
    def _check_X(self, X):
        check_is_fitted(self)
        return _validate(self, X, reset=False)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Approximate log marginal likelihood (and its gradient w.r.t. log hyperparameters).

        theta : (p,) log hyperparameters of ``kernel_`` or None (the fitted value); with
        ``inducing_points`` the fitted inducing inputs are held fixed.
        Returns the value, or ``(value, gradient (p,))`` when ``eval_gradient``: power EP's
        evidence where the fit's search ran on it (``optimizer_result_.approximation ==
        "power"``), else that of ``method``.
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("gradient can only be evaluated for theta != None")
            return self.log_marginal_likelihood_value_
        return self._state.log_marginal_likelihood(np.asarray(theta, dtype=float), eval_gradient)

    def loo_score(self):
        """Mean leave-one-out log predictive density, mean_i log p(y_i | y_-i) (EP methods)."""
        from robustep import diagnostics

        methods = "the EP methods ('auto', 'ep', 'damped', 'power', 'rep')"
        return diagnostics.loo_score(self, methods)

    def predict_latent(self, X, return_std=False):
        """Mean (m,) and, with ``return_std``, std (m,) of the latent f at X (m, d).

        With more than two classes: (m, c), one column per class (multinomial: the c latent
        GPs; one-vs-rest: each binary classifier's latent).
        """
        X = self._check_X(X)
        return self._state.predict_latent(X, return_std)

    def decision_function(self, X):
        """Standardised latent score z (m,): predict_proba = Φ(z) (probit) or ε + (1-2ε)Φ(z) (step).

        z = μ*/√(1 + σ*²) for probit and μ*/σ* for the step likelihood; z > 0 means
        ``classes_[1]``.  With more than two classes: scores (m, c) whose argmax is
        ``predict`` (multinomial: log predictive probabilities; one-vs-rest: each binary z).
        """
        X = self._check_X(X)
        return self._state.decision_function(X)

    def predict_proba(self, X):
        """Class probabilities (m, 2), columns ordered as ``classes_``.

        With c > 2 classes: (m, c), rows summing to 1 (multinomial: the multinomial probit
        integrated over the latent predictive; one-vs-rest: normalised binary probabilities).
        """
        X = self._check_X(X)
        return self._state.predict_proba(X)

    def predict(self, X):
        """Predicted labels (m,) in the original label set."""
        X = self._check_X(X)
        return self.classes_[self._state.predict_index(X)]
