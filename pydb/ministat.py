"""ministat: is the difference between two sets of measurements real?

A Python port of FreeBSD's ``ministat(1)`` (usr.bin/ministat/ministat.c,
Poul-Henning Kamp; method in docs/experiments.md §2), as a library for the
crashtest and the GC test and as ``python -m pydb ministat``.

The method (Student's two-sample t test with pooled variance):

- per data set: N, Min, Max, Median (the mean of the two middle values for
  even N), Avg, Stddev (sample standard deviation, divisor N-1);
- pooled standard deviation ``s = sqrt(((n1-1) v1 + (n2-1) v2) / (n1+n2-2))``;
- half-width of the confidence interval of the difference of the means
  ``e = t(C, n1+n2-2) * s * sqrt(1/n1 + 1/n2)``, where ``t(C, df)`` is the
  two-sided critical value of Student's t distribution (the
  ``(1 + C/100)/2`` quantile) with ``df`` degrees of freedom;
- the difference ``d = avg2 - avg1`` is proven when ``|d| > e``; the
  percentage and its half-width are ``100 d / avg1`` and ``100 e / avg1``
  (relative to the first data set, as in the man page's example:
  ``2169.95 +/- 37.385`` and ``25.8893% +/- 0.446034%``).

FreeBSD takes t from a table (rows for 1..100 degrees of freedom, and the
normal distribution's values beyond).  Here t is computed exactly for any
degrees of freedom: the t distribution's CDF through the regularized
incomplete beta function, ``P(T <= t) = 1 - I_x(df/2, 1/2) / 2`` with
``x = df / (df + t^2)`` for t >= 0 (Abramowitz & Stegun 26.7.1 and 26.5.27),
evaluated with Lentz's continued fraction (Numerical Recipes, 2nd ed.,
§6.4, ``betacf``), and inverted by bisection to full double precision.
For df <= 100 it agrees with FreeBSD's table to the table's 3 decimals;
beyond, it is the exact value rather than the normal approximation.

The text output (``render``) follows ministat.c: the legend, the ASCII plot
(``x`` for the first set, ``+`` for the second, ``*`` where they overlap;
``|___|`` spans avg +/- stddev, ``M`` marks the median and ``A`` the
average), the table with ``%13.8g`` columns, and per later set either
"Difference at C% confidence" or "No difference proven at C% confidence".
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["CONFIDENCES", "Stats", "Verdict", "summarize", "compare", "student_t",
           "t_cdf", "betainc", "read_values", "render", "main"]

#: The confidence levels (percent) ministat offers (its ``-c``).
CONFIDENCES = (80.0, 90.0, 95.0, 98.0, 99.0, 99.5)

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
    """Stats of `values` (any iterable of numbers, at least one).

    Raises ValueError if it is empty."""
    v = sorted(float(x) for x in values)
    n = len(v)
    if n == 0:
        raise ValueError("no values")
    avg = math.fsum(v) / n
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0
    var = math.fsum((x - avg) ** 2 for x in v) / (n - 1) if n > 1 else math.nan
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
        """ministat's text for this verdict (one to four lines)."""
        if not self.significant:
            return [f"No difference proven at {self.confidence:.1f}% confidence"]
        return [f"Difference at {self.confidence:.1f}% confidence",
                f"\t{_g(self.diff)} +/- {_g(self.diff_ci)}",
                f"\t{_g(self.pct)}% +/- {_g(self.pct_ci)}%",
                f"\t(Student's t, pooled s = {_g(self.pooled_s)})"]

    def short(self) -> str:
        """One line: ``+12.3% +/- 4.5%`` when proven, else ``no diff``."""
        if not self.significant:
            return "no diff"
        return f"{self.pct:+.1f}% +/- {self.pct_ci:.1f}%"


def _g(x: float) -> str:
    return f"{x:g}"


def compare(a: Sequence[float] | Stats, b: Sequence[float] | Stats,
            confidence: float = 95.0) -> Verdict:
    """Is the mean of `b` different from the mean of `a`?  (ministat's
    Relative(): Student's t with pooled variance; the module docstring
    gives the formulas.)

    Args:
        a: the reference samples (or their :class:`Stats`).
        b: the samples compared with it.
        confidence: percent (0 < confidence < 100; ministat's -c levels
            are 80, 90, 95, 98, 99, 99.5).

    Returns:
        A :class:`Verdict`; percentages are relative to avg(a) (NaN when
        avg(a) is 0).

    Raises:
        ValueError: fewer than 3 values in all (no degree of freedom), or a
            bad confidence.
    """
    sa = a if isinstance(a, Stats) else summarize(a)
    sb = b if isinstance(b, Stats) else summarize(b)
    df = sa.n + sb.n - 2
    if df < 1:
        raise ValueError("comparing needs at least 3 values in all (n1 + n2 - 2 >= 1)")
    t = student_t(confidence, df)
    va = sa.var if sa.n > 1 else 0.0
    vb = sb.var if sb.n > 1 else 0.0
    pooled = math.sqrt(((sa.n - 1) * va + (sb.n - 1) * vb) / df)
    e = t * pooled * math.sqrt(1.0 / sa.n + 1.0 / sb.n)
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

    Raises ValueError naming the line for a field that is not a number."""
    out = []
    for lineno, line in enumerate(lines, 1):
        fields = [f for f in _split(line.rstrip("\r\n"), delimiters) if f]
        if len(fields) < column or any(f.startswith("#") for f in fields[:column]):
            continue
        try:
            x = float(fields[column - 1])
        except ValueError:
            raise ValueError(f"Invalid data on line {lineno} in {name}") from None
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
           stats_only: bool = False, quiet: bool = False) -> str:
    """ministat's whole output for `datasets` (1 to 7 lists of numbers,
    each with at least one value) named `names`.

    Args:
        confidence: percent for the comparisons (-c).
        width: plot width in characters, without its two borders (-w).
        separate: one avg/median/stddev bar line per data set (-s).
        stats_only: the table only: no plot, no comparison (-n).
        quiet: no legend and no table header (-q).

    Returns the text, ending with a newline.

    Raises ValueError for more than 7 data sets or an empty one."""
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
            out += compare(stats[0], stats[i], confidence).lines()
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    """``python -m pydb ministat [-c C] [-C column] [-d delimiters] [-n]
    [-q] [-s] [-w width] FILE...`` (``-`` or no file: standard input).
    Returns 0, or 2 for bad input (as ministat)."""
    ap = argparse.ArgumentParser(
        prog="pydb ministat",
        description="Statistics of one number per line, and Student's t comparison "
                    "of each file against the first (FreeBSD ministat).")
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
    ap.add_argument("files", nargs="*", metavar="FILE")
    args = ap.parse_args(argv)
    try:
        confidence = float(args.confidence)
    except ValueError:
        confidence = math.nan
    if confidence not in CONFIDENCES:
        ap.error("-c takes 80, 90, 95, 98, 99 or 99.5")
    if args.column < 1:
        ap.error("-C takes a column number >= 1")
    if args.width < 2:
        ap.error("-w takes a width >= 2")
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
        except (OSError, ValueError) as e:
            print(f"ministat: {e}", file=sys.stderr)
            return 2
        if len(vals) < 3:
            print(f"ministat: Dataset {name} must contain at least 3 data points",
                  file=sys.stderr)
            return 2
        sets.append(vals)
        names.append("<stdin>" if name == "-" else name)
    sys.stdout.write(render(sets, names, confidence, args.width, args.separate,
                            args.stats_only, args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
