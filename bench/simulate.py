r"""Times qkspec's Fig. 5 sweep against a straightforward NumPy implementation.

  python bench/simulate.py            # the full configs/simulate_rho.py grid
  python bench/simulate.py --quick    # 3 pairs x 3 draws, smoke-sized grid

Both estimate the same quantities for every (covariance, pair): rho_i of the
last query (Definition 1), the attention entropy of the full softmax over
all T queries, and the three Gaussian approximations of Lemma 1, averaged
over D W_QK draws (W_QK = B diag(w) B^T) and N random walks.

* NumPy reference: the paper's procedure read conservatively, vectorised
  over walks: every (covariance, pair, draw) samples its own W_QK and N
  fresh walks (numpy.random), forms X W_QK X^T and the softmax.
* qkspec (config.design="shared", the default): common random numbers
  (`qkspec.theory.grid_estimator`): one set of walks and D spectra shared
  by every pair, logits affine in (eigen_mean, eigen_std); one jit-compiled
  computation. Also timed
  once: qkspec's jit-compiled fresh design (`simulate_rho.sweep`).

Compile time is reported separately; run times are the best of `--repeats`
runs (median in brackets). The designs use different random numbers, so the
checks are statistical: the standard errors of both (crossed-design SE for
qkspec, std over the independent draws / sqrt(D) for NumPy), the largest
|difference| / combined SE between the two estimates, and each against the
exact-moment Gaussian rho_i of its own draws. Sharing walks across draws
makes qkspec's errors larger at the same N and D, so the bench also prints
the speed-up at equal precision, (time x SE^2) of NumPy over qkspec. The
last line times the 64 x 64 grid of configs/simulate_grid.py (chunked;
compile separately).

OpenBLAS note: on a machine whose cores are busy with other work, NumPy's
multi-threaded OpenBLAS can be very slow on small LAPACK calls (the 128 x 128
QR of the Haar sampler); `OPENBLAS_NUM_THREADS=1` avoids that. Report which
setting was used.
"""
# pylint: disable=invalid-name
import os
import pathlib
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from qkspec.config import args as config_args
from qkspec.experiments import inputs
from qkspec.experiments import simulate_grid
from qkspec.experiments import simulate_rho
from qkspec.theory import softmax

_QUICK = flags.DEFINE_bool("quick", False, "3 pairs x 3 draws instead of the "
                           "full grid.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs of each side.")
_CELLS = flags.DEFINE_integer("cells_per_batch", None, "Override of "
                              "config.cells_per_batch (fresh design).")
_FRESH = flags.DEFINE_bool("fresh", True, "Also time qkspec's fresh design "
                           "once (compile + run).")
_GRID = flags.DEFINE_bool("grid", True, "Also time configs/simulate_grid.py "
                          "(smoke-sized with --quick).")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_config(name, arg=None):
  return config_args.load_config_file(ROOT / "configs" / f"{name}.py", arg)


def rho_config(quick):
  config = load_config("simulate_rho")
  if quick:
    config.pairs = config.pairs[:3]
    config.regimes = config.regimes[:3]
    config.num_draws = 3
  if _CELLS.value is not None:
    config.cells_per_batch = _CELLS.value
  return config


def numpy_gaussian_rho(t, trace, trace_sq, lam):
  """Lemma 1 Gaussian rho_i: printed, corrected and exact-moment versions."""
  i = np.arange(1, t + 1)
  theta = i / t
  tr1, tr2 = trace / lam, trace_sq / lam**2
  a_g = (i - (t + 1) / 2) / t
  t_a_g_a = (i - 2 * (i * t - i * (i - 1) / 2) / t
             + (t + 1) * (2 * t + 1) / (6 * t)) / t
  moments = {
      "paper": ((theta - 0.5) * tr1, (2 * theta**2 + 7 / 12) * tr2),
      "corrected": ((theta - 0.5) * tr1,
                    (2 * theta**2 - 2 * theta + 7 / 12) * tr2),
      "exact": (1 / t + a_g * tr1, (a_g**2 + t_a_g_a) * tr2)}
  return {name: 0.5 * (special.erf((1 - mu) / np.sqrt(2 * v))
                       + special.erf(mu / np.sqrt(2 * v)))
          for name, (mu, v) in moments.items()}


