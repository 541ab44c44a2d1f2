# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # qkspec in pictures
#
# A tour of [qkspec](../README.md), which implements and checks Bao, Hataya,
# Karakida, *Self-attention Networks Localize When QK-eigenspectrum
# Concentrates* (ICML 2024, arXiv:2402.02098, "the paper"), in six steps:
#
# 1. the piecewise-linear softmax and the event behind the signal
#    propagation probability $\rho_i$ (Sec. 2);
# 2. $\rho_i$ by Monte Carlo against Lemma 1, printed and corrected, and
#    Lemma 2 (Figs. 2-3);
# 3. $\rho_i$ and the attention entropy over the eigenspectrum's
#    (eigen_mean, eigen_std) plane (Fig. 5);
# 4. the Sec. 2 model trained without and with LocATER;
# 5. `qkspec.for_flax` on a small Flax transformer written here;
# 6. what the reproduction of Sec. 7 found.
#
# Every cell runs in seconds on a laptop CPU, and every number it prints is
# computed by qkspec. Tokens are rows, $W_{QK} = W_Q^\top W_K$, the query
# is the last token: $\omega_j = x_T^\top W_{QK} x_j / \lambda$, with
# temperature $\lambda = \sqrt d$.

# %%
# In Colab (or wherever qkspec is not installed): clone the repository and
# install it. Where qkspec imports, this cell does nothing.
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/qkspec/qkspec"
if importlib.util.find_spec("qkspec") is None:
  subprocess.run(["git", "clone", "--quiet", "--depth=1", REPOSITORY,
                  "qkspec"], check=True)
  subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                  "./qkspec"], check=True)
  importlib.invalidate_caches()

# %%
import json
import os
import pathlib
import tempfile

from flax import nnx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from qkspec import for_flax, locater, propagation, randomwalk, softmax
from qkspec import spectrum
from qkspec.config import args
from qkspec.data import synthetic
from qkspec.experiments import outputs, simulate_grid
from qkspec.records import rundir
from qkspec.report import answer
from qkspec.report import pooled as pooled_tests
from qkspec.training import loop

# the checkout: its configs/ and reproduction/ (in Colab, the clone above)
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents,
                        pathlib.Path("qkspec").resolve())
            if (p / "configs").is_dir() and (p / "reproduction").is_dir())
# QKSPEC_TOUR_QUICK=1 (the test suite sets it): fewer walks, grid points
# and training steps.
QUICK = os.environ.get("QKSPEC_TOUR_QUICK") == "1"
# qkspec's own figures draw off screen (Agg); these draw in the notebook
# %matplotlib inline

# %% [markdown]
# ## 1. Softmax and its piecewise-linear form (Sec. 2)
#
# Expanding softmax to first order at $\omega = 0$ gives the linear score
# $u_i = (\omega_i - \bar\omega)/T + 1/T$; the piecewise-linear softmax
# clips it to $[0, 1]$. Token $i$'s signal *propagates* when $u_i \in [0, 1]$
# (Definition 1): where $u_i$ leaves that range, the piecewise-linear
# softmax is 0 or 1 and the token's weight no longer moves with its logit.
# Below: one random walk of $T = 16$ tokens in $d = 16$ dimensions
# (Assumption 1) and one $W_{QK} = B\,\mathrm{diag}(w)\,B^\top$, its
# eigenvalues $w_k \sim N(\text{eigen\_mean}, 0.1^2)$, at a small and a
# large eigen_mean.

# %%
d, T = 16, 16
x_Txd = randomwalk.random_walk(jax.random.key(0), 1, T, d)[0]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
for ax, eigen_mean in zip(axes, (0.05, 0.5)):
  w_qk = spectrum.sample_qk(jax.random.key(1), d, eigen_mean, 0.1)
  omega = propagation.query_logits(x_Txd, w_qk)
  inside = softmax.propagation_mask(omega)
  i = np.arange(1, T + 1)
  ax.axhspan(0, 1, color="0.92", label="$u_i \\in [0, 1]$")
  ax.bar(i, softmax.softmax(omega), color="tab:blue", alpha=0.6,
         label="softmax $S(\\omega)_i$")
  ax.plot(i, softmax.linearized_score(omega), "k.--", lw=0.8,
          label="linear score $u_i$")
  ax.plot(i, softmax.piecewise_linear_softmax(omega), "o-", color="tab:red",
          mfc="none", label="piecewise-linear $\\tilde S(\\omega)_i$")
  ax.set(xlabel="key position i (query: token T)", ylabel="weight",
         title=f"eigen_mean = {eigen_mean}: $u_i \\in [0, 1]$ at "
               f"{int(inside.sum())} of {T} keys")
  ax.set_ylim(-0.6, 1.1)
  print(f"eigen_mean {eigen_mean}: r = tr(W)/lambda = "
        f"{float(spectrum.spectrum_stats(w_qk)['r']):.2f}, softmax sums to "
        f"{float(softmax.softmax(omega).sum()):.3f}, the piecewise-linear "
        f"form to {float(softmax.piecewise_linear_softmax(omega).sum()):.3f}")
