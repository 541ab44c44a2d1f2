"""Fixtures of the qkspec.for_flax tests: small linen and nnx attention
models, plain, stacked, grouped-query, with QK-norm or a custom attention
function, their inputs, a NumPy forward pass from their raw kernels, the
entropy and rho_i of attention probabilities by NumPy loops, W_QK, the
LocATER penalty and the spectrum statistics in NumPy, and a closeness
check that logs its largest difference from NumPy."""
import functools

from absl import logging
import jax
import numpy as np

# The Flax attention models of the qkspec.for_flax tests: batch, sequence
# length, width, heads and stacked layers.
FLAX_B, FLAX_T, FLAX_D, FLAX_H, FLAX_L = 3, 5, 8, 2, 2
# Query heads of the grouped-query models (head width FLAX_D / GQA_N = 2),
# the soft cap of their soft-capped attention and the RoPE base.
GQA_N, SOFT_CAP, ROPE_BASE = 4, 0.5, 10.0


@functools.cache
def flax_nets() -> tuple[type, type]:
  """(LinenNet, NnxNet): two Flax attention layers with skips, `FLAX_H`
  heads on width `FLAX_D`. LinenNet(use_bias) stacks
  `nn.MultiHeadDotProductAttention` and sows its weights; NnxNet(rngs)
  stacks causal `nnx.MultiHeadAttention`. Imports flax only when used."""
  # pylint: disable=g-import-not-at-top
  import flax.linen as nn
  from flax import nnx

  class LinenNet(nn.Module):
    use_bias: bool = True

    @nn.compact
    def __call__(self, x, mask=None):
      for l in range(2):
        x = x + nn.MultiHeadDotProductAttention(
            FLAX_H, use_bias=self.use_bias, name=f"attn_{l}")(
                x, mask=mask, sow_weights=True)
      return x

  class NnxNet(nnx.Module):

    def __init__(self, rngs):
      self.layers = nnx.List([nnx.MultiHeadAttention(FLAX_H, FLAX_D,
                                                     decode=False, rngs=rngs)
                              for _ in range(2)])

    def __call__(self, x, mask=None, sow=False):
      for layer in self.layers:
        x = x + layer(x, mask=mask, is_causal=True, sow_weights=sow)
      return x

  return LinenNet, NnxNet