def numpy_sweep(config, covs):
  """The paper's procedure, looped: per covariance, pair and W_QK draw."""
  rng = np.random.default_rng(config.seed)
  d, n, t = config.dim, config.num_sequences, config.seq_len
  lam = softmax.temperature(config.temperature, d)
  rho = np.zeros((len(covs), len(config.pairs), config.num_draws, t))
  entropy = np.zeros(rho.shape[:3])
  gauss = {k: np.zeros_like(rho) for k in simulate_rho.GAUSSIAN}
  for c, cov in enumerate(covs):
    evals, evecs = np.linalg.eigh(cov)
    sqrt_cov = (evecs * np.sqrt(np.clip(evals, 0, None))) @ evecs.T
    for p, (eigen_mean, eigen_std) in enumerate(config.pairs):
      for k in range(config.num_draws):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        basis = q * np.sign(np.diag(r))
        eig = eigen_mean + eigen_std * rng.standard_normal(d)
        w = ((basis * eig) @ basis.T).astype(np.float32)
        eps = rng.standard_normal((n, t, d), dtype=np.float32) @ sqrt_cov
        x = np.cumsum(eps, axis=1)
        logits = (x @ w) @ x.transpose(0, 2, 1) / lam
        omega = logits[:, -1, :]                   # query = last token
        u = (omega - omega.mean(-1, keepdims=True)) / t + 1 / t
        rho[c, p, k] = ((u >= 0) & (u <= 1)).mean(0)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        entropy[c, p, k] = -np.sum(special.xlogy(probs, probs), -1).mean()
        w_sigma = w @ cov
        for name, g in numpy_gaussian_rho(
            t, np.trace(w_sigma), np.sum(w_sigma * w_sigma.T), lam).items():
          gauss[name][c, p, k] = g
  return rho, entropy, gauss