axes[0].legend(loc="upper left", fontsize=8)
plt.show()

# %% [markdown]
# ## 2. $\rho_i$: Monte Carlo, Lemma 1 and Lemma 2 (Figs. 2-3)
#
# $\rho_i = P\{u_i \in [0, 1]\}$ over random walks. Lemma 1 approximates
# $u_i$ by a Gaussian with $\mu^i = (\theta - \frac12)\,\mathrm{tr}(W)/\lambda$
# ($\theta = i/T$). **Erratum:** the printed variance $v^i = (2\theta^2 +
# 7/12)\,\mathrm{tr}(W^2)/\lambda^2$ drops a term of App. C; the corrected
# variance is $(2\theta^2 - 2\theta + 7/12)\,\mathrm{tr}(W^2)/\lambda^2$,
# and qkspec also has the exact finite-$T$ moments. Lemma 2: as
# $\xi = \mathrm{tr}W/\sqrt{\mathrm{tr}W^2}$ grows at fixed
# $r = \xi\eta = \mathrm{tr}(W)/\lambda > 2$, $\rho$ tends to the indicator
# of $\frac12 \le \theta \le \frac12 + \frac1r$: the signal propagates only
# from a band of middle tokens. Here $W_{QK} = cI$ in $d = 64$
# ($\xi = \sqrt d = 8$), so $\eta = \sqrt{\mathrm{tr}W^2}/\lambda = c$,
# at three $\eta$.

# %%
d, T, N = 64, 32, 500 if QUICK else 2000      # N walks per eta
theta = np.arange(1, T + 1) / T
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), layout="constrained",
                         sharey=True)
for ax, eta in zip(axes, (0.25, 0.5, 1.0)):
  w_qk = eta * jnp.eye(d)
  stats = spectrum.spectrum_stats(w_qk)
  rho_mc = propagation.rho_monte_carlo(jax.random.key(2), w_qk,
                                       num_sequences=N, seq_len=T)
  theory = {
      "Lemma 1 as printed": propagation.rho_from_spectrum(
          w_qk, T, variant="paper"),
      "Lemma 1 corrected": propagation.rho_from_spectrum(w_qk, T),
      "exact finite-T moments": propagation.rho_from_spectrum(
          w_qk, T, exact=True)}
  r = float(stats["r"])
  ax.plot(theta, rho_mc, "ko", ms=3, label=f"Monte Carlo ({N} walks)")
  for (name, rho), style in zip(theory.items(), ("r--", "b-", "g:")):
    ax.plot(theta, rho, style, lw=1.5, label=name)
    print(f"eta {float(stats['eta']):.2f}: max |MC - {name}| = "
          f"{float(jnp.abs(rho_mc - rho).max()):.3f}")
  ax.plot(theta, propagation.rho_trace_limit(theta, r), color="0.5",
          lw=4, alpha=0.4, label="Lemma 2 limit at this r")
  ax.set(xlabel="$\\theta = i/T$", title=f"$\\xi$ = "
         f"{float(stats['xi']):.0f}, $\\eta$ = {float(stats['eta']):.2f},"
         f" r = {r:.0f}")
axes[0].set_ylabel("$\\rho_i$")
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
           ncol=5, fontsize=8)
plt.show()

