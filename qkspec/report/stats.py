r"""The statistics behind the report's verdicts (paper Sec. 7, Figs. 6-12).

Each claim is a difference d = alt - base between two members of one seed
(same initialisation and batches), read through three rules: below the
minimal effect (`min_effect`) it is "no practical effect"; with two seeds
or more a paired t-test (`paired_test`) decides; with one seed |d| must
exceed every floor the records measure (`one_seed_floor`, `floors`), and
the verdict is only "indicative (one seed)"; "undetermined" where |d|
clears some of them but not all. `time_average` reads two curves
over training, `slope` and `bonferroni` a metric as a curve over kappa2;
`sign_test` and `holm` pool the cells of a claim (`pooled`).
"""
import math

import numpy as np
from scipy import stats

LEVEL = 0.95
# quantity -> (kind, size): |diff| below it is "no practical effect";
# "relative" is a fraction of the larger of the two group means.
MIN_EFFECT = {"scale": ("relative", 0.10), "entropy": ("absolute", 0.01),
              "valid_ppl": ("relative", 0.001),
              "test_ppl": ("relative", 0.001)}
WARMUP = 0.1     # the first 10% of the planned steps are left out

REPRODUCED, REVERSED = "reproduced", "reversed"
NOT_SIGNIFICANT, NO_EFFECT = "not significant", "no practical effect"
INDICATIVE = "indicative (one seed)"
UNDETERMINED = "undetermined"
# a one-seed difference against its floors (`floors.one_seed`)
SIGNIFICANT, BETWEEN, BELOW = "beyond every floor", "between", "below"


def t_critical(dof: int, level: float = LEVEL) -> float:
  """The two-sided critical value of Student's T: P(|T| <= t) = `level`."""
  return float(stats.t.ppf((1 + level) / 2, dof))


def paired_test(d, level: float = LEVEL) -> dict:
  """Paired t-test of per-seed differences `d` (n >= 2): mean, std, t,
  t_crit, the `level` interval and whether it excludes 0."""
  d = np.asarray(d, np.float64)
  n = len(d)
  if n < 2:
    raise ValueError(f"a paired test needs two seeds or more, got {n}.")
  mean, std = float(d.mean()), float(d.std(ddof=1))
  crit = t_critical(n - 1, level)
  se = std / math.sqrt(n)
  if se > 0:
    t = mean / se
  else:
    t = math.copysign(math.inf, mean) if mean else 0.0
  half = crit * se
  return dict(n=n, mean=mean, std=std, t=t, t_crit=crit,
              ci=(mean - half, mean + half), p=t_p_value(t, n - 1),
              significant=bool(abs(mean) > half))


def min_effect(quantity: str, m0: float, m1: float) -> float:
  """The least |difference| of practical size (`MIN_EFFECT`) between
  group means `m0` and `m1` (0 for other quantities)."""
  kind, size = MIN_EFFECT.get(quantity, ("absolute", 0.0))
  return size * (max(abs(m0), abs(m1)) if kind == "relative" else 1.0)


def t_p_value(t: float, dof: int) -> float:
  """Two-sided p-value of Student's T with `dof` degrees of freedom."""
  return float(2 * stats.t.sf(abs(t), dof))


def one_seed_floor(rel: float, dof: int, m0: float, m1: float,
                   level: float = LEVEL) -> float:
  """t_dof (at `level`) x `rel` (a relative noise measured with `dof`
  degrees of freedom, `floors`) x the larger of `m0`, `m1`."""
  return t_critical(dof, level) * rel * max(abs(m0), abs(m1))


def sign_test(k: int, n: int) -> float:
  """Exact two-sided binomial p-value of `k` of `n` signs one way, each
  way equally likely under the null (n = 0: 1)."""
  return float(stats.binomtest(k, n, 0.5).pvalue) if n else 1.0


def holm(p_values) -> np.ndarray:
  """Holm's step-down adjusted p-values of a family (in its order):
  sorted p_(1) <= ... <= p_(m), adjusted max_{j <= i} min(1, (m - j + 1)
  p_(j)); one holds at family-wise `LEVEL` where adjusted < 1 - LEVEL.

  References:
    Holm, A simple sequentially rejective multiple test procedure,
    Scand. J. Statist. 6 (1979).
  """
  p = np.asarray(p_values, np.float64)
  order = np.argsort(p, kind="stable")
  m = len(p)
  steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
  out = np.empty(m)
  out[order] = np.maximum.accumulate(steps)
  return out


def decide(diff: float, sign: int, minimal: float, outcome: str,
           one_seed: bool) -> str:
  """The verdict on `diff` of expected `sign`: `NO_EFFECT` below
  `minimal`, else by the test's `outcome` (`SIGNIFICANT`, `BETWEEN` its
  floors: `UNDETERMINED`, `BELOW`); `INDICATIVE` with one seed."""
  if not np.isfinite(diff):
    return NOT_SIGNIFICANT
  if abs(diff) < minimal:
    return NO_EFFECT
  if outcome == BETWEEN:
    return UNDETERMINED
  if outcome != SIGNIFICANT:
    return NOT_SIGNIFICANT
  if one_seed:
    return INDICATIVE
  return REPRODUCED if np.sign(diff) == sign else REVERSED


def step_differences(base, alt, start: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
  """(steps, alt - base) at the steps >= `start` both (steps, values)
  curves logged."""
  (s0, v0), (s1, v1) = base, alt
  at0 = {int(s): float(v) for s, v in zip(s0, v0) if s >= start}
  pairs = [(int(s), float(v) - at0[int(s)]) for s, v in zip(s1, v1)
           if int(s) in at0]
  steps, d = zip(*pairs) if pairs else ((), ())
  return np.asarray(steps, int), np.asarray(d, np.float64)


def time_average(base, alt, start: int) -> tuple[float, float, int]:
  """(mean of alt - base, fraction of positive alt - base, evaluations)
  over the steps >= `start` that both (steps, values) curves logged."""
  d = step_differences(base, alt, start)[1]
  d = d[np.isfinite(d)]
  if not d.size:
    return math.nan, math.nan, 0
  return float(d.mean()), float(np.mean(d > 0)), int(d.size)


def bonferroni(m: int, level: float = LEVEL) -> float:
  """Each of `m` comparisons' level for a family-wise 1 - `level`."""
  return 1 - (1 - level) / m


def slope(x, y) -> dict:
  """Least-squares slope of `y` on `x` and its 95% interval from the
  scatter about the line (None below 3 points)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  xc = x - x.mean()
  b = float(np.sum(xc * (y - y.mean())) / np.sum(xc * xc))
  if len(x) < 3:
    return dict(slope=b, ci=None, p=None)
  resid = y - y.mean() - b * xc
  se = math.sqrt(np.sum(resid ** 2) / (len(x) - 2) / np.sum(xc * xc))
  half = t_critical(len(x) - 2) * se
  t = b / se if se > 0 else (math.copysign(math.inf, b) if b else 0.0)
  return dict(slope=b, ci=(b - half, b + half), p=t_p_value(t, len(x) - 2))


def span(xs, fmt: str = ".2g") -> str:
  """"lo to hi" of the values `xs`, each formatted by `fmt`; "lo" alone
  where both print alike."""
  lo, hi = format(min(xs), fmt), format(max(xs), fmt)
  return lo if lo == hi else f"{lo} to {hi}"
