"""ministat: is the difference between two sets of measurements real?

A Python port of FreeBSD's ``ministat(1)`` (usr.bin/ministat/ministat.c,
Poul-Henning Kamp; method in docs/experiments.md §2), as a library for the
crashtest and the GC test and as ``python -m pydb ministat``.  By default it
prints what FreeBSD's ministat prints, digit for digit: the same critical
values (FreeBSD's table, :data:`STUDENT_TABLE`), the same arithmetic in the
same order, the same ``printf`` formats.

The method (Student's two-sample t test with pooled variance):

- per data set: N, Min, Max, Median (the mean of the two middle values for
  even N), Avg, Stddev (sample standard deviation, divisor N-1);
- pooled standard deviation ``s = sqrt(((n1-1) v1 + (n2-1) v2) / (n1+n2-2))``;
- half-width of the confidence interval of the difference of the means
  ``e = t(C, n1+n2-2) * s * sqrt(1/n1 + 1/n2)``, where ``t(C, df)`` is the
  two-sided critical value of Student's t distribution with ``df`` degrees
  of freedom at confidence level C;
- the difference ``d = avg2 - avg1`` is proven when ``|d| > e``; the
  percentage and its half-width are ``100 d / avg1`` and ``100 e / avg1``
  (relative to the first data set; the comparison of docs/experiments.md §2
  prints ``2169.95 +/- 37.385``, ``25.8893% +/- 0.446034%``, ``(Student's
  t, pooled s = 39.7884)``).

Where t comes from (``exact``):

- ``exact=False`` (the default) looks t up in FreeBSD's table
  (:func:`student_t_table`): three decimals per degrees of freedom 1..100
  and per confidence level 80, 90, 95, 98, 99, 99.5 %, and for more than
  100 degrees of freedom the row of the normal distribution ("inf"), as
  ministat.c's Relative() does.  The column FreeBSD labels 99.5 % holds the
  two-sided 99.8 % values (318.313 for 1 degree of freedom, 3.090 for
  "inf"); it is reproduced as it is.
- ``exact=True`` computes t for any confidence and degrees of freedom
  (:func:`student_t`): the t distribution's CDF through the regularized
  incomplete beta function, ``P(T <= t) = 1 - I_x(df/2, 1/2) / 2`` with
  ``x = df / (df + t^2)`` for t >= 0 (Abramowitz & Stegun 26.7.1 and
  26.5.27), evaluated with Lentz's continued fraction (Numerical Recipes,
  2nd ed., §6.4, ``betacf``), inverted by bisection to full double
  precision.  For 80..99 % it agrees with the table to its 3 decimals up to
  100 degrees of freedom; the last digits printed then differ (the published
  example gives ``37.3836`` and ``0.446017%``), and 99.5 % is the true 99.5 %.

The arithmetic follows ministat.c: the mean is the sum of the values in the
order they were read, divided by N; the variance sums ``(x - avg)^2`` over
the sorted values, one after the other, and divides by ``N - 1.0``; the
median of an even N is the mean of the two middle values (older ministat.c
took the upper one; the published examples have odd N).  One
difference from FreeBSD's current ministat.c is deliberate: its Relative()
now prints as the percentage's half-width a propagated error of the
ratio of the means (``re`` in ministat.c) instead of ``100 e / avg1``, so it
no longer prints the values of its own manual page (``80% +/- 70.7384%``)
or README; pydb prints ``100 e / avg1``, as all the published outputs do.

The text output (``render``) follows ministat.c: the legend, the ASCII plot
(``x`` for the first set, ``+`` for the second, ``*`` where they overlap;
``|___|`` spans avg +/- stddev, ``M`` marks the median and ``A`` the
average), the table with ``%13.8g`` columns, and per later set either
"Difference at C% confidence" (``%.1f``) with the lines ``\t%g +/- %g``,
``\t%g%% +/- %g%%`` and ``\t(Student's t, pooled s = %g)``, or "No
difference proven at C% confidence".
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ._cli import tool_parser

__all__ = ["CONFIDENCES", "NSTUDENT", "STUDENT_TABLE", "Stats", "Verdict", "summarize",
           "compare", "student_t", "student_t_table", "t_cdf", "betainc", "read_values",
           "render", "main"]

#: The confidence levels (percent) ministat offers (its ``-c``), the columns
#: of :data:`STUDENT_TABLE` (ministat.c ``studentpct[]``).
CONFIDENCES = (80.0, 90.0, 95.0, 98.0, 99.0, 99.5)

#: The last degrees of freedom with a row of their own in :data:`STUDENT_TABLE`.
NSTUDENT = 100

#: FreeBSD ministat's table of two-sided critical values of Student's t,
#: ``STUDENT_TABLE[df][i]`` for ``df`` = 1..NSTUDENT degrees of freedom and
#: the confidence level ``CONFIDENCES[i]``; row 0 is the "inf" row (the
#: normal distribution), used for more than NSTUDENT degrees of freedom.
#: Copied value for value from ``double student[NSTUDENT + 1][NCONF]`` in
#: FreeBSD's usr.bin/ministat/ministat.c (Poul-Henning Kamp, Beerware
#: licence), revision "$FreeBSD: src/usr.bin/ministat/ministat.c,v
#: 1.14.2.1.8.1 2012/03/03$" (freebsd/freebsd-src commit 039ea811636f); the
#: table is the same in the current file.  The 99.5 column holds the
#: two-sided 99.8 % values (see the module docstring).
STUDENT_TABLE: tuple[tuple[float, float, float, float, float, float], ...] = (
    (  1.282,   1.645,   1.960,   2.326,   2.576,   3.090),  # inf
    (  3.078,   6.314,  12.706,  31.821,  63.657, 318.313),  # 1
    (  1.886,   2.920,   4.303,   6.965,   9.925,  22.327),  # 2
    (  1.638,   2.353,   3.182,   4.541,   5.841,  10.215),  # 3
    (  1.533,   2.132,   2.776,   3.747,   4.604,   7.173),  # 4
    (  1.476,   2.015,   2.571,   3.365,   4.032,   5.893),  # 5
    (  1.440,   1.943,   2.447,   3.143,   3.707,   5.208),  # 6
    (  1.415,   1.895,   2.365,   2.998,   3.499,   4.782),  # 7
    (  1.397,   1.860,   2.306,   2.896,   3.355,   4.499),  # 8
    (  1.383,   1.833,   2.262,   2.821,   3.250,   4.296),  # 9
    (  1.372,   1.812,   2.228,   2.764,   3.169,   4.143),  # 10
    (  1.363,   1.796,   2.201,   2.718,   3.106,   4.024),  # 11
    (  1.356,   1.782,   2.179,   2.681,   3.055,   3.929),  # 12
    (  1.350,   1.771,   2.160,   2.650,   3.012,   3.852),  # 13
    (  1.345,   1.761,   2.145,   2.624,   2.977,   3.787),  # 14
    (  1.341,   1.753,   2.131,   2.602,   2.947,   3.733),  # 15
    (  1.337,   1.746,   2.120,   2.583,   2.921,   3.686),  # 16
    (  1.333,   1.740,   2.110,   2.567,   2.898,   3.646),  # 17
    (  1.330,   1.734,   2.101,   2.552,   2.878,   3.610),  # 18
    (  1.328,   1.729,   2.093,   2.539,   2.861,   3.579),  # 19
    (  1.325,   1.725,   2.086,   2.528,   2.845,   3.552),  # 20
    (  1.323,   1.721,   2.080,   2.518,   2.831,   3.527),  # 21
    (  1.321,   1.717,   2.074,   2.508,   2.819,   3.505),  # 22
    (  1.319,   1.714,   2.069,   2.500,   2.807,   3.485),  # 23
    (  1.318,   1.711,   2.064,   2.492,   2.797,   3.467),  # 24
    (  1.316,   1.708,   2.060,   2.485,   2.787,   3.450),  # 25
    (  1.315,   1.706,   2.056,   2.479,   2.779,   3.435),  # 26
    (  1.314,   1.703,   2.052,   2.473,   2.771,   3.421),  # 27
    (  1.313,   1.701,   2.048,   2.467,   2.763,   3.408),  # 28
    (  1.311,   1.699,   2.045,   2.462,   2.756,   3.396),  # 29
    (  1.310,   1.697,   2.042,   2.457,   2.750,   3.385),  # 30
    (  1.309,   1.696,   2.040,   2.453,   2.744,   3.375),  # 31
    (  1.309,   1.694,   2.037,   2.449,   2.738,   3.365),  # 32
    (  1.308,   1.692,   2.035,   2.445,   2.733,   3.356),  # 33
    (  1.307,   1.691,   2.032,   2.441,   2.728,   3.348),  # 34
    (  1.306,   1.690,   2.030,   2.438,   2.724,   3.340),  # 35
    (  1.306,   1.688,   2.028,   2.434,   2.719,   3.333),  # 36
    (  1.305,   1.687,   2.026,   2.431,   2.715,   3.326),  # 37
    (  1.304,   1.686,   2.024,   2.429,   2.712,   3.319),  # 38
    (  1.304,   1.685,   2.023,   2.426,   2.708,   3.313),  # 39
    (  1.303,   1.684,   2.021,   2.423,   2.704,   3.307),  # 40
    (  1.303,   1.683,   2.020,   2.421,   2.701,   3.301),  # 41
    (  1.302,   1.682,   2.018,   2.418,   2.698,   3.296),  # 42
    (  1.302,   1.681,   2.017,   2.416,   2.695,   3.291),  # 43
    (  1.301,   1.680,   2.015,   2.414,   2.692,   3.286),  # 44
    (  1.301,   1.679,   2.014,   2.412,   2.690,   3.281),  # 45
    (  1.300,   1.679,   2.013,   2.410,   2.687,   3.277),  # 46
    (  1.300,   1.678,   2.012,   2.408,   2.685,   3.273),  # 47
    (  1.299,   1.677,   2.011,   2.407,   2.682,   3.269),  # 48
    (  1.299,   1.677,   2.010,   2.405,   2.680,   3.265),  # 49
    (  1.299,   1.676,   2.009,   2.403,   2.678,   3.261),  # 50
    (  1.298,   1.675,   2.008,   2.402,   2.676,   3.258),  # 51
    (  1.298,   1.675,   2.007,   2.400,   2.674,   3.255),  # 52
    (  1.298,   1.674,   2.006,   2.399,   2.672,   3.251),  # 53
    (  1.297,   1.674,   2.005,   2.397,   2.670,   3.248),  # 54
    (  1.297,   1.673,   2.004,   2.396,   2.668,   3.245),  # 55
    (  1.297,   1.673,   2.003,   2.395,   2.667,   3.242),  # 56
    (  1.297,   1.672,   2.002,   2.394,   2.665,   3.239),  # 57
    (  1.296,   1.672,   2.002,   2.392,   2.663,   3.237),  # 58
    (  1.296,   1.671,   2.001,   2.391,   2.662,   3.234),  # 59
    (  1.296,   1.671,   2.000,   2.390,   2.660,   3.232),  # 60
    (  1.296,   1.670,   2.000,   2.389,   2.659,   3.229),  # 61
    (  1.295,   1.670,   1.999,   2.388,   2.657,   3.227),  # 62
    (  1.295,   1.669,   1.998,   2.387,   2.656,   3.225),  # 63
    (  1.295,   1.669,   1.998,   2.386,   2.655,   3.223),  # 64
    (  1.295,   1.669,   1.997,   2.385,   2.654,   3.220),  # 65
    (  1.295,   1.668,   1.997,   2.384,   2.652,   3.218),  # 66
    (  1.294,   1.668,   1.996,   2.383,   2.651,   3.216),  # 67
    (  1.294,   1.668,   1.995,   2.382,   2.650,   3.214),  # 68
    (  1.294,   1.667,   1.995,   2.382,   2.649,   3.213),  # 69
    (  1.294,   1.667,   1.994,   2.381,   2.648,   3.211),  # 70
    (  1.294,   1.667,   1.994,   2.380,   2.647,   3.209),  # 71
    (  1.293,   1.666,   1.993,   2.379,   2.646,   3.207),  # 72
    (  1.293,   1.666,   1.993,   2.379,   2.645,   3.206),  # 73
    (  1.293,   1.666,   1.993,   2.378,   2.644,   3.204),  # 74
    (  1.293,   1.665,   1.992,   2.377,   2.643,   3.202),  # 75
    (  1.293,   1.665,   1.992,   2.376,   2.642,   3.201),  # 76
    (  1.293,   1.665,   1.991,   2.376,   2.641,   3.199),  # 77
    (  1.292,   1.665,   1.991,   2.375,   2.640,   3.198),  # 78
    (  1.292,   1.664,   1.990,   2.374,   2.640,   3.197),  # 79
    (  1.292,   1.664,   1.990,   2.374,   2.639,   3.195),  # 80
    (  1.292,   1.664,   1.990,   2.373,   2.638,   3.194),  # 81
    (  1.292,   1.664,   1.989,   2.373,   2.637,   3.193),  # 82
    (  1.292,   1.663,   1.989,   2.372,   2.636,   3.191),  # 83
    (  1.292,   1.663,   1.989,   2.372,   2.636,   3.190),  # 84
    (  1.292,   1.663,   1.988,   2.371,   2.635,   3.189),  # 85
    (  1.291,   1.663,   1.988,   2.370,   2.634,   3.188),  # 86
    (  1.291,   1.663,   1.988,   2.370,   2.634,   3.187),  # 87
    (  1.291,   1.662,   1.987,   2.369,   2.633,   3.185),  # 88
    (  1.291,   1.662,   1.987,   2.369,   2.632,   3.184),  # 89
    (  1.291,   1.662,   1.987,   2.368,   2.632,   3.183),  # 90
    (  1.291,   1.662,   1.986,   2.368,   2.631,   3.182),  # 91
    (  1.291,   1.662,   1.986,   2.368,   2.630,   3.181),  # 92
    (  1.291,   1.661,   1.986,   2.367,   2.630,   3.180),  # 93
    (  1.291,   1.661,   1.986,   2.367,   2.629,   3.179),  # 94
    (  1.291,   1.661,   1.985,   2.366,   2.629,   3.178),  # 95
    (  1.290,   1.661,   1.985,   2.366,   2.628,   3.177),  # 96
    (  1.290,   1.661,   1.985,   2.365,   2.627,   3.176),  # 97
    (  1.290,   1.661,   1.984,   2.365,   2.627,   3.175),  # 98
    (  1.290,   1.660,   1.984,   2.365,   2.626,   3.175),  # 99
    (  1.290,   1.660,   1.984,   2.364,   2.626,   3.174),  # 100
)

#: Plot symbols, indexed by the OR of the data set bits (ministat.c).
SYMBOLS = " x+*%#@O"
MAX_DATASETS = 7


# ------------------------------------------------------------- t values

def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1,
    a, b > 0 (Numerical Recipes §6.4: the continued fraction, used directly
    for x < (a+1)/(a+b+2) and through I_x(a,b) = 1 - I_{1-x}(b,a) above).

    Raises ValueError outside the domain."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"betainc({a}, {b}, {x}): need a, b > 0 and 0 <= x <= 1")
    if x == 0.0 or x == 1.0:
        return x
    ln_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    # Modified Lentz's method for the continued fraction of I_x(a, b).
    tiny, eps = 1e-300, 1e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError(f"betainc continued fraction did not converge (a={a}, b={b}, x={x})")


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with `df` > 0 degrees of
    freedom (A&S 26.7.1 via the incomplete beta function)."""
    if df <= 0:
        raise ValueError("degrees of freedom must be > 0")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def student_t(confidence: float, df: int) -> float:
    """Two-sided critical value of Student's t: the t with
    P(-t <= T <= t) = confidence/100 for `df` degrees of freedom, i.e. the
    (1 + confidence/100)/2 quantile.  E.g. ``student_t(95, 10)`` = 2.2281.

    Args:
        confidence: percent, 0 < confidence < 100 (ministat offers 80, 90,
            95, 98, 99, 99.5).
        df: degrees of freedom, int >= 1.

    Raises ValueError outside these ranges."""
    if not 0 < confidence < 100:
        raise ValueError(f"confidence must be between 0 and 100 percent, not {confidence}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, not {df}")
    p = (1.0 + confidence / 100.0) / 2.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):          # bisection to the last bit
        mid = (lo + hi) / 2.0
        if mid == lo or mid == hi:
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def student_t_table(confidence: float, df: int) -> float:
    """Two-sided critical value of Student's t as FreeBSD's ministat takes
    it: ``STUDENT_TABLE[df]`` for 1 <= df <= NSTUDENT (100), the "inf" row
    (normal distribution) beyond (ministat.c Relative():
    ``if (z > NSTUDENT) t = student[0][confidx]; else t = student[z][confidx]``).
    E.g. ``student_t_table(95, 18)`` = 2.101, ``student_t_table(95, 101)``
    = 1.960, and ``student_t_table(99.5, 1)`` = 318.313 (FreeBSD's 99.5
    column holds the two-sided 99.8 % values).

    Args:
        confidence: percent, one of :data:`CONFIDENCES` (80, 90, 95, 98,
            99, 99.5).
        df: degrees of freedom, int >= 1.

    Raises ValueError for another confidence level or df < 1."""
    try:
        col = CONFIDENCES.index(float(confidence))
    except ValueError:
        raise ValueError(f"FreeBSD's t table has no column for {confidence}% confidence "
                         f"(it has 80, 90, 95, 98, 99 and 99.5; exact=True computes any "
                         f"level)") from None
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, not {df}")
    return STUDENT_TABLE[0 if df > NSTUDENT else df][col]