# %% [markdown]
# ## 3. The eigenspectrum plane (Fig. 5)
#
# Fig. 5 draws $W_{QK} = B\,\mathrm{diag}(w)\,B^\top$ with eigenvalues
# $w_k \sim N(\text{eigen\_mean}, \text{eigen\_std}^2)$ and measures
# $\rho_i$ and the attention entropy. `qkspec.experiments.simulate_grid`
# fills the whole plane with common random numbers; here a small grid
# (`python launch/run.py --config configs/simulate_grid.py` runs the
# 64 x 64 one). With a concentrated spectrum (small eigen_std) and
# eigen_mean near 0, every token propagates and attention is near uniform
# (entropy near $\ln T$); beyond Lemma 2's boundary $E\,r = \pm 2$
# (dashed) only a few tokens propagate and the entropy falls: attention
# localizes. A spread spectrum (large eigen_std) takes every $u_i$ out of
# $[0, 1]$ and the entropy towards 0.

# %% tags=["readme-figure"]
config = args.load_config_file(ROOT / "configs" / "simulate_grid.py",
                               "smoke")
config.update(dict(covariances=("isotropic",), dim=32, seq_len=16,
                   num_sequences=128 if QUICK else 512, entropy_sequences=16,
                   num_draws=4, num_eigen_means=11 if QUICK else 41,
                   num_eigen_stds=8 if QUICK else 31,
                   eigen_std_range=(0.01, 3.0), points_per_chunk=128))
grid = simulate_grid.compute(config)
width = simulate_grid.summaries(grid, config)["width"][0]      # [M, S]
edges = simulate_grid.r_edges(config)[0]        # Lemma 2: E r = -2, +2
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
panels = ((width, f"tokens with $\\rho_i > 1/2$ (of T = {config.seq_len})",
           "viridis", (0, config.seq_len)),
          (grid["entropy"][0], "attention entropy [nats]", "cividis",
           (0, np.log(config.seq_len))))
for ax, (values, label, cmap, (lo, hi)) in zip(axes, panels):
  mesh = ax.pcolormesh(grid["eigen_means"], grid["eigen_stds"], values.T,
                       cmap=cmap, vmin=lo, vmax=hi, shading="nearest")
  ax.set_yscale("log")
  for edge in edges:                  # labelled on their outer side
    ax.axvline(edge, color="w", ls="--", lw=1)
    ax.text(edge, 0.03, f" $E\\,r = {2 * np.sign(edge):+.0f}$ ", color="w",
            fontsize=9, ha="right" if edge < 0 else "left",
            transform=ax.get_xaxis_transform())
  ax.set(xlabel="eigen_mean", ylabel="eigen_std", title=label)
  fig.colorbar(mesh, ax=ax)
fig.suptitle(f"Fig. 5 on a {config.num_eigen_means} x "
             f"{config.num_eigen_stds} grid: d = {config.dim}, "
             f"{config.num_draws} $W_{{QK}}$ draws x "
             f"{config.num_sequences} walks per point")
plt.show()
print(f"tokens propagating: {int(width.min())} to {int(width.max())}; "
      f"entropy {grid['entropy'].min():.2f} to {grid['entropy'].max():.2f} "
      f"nats; {grid['compile_s']:.1f} s to compile, {grid['run_s']:.2f} s "
      "to run")

# %% [markdown]
# ## 4. The Sec. 2 model without and with LocATER
#
# LocATER adds $\kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK}) + \kappa_2
# (\mathrm{tr}\,W_{QK} - \tau)^2$ to the loss (Sec. 6): it shrinks the
# scale $\mathrm{tr}(W_{QK}^\top W_{QK})$ and holds the trace at $\tau$,
# so that the spectrum concentrates. `configs/theory_task.py` trains the
# paper's single-layer model on random walks (predict $x_{T+1}$), three
# members side by side in one vmapped program: no LocATER, the paper's
# $\kappa_1 = 100, \kappa_2 = 1, \tau = 1$, and a localizing
# $\kappa_1 = \kappa_2 = 100, \tau = 12$; here at its `smoke` sizes. The
# penalty alone has its minimum at $W^* = cI$
# (`locater.penalty_minimum`): the paper's strengths pull $W_{QK}$ to a
# tiny $W^*$ and attention towards uniform, while $\tau = 12$ raises
# $\mathrm{tr}\,W_{QK}$ past Lemma 2's $r = 2$ and attention localizes.

