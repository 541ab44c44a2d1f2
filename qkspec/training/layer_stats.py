r"""Per-layer measurements of a model during training (paper Figs. 6-7).

Shapes: L=layers, H=heads, B=batch, T=tokens, d=width.

One deterministic forward pass with the sown intermediates gives, per
layer (and head):

* `qkspec.theory.spectrum.spectrum_stats` of :math:`W_{QK}` with the
  model's :math:`\lambda`: `qk_scale` :math:`\mathrm{tr}(W^\top W)`
  (Fig. 6B), `qk_trace`, `eigen_variance` (Eq. 8), Lemma 1's `xi`, `eta`,
  `r`;
* `entropy`: mean attention entropy over the visible keys (Fig. 6C);
* `rho` [T]: the empirical propagation probability of each key for the
  last query, over the batch (Fig. 7);
* `rank_residual`: Dong's relative residual of the block output ("mean").
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import diagnostics
from qkspec.training import model as model_lib
from qkspec.theory import propagation
from qkspec.theory import spectrum

SCALARS = ("qk_scale", "qk_trace", "eigen_variance", "xi", "eta", "r",
           "entropy")


def measure(params, batch, *, task) -> dict[str, jax.Array]:
  """Per-layer measurements on `batch` (dropout off). See the module doc."""
  (loss_sum, weight), state = task.summed_loss(
      params, batch, deterministic=True, mutable=["intermediates"])
  inter = state["intermediates"]["decoder"]
  blocks = [inter[f"block_{l}"]
            for l in range(sum(n.startswith("block_") for n in inter))]
  # sow stores a tuple
  logits_LxBxHxTxT = jnp.stack([b["attn"]["logits"][0] for b in blocks])
  probs_LxBxHxTxT = jnp.stack([b["attn"]["probs"][0] for b in blocks])
  out_LxBxTxd = jnp.stack([b["out"][0] for b in blocks])
  T = logits_LxBxHxTxT.shape[-1]

  stats = spectrum.spectrum_stats(model_lib.qk_matrices(params),
                                  temperature=task.temperature)
  mask = model_lib.causal_mask(T) if task.causal else None
  ent_LxBxHxT = diagnostics.attention_entropy(probs_LxBxHxTxT, mask,
                                              reduce=False)
  last_LxHxBxT = jnp.swapaxes(logits_LxBxHxTxT[..., -1, :], 1, 2)
  rho_LxHxT = jax.vmap(jax.vmap(propagation.empirical_rho))(last_LxHxBxT)
  res_LxB = diagnostics.relative_residual(out_LxBxTxd, "mean")
  return dict(
      qk_scale=stats["scale"], qk_trace=stats["qk_trace"],
      eigen_variance=stats["variance"], xi=stats["xi"], eta=stats["eta"],
      r=stats["r"],
      entropy=jnp.mean(ent_LxBxHxT, axis=(1, 3)),
      rho=rho_LxHxT, rank_residual=jnp.mean(res_LxB, axis=1),
      loss=loss_sum / weight)


def flatten(m: dict[str, np.ndarray]) -> tuple[dict, dict]:
  """Host measurements of one run -> (scalars, arrays) for the writer:
  `l{layer}[/h{head}]/{name}` (the head if several), `mean/{name}`; `rho`
  is an array."""
  scalars, arrays = {}, {}
  L, H = np.shape(m["qk_scale"])
  for l in range(L):
    for h in range(H):
      prefix = f"l{l}/" if H == 1 else f"l{l}/h{h}/"
      for name in SCALARS:
        scalars[prefix + name] = float(m[name][l, h])
      arrays[prefix + "rho"] = np.asarray(m["rho"][l, h]).tolist()
    scalars[f"l{l}/rank_residual"] = float(m["rank_residual"][l])
  for name in SCALARS:
    scalars["mean/" + name] = float(np.mean(m[name]))
  scalars["measure/loss"] = float(m["loss"])
  return scalars, arrays
