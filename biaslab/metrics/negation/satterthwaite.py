"""Linear mixed model deviance in lme4's parametrization, Satterthwaite degrees of freedom (as lmerTest) and the
boundary (singular-fit) check, for a fitted statsmodels `MixedLM` without variance components.

Model (one block per group i): y_i = X_i beta + Z_i b_i + e_i, b_i ~ N(0, sigma^2 Lambda Lambda'),
e_i ~ N(0, sigma^2 I), so Var(y_i) = sigma^2 V_i(theta) with V_i = I + Z_i Lambda Lambda' Z_i'. `theta` is the
lower triangle of the relative Cholesky factor Lambda, column by column (lme4's order: for a random intercept and
slope, theta = (L11, L21, L22)), and `sigma` the residual standard deviation. The variance parameters are
`varpar = (theta, sigma)`, as in lmerTest (Kuznetsova, Brockhoff and Christensen 2017, J. Stat. Softw. 82(13)).

Deviances (-2 log-likelihood), with beta_hat(theta) the GLS estimate and r = y - X beta_hat:

* REML: log|V| + log|X' V^-1 X| + (n - p) log(2 pi sigma^2) + r' V^-1 r / sigma^2
* ML:   log|V| + n log(2 pi sigma^2) + r' V^-1 r / sigma^2

(-deviance / 2 equals statsmodels' `llf` at its estimates; tested.) The fixed-effect covariance is
Cov(beta_hat)(varpar) = sigma^2 (X' V^-1 X)^-1.

Satterthwaite (1946) degrees of freedom of a contrast c'beta, as lmerTest computes them:

    df = 2 (c' C c)^2 / (g' A g),   g_k = c' (dC / d varpar_k) c,   A = 2 H^-1,

with C = Cov(beta_hat) at the estimates, H the Hessian of the deviance in `varpar` (A is the asymptotic covariance of
the variance parameters) and both derivatives taken numerically (central differences with one Richardson step).
The value does not depend on the parametrization at an interior optimum; lmerTest's (theta, sigma) is used so that
boundary fits get lmerTest's numbers too. p = 2 P(T_df > |c'beta_hat| / sqrt(c' C c)).

Singular fit (lme4's `isSingular`, and a check statsmodels lacks): a random-effects covariance on the boundary of
the positive semi-definite cone (a variance 0, or correlation +/-1). `boundary_deviance` is the smallest profiled
deviance over covariances of rank q - 1 (q <= 2); when it is not larger than the deviance at statsmodels' estimate,
the (RE)ML optimum lies on the boundary even if statsmodels stopped inside (e.g. at a correlation of -0.989).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from ...errors import Unsupported

#: Relative step of the numerical derivatives (one Richardson extrapolation halves it).
STEP = 1e-2
#: Smallest step scale of a theta element (its natural unit is a standard deviation relative to sigma).
THETA_FLOOR = 0.05


def chol_psd(matrix: np.ndarray) -> np.ndarray:
    """Lower-triangular L with L L' = matrix for a positive semi-definite matrix (a zero pivot gives a zero column
    below it instead of a division by zero, as for a boundary fit). Negative pivots beyond rounding are clamped to 0.

    Parameters
    ----------
    matrix : symmetric q x q.

    Returns
    -------
    q x q lower-triangular array.
    """
    a = np.asarray(matrix, dtype=float)
    q = a.shape[0]
    low = np.zeros_like(a)
    for j in range(q):
        pivot = a[j, j] - low[j, :j] @ low[j, :j]
        low[j, j] = math.sqrt(pivot) if pivot > 0 else 0.0
        for i in range(j + 1, q):
            low[i, j] = (a[i, j] - low[i, :j] @ low[j, :j]) / low[j, j] if low[j, j] > 0 else 0.0
    return low


def theta_of(low: np.ndarray) -> np.ndarray:
    """The lower triangle of `low`, column by column (lme4's theta order)."""
    q = low.shape[0]
    return np.array([low[i, j] for j in range(q) for i in range(j, q)])


def lambda_of(theta: np.ndarray, q: int) -> np.ndarray:
    """Inverse of `theta_of`."""
    low = np.zeros((q, q))
    k = 0
    for j in range(q):
        for i in range(j, q):
            low[i, j] = theta[k]
            k += 1
    return low


@dataclass
class _Parts:
    logdet_v: float
    xtvx: np.ndarray
    xtvy: np.ndarray
    ytvy: float


class LmmDeviance:
    """The deviance of a linear mixed model as a function of its variance parameters (see the module docstring).

    Parameters
    ----------
    y : response, length n.
    x : fixed-effect design, n x p (full column rank).
    z : random-effect design, n x q.
    groups : group label per row.
    reml : REML (True) or ML deviance.
    """

    def __init__(self, y, x, z, groups, reml: bool = True):
        y = np.asarray(y, dtype=float)
        x = np.asarray(x, dtype=float)
        z = np.asarray(z, dtype=float)
        if z.ndim == 1:
            z = z[:, None]
        self.n, self.p = x.shape
        self.q = z.shape[1]
        self.reml = bool(reml)
        codes = np.unique(np.asarray(groups), return_inverse=True)[1]
        order = np.argsort(codes, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
        members = np.split(order, starts[1:])
        # groups of one size are stacked and processed as one batch
        self.blocks = []
        for size in sorted({len(m) for m in members}):
            idx = np.stack([m for m in members if len(m) == size])
            self.blocks.append((y[idx], x[idx], z[idx]))

    @property
    def n_theta(self) -> int:
        return self.q * (self.q + 1) // 2

    def _parts(self, theta: np.ndarray) -> _Parts:
        low = lambda_of(np.asarray(theta, dtype=float), self.q)
        logdet = 0.0
        xtvx = np.zeros((self.p, self.p))
        xtvy = np.zeros(self.p)
        ytvy = 0.0
        for yb, xb, zb in self.blocks:
            zl = zb @ low                                             # m x k x q
            v = np.eye(yb.shape[1]) + zl @ np.swapaxes(zl, 1, 2)      # m x k x k
            chol = np.linalg.cholesky(v)
            logdet += 2.0 * float(np.log(np.diagonal(chol, axis1=1, axis2=2)).sum())
            rhs = np.concatenate([xb, yb[:, :, None]], axis=2)        # m x k x (p + 1)
            w = np.linalg.solve(chol, rhs)                             # L^-1 [X y]
            gram = np.swapaxes(w, 1, 2) @ w                            # [X y]' V^-1 [X y]
            total = gram.sum(axis=0)
            xtvx += total[:-1, :-1]
            xtvy += total[:-1, -1]
            ytvy += float(total[-1, -1])
        return _Parts(logdet, xtvx, xtvy, ytvy)

    def _rss(self, parts: _Parts) -> float:
        beta = np.linalg.solve(parts.xtvx, parts.xtvy)
        return float(parts.ytvy - beta @ parts.xtvy)

    def deviance(self, varpar) -> float:
        """-2 (RE)ML log-likelihood at varpar = (theta, sigma)."""
        varpar = np.asarray(varpar, dtype=float)
        theta, sigma2 = varpar[:-1], float(varpar[-1]) ** 2
        parts = self._parts(theta)
        rss = self._rss(parts)
        dev = parts.logdet_v + rss / sigma2
        if self.reml:
            return dev + float(np.linalg.slogdet(parts.xtvx)[1]) + (self.n - self.p) * math.log(2 * math.pi * sigma2)
        return dev + self.n * math.log(2 * math.pi * sigma2)

    def profiled_deviance(self, theta) -> float:
        """The deviance minimised over sigma: sigma^2 = r'V^-1 r / (n - p) (REML) or / n (ML)."""
        parts = self._parts(np.asarray(theta, dtype=float))
        rss = self._rss(parts)
        dof = self.n - self.p if self.reml else self.n
        if rss <= 0:
            return -math.inf
        dev = parts.logdet_v + dof * (1.0 + math.log(2 * math.pi * rss / dof))
        return dev + float(np.linalg.slogdet(parts.xtvx)[1]) if self.reml else dev

    def cov_beta(self, varpar) -> np.ndarray:
        """Cov(beta_hat) = sigma^2 (X' V^-1 X)^-1 at varpar = (theta, sigma)."""
        varpar = np.asarray(varpar, dtype=float)
        parts = self._parts(varpar[:-1])
        return float(varpar[-1]) ** 2 * np.linalg.inv(parts.xtvx)

    def beta(self, theta) -> np.ndarray:
        """The GLS fixed effects at theta."""
        parts = self._parts(np.asarray(theta, dtype=float))
        return np.linalg.solve(parts.xtvx, parts.xtvy)

    # ------------------------------------------------------------------------------------------- derivatives

    def _steps(self, varpar: np.ndarray) -> np.ndarray:
        scale = np.abs(varpar).astype(float)
        scale[:-1] = np.maximum(scale[:-1], THETA_FLOOR)
        scale[-1] = max(scale[-1], 1e-8)
        return STEP * scale

    def hessian(self, varpar) -> np.ndarray:
        """Hessian of `deviance` at varpar: central differences, one Richardson step (error O(h^4))."""
        x0 = np.asarray(varpar, dtype=float)
        k = len(x0)
        f0 = self.deviance(x0)

        def estimate(h: np.ndarray) -> np.ndarray:
            out = np.empty((k, k))
            for i in range(k):
                e = np.zeros(k)
                e[i] = h[i]
                out[i, i] = (self.deviance(x0 + e) - 2 * f0 + self.deviance(x0 - e)) / h[i] ** 2
                for j in range(i):
                    d = np.zeros(k)
                    d[j] = h[j]
                    value = (self.deviance(x0 + e + d) - self.deviance(x0 + e - d)
                             - self.deviance(x0 - e + d) + self.deviance(x0 - e - d)) / (4 * h[i] * h[j])
                    out[i, j] = out[j, i] = value
            return out

        h = self._steps(x0)
        return (4 * estimate(h / 2) - estimate(h)) / 3

    def cov_beta_jacobian(self, varpar) -> np.ndarray:
        """d Cov(beta_hat) / d varpar_k, shape (k, p, p), central differences with one Richardson step."""
        x0 = np.asarray(varpar, dtype=float)
        h = self._steps(x0)
        out = []
        for i in range(len(x0)):
            def diff(step: float, i: int = i) -> np.ndarray:
                e = np.zeros(len(x0))
                e[i] = step
                return (self.cov_beta(x0 + e) - self.cov_beta(x0 - e)) / (2 * step)
            out.append((4 * diff(h[i] / 2) - diff(h[i])) / 3)
        return np.stack(out)


def varpar_from(cov_re, scale: float) -> np.ndarray:
    """lmerTest's (theta, sigma) from a random-effects covariance (absolute units) and the residual variance."""
    sigma2 = float(scale)
    low = chol_psd(np.atleast_2d(np.asarray(cov_re, dtype=float)) / sigma2)
    return np.r_[theta_of(low), math.sqrt(sigma2)]


def deviance_of_result(result) -> LmmDeviance:
    """The deviance of a fitted statsmodels `MixedLMResults` (random effects by `re_formula` only; variance
    components are not supported)."""
    model = result.model
    if getattr(model, "k_vc", 0):
        raise Unsupported("Satterthwaite degrees of freedom: variance components (vc_formula) are not supported")
    groups = np.empty(model.n_totobs if hasattr(model, "n_totobs") else len(model.endog), dtype=np.int64)
    for code, label in enumerate(model.group_labels):
        groups[model.row_indices[label]] = code
    return LmmDeviance(model.endog, model.exog, model.exog_re, groups, reml=model.reml)


@dataclass
class Satterthwaite:
    """Per contrast: `estimate`, `std_error` = sqrt(c' C c), `t`, `df`, `p_value`; `hessian_ok` is False (and df NaN)
    where the deviance Hessian is not positive definite, with the reason in `note`."""
    estimate: np.ndarray
    std_error: np.ndarray
    t: np.ndarray
    df: np.ndarray
    p_value: np.ndarray
    hessian_ok: bool
    note: str


def satterthwaite(dev: LmmDeviance, varpar, beta, contrasts) -> Satterthwaite:
    """Satterthwaite degrees of freedom and t-test p-values of the contrasts c'beta (one per row of `contrasts`), as
    lmerTest's `contest1D(..., ddf = "Satterthwaite")`.

    Parameters
    ----------
    dev : the model's deviance (`deviance_of_result` or `LmmDeviance`).
    varpar : (theta, sigma) at the estimates (`varpar_from`).
    beta : the fixed-effect estimates.
    contrasts : m x p (a row per contrast; the identity gives one test per coefficient).

    Returns
    -------
    `Satterthwaite` with arrays of length m.
    """
    varpar = np.asarray(varpar, dtype=float)
    cs = np.atleast_2d(np.asarray(contrasts, dtype=float))
    beta = np.asarray(beta, dtype=float)
    cov = dev.cov_beta(varpar)
    estimate = cs @ beta
    var = np.einsum("mi,ij,mj->m", cs, cov, cs)
    se = np.sqrt(var)
    t = estimate / se
    hess = dev.hessian(varpar)
    hess = (hess + hess.T) / 2
    eig = np.linalg.eigvalsh(hess)
    note = ""
    ok = bool(np.all(np.isfinite(eig)) and eig.min() > 1e-8 * max(abs(eig).max(), 1e-300))
    if not ok:
        note = ("Satterthwaite df undefined: the Hessian of the deviance in the variance parameters is not positive "
                f"definite (smallest eigenvalue {eig.min():.3g}; a boundary or non-converged fit)")
        df = np.full(len(cs), math.nan)
    else:
        a = 2.0 * np.linalg.inv(hess)
        jac = dev.cov_beta_jacobian(varpar)                            # k x p x p
        g = np.einsum("mi,kij,mj->mk", cs, jac, cs)                    # m x k
        denom = np.einsum("mk,kl,ml->m", g, a, g)
        with np.errstate(divide="ignore", invalid="ignore"):
            df = np.where(denom > 0, 2.0 * var ** 2 / denom, math.nan)
    p = np.where(np.isfinite(df), 2.0 * stats.t.sf(np.abs(t), np.where(np.isfinite(df), df, 1.0)), math.nan)
    return Satterthwaite(estimate, se, t, df, p, ok, note)


def _nelder_mead(fun, x0: np.ndarray) -> tuple[float, np.ndarray]:
    res = optimize.minimize(fun, x0, method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-11, "maxiter": 20000,
                                                                    "maxfev": 20000})
    return float(res.fun), np.asarray(res.x, dtype=float)


def boundary_deviance(dev: LmmDeviance, varpar) -> tuple[float, np.ndarray]:
    """The smallest profiled deviance over random-effects covariances of rank q - 1 (q = 1: no random effect, i.e.
    the fixed-effects-only model; q = 2: Lambda with L22 = 0, which covers every rank-1 covariance: correlation +/-1
    or one variance 0), minimised with Nelder-Mead from the fit's own (L11, L21) and from the two single-variance
    corners. Returns (deviance, theta at the minimum); (NaN, empty) for q > 2.
    """
    q = dev.q
    if q == 1:
        theta = np.zeros(1)
        return dev.profiled_deviance(theta), theta
    if q != 2:
        return math.nan, np.empty(0)
    start = np.asarray(varpar, dtype=float)[:2]

    def objective(x: np.ndarray) -> float:
        return dev.profiled_deviance(np.array([x[0], x[1], 0.0]))

    best = (math.inf, np.zeros(3))
    for x0 in (start, np.array([np.hypot(*start), 0.0]), np.array([0.0, np.hypot(*start)])):
        fun, x = _nelder_mead(objective, x0)
        if fun < best[0]:
            best = (fun, np.array([x[0], x[1], 0.0]))
    return best


#: A fit is on the boundary when the best rank-deficient covariance is within this many deviance units of the best
#: covariance found at all (-2 log-likelihood; lme4's own convergence tolerances are of this order).
BOUNDARY_TOL = 1e-4


@dataclass
class Optimum:
    """Where the (RE)ML optimum lies, found here independently of statsmodels' optimizer (the profiled deviance
    minimised over theta from statsmodels' estimate and from the best boundary point).

    deviance_fit: profiled deviance at statsmodels' estimate; deviance_best: the smallest found at all;
    deviance_boundary: the smallest over rank-deficient covariances (q <= 2, else NaN); theta_best: theta there;
    on_boundary: deviance_boundary <= deviance_best + BOUNDARY_TOL; gap = deviance_fit - deviance_best (> 0 when
    statsmodels stopped before the optimum).
    """
    deviance_fit: float
    deviance_best: float
    deviance_boundary: float
    theta_best: np.ndarray
    on_boundary: bool

    @property
    def gap(self) -> float:
        return self.deviance_fit - self.deviance_best

    def correlation(self, q: int) -> float:
        """The random-effect correlation at theta_best (q = 2), NaN otherwise or when a variance is 0."""
        if q != 2:
            return math.nan
        low = lambda_of(self.theta_best, 2)
        g = low @ low.T
        denom = math.sqrt(g[0, 0] * g[1, 1])
        return float(g[0, 1] / denom) if denom > 0 else math.nan


def find_optimum(dev: LmmDeviance, varpar) -> Optimum:
    """Minimise the profiled deviance over theta (Nelder-Mead, from statsmodels' theta and from the best boundary
    point) and compare with the boundary (see `Optimum`)."""
    theta = np.asarray(varpar, dtype=float)[:-1]
    fit = dev.profiled_deviance(theta)
    boundary, theta_boundary = boundary_deviance(dev, varpar)
    best, theta_best = _nelder_mead(dev.profiled_deviance, theta)
    if np.isfinite(boundary) and len(theta_boundary):
        again, theta_again = _nelder_mead(dev.profiled_deviance, theta_boundary)
        for value, point in ((boundary, theta_boundary), (again, theta_again)):
            if value < best:
                best, theta_best = value, point
    if fit < best:
        best, theta_best = fit, theta
    on_boundary = bool(np.isfinite(boundary) and boundary <= best + BOUNDARY_TOL)
    return Optimum(fit, best, boundary, theta_best, on_boundary)
