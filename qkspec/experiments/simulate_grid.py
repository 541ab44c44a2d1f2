r"""Monte Carlo :math:`\rho_i` and entropy on a dense grid of W_QK spectra.

Shapes: C = covariances, M = eigen-means, S = eigen-stds, P = M * S grid
points, D = W_QK draws, N = walks, E = walks for the entropy, T = tokens.

Fig. 5 shows eight (eigen_mean, eigen_std) pairs; this fills the plane with
`qkspec.theory.grid_estimator`'s shared design. Per point and covariance:
mean :math:`\rho_i` (Definition 1) with its standard error, the entropy of
all T queries on the first E walks (Eq. (1)) and the exact-moment Gaussian
:math:`\rho_i` (Lemma 1), `points_per_chunk` points per compiled call.
"""
# pylint: disable=invalid-name
import functools
import time

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import grid_bases
from qkspec.theory import grid_estimator
from qkspec.theory import propagation
from qkspec.theory import softmax
from qkspec.experiments import chunked
from qkspec.experiments import inputs
from qkspec.experiments import outputs
from qkspec.plots import style


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of a simulate_grid config."""
  outputs.require_ints(config, {
      "dim": 1, "seq_len": 2, "num_sequences": 2, "entropy_sequences": 2,
      "num_draws": 2, "num_eigen_means": 1, "num_eigen_stds": 1,
      "points_per_chunk": 1})
  outputs.require_temperature(config)
  outputs.require(config.entropy_sequences <= config.num_sequences,
                  "entropy_sequences", "must be <= num_sequences",
                  config.entropy_sequences)
  means, stds = config.eigen_mean_range, config.eigen_std_range
  outputs.require(len(means) == 2 and means[0] <= means[1],
                  "eigen_mean_range", "must be (low, high) with low <= high",
                  means)
  outputs.require(len(stds) == 2 and 0 < stds[0] <= stds[1],
                  "eigen_std_range",
                  "must be (low, high) with 0 < low <= high", stds)
  inputs.require_covariances(config)
  outputs.require(len(config.positions) > 0
                  and all(1 <= i <= config.seq_len for i in config.positions),
                  "positions",
                  f"must be token positions in [1, {config.seq_len}]",
                  config.positions)


def grid_axes(config: ml_collections.ConfigDict) -> tuple[np.ndarray,
                                                           np.ndarray]:
  """Eigen-means (linear) [M] and eigen-stds (log-spaced) [S]."""
  means = np.linspace(*config.eigen_mean_range, config.num_eigen_means)
  stds = np.geomspace(*config.eigen_std_range, config.num_eigen_stds)
  return means.astype(np.float32), stds.astype(np.float32)


sample_bases = jax.jit(grid_bases.sample_bases, static_argnames=(
    "num_draws", "num_sequences", "entropy_sequences", "seq_len",
    "temperature"))


@functools.partial(jax.jit, static_argnames=("seq_len", "temperature"))
def chunk_stats(bases, means_P, stds_P, *, seq_len, temperature):
  """One chunk: means over draws, standard errors and the Gaussian rho."""
  stats = grid_estimator.grid_stats(bases, means_P, stds_P)
  trace, trace_sq = stats["trace"], stats["trace_sq"]           # [P, D, C]
  rho_exact = propagation.rho_gaussian(seq_len, trace, trace_sq, temperature,
                                       exact=True)
  return dict(rho=stats["rho_mean"], rho_se=stats["rho_se"],
              rho_exact=jnp.mean(rho_exact, axis=1),
              entropy=stats["entropy_mean"], entropy_se=stats["entropy_se"],
              r=jnp.mean(trace, axis=1) / temperature,
              eta=jnp.mean(jnp.sqrt(trace_sq), axis=1) / temperature)


def compute(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
  """The grid chunk by chunk: `rho`, `rho_se`, `rho_exact` [C, M, S, T],
  `entropy`, `entropy_se`, `r`, `eta` [C, M, S], the axes and timings."""
  means, stds = grid_axes(config)
  mean_P, std_P = (a.ravel() for a in np.meshgrid(means, stds,
                                                  indexing="ij"))
  chunk = config.points_per_chunk
  lam = softmax.temperature(config.temperature, config.dim)
  static = {k: config[k] for k in ("num_draws", "num_sequences",
                                   "entropy_sequences", "seq_len")}
  static["temperature"] = lam
  args = (inputs.shared_key(jax.random.key(config.seed)),
          inputs.covariances(config))
  chunk_args = (jnp.zeros(chunk), jnp.zeros(chunk))
  start = time.perf_counter()          # jit caches what lower().compile() built
  sample_bases.lower(*args, **static).compile()
  bases = jax.eval_shape(functools.partial(sample_bases, **static), *args)
  chunk_stats.lower(bases, *chunk_args, seq_len=config.seq_len,
                    temperature=lam).compile()
  compile_s = time.perf_counter() - start
  logging.info("simulate_grid: compiled in %.1f s; %d points in chunks of "
               "%d", compile_s, mean_P.size, chunk)
  start = time.perf_counter()
  bases = jax.block_until_ready(sample_bases(*args, **static))
  out = chunked.map_chunks(
      functools.partial(chunk_stats, bases, seq_len=config.seq_len,
                        temperature=lam),
      (mean_P, std_P), chunk, "simulate_grid")                # [P, C, ...]
  run_s = time.perf_counter() - start
  shape = (means.size, stds.size)
  out = {name: np.moveaxis(a.reshape(shape + a.shape[1:]), 2, 0)
         for name, a in out.items()}                          # [C, M, S, ...]
  out.update(eigen_means=means, eigen_stds=stds, compile_s=compile_s,
             run_s=run_s)
  return out


def summaries(out: dict, config: ml_collections.ConfigDict) -> dict:
  """[C, M, S] summaries: `width` #{i: rho_i > 1/2}, `focus` argmax_i
  rho_i (1-based), `peak`, `err_exact` (against the exact Gaussian) and
  `se_max`, maxima over i."""
  rho = out["rho"]
  return dict(width=np.sum(rho > 0.5, axis=-1),
              focus=np.argmax(rho, axis=-1) + 1,
              peak=rho.max(-1),
              err_exact=np.abs(rho - out["rho_exact"]).max(-1),
              se_max=out["rho_se"].max(-1))


def table(out, summary, config):
  """One row per (covariance, eigen_mean, eigen_std)."""
  rows = []
  for c, cov in enumerate(config.covariances):
    for m, eigen_mean in enumerate(out["eigen_means"]):
      for s, eigen_std in enumerate(out["eigen_stds"]):
        rows.append(dict(
            covariance=cov, eigen_mean=float(eigen_mean),
            eigen_std=float(eigen_std),
            r=float(out["r"][c, m, s]), eta=float(out["eta"][c, m, s]),
            **{k: v[c, m, s].item() for k, v in summary.items()},
            entropy=float(out["entropy"][c, m, s]),
            entropy_se=float(out["entropy_se"][c, m, s])))
  return rows


def _heatmap(fig, ax, out, values, title, r_lines, **kwargs):
  """values [M, S] as an image: eigen_mean across, log10 eigen_std up."""
  means, log_stds = out["eigen_means"], np.log10(out["eigen_stds"])
  half_m = (means[-1] - means[0]) / max(len(means) - 1, 1) / 2
  half_s = (log_stds[-1] - log_stds[0]) / max(len(log_stds) - 1, 1) / 2
  image = ax.imshow(values.T, origin="lower", aspect="auto",
                    interpolation="nearest",
                    extent=(means[0] - half_m, means[-1] + half_m,
                            log_stds[0] - half_s, log_stds[-1] + half_s),
                    **kwargs)
  decades = np.arange(np.ceil(log_stds[0]), np.floor(log_stds[-1]) + 1)
  ax.set_yticks(decades, [f"1e{int(k)}" for k in decades])
  for mean in r_lines:           # Lemma 2: r = tr(W)/lambda = +-2
    ax.axvline(mean, color="w", ls="--", lw=0.8)
  ax.set_title(title, fontsize=9)
  ax.set(xlabel="eigen_mean", ylabel="eigen_std (log)")
  fig.colorbar(image, ax=ax)


def r_edges(config: ml_collections.ConfigDict) -> list[list[float]]:
  """Per covariance, the eigen_means within `eigen_mean_range` on Lemma 2's
  boundary E r = tr(Sigma) eigen_mean / lambda = -2 and +2."""
  lam = softmax.temperature(config.temperature, config.dim)
  lo, hi = config.eigen_mean_range
  edges = []
  for cov in np.asarray(inputs.covariances(config)):
    mean = float(2 * lam / np.trace(cov))
    edges.append([m for m in (-mean, mean) if lo <= m <= hi])
  return edges


def plot(out, summary, config, workdir):
  """Two figures: localization summaries and rho_i at chosen positions."""
  t = config.seq_len
  lam = softmax.temperature(config.temperature, config.dim)
  r_lines = r_edges(config)
  localization = [
      (summary["width"], f"#positions with rho_i > 1/2 (of {t})",
       dict(cmap="viridis", vmin=0, vmax=t)),
      (summary["focus"], "argmax_i rho_i", dict(cmap="plasma", vmin=1,
                                                vmax=t)),
      (summary["peak"], "max_i rho_i", dict(cmap="magma", vmin=0, vmax=1)),
      (out["entropy"], f"attention entropy [nats] (ln T = {np.log(t):.2f})",
       dict(cmap="cividis", vmin=0, vmax=np.log(t)))]
  positions = [(out["rho"][..., i - 1], f"rho_{i} (i/T = {i / t:.2f})",
                dict(cmap="magma", vmin=0, vmax=1)) for i in config.positions]
  figures = {
      "fig_grid_localization": (
          localization, 4.2, 3.4,
          f"Localization over the (eigen_mean, eigen_std) grid: "
          f"{config.num_draws} W_QK draws x {config.num_sequences} walks "
          f"(entropy: {config.entropy_sequences} walks), T={t}, "
          f"d={config.dim}, lambda={lam:g}; dashed: E r = +-2 (Lemma 2)"),
      "fig_grid_rho": (positions, 3.6, 3.2, "Signal propagation probability "
                       "rho_i (Definition 1) per token position")}
  num_c, paths = len(config.covariances), []
  for name, (panels, width, height, title) in figures.items():
    fig, axes = style.subplots(num_c, len(panels), (
        width * len(panels), height * num_c), layout=None)
    for c, cov in enumerate(config.covariances):
      for ax, (values, label, kwargs) in zip(axes[c], panels):
        _heatmap(fig, ax, out, values[c], f"{cov}: {label}", r_lines[c],
                 **kwargs)
    fig.suptitle(title)
    fig.subplots_adjust(wspace=0.5, hspace=0.45)
    paths.append(style.save_figure(fig, workdir, name))
  return paths


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the grid, writes figures, `simulate_grid` table, arrays and config."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  out = compute(config)
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
