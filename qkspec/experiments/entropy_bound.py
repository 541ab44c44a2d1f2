r"""The Eq. (9) curve against :math:`\nu` (paper Fig. 4).

Shapes: K = sequence lengths T, V = points on the :math:`\nu` grid.

Eq. (9) (`diagnostics.eq9_entropy`), printed as an attention-entropy lower
bound, is drawn with the maximum entropy :math:`\ln T`: it is
:math:`\ln(1+T) > \ln T` at :math:`\nu = 0` and stays above :math:`\ln T`
on :math:`[0, \nu^*(T)]`, which the table lists.
"""
# pylint: disable=invalid-name
from absl import logging
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import diagnostics
from qkspec.experiments import outputs
from qkspec.plots import style


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of an entropy_bound
  config."""
  outputs.require_positive(config, "nu_max")
  outputs.require_ints(config, {"num_nu": 2})
  seq_lens = config.seq_lens
  outputs.require(len(seq_lens) > 0
                  and all(isinstance(t, int) and t >= 2 for t in seq_lens),
                  "seq_lens", "must be non-empty integers >= 2", seq_lens)


def exceed_intervals(nu_V: np.ndarray, above_V: np.ndarray
                     ) -> list[tuple[float, float]]:
  """Closed nu intervals (grid resolution) where `above_V` holds."""
  step_V = np.diff(np.concatenate(([False], above_V, [False])).astype(int))
  starts, stops = np.flatnonzero(step_V == 1), np.flatnonzero(step_V == -1)
  return [(float(nu_V[a]), float(nu_V[b - 1])) for a, b in zip(starts, stops)]


def summary_rows(nu_V, bound_KxV, seq_lens) -> list[dict]:
  """Per T: Eq. (9) at nu = 0, its peak and where it exceeds ln T."""
  rows = []
  for t, bound_V in zip(seq_lens, bound_KxV):
    log_t = float(np.log(t))
    peak = int(np.argmax(bound_V))
    intervals = exceed_intervals(nu_V, bound_V > log_t)
    span = "; ".join(f"[{a:.3g}, {b:.3g}]" for a, b in intervals) or "none"
    rows.append(dict(
        seq_len=int(t), ln_T=log_t, bound_at_nu0=float(bound_V[0]),
        ln_1_plus_T=float(np.log1p(t)), peak_nu=float(nu_V[peak]),
        peak_bound=float(bound_V[peak]), peak_over_ln_T=float(bound_V[peak])
        / log_t, bound_exceeds_ln_T_on=span,
        note=("Eq. (9) > max entropy ln T there: not a valid lower bound"
              if intervals else "Eq. (9) <= ln T everywhere")))
  return rows


def plot(nu_V, bound_KxV, seq_lens, workdir):
  """Fig. 4: the Eq. (9) curve vs nu with ln T dashed, and curve / ln T."""
  fig, ((ax, ax_ratio),) = style.subplots(1, 2, (10, 3.8))
  for t, bound_V in zip(seq_lens, bound_KxV):
    line, = ax.plot(nu_V, bound_V, label=f"T = {t}")
    ax.axhline(np.log(t), ls="--", lw=1, color=line.get_color())
    ratio_V = bound_V / np.log(t)
    ax_ratio.plot(nu_V, ratio_V, color=line.get_color(), label=f"T = {t}")
    ax_ratio.fill_between(nu_V, 1.0, ratio_V, where=ratio_V > 1,
                          color=line.get_color(), alpha=0.15)
  ax.set(xlabel="nu = ||X X^T||_2 ||W_QK||_2", ylabel="Eq. (9) [nats]")
  ax.set_title("Eq. (9) as printed; dashed: ln T (max entropy)", fontsize=9)
  ax.legend(fontsize=8)
  ax_ratio.axhline(1.0, color="k", lw=1)
  ax_ratio.set(yscale="log", xlabel="nu", ylabel="Eq. (9) / ln T")
  ax_ratio.set_title("shaded: Eq. (9) exceeds ln T (impossible entropy)",
                     fontsize=9)
  fig.suptitle("The Eq. (9) curve, printed as an entropy lower bound (cf. "
               "paper Fig. 4)")
  return [style.save_figure(fig, workdir, "fig4_entropy_bound")]


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Draws Fig. 4 and writes the Eq. (9) curves and a per-T summary."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  nu_V = np.linspace(0.0, config.nu_max, config.num_nu)
  seq_lens = list(config.seq_lens)
  bound_KxV = np.stack([diagnostics.eq9_entropy(jnp.asarray(nu_V), t)
                        for t in seq_lens])                      # [K, V]
  rows = summary_rows(nu_V, bound_KxV, seq_lens)
  logging.info("Eq. (9) vs ln T:\n%s", outputs.format_table(rows))
  paths += plot(nu_V, bound_KxV, seq_lens, workdir)
  paths += outputs.write_table(rows, workdir, "entropy_bound_summary")
  curve_rows = [dict(seq_len=int(t), nu=float(nu), bound=float(b),
                     ln_T=float(np.log(t)), exceeds_ln_T=bool(b > np.log(t)))
                for t, bound_V in zip(seq_lens, bound_KxV)
                for nu, b in zip(nu_V, bound_V)]
  paths += outputs.write_table(curve_rows, workdir, "entropy_bound")
  outputs.log_outputs("entropy_bound", paths)
  return dict(nu=nu_V, bound=bound_KxV, summary=rows, paths=paths)