# %%
config = args.load_config_file(ROOT / "configs" / "theory_task.py", "smoke")
config.num_steps = 100 if QUICK else 1_000
config.log_every = 10
config.eval_every = config.checkpoint_every = config.num_steps
with tempfile.TemporaryDirectory() as workdir:
  loop.train_and_evaluate(config, workdir)
  members = rundir.load_members(workdir)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), layout="constrained")
panels = (("train/loss", "train loss (squared error)", "linear"),
          ("mean/qk_scale", "scale tr($W_{QK}^\\top W_{QK}$)", "log"),
          ("mean/entropy", "attention entropy [nats]", "linear"))
for ax, (key, label, yscale) in zip(axes, panels):
  for member, name in zip(members, rundir.member_names(members)):
    ax.plot(*member["metrics"][key], label=name)
  ax.set(xlabel="step", ylabel=label, yscale=yscale)
axes[2].axhline(np.log(config.data.seq_len), color="k", ls=":",
                label="ln T (uniform attention)")
axes[2].legend(fontsize=8)
fig.suptitle(f"The Sec. 2 model, d = {config.model.d_model}, "
             f"T = {config.data.seq_len}: three members in one program")
plt.show()

rows = []
for m in members:
  minimum = locater.penalty_minimum(m["kappa1"], m["kappa2"],
                                    config.model.d_model, m["target"])
  rows.append(dict(
      kappa1=m["kappa1"], kappa2=m["kappa2"], target=m["target"],
      **{k.split("/")[1]: rundir.final_value(m["metrics"], k) for k in (
          "train/loss", "mean/qk_trace", "mean/qk_scale", "mean/entropy")},
      min_trace=float(minimum.trace), min_scale=float(minimum.scale)))
print("Last step, and LocATER's own minimum W* = cI (min_*; none without "
      "LocATER):")
print(outputs.format_table(rows))

# %% [markdown]
# ## 5. Your own Flax model
#
# `qkspec.for_flax` finds the attention layers of a Flax model by their
# query and key kernels. Below, a small Llama-style causal transformer
# (RMSNorm, grouped-query attention with Flax's own
# `nnx.MultiHeadAttention(num_kv_heads=...)`: 4 query heads read 2 key
# heads, and a SwiGLU MLP), written without qkspec, learns to write out the
# sorted copy of its first $n$ tokens. LocATER is one more term of its loss;
# `spectrum_table` reads the spectra from the parameters, and
# `attention_table` measures entropy and $\rho_i$ per layer and head from
# one run of the unmodified model. Expect LocATER to hold every head's
# $\mathrm{tr}\,W_{QK}$ near $\tau = 1$, so that $r = \mathrm{tr}(W)/\lambda$
# stays well below Lemma 2's 2: nearly every key propagates and the
# entropy rises, while the task is still learnt.

# %%
class Block(nnx.Module):
  """x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))."""

  def __init__(self, d, heads, kv_heads, *, rngs):
    self.norm1 = nnx.RMSNorm(d, rngs=rngs)
    self.attn = nnx.MultiHeadAttention(
        num_heads=heads, num_kv_heads=kv_heads, in_features=d,
        use_bias=False, decode=False, rngs=rngs)
    self.norm2 = nnx.RMSNorm(d, rngs=rngs)
    self.gate = nnx.Linear(d, 2 * d, use_bias=False, rngs=rngs)
    self.up = nnx.Linear(d, 2 * d, use_bias=False, rngs=rngs)
    self.down = nnx.Linear(2 * d, d, use_bias=False, rngs=rngs)

  def __call__(self, x, mask):
    x = x + self.attn(self.norm1(x), mask=mask)
    h = self.norm2(x)
    return x + self.down(nnx.silu(self.gate(h)) * self.up(h))


class TinyLM(nnx.Module):
  """Token and position embeddings, causal blocks, logits [B, T, V]."""

  def __init__(self, vocab, d, heads, kv_heads, layers, max_len, *, rngs):
    self.embed = nnx.Embed(vocab, d, rngs=rngs)
    self.pos = nnx.Embed(max_len, d, rngs=rngs)
    self.blocks = nnx.List([Block(d, heads, kv_heads, rngs=rngs)
                            for _ in range(layers)])
    self.norm = nnx.RMSNorm(d, rngs=rngs)
    self.head = nnx.Linear(d, vocab, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens) + self.pos(jnp.arange(tokens.shape[-1]))
    mask = nnx.make_causal_mask(tokens)
    for block in self.blocks:
      x = block(x, mask)
    return self.head(self.norm(x))


