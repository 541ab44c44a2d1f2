"""Planted inputs of the report's tests: summary rows, loaded runs,
members over training and Fig. 7's rho maps."""
import math

import numpy as np

SEED_LEVEL = {"scale": 0.27, "entropy": 2.8, "valid_ppl": 240.0}


def seed_row(kappa2, deltas, label="Fig. 6", kappa1=100.0,
             reading="mean_loss", seeds=None) -> dict:
  """A group whose per-seed values are `SEED_LEVEL` + seed offset +
  `deltas`."""
  deltas = {q: np.broadcast_to(deltas.get(q, 0.0), (len(seeds or [0]),))
            for q in SEED_LEVEL}
  seeds = list(seeds or [0])
  row = dict(figure=label.split()[1], label=label, reading=reading,
             kappa1=kappa1, kappa2=kappa2, target=1.0, seeds=seeds,
             n_seeds=len(seeds), final_step=50_000)
  for q, level in SEED_LEVEL.items():
    vals = [level * (1 + 0.01 * s) + d for s, d in zip(seeds, deltas[q])]
    row[f"{q}_values"] = vals
    row[f"{q}_mean"] = float(np.mean(vals))
    row[f"{q}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else np.nan
  return row


def summary_row(kappa2, scale, entropy, ppl, n_seeds=3, spread=0.01,
                kappa1=100.0) -> dict:
  """A Fig. 6 summary row (`run_cells.summarize_runs`' form) of the given
  means and one std `spread` (NaN for one seed)."""
  row = dict(figure="6", label="Fig. 6", reading="mean_loss",
             kappa1=kappa1, kappa2=kappa2, n_seeds=n_seeds)
  for name, mean in (("scale", scale), ("entropy", entropy),
                     ("valid_ppl", ppl)):
    row[f"{name}_mean"] = mean
    row[f"{name}_std"] = spread if n_seeds > 1 else math.nan
  return row


def loaded_run(run_dir, seeds, last_step, kappa2=(0.0, 1.0),
               label="Fig. 6") -> dict:
  """A loaded run (`run_cells.load_runs`' form) with synthetic finals."""
  members = [dict(seed=seed, kappa1=100.0, kappa2=k, target=1.0,
                  last_step=last_step,
                  metrics={"mean/entropy": (np.asarray([last_step]),
                                            np.asarray([seed + k]))})
             for seed in seeds for k in kappa2]
  return dict(run_dir=run_dir, figure=label.split()[1], smoke=False,
              label=label, reading="mean_loss", command="", members=members,
              final_step=last_step, num_steps=50_000)


def gap_member(kappa1, kappa2, ppl, entropy=2.8, steps=(0, 10, 20)) -> dict:
  """A member whose valid ppl over `steps` is `ppl`, its entropy flat."""
  return dict(kappa1=kappa1, kappa2=kappa2, target=1.0, seed=0,
              metrics={"valid/ppl": (list(steps), list(ppl)),
                       "mean/entropy": (list(steps), [entropy] * len(steps))})


# Fig. 7's rho maps: RHO_S logged steps x RHO_T key positions.
RHO_S, RHO_T = 40, 32
RHO_X = np.arange(RHO_T) / (RHO_T - 1)           # positions in [0, 1]


def rho_map(profile, noise=0.1, seed=1) -> np.ndarray:
  """rho_SxT: `profile` (over positions, or [S, T]) + noise, clipped."""
  rng = np.random.default_rng(seed)
  return np.clip(profile + noise * rng.standard_normal((RHO_S, RHO_T)), 0, 1)


def striped_profile() -> np.ndarray:
  """A couple of light and dark stripes on a uniform 0.4."""
  i = np.arange(RHO_T)
  return np.where(np.isin(i, (5, 11)), 0.8, np.where(i == 20, 0.1, 0.4))