def _best(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    times.append(time.perf_counter() - start)
  return result, min(times), statistics.median(times)


def _timed_compile(fn, *args, **static):
  start = time.perf_counter()
  compiled = fn.lower(*args, **static).compile()
  return compiled, time.perf_counter() - start


def _agreement(a_mean, a_se, b_mean, b_se):
  """|a - b| / sqrt(se_a^2 + se_b^2) over entries where both SEs are > 0.

  Returns (max z, number with z > 3, number compared, number where one SE
  is 0 but the estimates differ: an event never (or always) seen in one
  sample, whose plug-in SE of 0 is no uncertainty estimate).
  """
  both = (a_se > 0) & (b_se > 0)
  z = np.abs(a_mean - b_mean)[both] / np.sqrt(a_se**2 + b_se**2)[both]
  one_zero = ~both & (a_mean != b_mean)
  return z.max(), int(np.sum(z > 3)), int(both.sum()), int(one_zero.sum())


def main(argv):
  del argv
  config = rho_config(_QUICK.value)
  covs = inputs.covariances(config)
  means, stds = (jnp.asarray(v, jnp.float32) for v in zip(*config.pairs))
  args = (jax.random.key(config.seed), means, stds, covs)
  lam = softmax.temperature(config.temperature, config.dim)
  grid = (f"{len(config.covariances)} covariances x {len(config.pairs)} pairs"
          f" x {config.num_draws} draws, N={config.num_sequences}, "
          f"T={config.seq_len}, d={config.dim}")
  print(f"grid: {grid}; devices: {jax.devices()}; OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")

  shared, compile_s = _timed_compile(
      simulate_rho.sweep_shared, *args, num_sequences=config.num_sequences,
      entropy_sequences=config.num_sequences, seq_len=config.seq_len,
      num_draws=config.num_draws, temperature=lam)
  out, jax_best, jax_median = _best(
      lambda: jax.block_until_ready(shared(*args)), _REPEATS.value)
  out = jax.tree.map(np.asarray, out)
  if _FRESH.value:
    fresh, fresh_compile_s = _timed_compile(
        simulate_rho.sweep, *args, dim=config.dim,
        num_sequences=config.num_sequences, seq_len=config.seq_len,
        num_draws=config.num_draws, cells_per_batch=config.cells_per_batch,
        temperature=lam)
    _, fresh_s, _ = _best(lambda: jax.block_until_ready(fresh(*args)), 1)
  covs_np = np.asarray(covs)
  (rho_np, ent_np, gauss_np), np_best, np_median = _best(
      lambda: numpy_sweep(config, covs_np), _REPEATS.value)

  reps = _REPEATS.value
  print(f"qkspec compile (shared design):  {compile_s:8.2f} s")
  print(f"qkspec sweep (shared, jit):      {jax_best:8.3f} s  (median "
        f"{jax_median:.3f} s of {reps})")
  if _FRESH.value:
    print(f"qkspec sweep (fresh, jit):       {fresh_s:8.2f} s  (1 run; "
          f"compile {fresh_compile_s:.1f} s)")
  print(f"numpy reference (fresh walks):   {np_best:8.2f} s  (median "
        f"{np_median:.2f} s of {reps})")
  print(f"ratio numpy / qkspec:            {np_best / jax_best:8.1f}x  "
        f"(excluding compile; {np_best / (jax_best + compile_s):.2f}x "
        "including it)")

  d = config.num_draws
  rho_np_mean, rho_np_se = rho_np.mean(2), rho_np.std(2, ddof=1) / np.sqrt(d)
  ent_np_mean, ent_np_se = ent_np.mean(2), ent_np.std(2, ddof=1) / np.sqrt(d)
  rho_mean, ent_mean = out["rho"].mean(2), out["entropy"].mean(2)
  print(f"SE of rho_i, median / max over (cov, pair, i): qkspec "
        f"{np.median(out['rho_se']):.4f} / {out['rho_se'].max():.4f}, numpy "
        f"{np.median(rho_np_se):.4f} / {rho_np_se.max():.4f}; entropy: "
        f"qkspec {np.median(out['entropy_se']):.4f} / "
        f"{out['entropy_se'].max():.4f}, numpy {np.median(ent_np_se):.4f} / "
        f"{ent_np_se.max():.4f} nats")
  for name, (a, a_se, b, b_se) in {
      "rho_i": (rho_mean, out["rho_se"], rho_np_mean, rho_np_se),
      "entropy": (ent_mean, out["entropy_se"], ent_np_mean, ent_np_se),
  }.items():
    z_max, z_3, num, one_zero = _agreement(a, a_se, b, b_se)
    print(f"agreement qkspec vs numpy, {name}: max |diff| / combined SE "
          f"{z_max:.2f} over {num} entries, {z_3} above 3 ({one_zero} more "
          "where one side's SE is 0)")
  for name, qk_se, np_se in (("rho_i", out["rho_se"], rho_np_se),
                             ("entropy", out["entropy_se"], ent_np_se)):
    gain = (np_best * np.median(np_se)**2) / (jax_best
                                              * np.median(qk_se)**2)
    print(f"equal-precision speed-up (time x median SE^2), {name}: "
          f"{gain:.1f}x")
  err_np = np.abs(rho_np_mean - gauss_np["exact"].mean(2)).max()
  err_jax = np.abs(rho_mean - out["rho_exact"].mean(2)).max()
  print(f"sanity: max |MC rho_i - exact-moment Gaussian rho_i| (mean over "
        f"draws): qkspec {err_jax:.3f}, numpy {err_np:.3f}")

  if _GRID.value:
    grid_config = load_config("simulate_grid",
                              "smoke" if _QUICK.value else None)
    grid_out = simulate_grid.compute(grid_config)
    g = grid_config
    print(f"{g.num_eigen_means}x{g.num_eigen_stds} grid "
          f"({len(g.covariances)} "
          f"covariances, D={g.num_draws}, N={g.num_sequences}, entropy on "
          f"E={g.entropy_sequences}, T={g.seq_len}, d={g.dim}): compile "
          f"{grid_out['compile_s']:.1f} s, run {grid_out['run_s']:.1f} s")


if __name__ == "__main__":
  app.run(main)
