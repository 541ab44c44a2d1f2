r"""LocATER and the diagnostics on a Flax transformer qkspec did not write.

Shapes: B = batch, T = tokens, V = vocabulary, d = width.

`Transformer`, a plain Pre-LN encoder of Flax's own layers, reached only
through `qkspec.for_flax`, learns Dong et al.'s sorting task twice from one
initialization: with :math:`\kappa = 0` and with the config's LocATER
strengths (`loss_fn`). The `for_flax` spectrum and attention tables are
measured at "init", "plain" and "locater".
"""
# pylint: disable=invalid-name
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from qkspec import for_flax
from qkspec.data import synthetic
from qkspec.experiments import outputs
from qkspec.plots import style
from qkspec.theory import locater

STAGES = ("init", "plain", "locater")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of the config."""
  outputs.require_ints(config, {
      "seed": 0, "num_layers": 1, "num_heads": 1, "d_model": 1, "mlp_dim": 1,
      "seq_len": 2, "vocab_size": 2, "batch_size": 1, "num_steps": 1,
      "eval_batch_size": 1})
  outputs.require(config.d_model % config.num_heads == 0, "num_heads",
                  "must divide d_model", config.num_heads)
  outputs.require_positive(config, "lr")
  for field in ("kappa1", "kappa2"):
    outputs.require(config.locater[field] >= 0, f"locater.{field}",
                    "must be >= 0", config.locater[field])


class Block(nn.Module):
  """x + attention(LN(x)), then x + MLP(LN(x))."""
  num_heads: int
  mlp_dim: int

  @nn.compact
  def __call__(self, x_BxTxd):
    d = x_BxTxd.shape[-1]
    h = nn.LayerNorm()(x_BxTxd)
    x_BxTxd = x_BxTxd + nn.MultiHeadDotProductAttention(
        self.num_heads, name="attn")(h)
    h = nn.gelu(nn.Dense(self.mlp_dim)(nn.LayerNorm()(x_BxTxd)))
    return x_BxTxd + nn.Dense(d)(h)


class Transformer(nn.Module):
  """Token and position embeddings, L blocks, a linear readout [B, T, V]."""
  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  mlp_dim: int

  @nn.compact
  def __call__(self, tokens_BxT):
    T = tokens_BxT.shape[-1]
    x_BxTxd = nn.Embed(self.vocab_size, self.d_model)(tokens_BxT)
    x_BxTxd += self.param("pos", nn.initializers.normal(0.02),
                          (T, self.d_model))[None]
    for l in range(self.num_layers):
      x_BxTxd = Block(self.num_heads, self.mlp_dim, name=f"block_{l}")(x_BxTxd)
    return nn.Dense(self.vocab_size)(nn.LayerNorm()(x_BxTxd))


def task_loss(model, params, batch):
  """Mean token cross-entropy (nats) and accuracy of a sorting batch."""
  logits_BxTxV = model.apply({"params": params}, batch["inputs"])
  loss = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxTxV, batch["targets"]).mean()
  return loss, synthetic.token_accuracy(logits_BxTxV, batch["targets"])


def train(config, model, params, hparams: locater.LocaterHParams):
  """`config.num_steps` Adam updates of the task loss plus
  `for_flax.locater_penalty`, one compiled scan: (params, losses)."""
  tx = optax.adam(config.lr)
  key = jax.random.key(config.seed + 1)

  def loss_fn(params, batch):
    loss, _ = task_loss(model, params, batch)
    return loss + for_flax.locater_penalty(params, hparams)   # LocATER

  def step(carry, i):
    params, opt_state = carry
    batch = synthetic.sorting(jax.random.fold_in(key, i), config.batch_size,
                              config.seq_len, config.vocab_size)
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  (params, _), losses = jax.lax.scan(step, (params, tx.init(params)),
                                     jnp.arange(config.num_steps))
  return params, losses


def measure(config, model, params, stage: str, batch) -> dict[str, list]:
  """The two `for_flax` tables and a summary row of one stage."""
  spectrum_rows = [dict(stage=stage, **r)
                   for r in for_flax.spectrum_table(params)]
  attention_rows = [dict(stage=stage, **r) for r in for_flax.attention_table(
      model.apply, {"params": params}, batch["inputs"])]
  loss, accuracy = jax.device_get(
      jax.jit(task_loss, static_argnums=0)(model, params, batch))
  hp = locater.LocaterHParams(**config.locater)
  summary = dict(
      stage=stage, loss=float(loss), accuracy=float(accuracy),
      penalty=float(for_flax.locater_penalty(params, hp)),
      mean_scale=float(np.mean([r["scale"] for r in spectrum_rows])),
      mean_entropy=float(np.mean([r["entropy"] for r in attention_rows])))
  return dict(spectrum=spectrum_rows, attention=attention_rows,
              summary=[summary])


def plot(tables, config, workdir):
  """Scale and entropy per head, one bar per stage; ln T the most entropy."""
  fig, axes = style.subplots(1, 2, (11.0, 3.8))
  heads = [f"{r['path']} h{r['head']}" for r in tables["spectrum"]
           if r["stage"] == STAGES[0]]
  x = np.arange(len(heads))
  width = 0.8 / len(STAGES)
  for ax, (table, column, label) in zip(axes[0], (
      ("spectrum", "scale", "scale tr(W_QK^T W_QK)"),
      ("attention", "entropy", "attention entropy [nats]"))):
    for k, stage in enumerate(STAGES):
      values = [r[column] for r in tables[table] if r["stage"] == stage]
      ax.bar(x + (k - 1) * width, values, width, label=stage)
    if column == "entropy":
      ax.axhline(np.log(config.seq_len), color="gray", ls=":", label="ln T")
    ax.set(xticks=x, ylabel=label)
    ax.set_xticklabels(heads, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=8)
  return style.save_figure(fig, workdir, "fig_for_flax_example")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains without and with LocATER, prints and writes the tables."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  model = Transformer(config.vocab_size, config.d_model, config.num_layers,
                      config.num_heads, config.mlp_dim)
  init_key, eval_key = jax.random.split(jax.random.key(config.seed))
  batch = synthetic.sorting(eval_key, config.eval_batch_size,
                            config.seq_len, config.vocab_size)
  params = jax.jit(model.init)(init_key, batch["inputs"])["params"]
  train_jit = jax.jit(lambda p, hp: train(config, model, p, hp))
  trained = {"init": params}
  for stage, hp in (("plain", locater.LocaterHParams(0.0, 0.0, 1.0)),
                    ("locater", locater.LocaterHParams(**config.locater))):
    hp = jax.tree.map(jnp.float32, hp)    # traced: one compile for both
    trained[stage], losses = train_jit(params, hp)
    logging.info("%s: %d steps, objective %.4g -> %.4g", stage,
                 config.num_steps, float(losses[0]), float(losses[-1]))
  tables = {"spectrum": [], "attention": [], "summary": []}
  for stage in STAGES:
    for name, rows in measure(config, model, trained[stage], stage,
                              batch).items():
      tables[name] += rows
  outputs.show("for_flax.spectrum_table per stage:",
               outputs.format_table(tables["spectrum"]))
  outputs.show("for_flax.attention_table per stage:", outputs.format_table(
      tables["attention"], ("stage", "path", "head", "entropy",
                            "rank_residual")))
  outputs.show("for_flax_example summary (eval batch):",
               outputs.format_table(tables["summary"]))
  paths += outputs.write_tables(tables, workdir)
  paths.append(plot(tables, config, workdir))
  outputs.log_outputs("for_flax_example", paths)
  return dict(tables, paths=paths)
