r"""Monte Carlo :math:`\rho_i` and attention entropy on a dense eigen-(mean, scale) grid.

Shapes: C = covariances, M = eigen-means, S = eigen-scales, P = M * S grid
points, D = W_QK draws, N = walks, E = walks used for the entropy,
T = tokens.

Fig. 5 of the paper shows eight (mean, scale) pairs; this experiment fills
the plane, using the shared (common random numbers) design of
`qkspec.theory.grid_estimator`: one set of N walks and D spectra (B_k, z_k) for every
grid point, so each point is an affine combination of precomputed bases.
Per point and covariance it reports the mean over draws and walks of
:math:`\rho_i` (Definition 1) with its crossed-design standard error, the
attention entropy of all T queries on the first E walks (Eq. (1),
bidirectional; E < N because the T x T softmax per walk dominates the cost),
and the exact-moment Gaussian :math:`\rho_i` (Lemma 1) of the same W_QK
draws. The grid is evaluated in chunks of `points_per_chunk` points (one
jit-compiled function, compiled once) with a progress line per chunk.
"""
# pylint: disable=invalid-name
import functools
import time

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import propagation
from qkspec.theory import grid_estimator
from qkspec.experiments import outputs
from qkspec.experiments import simulate_rho


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first bad field of a simulate_grid config."""
  for field, low in (("dim", 1), ("seq_len", 2), ("num_sequences", 2),
                     ("entropy_sequences", 2), ("num_draws", 2),
                     ("num_means", 1), ("num_scales", 1),
                     ("points_per_chunk", 1)):
    value = config[field]
    outputs.require(isinstance(value, int) and value >= low, field,
               f"must be an integer >= {low}", value)
  outputs.require(config.entropy_sequences <= config.num_sequences,
             "entropy_sequences", "must be <= num_sequences",
             config.entropy_sequences)
  outputs.require(len(config.mean_range) == 2
             and config.mean_range[0] <= config.mean_range[1], "mean_range",
             "must be (low, high) with low <= high", config.mean_range)
  outputs.require(len(config.scale_range) == 2
             and 0 < config.scale_range[0] <= config.scale_range[1],
             "scale_range", "must be (low, high) with 0 < low <= high",
             config.scale_range)
  outputs.require(len(config.covariances) > 0
             and set(config.covariances) <= set(simulate_rho.COVARIANCES),
             "covariances", f"must be a non-empty subset of "
             f"{simulate_rho.COVARIANCES}", config.covariances)
  outputs.require(config.aniso_half_width > 0, "aniso_half_width", "must be > 0",
             config.aniso_half_width)
  outputs.require(len(config.positions) > 0
             and all(1 <= i <= config.seq_len for i in config.positions),
             "positions", f"must be token positions in [1, {config.seq_len}]",
             config.positions)


def grid_axes(config: ml_collections.ConfigDict) -> tuple[np.ndarray,
                                                           np.ndarray]:
  """Eigen-means (linear) [M] and eigen-scales (log-spaced) [S]."""
  means = np.linspace(*config.mean_range, config.num_means)
  scales = np.geomspace(*config.scale_range, config.num_scales)
  return means.astype(np.float32), scales.astype(np.float32)


sample_bases = jax.jit(grid_estimator.sample_bases, static_argnames=(
    "num_draws", "num_sequences", "entropy_sequences", "seq_len",
    "temperature"))


@functools.partial(jax.jit, static_argnames=("seq_len", "temperature"))
def chunk_stats(bases, means_P, scales_P, *, seq_len, temperature):
  """One chunk: means over draws, standard errors and the Gaussian rho."""
  stats = grid_estimator.grid_stats(bases, means_P, scales_P)
  trace, trace_sq = stats["trace"], stats["trace_sq"]           # [P, D, C]
  rho_exact = propagation.rho_gaussian(seq_len, trace, trace_sq, temperature,
                                       exact=True)
  return dict(rho=stats["rho_mean"], rho_se=stats["rho_se"],
              rho_exact=jnp.mean(rho_exact, axis=1),
              entropy=stats["entropy_mean"], entropy_se=stats["entropy_se"],
              r=jnp.mean(trace, axis=1) / temperature,
              eta=jnp.mean(jnp.sqrt(trace_sq), axis=1) / temperature)


def compute(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
  """Evaluates the grid chunk by chunk; numpy arrays with axes [C, M, S, ...].

  Returns:
    `rho`, `rho_se`, `rho_exact` [C, M, S, T]; `entropy`, `entropy_se`, `r`,
    `eta` [C, M, S]; `means` [M], `scales` [S]; `compile_s`, `run_s`.
  """
  means, scales = grid_axes(config)
  mean_P, scale_P = (a.ravel() for a in np.meshgrid(means, scales,
                                                    indexing="ij"))
  num_p, chunk = mean_P.size, config.points_per_chunk
  num_chunks = -(-num_p // chunk)
  pad = num_chunks * chunk - num_p            # repeat the last point
  mean_P = np.concatenate([mean_P, np.repeat(mean_P[-1:], pad)])
  scale_P = np.concatenate([scale_P, np.repeat(scale_P[-1:], pad)])
  lam = float(np.sqrt(config.dim))
  static = dict(num_draws=config.num_draws,
                num_sequences=config.num_sequences,
                entropy_sequences=config.entropy_sequences,
                seq_len=config.seq_len, temperature=lam)
  args = (simulate_rho.shared_key(jax.random.key(config.seed)),
          simulate_rho.covariances(config))
  chunk_args = (jnp.zeros(chunk), jnp.zeros(chunk))
  start = time.perf_counter()          # jit caches what lower().compile() built
  sample_bases.lower(*args, **static).compile()
  bases = jax.eval_shape(functools.partial(sample_bases, **static), *args)
  chunk_stats.lower(bases, *chunk_args, seq_len=config.seq_len,
                    temperature=lam).compile()
  compile_s = time.perf_counter() - start
  logging.info("simulate_grid: compiled in %.1f s; %d points in %d chunks of "
               "%d", compile_s, num_p, num_chunks, chunk)
  start = time.perf_counter()
  bases = jax.block_until_ready(sample_bases(*args, **static))
  parts = []
  for i in range(num_chunks):
    sl = slice(i * chunk, (i + 1) * chunk)
    parts.append(jax.tree.map(np.asarray, chunk_stats(
        bases, jnp.asarray(mean_P[sl]), jnp.asarray(scale_P[sl]),
        seq_len=config.seq_len, temperature=lam)))
    elapsed = time.perf_counter() - start
    logging.info("simulate_grid: chunk %d/%d (%3.0f%%), %.1f s elapsed, "
                 "ETA %.1f s", i + 1, num_chunks, 100 * (i + 1) / num_chunks,
                 elapsed, elapsed / (i + 1) * (num_chunks - i - 1))
  run_s = time.perf_counter() - start
  num_m, num_s = means.size, scales.size
  out = {}
  for name in parts[0]:
    a = np.concatenate([p[name] for p in parts])[:num_p]      # [P, C, ...]
    a = a.reshape((num_m, num_s) + a.shape[1:])
    out[name] = np.moveaxis(a, 2, 0)                          # [C, M, S, ...]
  out.update(means=means, scales=scales, compile_s=compile_s, run_s=run_s)
  return out


def summaries(out: dict, config: ml_collections.ConfigDict) -> dict:
  """Localization summaries per (covariance, mean, scale), arrays [C, M, S].

  `width`: number of positions with rho_i > 1/2; `focus`: argmax_i rho_i
  (1-based); `peak`: max_i rho_i; `err_exact`: max_i |rho_i - exact-moment
  Gaussian rho_i|; `se_max`: max_i standard error.
  """
  rho = out["rho"]
  return dict(width=np.sum(rho > 0.5, axis=-1),
              focus=np.argmax(rho, axis=-1) + 1,
              peak=rho.max(-1),
              err_exact=np.abs(rho - out["rho_exact"]).max(-1),
              se_max=out["rho_se"].max(-1))


def table(out, summary, config):
  """One row per (covariance, mean, scale)."""
  rows = []
  for c, cov in enumerate(config.covariances):
    for m, mean in enumerate(out["means"]):
      for s, scale in enumerate(out["scales"]):
        rows.append(dict(
            covariance=cov, mean=float(mean), scale=float(scale),
            r=float(out["r"][c, m, s]), eta=float(out["eta"][c, m, s]),
            **{k: v[c, m, s].item() for k, v in summary.items()},
            entropy=float(out["entropy"][c, m, s]),
            entropy_se=float(out["entropy_se"][c, m, s])))
  return rows


def _heatmap(fig, ax, out, values, title, r_lines, **kwargs):
  """values [M, S] as an image: eigen-mean across, log10 eigen-scale up."""
  means, log_scales = out["means"], np.log10(out["scales"])
  half_m = (means[-1] - means[0]) / max(len(means) - 1, 1) / 2
  half_s = (log_scales[-1] - log_scales[0]) / max(len(log_scales) - 1, 1) / 2
  image = ax.imshow(values.T, origin="lower", aspect="auto",
                    interpolation="nearest",
                    extent=(means[0] - half_m, means[-1] + half_m,
                            log_scales[0] - half_s, log_scales[-1] + half_s),
                    **kwargs)
  decades = np.arange(np.ceil(log_scales[0]), np.floor(log_scales[-1]) + 1)
  ax.set_yticks(decades, [f"1e{int(k)}" for k in decades])
  for mean in r_lines:           # Lemma 2: r = tr(W)/lambda = +-2
    ax.axvline(mean, color="w", ls="--", lw=0.8)
  ax.set_title(title, fontsize=9)
  fig.colorbar(image, ax=ax)


def _r_lines(config):
  """Per covariance, the eigen-means where E r = mean tr(Sigma)/lambda = +-2."""
  lines = []
  for cov in np.asarray(simulate_rho.covariances(config)):
    mean = 2 * np.sqrt(config.dim) / np.trace(cov)     # Lemma 2 regimes
    lo, hi = config.mean_range
    lines.append([m for m in (-mean, mean) if lo <= m <= hi])
  return lines


def plot(out, summary, config, workdir):
  """Two figures: localization summaries and rho_i at chosen positions."""
  plt = outputs.pyplot()
  num_c = len(config.covariances)
  t = config.seq_len
  r_lines = _r_lines(config)
  panels = [("width", f"#positions with rho_i > 1/2 (of {t})",
             dict(cmap="viridis", vmin=0, vmax=t)),
            ("focus", "argmax_i rho_i", dict(cmap="plasma", vmin=1, vmax=t)),
            ("peak", "max_i rho_i", dict(cmap="magma", vmin=0, vmax=1)),
            ("entropy", f"attention entropy [nats] (ln T = {np.log(t):.2f})",
             dict(cmap="cividis", vmin=0, vmax=np.log(t)))]
  fig, axes = plt.subplots(num_c, len(panels), squeeze=False,
                           figsize=(4.2 * len(panels), 3.4 * num_c))
  for c, cov in enumerate(config.covariances):
    for ax, (name, title, kwargs) in zip(axes[c], panels):
      values = out["entropy"][c] if name == "entropy" else summary[name][c]
      _heatmap(fig, ax, out, values, f"{cov}: {title}", r_lines[c],
               **kwargs)
      ax.set(xlabel="eigen-mean", ylabel="eigen-scale (log)")
  fig.suptitle(f"Localization over the eigen-(mean, scale) grid: "
               f"{config.num_draws} W_QK draws x {config.num_sequences} "
               f"walks (entropy: {config.entropy_sequences} walks), T={t}, "
               f"d={config.dim}; dashed: E r = +-2 (Lemma 2)")
  fig.subplots_adjust(wspace=0.5, hspace=0.45)
  paths = [outputs.save_figure(fig, workdir, "fig_grid_localization")]
  pos = list(config.positions)
  fig, axes = plt.subplots(num_c, len(pos), squeeze=False,
                           figsize=(3.6 * len(pos), 3.2 * num_c))
  for c, cov in enumerate(config.covariances):
    for ax, i in zip(axes[c], pos):
      _heatmap(fig, ax, out, out["rho"][c, ..., i - 1],
               f"{cov}: rho_{i} (i/T = {i / t:.2f})", r_lines[c],
               cmap="magma", vmin=0, vmax=1)
      ax.set(xlabel="eigen-mean", ylabel="eigen-scale (log)")
  fig.suptitle("Signal propagation probability rho_i (Definition 1) per "
               "token position")
  fig.subplots_adjust(wspace=0.5, hspace=0.45)
  paths.append(outputs.save_figure(fig, workdir, "fig_grid_rho"))
  return paths


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the grid, writes figures, `simulate_grid` table, arrays and config."""
  validate(config)
  workdir = outputs.make_workdir(workdir)
  paths = [outputs.write_config(config, workdir)]
  logging.info("simulate_grid: %d covariances x %d means x %d scales x %d "
               "draws, N=%d walks (entropy: %d), T=%d, d=%d",
               len(config.covariances), config.num_means, config.num_scales,
               config.num_draws, config.num_sequences,
               config.entropy_sequences, config.seq_len, config.dim)
  out = compute(config)
  logging.info("simulate_grid: compile %.1f s, run %.1f s", out["compile_s"],
               out["run_s"])
  summary = summaries(out, config)
  rows = table(out, summary, config)
  for c, cov in enumerate(config.covariances):
    logging.info("%s: max rho_i SE %.3f, max entropy SE %.3f, max |MC - "
                 "exact Gaussian| %.3f", cov, summary["se_max"][c].max(),
                 out["entropy_se"][c].max(), summary["err_exact"][c].max())
  paths += plot(out, summary, config, workdir)
  paths += outputs.write_table(rows, workdir, "simulate_grid")
  arrays = workdir / "simulate_grid.npz"
  np.savez_compressed(arrays, **{k: v for k, v in out.items()
                                 if isinstance(v, np.ndarray)})
  paths.append(arrays)
  outputs.log_outputs("simulate_grid", paths)
  return dict(out=out, summary=summary, rows=rows, paths=paths)
