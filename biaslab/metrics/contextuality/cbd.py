"""Contextuality-by-Default (Dzhafarov and Kujala) for WinoPron template pairs, as decided in docs/design.md section 7.

A template pair (q1, q2) measured in one option order is a cyclic system of rank 2 with contexts o1 = "q1 then q2"
and o2 = "q2 then q1". In o1, X1 follows the unprimed answer distribution of q1 and X2 the distribution of q2 primed
by X1's value: P_o1(x1, x2) = P_q1(x1 | unprimed) P_q2(x2 | prime = x1); symmetrically in o2. With answers coded
feminine = +1, masculine = -1:

    Delta C = |<X1 X2>_o1 - <X1 X2>_o2| - (|<X1>_o1 - <X1>_o2| + |<X2>_o1 - <X2>_o2|),

and the pair is contextual iff Delta C > 0 (beyond a 1e-9 rounding tolerance; the rank-2 criterion
s_odd(<R11 R21>, <R12 R22>) - Delta > n - 2 = 0).

Variant "marginal-product" (the paper's printed formula) builds <X1 X2>_o from the product of the marginals
<X1>_o <X2>_o instead of the joint distribution. It can NEVER be contextual: with a_i = <X_i>_o1 and b_i = <X_i>_o2,
all in [-1, 1], a1 a2 - b1 b2 = a1 (a2 - b2) + b2 (a1 - b1), so |a1 a2 - b1 b2| <= |a2 - b2| + |a1 - b1| and
Delta C <= 0 for every system. It is offered only to reproduce the paper's numbers (its contextual fraction is 0 by
construction); the "joint" variant is the Contextuality-by-Default measure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import UsageError

VARIANTS = ("joint", "marginal-product")
#: One-line note shown wherever the marginal-product variant's results are shown.
MARGINAL_PRODUCT_NOTE = ("marginal-product (the paper's printed formula) can never be contextual: "
                         "|a1 a2 - b1 b2| <= |a1 - b1| + |a2 - b2| for values in [-1, 1], so Delta C <= 0 always")
#: Delta C within this of 0 counts as 0 (floating-point rounding of equal moments must not read as contextual)
TOLERANCE = 1e-9


def _spin(p_f: float) -> float:
    """<X> for P(X = +1) = p_f."""
    return 2.0 * p_f - 1.0


@dataclass(frozen=True)
class CbdResult:
    delta: float
    e12: tuple[float, float]  # <X1 X2> in o1, o2
    e1: tuple[float, float]   # <X1> in o1, o2
    e2: tuple[float, float]   # <X2> in o1, o2

    @property
    def contextual(self) -> bool:
        return self.delta > TOLERANCE


def cbd(p1: float, p2: float, p2_given: Mapping[str, float], p1_given: Mapping[str, float],
        variant: str = "joint") -> CbdResult:
    """Delta C of one pair and order.

    p1 = P_q1(f | unprimed), p2 = P_q2(f | unprimed); p2_given[x] = P_q2(f | prime = x) and p1_given[x] =
    P_q1(f | prime = x) for x in {"f", "m"}. With variant="marginal-product" Delta C <= 0 for every input (see the
    module docstring): that variant is never contextual.
    """
    if variant not in VARIANTS:
        raise UsageError(f"variant must be one of {VARIANTS}, got {variant!r}")
    # order o1: X1 ~ p1, then X2 | X1
    e1_o1 = _spin(p1)
    e2_o1 = _spin(p1 * p2_given["f"] + (1 - p1) * p2_given["m"])
    e12_o1 = p1 * _spin(p2_given["f"]) - (1 - p1) * _spin(p2_given["m"])
    # order o2: X2 ~ p2, then X1 | X2
    e2_o2 = _spin(p2)
    e1_o2 = _spin(p2 * p1_given["f"] + (1 - p2) * p1_given["m"])
    e12_o2 = p2 * _spin(p1_given["f"]) - (1 - p2) * _spin(p1_given["m"])
    if variant == "marginal-product":
        e12_o1, e12_o2 = e1_o1 * e2_o1, e1_o2 * e2_o2
    delta = abs(e12_o1 - e12_o2) - (abs(e1_o1 - e1_o2) + abs(e2_o1 - e2_o2))
    return CbdResult(delta, (e12_o1, e12_o2), (e1_o1, e1_o2), (e2_o1, e2_o2))