V, n = 8, 6         # vocabulary; n tokens, then their sorted copy


def sequences(key, batch_size):
  """[B, 2n]: n uniform tokens followed by the same tokens sorted."""
  task = synthetic.sorting(key, batch_size, n, V)
  return jnp.concatenate([task["inputs"], task["targets"]], axis=-1)


def task_loss(model, tokens):
  """Cross-entropy (nats) of predicting the sorted half."""
  logits = model(tokens[:, :-1])[:, n - 1:]
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, tokens[:, n:]).mean()


@nnx.jit
def train_step(model, optimizer, tokens, hparams):
  def loss_fn(model):
    task = task_loss(model, tokens)
    penalty = for_flax.locater_penalty(model, hparams)        # LocATER
    return task + penalty, (task, penalty)
  (_, (task, penalty)), grads = nnx.value_and_grad(
      loss_fn, has_aux=True)(model)
  optimizer.update(model, grads)
  return task, penalty


num_steps = 30 if QUICK else 300
adam = optax.adam(3e-3)     # one instance: both runs share a compiled step
models = {}
for name, hparams in (
    ("without LocATER", locater.LocaterHParams(0.0, 0.0, 1.0)),
    ("with LocATER", locater.LocaterHParams(1e-2, 1e-2, 1.0))):
  model = TinyLM(V, 32, 4, 2, 2, 2 * n, rngs=nnx.Rngs(0))  # the same init
  optimizer = nnx.Optimizer(model, adam, wrt=nnx.Param)
  hparams = jax.tree.map(jnp.float32, hparams)   # traced: one compile
  for step in range(num_steps):
    task, penalty = train_step(model, optimizer,
                               sequences(jax.random.key(step), 64), hparams)
  models[name] = model
  print(f"{name}: task loss {float(task):.3f} nats + penalty "
        f"{float(penalty):.3f} after {num_steps} steps")

# %%
tokens = sequences(jax.random.key(10**6), 256)[:, :-1]
forward = nnx.jit(lambda model, tokens: model(tokens))
tables = {}
for name, model in models.items():
  spectra = for_flax.spectrum_table(model)
  attention = for_flax.attention_table(forward, model, tokens)
  tables[name] = attention
  print(f"{name}: for_flax.spectrum_table")
  print(outputs.format_table(spectra) + "\n")

# %%
fig, axes = plt.subplots(2, 2, figsize=(11, 5.6), layout="constrained",
                         gridspec_kw=dict(width_ratios=(1, 2.2)))
entropies = [r["entropy"] for rows in tables.values() for r in rows]
for (name, rows), (ax_entropy, ax_rho) in zip(tables.items(), axes):
  layers = sorted({r["path"] for r in rows})
  heads = 1 + max(r["head"] for r in rows)
  entropy = np.full((len(layers), heads), np.nan)
  for r in rows:
    entropy[layers.index(r["path"]), r["head"]] = r["entropy"]
  image = ax_entropy.imshow(entropy, cmap="cividis", vmin=min(entropies),
                            vmax=max(entropies))
  for (layer, head), value in np.ndenumerate(entropy):
    ax_entropy.text(head, layer, f"{value:.2f}", ha="center", va="center",
                    color="w" if value < np.mean(entropies) else "k")
  ax_entropy.set(xticks=range(heads), yticks=range(len(layers)),
                 yticklabels=layers, xlabel="head",
                 title=f"{name}: entropy")
  fig.colorbar(image, ax=ax_entropy, label="nats")
  rho = np.array([r["rho"] for r in rows])          # [layer x head, keys]
  image = ax_rho.imshow(rho, cmap="magma", vmin=0, vmax=1, aspect="auto",
                        extent=(0.5, rho.shape[1] + 0.5, len(rows) - 0.5,
                                -0.5))
  ax_rho.set(yticks=range(len(rows)),
             yticklabels=[f"{r['path']} h{r['head']}" for r in rows],
             xlabel="key position i (query: the last token)",
             title=f"{name}: $\\rho_i$ per layer and head")
  fig.colorbar(image, ax=ax_rho, label="$\\rho_i$")
plt.show()

