r"""The model's attention, forward and backward: Pallas kernel vs cuDNN vs XLA.

Workload: one attention layer of the paper's models as a kappa2 sweep
trains it (5 members side by side: batch 5 x 64 sequences, T = 64, one
head, D = 32 or 128, causal, bfloat16), from the packed QKV projections
with their biases, as `qkspec.training.model.SelfAttention` calls it:

* pallas: `qkspec.kernels.attention` (what `model.kernels="pallas"` runs);
* cudnn: `jax.nn.dot_product_attention(implementation="cudnn")` on the
  same q, k, v (the biases added and the projections sliced in XLA);
* xla: `qkspec.kernels.attention_reference`'s maths in the compute dtype
  (`jax.nn.dot_product_attention(implementation="xla")`).

Each is timed as one compiled step (forward, then the gradient of a
weighted sum of the output with respect to the projections and biases),
best of `--repeats` after a warm-up, in one process; prints the device,
each time, its ratio to the Pallas kernel, and each one's largest
difference from the float32 reference.

  python bench/attention.py [--repeats 50]
  python bench/attention.py --rehearse      # a CPU: small, interpreted
"""
import argparse
import functools
import time

import jax
import jax.numpy as jnp

from qkspec import kernels

IMPLS = ("pallas", "cudnn", "xla")


def _split(qkv, biases):
  """q, k, v [B, T, H, D] with their biases, in qkv's dtype."""
  return [qkv[:, :, i] + biases[i].astype(qkv.dtype)[None, None]
          for i in range(3)]


def attention(impl: str, qkv, biases, temperature: float):
  """U [B, T, H, D] of the packed projections by `impl`."""
  if impl == "pallas":
    return kernels.attention(qkv, temperature, biases=biases)
  q, k, v = _split(qkv, biases)
  return jax.nn.dot_product_attention(q, k, v, scale=1.0 / temperature,
                                      is_causal=True, implementation=impl)


def _step(impl, temperature, qkv, biases, w):
  """(U, d/d(qkv, biases) of sum(w * U)): a training step's share."""
  def loss(qkv, biases):
    u = attention(impl, qkv, biases, temperature)
    return jnp.sum(w * u.astype(jnp.float32)), u
  (_, u), grads = jax.value_and_grad(loss, (0, 1), has_aux=True)(qkv,
                                                                 biases)
  return u, grads


def _best(fn, args, repeats):
  jax.block_until_ready(fn(*args))               # compile, warm up
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return min(times)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--repeats", type=int, default=50)
  p.add_argument("--widths", default="32,128", help="head widths D")
  p.add_argument("--rehearse", action="store_true",
                 help="a CPU: 2 sequences of 16 tokens, float32, the "
                 "Pallas kernel interpreted, no cuDNN")
  flags = p.parse_args(argv)
  dev = jax.devices()[0]
  print(f"device: {dev.platform}, {dev.device_kind}, jax {jax.__version__}")
  batch, T = (2, 16) if flags.rehearse else (5 * 64, 64)
  dtype = jnp.float32 if flags.rehearse else jnp.bfloat16
  impls = [i for i in IMPLS if not (flags.rehearse and i == "cudnn")]
  for D in (int(x) for x in flags.widths.split(",")):
    ks = jax.random.split(jax.random.key(D), 3)
    qkv = jax.random.normal(ks[0], (batch, T, 3, 1, D), dtype)
    biases = tuple(0.1 * jax.random.normal(ks[1], (3, 1, D)))
    w = jax.random.normal(ks[2], (batch, T, 1, D))
    temperature = float(D) ** 0.5
    want = kernels.attention_reference(qkv, temperature, biases=biases)
    base = None
    for impl in impls:
      fn = jax.jit(functools.partial(_step, impl, temperature))
      try:
        sec = _best(fn, (qkv, biases, w), 2 if flags.rehearse
                    else flags.repeats)
        err = float(jnp.max(jnp.abs(fn(qkv, biases, w)[0].astype(
            jnp.float32) - want)))
      except Exception as e:  # pylint: disable=broad-except
        print(f"D={D:4d} {impl:7s} unavailable here: {type(e).__name__}: "
              f"{str(e).splitlines()[0][:100]}")
        continue
      base = base or sec
      print(f"D={D:4d} {impl:7s} {sec * 1e3:8.3f} ms   / pallas "
            f"{sec / base:5.2f}   max |U - float32| {err:.2e}   "
            f"[{dev.device_kind}]")


if __name__ == "__main__":
  main()
