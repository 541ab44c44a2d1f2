r"""The paper's LM train step (Fig. 6 model) on this machine: qkspec vs PyTorch.

Workload: d = 128, L = 1, H = 1, vocabulary 33,278, T = 64, batch 64,
AdamW + LocATER, float32, one full step (forward, backward, update).
Prints, from one process: the device, a matmul-peak probe and the
arithmetic floor, qkspec's step (output projection and cross-entropy
fused) and PyTorch eager / torch.compile if torch is installed
(`pip install -e ".[bench]"`; never a runtime dependency), with ratios.

  python bench/train_step.py [--steps 5] [--no_torch]
"""
import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import defaults
from qkspec.training import step as step_lib
from qkspec.training import sweep

D, V, T, B = 128, 33_278, 64, 64


def _best(fn, repeats):
  fn()                                  # compile / warm up
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def matmul_peak(repeats, n=2048):
  """Peak float32 matmul GFLOP/s: a compute-bound [n, n] @ [n, n]."""
  a = jnp.ones((n, n))
  f = jax.jit(lambda a: (a @ a).sum())
  sec = _best(lambda: f(a).block_until_ready(), repeats)
  return 2 * n**3 / sec / 1e9


def step_flops():
  """Matmul FLOPs of one step (forward + backward = 3x forward)."""
  n = B * T
  forward = 2 * n * D * V                         # output projection
  forward += 2 * n * D * (4 * D + 2 * D)          # q, k, v, out, FFN (2 x d^2)
  forward += 2 * 2 * B * T * T * D                # scores and mixing
  return 3 * forward


def qkspec_step(repeats):
  c = defaults.lm_config()
  defaults.synthetic_data(c, vocab_size=V, train_tokens=B * T * 8,
                          eval_tokens=B * T)
  c.locater.kappa1, c.locater.kappa2 = 100.0, 1.0
  c.num_steps = 1000
  plan = sweep.make_plan(c)
  steps = step_lib.build_steps(plan)
  init_key, dropout_key, hparams = step_lib.member_inputs(plan)
  state = steps.init(init_key, hparams)
  batch = steps.task.train_batch(0)
  holder = [state]

  def run():
    holder[0], metrics = steps.train(holder[0], batch, dropout_key)
    metrics["loss"].block_until_ready()
  return _best(run, repeats)


def torch_step(compiled, repeats):
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)

  class LM(nn.Module):
    """Embedding x sqrt(d) + sinusoids, 1 Post-LN block, untied output."""

    def __init__(self):
      super().__init__()
      self.embed = nn.Embedding(V, D)
      self.block = nn.TransformerEncoderLayer(D, 1, D, dropout=0.1,
                                              batch_first=True)
      self.out = nn.Linear(D, V, bias=False)
      pos = np.arange(T)[:, None] / 10_000 ** (np.arange(D // 2) / (D // 2))
      self.register_buffer("pos", torch.tensor(np.concatenate(
          [np.sin(pos), np.cos(pos)], 1), dtype=torch.float32))
      self.register_buffer(
          "mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, x):
      h = self.embed(x) * D**0.5 + self.pos
      return self.out(self.block(h, src_mask=self.mask, is_causal=True))

  model = LM()
  opt = torch.optim.AdamW(model.parameters(), lr=2.5e-5, eps=1e-8,
                          weight_decay=0.01)
  tokens = torch.randint(0, V, (B, T + 1))

  def loss_fn():
    logits = model(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, V),
                                       tokens[:, 1:].reshape(-1))
    w = model.block.self_attn.in_proj_weight
    w_qk = w[:D].T @ w[D:2 * D]
    return loss + 100.0 * (w_qk**2).sum() + (torch.trace(w_qk) - 1.0)**2

  def one():
    opt.zero_grad(set_to_none=True)
    loss_fn().backward()
    opt.step()
  fn = torch.compile(one) if compiled else one
  return _best(fn, repeats)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=5, help="timed repeats")
  parser.add_argument("--no_torch", action="store_true")
  args = parser.parse_args()
  print(f"device: {jax.devices()[0].device_kind}, "
        f"{len(os.sched_getaffinity(0))} cores, jax {jax.__version__}")
  peak = matmul_peak(args.steps)
  floor = step_flops() / peak / 1e9
  print(f"matmul peak (2048^3 float32): {peak:.1f} GFLOP/s; step "
        f"{step_flops() / 1e9:.1f} GFLOP -> arithmetic floor {floor:.3f} s")
  times = {"qkspec": qkspec_step(args.steps)}
  if not args.no_torch:
    try:
      times["torch eager"] = torch_step(False, args.steps)
      times["torch compile"] = torch_step(True, args.steps)
    except ImportError:
      print("torch not installed: pip install -e '.[bench]' for the reference")
  ours = times["qkspec"]
  for name, sec in times.items():
    print(f"{name:14s} {sec:7.3f} s/step   {name} / qkspec = "
          f"{sec / ours:5.2f}x   floor / {name} = {floor / sec:5.2f}")


if __name__ == "__main__":
  main()
