r"""Training and measuring the task SANs of `dong_trained` (no `run`).

Shapes: S = seeds (sweep members), B = eval sequences, T = tokens,
d = width, V = classes, L = layers, H = heads, K = L + 1 path lengths.

`train` trains one (task, variant), its seeds as one vmapped sweep;
`measure` evaluates all seeds in one jit: accuracy and loss on paths of
length <= k (`path_eval`) and of the full network, per layer the accuracy
without its attention and its heads' `spectrum.spectrum_stats`, and Dong's
relative residual with skips and/or MLPs removed (`EVAL_ARCHS`), trained
and at init.
"""
# pylint: disable=invalid-name
import functools
import os

import jax
import jax.numpy as jnp
import ml_collections
import optax

from qkspec.config import defaults
from qkspec.data import synthetic
from qkspec.theory import diagnostics
from qkspec.theory import path_eval
from qkspec.theory import san
from qkspec.theory import spectrum
from qkspec.training import loop
from qkspec.training import model as model_lib
from qkspec.training import san_model
from qkspec.training import step as step_lib
from qkspec.training import tasks

# The trained architectures (skip SANs, as Dong et al. train them).
VARIANTS = {"san_skip": dict(skip=True, mlp=False),
            "san_skip_mlp": dict(skip=True, mlp=True)}
# Architectures the trained weights are evaluated with (rank collapse).
EVAL_ARCHS = {"as_trained": lambda a: a,
              "no_skip": lambda a: san.Architecture(skip=False, mlp=a.mlp),
              "no_mlp": lambda a: san.Architecture(skip=a.skip, mlp=False),
              "pure_san": lambda a: san.Architecture()}


def train_config(config, task: str, variant: str) -> ml_collections.ConfigDict:
  """The `synthetic` training config of one (task, variant) of `config`."""
  c = defaults.synthetic_config(task)
  c.model.update(num_layers=config.num_layers, num_heads=config.num_heads,
                 d_model=config.d_model, ffn_dim=config.mlp_dim,
                 temperature=config.temperature, **VARIANTS[variant])
  c.data.update(seq_len=config.seq_len, vocab_size=config.vocab_size,
                batch_size=config.batch_size, seed=config.seed,
                num_memorized=config.num_memorized,
                eval_sequences=config.eval_sequences)
  c.opt.lr = config.lr
  c.seed = config.seed
  c.sweep.seed = tuple(config.seed + i for i in range(config.num_seeds))
  c.num_steps = config.num_steps
  c.log_every = c.eval_every = max(config.num_steps // 4, 1)
  c.checkpoint_every = config.num_steps
  c.max_to_keep = 1
  c.progress_every_s = 60.0
  return c


def eval_data(tc) -> dict[str, jax.Array]:
  """The whole eval set of training config `tc` as one batch."""
  _, evals = tasks.data_functions(tc.data)
  return {k: jnp.concatenate([b[k] for b in evals]) for k in evals[0]}


def train(config, task: str, variant: str, workdir: str):
  """Trains (or resumes) one (task, variant); (trained, initial) params [S]."""
  tc = train_config(config, task, variant)
  state = loop.train_and_evaluate(tc, os.path.join(workdir, "train", task,
                                                   variant))
  model = san_model.make_classifier(tc.model, tc.data.vocab_size,
                                    tc.data.seq_len,
                                    model_lib.attention_temperature(tc.model))
  example = jnp.zeros((1, tc.data.seq_len), jnp.int32)
  init = jax.jit(jax.vmap(lambda s: model.init(step_lib.member_keys(s)[0],
                                       example)["params"]))
  return state.params, init(jnp.asarray(tc.sweep.seed)), tc


def _scores(logits_BxTxV, targets_BxT):
  loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
      logits_BxTxV, targets_BxT))
  return synthetic.token_accuracy(logits_BxTxV, targets_BxT), loss


def _hidden(sp, x_BxTxd, arch, lam):
  """X^0..X^L [B, K, T, d] of the SAN `sp` under `arch`."""
  return jax.vmap(lambda x: san.forward(sp, x, arch, lam)["outputs"])(x_BxTxd)


@functools.partial(jax.jit, static_argnames=("arch", "lam", "mlp_dim"))
def measure_one(params, init_params, batch, *, arch: san.Architecture,
                lam: float, mlp_dim: int) -> dict[str, jax.Array]:
  """The measurements of one seed (module docstring)."""
  sp = san_model.san_params(params, mlp_dim)
  x_BxTxd = san_model.embed(params, batch["inputs"])
  y = batch["targets"]
  y_BxKxTxd = jax.vmap(lambda x: path_eval.restricted_outputs(
      sp, x, arch, lam))(x_BxTxd)
  acc_K, loss_K = jax.vmap(lambda yk: _scores(san_model.readout(params, yk),
                                              y), in_axes=1)(y_BxKxTxd)
  full_x = _hidden(sp, x_BxTxd, arch, lam)[:, -1]
  full_acc, full_loss = _scores(san_model.readout(params, full_x), y)
  L = sp["w_qk"].shape[0]
  knock = [_scores(san_model.readout(params, _hidden(
      path_eval.without_layer_attention(sp, l), x_BxTxd, arch, lam)[:, -1]),
                   y)[0] for l in range(L)]
  out = dict(acc_k=acc_K, loss_k=loss_K, full_acc=full_acc,
             full_loss=full_loss, knockout_acc=jnp.stack(knock))
  for when, p in (("trained", params), ("init", init_params)):
    sp_w = san_model.san_params(p, mlp_dim)
    x_w = san_model.embed(p, batch["inputs"])
    for name, make in EVAL_ARCHS.items():
      xs_BxKxTxd = _hidden(sp_w, x_w, make(arch), lam)
      out[f"rel_res/{when}/{name}"] = jnp.mean(
          diagnostics.relative_residual(xs_BxKxTxd, "mean"), axis=0)
    stats = spectrum.spectrum_stats(sp_w["w_qk"], temperature=lam)
    for k in ("trace", "scale", "xi", "eta"):
      out[f"spectrum/{when}/{k}"] = stats[k]           # [L, H]
  return out


def measure(params_S, init_S, tc) -> dict[str, jax.Array]:
  """`measure_one` over the stacked seeds: every value gains a leading S."""
  batch = eval_data(tc)
  arch = san_model.architecture(tc.model)
  lam = model_lib.attention_temperature(tc.model)
  return jax.vmap(lambda p, q: measure_one(
      p, q, batch, arch=arch, lam=lam, mlp_dim=tc.model.ffn_dim))(
          params_S, init_S)