# %% [markdown]
# ## 6. The reproduction's answer (Sec. 7, Fig. 6)
#
# `python launch/report.py` writes [REPRODUCTION.md](../REPRODUCTION.md)
# and `reproduction/summary.json` from the WikiText-2 runs of Figs. 6-12.
# Fig. 6's claims compare $\kappa_2 = 1$ with $\kappa_2 = 0$ at
# $\kappa_1 = 100$, seed by seed, under both readings of $\kappa$ (added to
# the mean loss as the paper writes it, or to fairseq's summed loss):
# below, each paired difference with its 95% interval over seeds, and the
# band of no practical effect.

# %%
def paired_differences(summary, figure="6"):
  """Fig. `figure`'s kappa2 0 -> 1 verdicts: {(quantity, reading): row}."""
  return {(v["quantity"], v["reading"]): v for v in summary["verdicts"]
          if v.get("figure") == figure and v.get("kind") == "kappa2"}


def pooled(summary):
  """The claims pooled over every cell: {(kind, quantity): Pooled}, the
  report's own record of each test (summary.json adds only `holds`)."""
  return {(v["kind"], v["quantity"]): pooled_tests.Pooled(**{
      k: x for k, x in v.items() if k != "holds"})
          for v in summary["pooled"] if v["reading"] == "both"}


with open(ROOT / "reproduction" / "summary.json") as f:
  summary = json.load(f)
fig6 = paired_differences(summary)
quantities = {"scale": "scale", "entropy": "entropy",
              "valid_ppl": "valid perplexity"}
units = {"scale": "scale tr($W_{QK}^\\top W_{QK}$)",
         "entropy": "attention entropy [nats]",
         "valid_ppl": "valid perplexity"}
readings = ("mean_loss", "summed_loss")
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), layout="constrained")
for ax, (quantity, label) in zip(axes, units.items()):
  for x, reading in enumerate(readings):
    v = fig6[quantity, reading]
    lo, hi = v["ci"]
    ax.fill_between([x - 0.3, x + 0.3], -v["minimal"], v["minimal"],
                    color="tab:green", alpha=0.25,
                    label="no practical effect" if x == 0 else None)
    ax.errorbar([x], [v["diff"]], yerr=[[v["diff"] - lo], [hi - v["diff"]]],
                fmt="o", color="k", capsize=4,
                label="mean, 95% interval" if x == 0 else None)
    ax.annotate(f"{v['verdict']}\n({v['n']} seeds)", (x, hi), fontsize=8,
                ha="center", xytext=(0, 6), textcoords="offset points")
  ax.axhline(0, color="0.5", lw=0.8)
  expected = "lower" if v["sign"] < 0 else "higher"
  ax.set(xticks=range(len(readings)), xlim=(-0.6, len(readings) - 0.4),
         xticklabels=[rundir.READING_NAMES[r] + " reading" for r in readings],
         ylabel=f"difference in {label}",
         title=f"{quantities[quantity]}: the paper expects it {expected}")
  ax.margins(y=0.3)
axes[0].legend(fontsize=8, loc="lower left")
fig.suptitle(f"Fig. 6: $\\kappa_2$ = {v['kappa2']:g} minus $\\kappa_2$ = 0 "
             f"at $\\kappa_1$ = {v['kappa1']:g}, paired by seed")
plt.show()

# %% [markdown]
# The first screen of REPRODUCTION.md in two sentences, pooled over the
# twelve figure x reading cells of Figs. 6 and 8-12, counted in independent
# units (cells that start from one initialisation count once):

# %%
claims = pooled(summary)
contrast = fig6["scale", "mean_loss"]
primary = [claims["kappa2", q] for q in quantities]
holding = sum(t.holds for t in primary)
print(f"kappa2 = 0 -> {contrast['kappa2']:g} at kappa1 = "
      f"{contrast['kappa1']:g} moves the " + "; the ".join(
          f"{word} {answer.ways(claims['kappa2', q])}"
          for q, word in quantities.items())
      + f". {holding or 'None'} of these directions holds after Holm's "
      f"correction over these {primary[0].size} primary claims (sign "
      "test p = " + ", ".join(f"{t.p:.2g}" for t in primary) + ").")
print("Beyond the paper, no LocATER -> LocATER moves the " + "; the ".join(
    f"{word} {answer.ways(claims['none', q])}"
    for q, word in quantities.items()) + ".")
