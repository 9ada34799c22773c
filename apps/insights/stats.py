"""Intervals for comparing two A/B groups, from per-group sums (pure: no Django).

Each group's metric is summarised as `Moments(n, total, squares)`: the count of sessions with a
value, the sum of the values and the sum of their squares. From those:

- a mean's difference uses Welch's t interval (unequal variances, Welch–Satterthwaite degrees
  of freedom);
- a relative difference (full − control) / control uses the delta method on the ratio of the
  two means, with the same degrees of freedom: its error grows when control's mean is small or
  noisy, which is honest, and it is only given when control's mean is positive;
- a rate's difference (successes over trials) uses Newcombe's hybrid score interval built from
  two Wilson intervals, which stays inside [−1, 1] and behaves at rates near 0 or 1.

All intervals are 95 %.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import stats as sp

Z = 1.959963984540054  # the normal 97.5 % quantile
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Moments:
    n: float = 0
    total: float = 0.0
    squares: float = 0.0

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.total + other.total, self.squares + other.squares)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def variance(self) -> float:
        """The sample variance (n − 1), 0 below two values; never negative from rounding."""
        if self.n < 2:
            return 0.0
        return max(0.0, (self.squares - self.total * self.total / self.n) / (self.n - 1))


def _welch_df(a: Moments, b: Moments) -> float:
    va, vb = a.variance / a.n, b.variance / b.n
    denominator = (va * va / (a.n - 1) if a.n > 1 else 0) + (vb * vb / (b.n - 1) if b.n > 1 else 0)
    if denominator == 0:
        return max(a.n + b.n - 2, 1)
    return (va + vb) ** 2 / denominator


def _t(df: float) -> float:
    # (rounded down to a whole degree of freedom, which widens the interval a hair: the
    # quantile is then computed once per df instead of on every request)
    return _t_whole(max(1, int(df)))


@functools.lru_cache(maxsize=4096)
def _t_whole(df: int) -> float:
    return float(sp.t.ppf(0.5 + CONFIDENCE / 2, df))


def mean_difference(full: Moments, control: Moments) -> tuple[float, tuple[float, float]] | None:
    """full − control with Welch's interval; None without two values on each side."""
    if full.n < 2 or control.n < 2:
        return None
    diff = full.mean - control.mean  # type: ignore[operator]
    se = math.sqrt(full.variance / full.n + control.variance / control.n)
    half = _t(_welch_df(full, control)) * se
    return diff, (diff - half, diff + half)


def relative_difference(full: Moments, control: Moments) -> tuple[float, tuple[float, float]] | None:
    """(full − control) / control with a delta-method interval; None when control's mean is not
    positive or either side has fewer than two values."""
    if full.n < 2 or control.n < 2 or not control.mean or control.mean <= 0:
        return None
    f, c = full.mean, control.mean
    ratio = f / c  # type: ignore[operator]
    var_f, var_c = full.variance / full.n, control.variance / control.n
    se = math.sqrt(var_f / (c * c) + (f * f) * var_c / c**4)  # type: ignore[operator]
    half = _t(_welch_df(full, control)) * se
    return ratio - 1, (ratio - 1 - half, ratio - 1 + half)


def wilson(successes: float, trials: float) -> tuple[float, float]:
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + Z * Z / (2 * trials)) / (1 + Z * Z / trials)
    half = Z * math.sqrt(p * (1 - p) / trials + Z * Z / (4 * trials * trials)) / (1 + Z * Z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_difference(full: Moments, control: Moments) -> tuple[float, tuple[float, float]] | None:
    """p_full − p_control (`total` successes of `n` trials) with Newcombe's interval."""
    if full.n < 1 or control.n < 1:
        return None
    p1, p2 = full.total / full.n, control.total / control.n
    l1, u1 = wilson(full.total, full.n)
    l2, u2 = wilson(control.total, control.n)
    diff = p1 - p2
    lo = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return diff, (lo, hi)
