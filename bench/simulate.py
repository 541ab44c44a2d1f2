r"""Times qkspec's Fig. 5 sweep against a straightforward NumPy implementation.

  python bench/simulate.py            # the full configs/simulate_rho.py grid
  python bench/simulate.py --quick    # 3 pairs x 3 draws

Both compute the same thing for every (covariance, pair, W_QK draw): sample
W_QK = B diag(w) B^T, N random walks, the logits X W_QK X^T / sqrt(d), the
propagation event of the last query (rho_i), the attention entropy of the
full softmax, and the three Gaussian approximations of Lemma 1. qkspec runs
it as one jit-compiled, vmapped computation (`simulation.sweep`); the
reference loops in Python over pairs and draws with numpy.random (the
paper's procedure). Compile time is reported separately; run times are the
best of `--repeats` runs. The two use different RNGs, so the last line checks
each against the same theory (the exact-moment Gaussian rho_i of its own
draws) instead of against each other.

OpenBLAS note: on a machine whose cores are busy with other work, NumPy's
multi-threaded OpenBLAS can be very slow on small LAPACK calls (the 128 x 128
QR of the Haar sampler); `OPENBLAS_NUM_THREADS=1` avoids that. Report which
setting was used.
"""
# pylint: disable=invalid-name
import importlib.util
import pathlib
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from qkspec.experiments import simulation

_QUICK = flags.DEFINE_bool("quick", False, "3 pairs x 3 draws instead of the "
                           "full grid.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs of each side.")
_CELLS = flags.DEFINE_integer("cells_per_batch", None, "Override of "
                              "config.cells_per_batch.")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_config(quick):
  spec = importlib.util.spec_from_file_location(
      "simulate_rho", ROOT / "configs" / "simulate_rho.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
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
  lam = np.sqrt(d)
  rho = np.zeros((len(covs), len(config.pairs), config.num_draws, t))
  entropy = np.zeros(rho.shape[:3])
  gauss = {k: np.zeros_like(rho) for k in simulation.GAUSSIAN}
  for c, cov in enumerate(covs):
    evals, evecs = np.linalg.eigh(cov)
    sqrt_cov = (evecs * np.sqrt(np.clip(evals, 0, None))) @ evecs.T
    for p, (mean, scale) in enumerate(config.pairs):
      for k in range(config.num_draws):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        basis = q * np.sign(np.diag(r))
        eig = mean + scale * rng.standard_normal(d)
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


def main(argv):
  del argv
  config = load_config(_QUICK.value)
  covs = simulation.covariances(config)
  means, scales = (jnp.asarray(v, jnp.float32) for v in zip(*config.pairs))
  args = (jax.random.key(config.seed), means, scales, covs)
  static = dict(dim=config.dim, num_sequences=config.num_sequences,
                seq_len=config.seq_len, num_draws=config.num_draws,
                cells_per_batch=config.cells_per_batch)
  grid = (f"{len(config.covariances)} covariances x {len(config.pairs)} pairs"
          f" x {config.num_draws} draws, N={config.num_sequences}, "
          f"T={config.seq_len}, d={config.dim}, cells_per_batch="
          f"{config.cells_per_batch}")
  print(f"grid: {grid}; devices: {jax.devices()}")

  start = time.perf_counter()
  compiled = simulation.sweep.lower(*args, **static).compile()
  compile_s = time.perf_counter() - start
  out, jax_best, jax_median = _best(
      lambda: jax.block_until_ready(compiled(*args)), _REPEATS.value)
  covs_np = np.asarray(covs)
  (rho_np, _, gauss_np), np_best, np_median = _best(
      lambda: numpy_sweep(config, covs_np), _REPEATS.value)

  print(f"qkspec compile:        {compile_s:8.2f} s")
  print(f"qkspec sweep (jit):    {jax_best:8.2f} s  (median {jax_median:.2f} s"
        f" of {_REPEATS.value})")
  print(f"numpy reference:       {np_best:8.2f} s  (median {np_median:.2f} s"
        f" of {_REPEATS.value})")
  print(f"ratio numpy / qkspec:  {np_best / jax_best:8.2f}x  (excluding "
        f"compile; {np_best / (jax_best + compile_s):.2f}x including it)")
  err_np = np.abs(rho_np.mean(2) - gauss_np["exact"].mean(2)).max()
  err_jax = np.abs(np.asarray(out["rho"]).mean(2)
                   - np.asarray(out["rho_exact"]).mean(2)).max()
  print(f"sanity: max |MC rho_i - exact-moment Gaussian rho_i| (mean over "
        f"draws): qkspec {err_jax:.3f}, numpy {err_np:.3f}")

if __name__ == "__main__":
  app.run(main)