@functools.cache
def flax_stacks() -> tuple[type, type, type]:
  """(LinenScan, LinenRemat, NnxScan): `FLAX_L` attention layers with skips,
  `FLAX_H` heads on width `FLAX_D`. LinenScan(remat) is `nn.scan` over a
  block (its kernels [L, d, H, D] under "layers/attn"), each block
  `nn.remat`'d if `remat`; LinenRemat `nn.remat`s each of its blocks
  "block_l"; NnxScan(rngs) builds its layers with `nnx.vmap` and runs them
  with `nnx.scan` (kernels [L, d, H, D] under "layers"). Each takes
  (x, mask=None)."""
  # pylint: disable=g-import-not-at-top
  import flax.linen as nn
  from flax import nnx

  class Block(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
      return x + nn.MultiHeadDotProductAttention(FLAX_H, name="attn")(
          x, mask=mask), None

  class LinenScan(nn.Module):
    remat: bool = False

    @nn.compact
    def __call__(self, x, mask=None):
      block = nn.remat(Block) if self.remat else Block
      x, _ = nn.scan(block, variable_axes={"params": 0},
                     split_rngs={"params": True}, in_axes=nn.broadcast,
                     length=FLAX_L)(name="layers")(x, mask)
      return x

  class LinenRemat(nn.Module):
    @nn.compact
    def __call__(self, x, mask=None):
      for l in range(FLAX_L):
        x, _ = nn.remat(Block)(name=f"block_{l}")(x, mask)
      return x

  class NnxScan(nnx.Module):

    def __init__(self, rngs):
      @nnx.split_rngs(splits=FLAX_L)
      @nnx.vmap(in_axes=(0,), out_axes=0)
      def layers(rngs):
        return nnx.MultiHeadAttention(FLAX_H, FLAX_D, decode=False,
                                      rngs=rngs)
      self.layers = layers(rngs)

    def __call__(self, x, mask=None):
      @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
      def body(x, layer):
        return x + layer(x, mask=mask, is_causal=True)
      return body(x, self.layers)

  return LinenScan, LinenRemat, NnxScan


def flax_inputs() -> np.ndarray:
  """The for_flax tests' inputs [FLAX_B, FLAX_T, FLAX_D]."""
  return np.asarray(jax.random.normal(jax.random.key(1),
                                      (FLAX_B, FLAX_T, FLAX_D)))


def float64_tree(tree):
  """`tree` with each leaf a float64 NumPy array."""
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def assert_close(what: str, got, want, rtol=0.0, atol=0.0) -> None:
  """np.testing.assert_allclose, logging the largest difference (shown by
  `pytest ... -o log_cli=true --log-cli-level=INFO`)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  diff = np.abs(got - want)
  with np.errstate(divide="ignore", invalid="ignore"):
    relative = np.nanmax(np.where(diff > 0, diff / np.abs(want), 0.0))
    largest = np.nanmax(diff) / np.nanmax(np.abs(want))
  logging.info("%s: max |diff| %.3g, relative %.3g, over the largest "
               "|value| %.3g", what, np.nanmax(diff), relative, largest)
  np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def trace_atol(w_qk, rtol=1e-5) -> float:
  """An absolute tolerance for tr(W_QK) (and r, xi) of the [..., d, d]
  matrices `w_qk`: `rtol` times the largest trace their size allows,
  sqrt(d) ||W_QK||_F (Cauchy-Schwarz). A trace that nearly cancels is
  summed in float32 from terms of that size, so a tolerance relative to
  the trace itself would fail on rounding alone."""
  w_qk = np.asarray(w_qk, np.float64)
  return rtol * np.sqrt(w_qk.shape[-1]) * np.linalg.norm(
      w_qk.reshape(-1, w_qk.shape[-1] ** 2), axis=-1).max()


def rope(x, xp=np):
  """Rotary positions on [..., T, H, D] (rotate-half), in NumPy or jnp."""
  T, D = x.shape[-3], x.shape[-1]
  angle = np.arange(T)[:, None] * ROPE_BASE ** (-np.arange(D // 2) / (D // 2))
  shape = (1,) * (x.ndim - 3) + (T, 1, D // 2)
  sin, cos = (f(angle).reshape(shape).astype(np.float32)
              for f in (np.sin, np.cos))
  x1, x2 = x[..., :D // 2], x[..., D // 2:]
  return xp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def soft_cap(logits, xp=np):
  """Gemma 2's logit soft-capping, cap tanh(logits / cap)."""
  return SOFT_CAP * xp.tanh(logits / SOFT_CAP)


@functools.cache
def attention_fns() -> dict:
  """Custom nnx `attention_fn`s: "rope" rotates q and k and calls flax's
  dot_product_attention (passing `module` on); "soft_cap" computes its own
  soft-capped probabilities and sows them; "unsown" sows nothing."""
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  import jax.numpy as jnp

  def rope_attention(query, key, value, module=None, **kwargs):
    return nnx.dot_product_attention(rope(query, jnp), rope(key, jnp), value,
                                     module=module, **kwargs)

  def soft_cap_attention(query, key, value, mask=None, module=None,
                         **kwargs):
    del kwargs
    logits = soft_cap(jnp.einsum("...tnd,...snd->...nts", query, key)
                      / np.sqrt(query.shape[-1]), jnp)
    if mask is not None:
      logits = jnp.where(jnp.broadcast_to(mask, logits.shape), logits,
                         jnp.finfo(logits.dtype).min)
    probs = jax.nn.softmax(logits)
    if module is not None:
      module.sow(nnx.Intermediate, "attention_weights", probs)
    return jnp.einsum("...nts,...snd->...tnd", probs, value)

  def unsown_attention(query, key, value, mask=None, **kwargs):
    del kwargs
    return nnx.dot_product_attention(query, key, value, mask=mask)

  return dict(rope=rope_attention, soft_cap=soft_cap_attention,
              unsown=unsown_attention)


def nnx_attention(num_kv_heads=None, normalize_qk=False, attention_fn=None,
                  seed=0):
  """nnx.MultiHeadAttention, `GQA_N` heads on width `FLAX_D`, with
  `num_kv_heads` key heads, QK-norm whose gains are moved off 1, and a
  custom `attention_fn` (a name of `attention_fns`) if asked."""
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  kwargs = {} if attention_fn is None else dict(
      attention_fn=attention_fns()[attention_fn])
  layer = nnx.MultiHeadAttention(GQA_N, FLAX_D, num_kv_heads=num_kv_heads,
                                 normalize_qk=normalize_qk, decode=False,
                                 rngs=nnx.Rngs(seed), **kwargs)
  if normalize_qk:
    for i, norm in enumerate((layer.query_ln, layer.key_ln)):
      norm.scale[...] = 1 + 0.5 * jax.random.normal(jax.random.key(9 + i),
                                                     norm.scale.shape)
  return layer


def np_layer_norm(x, scale, eps=1e-6):
  """flax's LayerNorm without bias over the last axis."""
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale


def np_attention(layer, x, visible, transform=None):
  """A Flax attention layer's raw logits [B, N, T, S], probabilities and
  output in NumPy from its parameters (float64): query head h reads key
  head h // (N/K); `query_ln`/`key_ln` if present; `transform` "rope"
  (before the logits) or "soft_cap" (on them)."""
  def project(name):
    p = layer[name]
    return np.einsum("btd,dhk->bthk", x, p["kernel"]) + p.get("bias", 0.0)
  q, k, v = project("query"), project("key"), project("value")
  if "query_ln" in layer:
    q = np_layer_norm(q, layer["query_ln"]["scale"])
    k = np_layer_norm(k, layer["key_ln"]["scale"])
  if transform == "rope":
    q, k = rope(q), rope(k)
  group = q.shape[2] // k.shape[2]
  k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
  logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
  if transform == "soft_cap":
    logits = soft_cap(logits)
  masked = np.where(visible, logits, -1e30)
  w = np.exp(masked - masked.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  out = np.einsum("bthk,hkd->btd", np.einsum("bhts,bshk->bthk", w, v),
                  layer["out"]["kernel"]) + layer["out"].get("bias", 0.0)
  return logits, w, out


def np_queries(visible):
  """[B, H, T]: a query that sees a key and whose own key some query sees
  (self-attention)."""
  return visible.any(-1) & visible.any(-2)


def np_entropy(w, visible):
  """Mean entropy per head over the batch's token queries [H]."""
  visible = np.broadcast_to(visible, w.shape)
  ok = np_queries(visible)
  terms = np.where(visible & (w > 0), -w * np.log(np.where(w > 0, w, 1)), 0)
  return (terms.sum(-1) * ok).sum((0, 2)) / ok.sum((0, 2))


def np_rho(logits, visible):
  """Empirical rho_i [H, S] (Definition 1) of each sequence's last token
  query over its visible keys, NaN where no sequence sees key i."""
  visible = np.broadcast_to(visible, logits.shape)
  ok = np_queries(visible)
  B, nh, _, S = logits.shape
  hits, seen = np.zeros((nh, S)), np.zeros((nh, S))
  for b in range(B):
    for h in range(nh):
      t = np.flatnonzero(ok[b, h])[-1]
      keys = np.flatnonzero(visible[b, h, t])
      omega = logits[b, h, t, keys]
      u = (omega - omega.mean()) / len(keys) + 1 / len(keys)
      hits[h, keys] += (u >= 0) & (u <= 1)
      seen[h, keys] += 1
  with np.errstate(invalid="ignore"):
    return hits / seen


def np_qk(wq, wk):
  """W_QK [N, d, d] of kernels [d, N, D], [d, K, D] head by head: query
  head h reads key head h // (N/K)."""
  group = wq.shape[1] // wk.shape[1]
  return np.stack([wq[:, h] @ wk[:, h // group].T
                   for h in range(wq.shape[1])])


def np_penalty(w_qks, hp):
  """The LocATER penalty (Sec. 6) summed over matrices W_QK [d, d]:
  kappa1 ||W||_F^2 + kappa2 (tr W - target)^2, `hp` = (kappa1, kappa2,
  target)."""
  return sum(hp.kappa1 * np.sum(w**2) + hp.kappa2 * (np.trace(w)
                                                     - hp.target)**2
             for w in w_qks)


def np_spectrum(w, lam):
  """scale, trace, xi, eta and r (Eqs. 5-8, Sigma = I) of W_QK [N, d, d]
  at the logit scale `lam`, per head."""
  sym = (w + np.swapaxes(w, -1, -2)) / 2
  tr, tr2 = np.trace(w, axis1=1, axis2=2), np.einsum("hij,hji->h", sym, sym)
  return dict(scale=np.sum(w**2, axis=(1, 2)), trace=tr,
              xi=tr / np.sqrt(tr2), eta=np.sqrt(tr2) / lam, r=tr / lam)
