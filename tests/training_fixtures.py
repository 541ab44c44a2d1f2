"""Training configs and LM pieces shared by the training, config, kernel,
experiment and system tests; each imports the training stack only when
used."""
import jax

from qkspec.config import defaults

def single_theory(**kw):
  """theory_task smoke without the sweep (one run)."""
  from configs import theory_task  # pylint: disable=g-import-not-at-top
  c = theory_task.get_config("smoke")
  c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (), ()
  c.locater.kappa1, c.locater.kappa2 = 1.0, 1.0
  c.update(kw)
  return c


def initialized(config, devices=None):
  """The compiled steps of `config`'s plan on `devices` (default: all), its
  initial state and its dropout keys."""
  # pylint: disable=g-import-not-at-top
  from qkspec.training import step as step_lib
  from qkspec.training import sweep
  # pylint: enable=g-import-not-at-top
  plan = sweep.make_plan(config, devices)
  steps = step_lib.build_steps(plan)
  init_keys, dropout_keys, hparams = step_lib.member_inputs(plan)
  return steps, steps.init(init_keys, hparams), dropout_keys


def lm_smoke(kappa2=(0.0, 1.0)):
  """The LM smoke config, a sweep over `kappa2` at kappa1 = 1."""
  c = defaults.smoke(defaults.lm_config())
  c.sweep.kappa2 = kappa2
  c.locater.kappa1 = 1.0
  return c


def sorting_config(num_steps):
  """Dong's sorting task (T = V = 4) for a 2-layer skip SAN + MLP, trained
  `num_steps` steps and logged, evaluated and saved once at the end."""
  c = defaults.synthetic_config("sorting")
  c.model.update(num_layers=2, num_heads=2, d_model=16, ffn_dim=32, mlp=True)
  c.data.update(seq_len=4, vocab_size=4, batch_size=32, eval_sequences=256)
  c.opt.lr = 3e-3
  c.num_steps = num_steps
  c.log_every = c.eval_every = c.checkpoint_every = num_steps
  return c


def lm_batch(config, seed: int = 3) -> dict:
  """A fixed random LM batch of `config`'s shape: targets = inputs + 1."""
  tokens = jax.random.randint(jax.random.key(seed),
                              (config.data.batch_size, config.data.seq_len),
                              0, config.data.vocab_size)
  return {"inputs": tokens, "targets": (tokens + 1) % config.data.vocab_size}


def lm_task(model_config, vocab_size: int):
  """A `tasks.Task` of `model_config`'s LM, no data (for `summed_loss` and
  `layer_stats.measure` on batches made in the test)."""
  # pylint: disable=g-import-not-at-top
  from qkspec.training import model as model_lib
  from qkspec.training import tasks
  return tasks.Task(
      kind="lm", model=model_lib.make_model(model_config, "lm", vocab_size),
      example_inputs=None, train_batch=None, eval_splits={},
      loss=tasks.token_loss, causal=model_config.causal,
      temperature=model_lib.attention_temperature(model_config),
      vocab_size=vocab_size)


def plain_loss(task, params, batch):
  """(loss sum, weight) from the whole [B, T, V] logits."""
  from qkspec.training import tasks  # pylint: disable=g-import-not-at-top
  logits = task.model.apply({"params": params}, batch["inputs"],
                            deterministic=True)
  return tasks.token_loss(logits, batch)
