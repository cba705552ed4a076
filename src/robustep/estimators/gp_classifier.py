"""Binary Gaussian process classification with EP, damped EP, power EP, relaxed EP and Laplace.

``GPClassifier`` is a thin scikit-learn shell over the EP engine
(:func:`robustep.ep.expectation_propagation`), the REP site update
(:mod:`robustep.ep.rep`) and the Laplace baseline (:mod:`robustep.baselines.laplace`).

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
import warnings

import numpy as np
from scipy import linalg, special
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from robustep._config import get_config
from robustep._validation import binary_labels
from robustep._validation import validate_data as _validate_data
from robustep.ep.chain import warn_if_not_converged
from robustep.estimators import _device
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    maximise_evidence,
    warn_if_stuck,
)
from robustep.posterior import DensePrior

__all__ = ["GPClassifier"]

_METHODS = ("auto", "ep", "damped", "power", "rep", "laplace")
#: what a user can change when the evidence search could not move
SEARCH_ADVICE = (
    "pass another starting kernel, set n_restarts_optimizer > 0 (with finite kernel bounds) "
    "or try method='power'"
)


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


def _ep_kernel_gradient(post, K_gradient):
    """Explicit EP evidence gradient (p,) of the kernel's log hyperparameters:
    ``post.kernel_gradient_contraction`` (Seeger 2005; :func:`robustep.ep.log_Z_gradient`)."""
    return post.kernel_gradient_contraction(K_gradient)


class GPClassifier(ClassifierMixin, BaseEstimator):
    """Binary GP classifier with EP / damped EP / power EP / relaxed EP (REP) / Laplace inference.

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
        then damped EP with adaptive damping, then the double loop, stopping at the first
        that converges; ``method_used_`` says which; a ConvergenceWarning only if all
        fail, naming what was tried).  Same approximation as "ep", whose fixed point it
        finds more often (docs/reliability.md, "method='auto'").
        "ep": EP (robust parallel EP with the double-loop fallback of the engine,
        exactly as before "auto" was the default); "damped": EP with damping
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
        Convergence tolerance on the largest change of site natural parameters.
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
    inducing_power : float in (0, 1], default 1
        With ``inducing_points``: the power α of power EP on the pseudo-point posterior
        (Bui, Yan & Turner 2017; docs/derivations/sparse.md §8), applied to each exact
        factor p(y_i | f_i) while p(f_i | u) is kept exact.  1: FITC-EP (today's sparse
        model, unchanged); towards 0: the variational free energy (Titsias' VFE).  Not the
        fractional ``power`` η of method "power", which tempers the sites under the fixed
        FITC prior; α < 1 needs method "auto", "ep" or "damped", in-memory X, and with
        more than two classes ``multi_class="one_vs_rest"``.  ``site_precision_`` /
        ``site_shift_`` are then the effective factors of f_i whose removal gives the
        leave-one-out cavity (``robustep.ep.sparse_power.PseudoPointEPResult.latent_view``).
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

    Attributes
    ----------
    kernel_, classes_ (2,), X_train_ (n, d), converged_, n_iter_,
    log_marginal_likelihood_value_, site_precision_ (n,), site_shift_ (n,),
    relaxation_b_ (n,) (REP only; zero where REP did not relax), n_features_in_,
    method_used_ ("ep", "damped" or "double_loop" for ``method="auto"``, else ``method``),
    inducing_points_ ((m, d) fitted inducing inputs, or None for the dense model; with Dask
    inputs ``X_train_`` is the Dask array).

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
        "multi_class": [StrOptions({"auto", "multinomial", "one_vs_rest"})],
        "multi_class_kernel": [StrOptions({"shared", "per_class"})],
        "device": [str, None],
        "dtype": [StrOptions({"float64", "float32"})],
        "inducing_points": [None, numbers.Integral, "array-like"],
        "optimize_inducing": ["boolean"],
        "inducing_power": [Interval(numbers.Real, 0.0, 1.0, closed="right")],
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
        multi_class="auto",
        multi_class_kernel="shared",
        device=None,
        dtype="float64",
        inducing_points=None,
        optimize_inducing=True,
        inducing_power=1.0,
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
        self.multi_class = multi_class
        self.multi_class_kernel = multi_class_kernel
        self.device = device
        self.dtype = dtype
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.inducing_power = inducing_power

    # ------------------------------------------------------------------ tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True  # > 2 classes: estimators/_multiclass.py
        return tags

    # ------------------------------------------------------------- inference
    def _make_likelihood(self):
        from robustep.likelihoods import NoisyStep, Probit

        if self.likelihood == "probit":
            if self.label_noise != 0:
                raise ValueError(
                    "label_noise applies to likelihood='step'; set label_noise=0 for 'probit'"
                )
            return Probit()
        return NoisyStep(float(self.label_noise))

    def _infer(self, K, init=None):
        """Run the chosen approximation on prior covariance K (n, n); returns the result object."""
        lik = self._likelihood_obj
        y = self._y_pm
        if self.method == "laplace":
            # probit is log-concave: Newton steps on B = I + W^1/2 K W^1/2 (one Cholesky
            # each; R&W Alg. 3.1), warm-started from a previous alpha = K^-1 f
            from robustep.baselines.laplace_logconcave import laplace_logconcave

            return laplace_logconcave(K, y, lik, max_iter=max(self.max_iter, 1), init_alpha=init)
        from robustep.ep import expectation_propagation

        if isinstance(K, np.ndarray):
            # K comes from a scikit-learn kernel, symmetric positive semi-definite by
            # construction: skip the engine's O(n^3) check of K (one Cholesky per call);
            # keep the O(n^2) finiteness test (a kernel can overflow)
            if not np.isfinite(K).all():
                raise ValueError("K contains NaN or inf; check the kernel and its hyperparameters")
            K = DensePrior(K, check=False)
        # the subset start: the same fixed point, fewer O(n^3) sweeps (ep/subset_start.py);
        # measured to pay for the probit likelihood only (docs/derivations/engine_floor.md §5)
        min_n = get_config().subset_start_min_n
        if (
            init is None
            and min_n is not None
            and self.likelihood == "probit"
            and self.schedule == "parallel"
            and isinstance(K, DensePrior)
            and K.n >= min_n
        ):
            init = "subset"
        kwargs = dict(schedule=self.schedule, max_iter=self.max_iter, tol=self.tol, init=init)
        if self.method == "auto":  # parallel -> damped -> double loop (ep/chain.py)
            from robustep.ep import InferenceStrategy, run_chain

            strategy = InferenceStrategy.auto(self.max_iter)
            return run_chain(K, y, lik, strategy, schedule=self.schedule, tol=self.tol, init=init)
        if self.method == "ep":
            return expectation_propagation(K, y, lik, **kwargs)
        if self.method == "power":
            return expectation_propagation(K, y, lik, power=float(self.power), **kwargs)
        if self.method == "rep":
            from robustep.ep.rep import make_rep_update

            return expectation_propagation(
                K, y, lik, site_update=make_rep_update(float(self.relaxation)), **kwargs
            )
        # damped
        if self.damping != "adaptive":
            return expectation_propagation(K, y, lik, damping=float(self.damping), **kwargs)
        return self._adaptive_damped(K, y, lik, init)

    def _adaptive_damped(self, K, y, lik, init):
        """Damped EP with adaptive damping (:class:`robustep.ep.AdaptiveDamping`: from 0.5,
        moving halfway to 1 after each block of 50 sweeps without progress)."""
        from robustep.ep import AdaptiveDamping, expectation_propagation

        def block(damping, max_iter, init, max_factorisations):
            return expectation_propagation(
                K,
                y,
                lik,
                schedule=self.schedule,
                damping=damping,
                max_iter=max_iter,
                tol=self.tol,
                init=init,
                max_factorisations=max_factorisations,
            )

        return AdaptiveDamping().run(block, self.max_iter, init)

    @staticmethod
    def _log_evidence(res):
        value = getattr(res, "log_Z", None)
        if value is None:
            value = res.log_marginal_likelihood
        return float(value)

    def _evaluate(self, theta, eval_gradient, init=None, search=False):
        """Inference at log hyperparameters ``theta``: (log evidence, gradient (p,) or None,
        the inference result, K).  ``search``: an evaluation of the evidence search, which
        raises EvaluationFailed for a result that did not converge or whose evidence is not
        finite (it has no valid evidence nor gradient) before computing the gradient."""
        kernel = self.kernel_.clone_with_theta(theta)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # a warm start that is invalid for the new hyperparameters restarts from the
            # prior: an internal detail of the optimisation, not a problem of the user's
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            if self.device is not None:  # K (and dK) on the device (estimators/_device.py)
                K, K_gradient = _device.prior(kernel, self.X_train_, self._like, eval_gradient)
            elif eval_gradient:
                K, K_gradient = kernel(self.X_train_, eval_gradient=True)
            else:
                K = kernel(self.X_train_)
            res = self._infer(K, init=init)
            value = self._log_evidence(res)
            if search and not (np.isfinite(value) and res.converged):
                raise EvaluationFailed
            grad = None
            if eval_gradient:
                grad = np.asarray(self._gradient(res, K_gradient), dtype=float)
        return value, grad, res, K

    def _evidence_and_gradient(self, theta, eval_gradient):
        """``log_marginal_likelihood(theta)``: -inf (and a zero gradient) where inference fails."""
        try:
            value, grad, _, _ = self._evaluate(theta, eval_gradient)
        except (linalg.LinAlgError, ValueError, FloatingPointError):
            return (-np.inf, np.zeros_like(theta)) if eval_gradient else -np.inf
        return (value, grad) if eval_gradient else value

    def _warm_state(self, res):
        """What the next evaluation starts from: EP's sites, or Laplace's alpha = K^-1 f."""
        if self.method == "laplace":
            return np.array(res.alpha, dtype=float)
        return (np.array(res.site_precision), np.array(res.site_shift))

    def _gradient(self, res, K_gradient):
        """d log Z / d theta (p,) for the kernel's log hyperparameters, from (n, n, p) dK."""
        if self.method == "laplace":
            from robustep.baselines.laplace_logconcave import (
                LogConcaveLaplaceResult,
                laplace_logconcave_gradient,
            )

            if isinstance(res, LogConcaveLaplaceResult):
                return laplace_logconcave_gradient(res, K_gradient)
            from robustep.baselines.laplace import laplace_log_marginal_likelihood_gradient

            grad, _ = laplace_log_marginal_likelihood_gradient(
                res, K_gradient, self._likelihood_obj, self._y_pm
            )
            return grad
        if self.device is not None:
            return _device.ep_gradient(res, K_gradient)
        post = getattr(res, "posterior", None)
        if getattr(post, "_all_positive", False) and not self._likelihood_obj.hyperparameter_names:
            return _ep_kernel_gradient(post, K_gradient)
        from robustep.ep import log_Z_gradient

        grad, _ = log_Z_gradient(res, K_gradient, self._likelihood_obj, self._y_pm)
        return grad

    # -------------------------------------------------------------------- fit
    def fit(self, X, y):
        """Fit the GP classifier.

        X : array (n, d); y : array (n,) with exactly two distinct labels.
        Returns ``self``.
        """
        self._validate_params()
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError("kernel must be a sklearn.gaussian_process.kernels.Kernel")
        from robustep.estimators import _sparse

        if _sparse.is_dask_input(X):  # Dask arrays: the sparse model over X's row chunks
            X, y = _sparse.validate_dask(self, X, y, classifier=True)
        else:
            X, y = _validate(self, X, y, reset=True)
        if self.device is not None:  # binary, dense EP only (estimators/_device.py)
            self._like = _device.check_fit(self, y)
        from robustep.estimators import _multiclass

        self._mc = None  # > 2 classes: the multinomial / one-vs-rest core
        labels = _two_integer_labels(y)  # two integer labels: binary (no type_of_target)
        if self.inducing_power != 1 and self.inducing_points is None:
            raise ValueError("inducing_power applies to the sparse model: pass inducing_points, "
                             "or inducing_power=1 for the dense model")  # fmt: skip
        if labels is None and _multiclass.n_distinct_classes(y) > 2:
            if self.inducing_power != 1 and self.multi_class != "one_vs_rest":
                raise ValueError("inducing_power < 1 is binary only; with more than two "
                                 "classes pass multi_class='one_vs_rest'")  # fmt: skip
            if _sparse.is_dask_input(X) and self.multi_class != "one_vs_rest":
                raise ValueError("Dask inputs with more than two classes need "
                                 "multi_class='one_vs_rest' (binary sparse fits); compute X "
                                 "into memory for the multinomial model")  # fmt: skip
            return _multiclass.fit_multiclass(self, X, y)
        _multiclass.forget_multiclass(self)
        if labels is None:
            labels = binary_labels(y, type(self).__name__)
        self.classes_, self._y_pm = labels
        self._likelihood_obj = self._make_likelihood()
        self.X_train_ = X if _sparse.is_dask_input(X) else np.asarray(X, dtype=float)
        if self.kernel is None:
            self.kernel_ = ConstantKernel(1.0) * RBF(1.0)
        else:
            self.kernel_ = clone(self.kernel)
        if self.inducing_points is not None:  # sparse FITC model: estimators/_sparse.py
            return _sparse.fit_classifier(self)
        self.inducing_points_ = None

        from robustep._config import blas_thread_limit

        # BLAS threads as robustep.config(blas_threads=...) says (one thread for n <= 2000
        # by default); the previous limits are restored on return
        with blas_thread_limit(self.X_train_.shape[0]):
            res, K = self._fit_inference()
        self._result = res
        self.converged_ = bool(res.converged)
        self.n_iter_ = int(res.n_iter)
        self.log_marginal_likelihood_value_ = self._log_evidence(res)
        if self.method == "laplace":
            self.site_precision_ = np.asarray(res.W, dtype=float).copy()
            self.site_shift_ = self.site_precision_ * res.mode + res.grad_log_lik
        else:
            self.site_precision_ = np.asarray(res.site_precision, dtype=float).copy()
            self.site_shift_ = np.asarray(res.site_shift, dtype=float).copy()
        if self.method == "rep":
            info = getattr(res, "site_info", None) or {}
            self.relaxation_b_ = np.asarray(
                info.get("b", np.zeros(self.X_train_.shape[0])), dtype=float
            ).copy()
        self.method_used_ = getattr(res, "method_used", self.method)
        from robustep import diagnostics

        diagnostics.set_classifier_loo(self, res, self._likelihood_obj, self._y_pm)
        warn_if_not_converged(self, res, self.method)
        warn_if_stuck(self.optimizer_result_, SEARCH_ADVICE)
        return self

    def _fit_inference(self):
        """Optimise the kernel (if asked) and return the inference result at ``kernel_`` and K.

        With the optimiser, the result is the best evaluation it made (warm-started from the
        previous evaluation, converged to ``tol``): no separate final run.
        """
        theta, res, K = None, None, None
        self.optimizer_result_ = None
        if self.optimizer is not None and self.kernel_.n_dims > 0:
            search = self._optimise_kernel()
            self.optimizer_result_ = search
            theta = search.x
            if search.state is not None:
                res, K = search.state
        if res is None or not np.allclose(theta, self.kernel_.theta, rtol=0.0, atol=1e-12):
            if self.device is None:
                K = self.kernel_(self.X_train_)
            else:
                K = _device.prior(self.kernel_, self.X_train_, self._like)[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = self._infer(K)
        return self._finite_or_prior(res, K), K

    def _finite_or_prior(self, res, K):
        """Keep ``res`` if its posterior is finite; otherwise fall back to the prior (sites = 0)."""
        mean, var = np.asarray(res.mean), np.asarray(res.var)
        if np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var > 0):
            return res
        from robustep.ep import expectation_propagation

        n = self.X_train_.shape[0]
        prior = expectation_propagation(
            K,
            self._y_pm,
            self._likelihood_obj,
            max_iter=1,
            tol=self.tol,
            init=(np.zeros(n), np.zeros(n)),
        )
        prior.converged = False
        return prior

    def _optimise_kernel(self):
        """The evidence search (estimators/_search.py); sets ``kernel_`` to its best point."""

        def evaluate(theta, context):
            value, grad, res, K = self._evaluate(theta, True, init=context.warm, search=True)
            return Evaluation(value, grad, state=(res, K))

        bounds = self.kernel_.bounds
        rng = check_random_state(self.random_state) if self.n_restarts_optimizer else None
        starts = draw_starts(self.kernel_.theta, bounds, self.n_restarts_optimizer, rng)
        search = maximise_evidence(
            evaluate,
            self.kernel_.theta,
            bounds,
            optimizer=self.optimizer,
            starts=starts,
            warm_of=lambda state: self._warm_state(state[0]),
        )
        self.kernel_ = self.kernel_.clone_with_theta(search.x)
        return search

    # --------------------------------------------------------------- predict
    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Approximate log marginal likelihood (and its gradient w.r.t. log hyperparameters).

        theta : (p,) log hyperparameters of ``kernel_`` or None (the fitted value).
        Returns the value, or ``(value, gradient (p,))`` when ``eval_gradient``.
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("gradient can only be evaluated for theta != None")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        if getattr(self, "_mc", None) is not None:  # > 2 classes
            return self._mc.log_marginal_likelihood(self, theta, eval_gradient)
        if getattr(self, "inducing_points_", None) is not None:  # sparse: Z held fixed
            from robustep.estimators import _sparse

            return _sparse.classifier_log_marginal_likelihood(self, theta, eval_gradient)
        return self._evidence_and_gradient(theta, eval_gradient)

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
        if getattr(self, "_mc", None) is not None:
            return self._mc.predict_latent(self, X, return_std)
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        k_diag = self.kernel_.diag(X)
        if self.device is not None:
            mean, var = _device.predict_latent(
                self.kernel_, X, self.X_train_, self._result, self._like
            )
        elif getattr(self, "inducing_points_", None) is not None:  # sparse: row batches
            from robustep.estimators import _sparse

            mean, var = _sparse.latent_moments(self._result, self.kernel_, self.inducing_points_, X)
        else:
            K_cross = self.kernel_(X, self.X_train_)
            mean, var = self._result.predict(K_cross, k_diag)
        mean = np.nan_to_num(np.asarray(mean, dtype=float), nan=0.0)
        if not return_std:
            return mean
        var = np.asarray(var, dtype=float)
        var = np.where(np.isfinite(var), np.maximum(var, 0.0), np.asarray(k_diag, float))
        return mean, np.sqrt(var)

    def decision_function(self, X):
        """Standardised latent score z (m,): predict_proba = Φ(z) (probit) or ε + (1-2ε)Φ(z) (step).

        z = μ*/√(1 + σ*²) for probit and μ*/σ* for the step likelihood; z > 0 means
        ``classes_[1]``.  With more than two classes: scores (m, c) whose argmax is
        ``predict`` (multinomial: log predictive probabilities; one-vs-rest: each binary z).
        """
        if getattr(self, "_mc", None) is not None:
            return self._mc.decision_function(self, X)
        mean, std = self.predict_latent(X, return_std=True)
        if self.likelihood == "probit":
            return mean / np.sqrt(1.0 + std**2)
        tiny = np.finfo(float).tiny
        return np.where(std > tiny, mean / np.maximum(std, tiny), np.sign(mean) * 1e300)

    def predict_proba(self, X):
        """Class probabilities (m, 2), columns ordered as ``classes_``.

        With c > 2 classes: (m, c), rows summing to 1 (multinomial: the multinomial probit
        integrated over the latent predictive; one-vs-rest: normalised binary probabilities).
        """
        if getattr(self, "_mc", None) is not None:
            return self._mc.predict_proba(self, X)
        z = self.decision_function(X)
        eps = 0.0 if self.likelihood == "probit" else float(self.label_noise)
        p1 = eps + (1.0 - 2.0 * eps) * special.ndtr(z)
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X):
        """Predicted labels (m,) in the original label set."""
        if getattr(self, "_mc", None) is not None:
            return self.classes_[np.argmax(self._mc.predict_proba(self, X), axis=1)]
        z = self.decision_function(X)
        return self.classes_[(z > 0).astype(int)]