# ------------------------------------------------------------- statistics

@dataclass(frozen=True)
class Stats:
    """Summary of one data set: n, min, max, median, avg, stddev (sample
    standard deviation with divisor n-1; NaN for n = 1), var (stddev^2)."""
    n: int
    min: float
    max: float
    median: float
    avg: float
    stddev: float
    var: float


def summarize(values: Iterable[float]) -> Stats:
    """Stats of `values` (any iterable of numbers, at least one), computed
    as ministat.c does, operation for operation, so that the printed digits
    are FreeBSD's: the mean is the sum in the order given (AddPoint()) over
    N; the variance the sum of ``(x - avg) * (x - avg)`` over the sorted
    values, in order, over ``N - 1.0`` (Var()); the median the middle value,
    or the mean of the two middle values for even N (Median()).

    Raises ValueError if it is empty."""
    given = [float(x) for x in values]
    n = len(given)
    if n == 0:
        raise ValueError("no values")
    sy = 0.0
    for x in given:             # a plain running sum, not fsum(): the C's sy
        sy += x
    avg = sy / n
    v = sorted(given)
    median = v[n // 2] if n % 2 else (v[n // 2] + v[n // 2 - 1]) / 2
    if n > 1:
        syy = 0.0
        for x in v:
            syy += (x - avg) * (x - avg)
        var = syy / (n - 1.0)
    else:
        var = math.nan
    return Stats(n, v[0], v[-1], median, avg, math.sqrt(var), var)


@dataclass(frozen=True)
class Verdict:
    """Result of :func:`compare` (b against a).

    diff: avg(b) - avg(a); diff_ci: half-width of its confidence interval
    (same unit); pct, pct_ci: the same as percent of avg(a); pooled_s: the
    pooled standard deviation; significant: |diff| > diff_ci; confidence:
    percent; t: the critical value used; df: n_a + n_b - 2."""
    diff: float
    diff_ci: float
    pct: float
    pct_ci: float
    pooled_s: float
    significant: bool
    confidence: float
    t: float
    df: int

    def lines(self) -> list[str]:
        """ministat's text for this verdict (one line, or four), as
        ministat.c's Relative() prints it: ``Difference at %.1f%%
        confidence``, ``\\t%g +/- %g``, ``\\t%g%% +/- %g%%``, ``\\t(Student's
        t, pooled s = %g)``, or ``No difference proven at %.1f%% confidence``
        (no line ends with a newline)."""
        if not self.significant:
            return [f"No difference proven at {self.confidence:.1f}% confidence"]
        # ministat.c prints e * 100 / Avg(rs): negative when the first mean
        # is (pct_ci is its absolute value); d != 0 here since |d| > e.
        pct_ci = -self.pct_ci if (self.diff < 0) != (self.pct < 0) else self.pct_ci
        return [f"Difference at {self.confidence:.1f}% confidence",
                f"\t{_g(self.diff)} +/- {_g(self.diff_ci)}",
                f"\t{_g(self.pct)}% +/- {_g(pct_ci)}%",
                f"\t(Student's t, pooled s = {_g(self.pooled_s)})"]

    def short(self) -> str:
        """One line: ``+12.3% +/- 4.5%`` when proven, else ``no diff``."""
        if not self.significant:
            return "no diff"
        return f"{self.pct:+.1f}% +/- {self.pct_ci:.1f}%"


def _g(x: float) -> str:
    return f"{x:g}"


def compare(a: Sequence[float] | Stats, b: Sequence[float] | Stats,
            confidence: float = 95.0, *, exact: bool = False) -> Verdict:
    """Is the mean of `b` different from the mean of `a`?  (ministat's
    Relative(): Student's t with pooled variance, computed in ministat.c's
    order of operations; the module docstring gives the formulas.)

    Args:
        a: the reference samples (or their :class:`Stats`).
        b: the samples compared with it.
        confidence: percent: one of ministat's -c levels 80, 90, 95, 98,
            99, 99.5; with ``exact=True`` any 0 < confidence < 100.
        exact: False (default): t from FreeBSD's table
            (:func:`student_t_table`), so that the verdict prints FreeBSD
            ministat's digits; True: t computed exactly
            (:func:`student_t`).

    Returns:
        A :class:`Verdict`; percentages are relative to avg(a) (NaN when
        avg(a) is 0).

    Raises:
        ValueError: fewer than 3 values in all (no degree of freedom), a
            confidence outside the table (``exact=False``) or outside
            0..100.
    """
    sa = a if isinstance(a, Stats) else summarize(a)
    sb = b if isinstance(b, Stats) else summarize(b)
    df = sa.n + sb.n - 2
    if df < 1:
        raise ValueError("comparing needs at least 3 values in all (n1 + n2 - 2 >= 1)")
    t = student_t(confidence, df) if exact else student_t_table(confidence, df)
    va = sa.var if sa.n > 1 else 0.0
    vb = sb.var if sb.n > 1 else 0.0
    # spool, s, e as ministat.c computes them (IEEE addition commutes, so
    # the order of the two sets in a sum does not matter; grouping does).
    pooled = math.sqrt(((sb.n - 1) * vb + (sa.n - 1) * va) / df)
    e = t * (pooled * math.sqrt(1.0 / sb.n + 1.0 / sa.n))
    d = sb.avg - sa.avg
    if sa.avg != 0:
        pct, pct_ci = d * 100.0 / sa.avg, e * 100.0 / abs(sa.avg)
    else:
        pct = pct_ci = math.nan
    return Verdict(d, e, pct, pct_ci, pooled, abs(d) > e, float(confidence), t, df)


# ------------------------------------------------------------- input

def read_values(lines: Iterable[str], column: int = 1, delimiters: str = " \t",
                name: str = "<input>") -> list[float]:
    """The numbers of one data set, as ministat reads them: each line is
    split at any of `delimiters`; the `column`-th (1-based) field is the
    value; lines that are blank, lack that column, or whose fields up to it
    start with ``#`` (a comment) are skipped.

    A value is what C's strtod() reads whole, hexadecimal (``0x10``)
    included; one that is not finite (nan, inf) is refused, as no
    statistic of it means anything (FreeBSD ministat takes it and prints
    nan or a broken plot).

    Raises ValueError naming the line for a field that is not a finite
    number."""
    out = []
    for lineno, line in enumerate(lines, 1):
        fields = [f for f in _split(line.rstrip("\r\n"), delimiters) if f]
        if len(fields) < column or any(f.startswith("#") for f in fields[:column]):
            continue
        field = fields[column - 1]
        try:
            if field.lstrip("+-")[:2].lower() == "0x":    # strtod's, not fromhex's "abc"
                x = float.fromhex(field)
            else:
                x = float(field)
        except (ValueError, OverflowError):
            raise ValueError(f"Invalid data on line {lineno} in {name}") from None
        if not math.isfinite(x):
            raise ValueError(f"Invalid data on line {lineno} in {name}: {field} is not a "
                             "finite number")
        out.append(x)
    return out


def _split(line: str, delimiters: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    for ch in line:
        if ch in delimiters:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


# ------------------------------------------------------------- output

class _Plot:
    # ministat.c's struct plot, SetupPlot/AdjPlot/DimPlot/PlotSet/DumpPlot.
    def __init__(self, width: int, separate: bool, nsets: int):
        self.width, self.separate, self.nsets = width, separate, nsets
        self.min, self.max = math.inf, -math.inf
        self.span = self.dx = self.x0 = 0.0
        self.height = 0
        self.data: list[list[int]] = []
        self.bars: list[list[str] | None] = [None] * nsets

    def adj(self, a: float) -> None:
        if math.isnan(a):
            return
        self.min, self.max = min(self.min, a), max(self.max, a)
        self.span = self.max - self.min
        self.dx = self.span / (self.width - 1.0)
        self.x0 = self.min - 0.5 * self.dx

    def dim(self, s: Stats) -> None:
        for a in (s.min, s.max, s.avg - s.stddev, s.avg + s.stddev):
            self.adj(a)

    def col(self, v: float) -> int:
        return int((v - self.x0) / self.dx)   # C's truncating conversion

    def add(self, points: Sequence[float], s: Stats, val: int) -> None:
        if self.span == 0:
            return
        bar_i = val - 1 if self.separate else 0
        bar = self.bars[bar_i]
        if bar is None:
            bar = self.bars[bar_i] = [""] * self.width
        cols = [self.col(p) for p in sorted(points)]
        m, i, j = 1, -1, 0
        for x in cols:
            if x == i:
                j += 1
                m = max(m, j)
            else:
                i, j = x, 1
        m += 1
        while self.height < m:
            self.data.append([0] * self.width)
            self.height += 1
        i = -1
        for x in cols:
            if x == i:
                j += 1
            else:
                i, j = x, 1
            self.data[j][x] |= val
        if not math.isnan(s.stddev):
            lo, hi = self.col(s.avg - s.stddev), self.col(s.avg + s.stddev)
            bar[hi] = "|"
            bar[lo] = "|"
            for k in range(lo + 1, hi):
                if not bar[k]:
                    bar[k] = "_"
        bar[self.col(s.median)] = "M"
        bar[self.col(s.avg)] = "A"

    def dump(self) -> list[str]:
        if self.span == 0:
            return ["[no plot, span is zero width]"]
        edge = "+" + "-" * self.width + "+"
        out = [edge]
        for row in range(self.height - 1, 0, -1):
            out.append("|" + "".join(SYMBOLS[k] for k in self.data[row]) + "|")
        for bar in self.bars:
            if bar is not None:
                out.append("|" + "".join(c or " " for c in bar) + "|")
        out.append(edge)
        return out


HEADER = "    N           Min           Max        Median           Avg        Stddev"


def vitals_line(s: Stats, index: int) -> str:
    """One table row (ministat.c Vitals(): ``%c %3zu`` then five
    ``%13.8g``); `index` 0 is the first data set (symbol x)."""
    return (f"{SYMBOLS[index + 1]} {s.n:3d} {s.min:13.8g} {s.max:13.8g} "
            f"{s.median:13.8g} {s.avg:13.8g} {s.stddev:13.8g}")


def render(datasets: Sequence[Sequence[float]], names: Sequence[str],
           confidence: float = 95.0, width: int = 74, separate: bool = False,
           stats_only: bool = False, quiet: bool = False, *, exact: bool = False) -> str:
    """ministat's whole output for `datasets` (1 to 7 lists of numbers,
    each with at least one value) named `names`.

    Args:
        confidence: percent for the comparisons (-c): 80, 90, 95, 98, 99 or
            99.5 (any level between 0 and 100 with `exact`).
        width: plot width in characters, without its two borders (-w).
        separate: one avg/median/stddev bar line per data set (-s).
        stats_only: the table only: no plot, no comparison (-n).
        quiet: no legend and no table header (-q).
        exact: compute Student's t instead of taking it from FreeBSD's
            table (see :func:`compare`); the default prints FreeBSD's
            digits.

    Returns the text, ending with a newline.

    Raises ValueError for more than 7 data sets, an empty one, or a
    confidence level :func:`compare` refuses."""
    if not 1 <= len(datasets) <= MAX_DATASETS:
        raise ValueError(f"ministat takes 1 to {MAX_DATASETS} data sets")
    stats = [summarize(d) for d in datasets]
    out: list[str] = []
    if not quiet:
        out += [f"{SYMBOLS[i + 1]} {name}" for i, name in enumerate(names)]
    if not stats_only:
        plot = _Plot(width, separate, len(datasets))
        for s in stats:
            plot.dim(s)
        for i, (d, s) in enumerate(zip(datasets, stats, strict=True)):
            plot.add(d, s, i + 1)
        out += plot.dump()
    if not quiet:
        out.append(HEADER)
    out.append(vitals_line(stats[0], 0))
    for i in range(1, len(stats)):
        out.append(vitals_line(stats[i], i))
        if not stats_only:
            out += compare(stats[0], stats[i], confidence, exact=exact).lines()
    return "\n".join(out) + "\n"


#: Exit statuses of ``pydb ministat`` (FreeBSD ministat's; --help shows them).
EXIT_STATUSES = (
    (0, "done"),
    (1, "a file cannot be opened"),
    (2, "bad usage, or bad input: a value that is not a number, fewer than 3 values "
        "in a file, an empty -d"),
    (130, "interrupted by Ctrl-C (SIGINT), after one line saying so"),
)


def main(argv=None) -> int:
    """``python -m pydb ministat [-c C] [-C column] [-d delimiters] [-n]
    [-q] [-s] [-w width] [--exact] FILE...`` (``-`` or no file: standard
    input).  ``--exact`` computes Student's t (and then takes any -c level
    between 0 and 100) instead of FreeBSD's table.
    Returns 0, 1 for a file that cannot be opened, or 2 for bad input
    (as ministat)."""
    ap = tool_parser("pydb ministat", "Statistics of one number per line, and Student's t "
                     "comparison of each file against the first (FreeBSD ministat).",
                     EXIT_STATUSES)
    ap.add_argument("-c", dest="confidence", default="95",
                    help="confidence level: 80, 90, 95, 98, 99 or 99.5 (default 95)")
    ap.add_argument("-C", dest="column", type=int, default=1,
                    help="column of the value (1-based, default 1)")
    ap.add_argument("-d", dest="delimiters", default=" \t",
                    help="field delimiters (default space and tab)")
    ap.add_argument("-n", dest="stats_only", action="store_true",
                    help="statistics only: no plot, no comparison")
    ap.add_argument("-q", dest="quiet", action="store_true",
                    help="no legend, no table header")
    ap.add_argument("-s", dest="separate", action="store_true",
                    help="one avg/median/stddev bar per data set")
    ap.add_argument("-w", dest="width", type=int, default=74, help="plot width (default 74)")
    ap.add_argument("--exact", action="store_true",
                    help="compute Student's t exactly instead of taking FreeBSD ministat's "
                         "3-decimal table (the last digits printed differ); -c then takes "
                         "any level between 0 and 100")
    ap.add_argument("files", nargs="*", metavar="FILE")
    args = ap.parse_args(argv)
    try:
        confidence = float(args.confidence)
    except ValueError:
        confidence = math.nan
    if args.exact:
        if not 0 < confidence < 100:
            ap.error("-c takes a level between 0 and 100 (with --exact)")
    elif confidence not in CONFIDENCES:
        ap.error("-c takes 80, 90, 95, 98, 99 or 99.5 (any level with --exact)")
    if args.column < 1:
        ap.error("-C takes a column number >= 1")
    if args.width < 2:
        ap.error("-w takes a width >= 2")
    if args.delimiters == "":
        print("ministat: Can't use empty delimiter string", file=sys.stderr)
        return 2
    files = args.files or ["-"]
    if len(files) > MAX_DATASETS:
        ap.error(f"at most {MAX_DATASETS} files")
    sets, names = [], []
    for name in files:
        try:
            if name == "-":
                vals = read_values(sys.stdin, args.column, args.delimiters, "<stdin>")
            else:
                with open(name, encoding="utf-8", errors="replace") as f:
                    vals = read_values(f, args.column, args.delimiters, name)
        except OSError as e:    # FreeBSD: err(1, "Cannot open %s")
            print(f"ministat: Cannot open {name}: {e.strerror}", file=sys.stderr)
            return 1
        except ValueError as e:
            print(f"ministat: {e}", file=sys.stderr)
            return 2
        if len(vals) < 3:
            print(f"ministat: Dataset {name} must contain at least 3 data points",
                  file=sys.stderr)
            return 2
        sets.append(vals)
        names.append("<stdin>" if name == "-" else name)
    sys.stdout.write(render(sets, names, confidence, args.width, args.separate,
                            args.stats_only, args.quiet, exact=args.exact))
    return 0


if __name__ == "__main__":
    sys.exit(main())
