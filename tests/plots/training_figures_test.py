"""Tests for qkspec.plots.training_figures: labels, axes, coinciding."""
from absl.testing import absltest
from absl.testing import parameterized
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from qkspec.plots import training_figures  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.records import rundir  # pylint: disable=g-import-not-at-top,wrong-import-position

_STEPS = np.arange(0, 101, 10)


def _member(kappa1=0.0, kappa2=0.0, target=1.0, seed=0, shift=0.0,
            layers=1, heads=1, lm=False):
  """A members.json entry with synthetic metrics ({name: (steps, values)})."""
  s = _STEPS.astype(float)
  decay = np.exp(-s / 30.0)
  metrics = {
      "train/loss": (_STEPS, 200.0 * decay + 8.0 + shift),   # > 1 decade
      "mean/qk_scale": (_STEPS, 3.0 * 10 ** (-3 * s / 100) + shift),
      "mean/entropy": (_STEPS, 1.8 + 0.1 * decay + shift),
      "mean/qk_trace": (_STEPS, -2.0 * (1 - decay) + shift),
      "mean/eigen_variance": (_STEPS, 20.0 * decay + 1.0 + shift),
      "l0/rho": (_STEPS, np.linspace(0, 1, len(_STEPS) * 8).reshape(-1, 8)),
  }
  metrics["valid/ppl" if lm else "valid/loss"] = (
      _STEPS[1:], 9.0 + decay[1:] + shift)
  for l in range(layers):
    metrics[f"l{l}/rank_residual"] = (_STEPS, 0.5 + 0.01 * l + 0 * s)
    for h in range(heads):
      unit = f"l{l}" if heads == 1 else f"l{l}/h{h}"
      metrics[f"{unit}/qk_trace"] = (_STEPS, -2.0 * (1 - decay) + h + shift)
  name = f"kappa1={kappa1:g},kappa2={kappa2:g},target={target:g}"
  return dict(name=name, dir=name, seed=seed, kappa1=kappa1, kappa2=kappa2,
              target=target, metrics=metrics)


def _theory_members():
  return [_member(0, 0, 1), _member(100, 1, 1, shift=0.5),
          _member(100, 100, 12, shift=1.0)]


def _sweep_members():
  return [_member(1, k2, shift=0.1 * i)
          for i, k2 in enumerate((0.0, 1e-3, 1e-2, 0.1, 1.0))]


def _data_axes(fig):
  """The visible axes that hold data (colorbars included)."""
  return [ax for ax in fig.axes if ax.get_visible()]


def _assert_labelled(test, fig):
  for ax in _data_axes(fig):
    if ax.get_label() == "<colorbar>":
      test.assertTrue(ax.get_ylabel() or ax.get_xlabel(), "colorbar label")
      continue
    test.assertTrue(ax.get_xlabel().strip(), f"x label of {ax.get_title()}")
    test.assertTrue(ax.get_ylabel().strip(), f"y label of {ax.get_title()}")


class DecisionTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("theory_task", [dict(kappa1=0, kappa2=0, target=1),
                       dict(kappa1=100, kappa2=1, target=1),
                       dict(kappa1=100, kappa2=100, target=12)], "member"),
      ("kappa1_varies", [dict(kappa1=0, kappa2=1), dict(kappa1=1, kappa2=1)],
       "member"),
      ("target_and_kappa2", [dict(kappa2=0, target=1),
                             dict(kappa2=1, target=2)], "member"),
      ("seed_and_kappa2", [dict(kappa2=0, seed=0), dict(kappa2=1, seed=1)],
       "member"),
      ("kappa2_sweep", [dict(kappa1=1, kappa2=k) for k in (0, 0.1, 1)],
       "kappa2"),
      ("kappa2_under_both_readings",       # one line per reading
       [dict(kappa2=k, penalty_added_to=r) for k in (0, 1)
        for r in ("mean_loss", "summed_loss")], "kappa2"),
      ("seed_and_reading", [dict(kappa2=1, seed=s, penalty_added_to=r)
                            for s, r in ((0, "mean_loss"),
                                         (1, "summed_loss"))], "member"),
      ("one_member", [dict(kappa2=1)], None),
      ("identical", [dict(kappa2=1), dict(kappa2=1)], None),
  )
  def test_final_values_axis(self, members, expected):
    self.assertEqual(training_figures.final_values_axis(members), expected)


  def test_coinciding(self):
    a = np.array([1.0, 2.0, 3.0])
    groups = training_figures.coinciding(
        [a, a * (1 + 1e-8), a + 1.0, None, a + 1.0])
    self.assertEqual(groups, [[0, 1], [2, 4]])
    self.assertEqual(training_figures.coinciding([a, a + 1e-3]), [])
    # Indistinguishable on an axis spanning [1, 4]: 1e-3 < 2e-3 * 3.
    self.assertEqual(training_figures.coinciding(
        [a, a + 1e-3, a + 1.0], span_frac=2e-3), [[0, 1]])

  def test_coincide_note(self):
    a = np.array([1.0, 2.0])
    self.assertEqual(training_figures.coincide_note([a, a, a + 1]),
                     "curves 1=2 coincide (to 1e-6 rel.)")
    self.assertEqual(training_figures.coincide_note([a, a + 1e-4, a + 1]),
                     "curves 1=2 coincide at this scale")
    self.assertEqual(training_figures.coincide_note([a, a + 1]), "")


class TrainingFiguresTest(parameterized.TestCase):

  def tearDown(self):
    plt.close("all")
    super().tearDown()

  @parameterized.named_parameters(
      ("theory", _theory_members), ("sweep", _sweep_members),
      ("lm_two_layers", lambda: [_member(1, k, layers=2, lm=True)
                                 for k in (0.0, 1.0)]),
      ("two_heads", lambda: [_member(1, k, heads=2) for k in (0.0, 1.0)]))
  def test_every_axis_is_labelled(self, make_members):
    figs = training_figures.figures(make_members())
    self.assertEqual(set(figs), {"fig6_curves", "rho_heatmap",
                                 "training_curves", "fig6_vs_kappa2"})
    for stem, fig in figs.items():
      with self.subTest(stem):
        _assert_labelled(self, fig)

  def test_fig6_names_its_quantities(self):
    fig = training_figures.fig6_figure(_theory_members())
    labels = [ax.get_ylabel() for ax in fig.axes]
    self.assertEqual(labels, [r"tr$(W_{QK}^\top W_{QK})$",
                              "attention entropy (nats)", "valid loss"])
    fig = training_figures.fig6_figure([_member(lm=True)])
    self.assertEqual(fig.axes[2].get_ylabel(), "valid perplexity")
    self.assertStartsWith(fig.axes[0].get_title(),
                          "eigenspectrum scale (Fig. 6B)")
    fig = training_figures.fig6_figure([_member(lm=True)], figure="9")
    self.assertStartsWith(fig.axes[0].get_title(),         # App. D figure
                          "eigenspectrum scale (Fig. 9B)")

  def test_log_axes_have_labelled_ticks(self):
    fig = training_figures.fig6_figure(_theory_members())
    scale, entropy = fig.axes[0], fig.axes[1]
    self.assertEqual(scale.get_yscale(), "log")          # 3 decades
    self.assertEqual(entropy.get_yscale(), "linear")     # < 1 decade
    fig.canvas.draw()
    low, high = scale.get_ylim()
    shown = [t for t in scale.get_yticks() if low <= t <= high]
    labelled = [t for t in scale.get_yticklabels() if t.get_text()]
    self.assertGreaterEqual(len(shown), 3)
    self.assertGreaterEqual(len(labelled), 3)
    curves = training_figures.curves_figure(_theory_members())
    self.assertEqual(curves.axes[0].get_yscale(), "log")  # train loss

  def test_one_layer_one_head_has_no_duplicate_mean_panel(self):
    keys = [k for k, _, _ in training_figures.curve_panels(
        _member()["metrics"])]
    self.assertEqual([k for k in keys if k.endswith("qk_trace")],
                     ["mean/qk_trace"])
    self.assertLen(keys, len(set(keys)))
    fig = training_figures.curves_figure([_member()])
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    self.assertFalse([t for t in titles if t.startswith("mean")], titles)

  @parameterized.named_parameters(("two_layers", 2, 1, "l0"),
                                  ("two_heads", 1, 2, "l0/h0"))
  def test_several_units_keep_first_and_mean(self, layers, heads, first):
    keys = [k for k, _, _ in training_figures.curve_panels(
        _member(layers=layers, heads=heads)["metrics"])]
    self.assertEqual([k for k in keys if k.endswith("qk_trace")],
                     [f"{first}/qk_trace", "mean/qk_trace"])
    self.assertLen([k for k in keys if k.endswith("rank_residual")], layers)

  def test_theory_task_gets_a_categorical_axis(self):
    members = _theory_members()
    fig = training_figures.vs_kappa2_figure(members)
    for ax in fig.axes:
      self.assertEqual(ax.get_xscale(), "linear")
      self.assertNotIn("kappa_2$", ax.get_xlabel().split("(")[0])
      ticks = [t.get_text() for t in ax.get_xticklabels()]
      self.assertLen(ticks, 3)
      self.assertIn("target=12", ticks[2])
    self.assertIn("differ in", fig.get_suptitle())

  def test_kappa2_sweep_gets_a_kappa2_axis(self):
    fig = training_figures.vs_kappa2_figure(_sweep_members())
    for ax in fig.axes:
      self.assertEqual(ax.get_xscale(), "symlog")
      self.assertIn(r"$\kappa_2$", ax.get_xlabel())

  def test_both_readings_get_one_kappa2_line_each(self):
    members = [dict(_member(100, k, shift=0.1 * i + 0.5 * j),
                    penalty_added_to=r)
               for i, k in enumerate((0.0, 0.1, 1.0))
               for j, r in enumerate(("mean_loss", "summed_loss"))]
    fig = training_figures.vs_kappa2_figure(members)
    for ax in fig.axes:
      self.assertEqual(ax.get_xscale(), "symlog")
      lines = {l.get_label(): l for l in ax.get_lines()
               if not l.get_label().startswith("_")}
      self.assertEqual(set(lines), {"literal reading", "fairseq reading"})
      for line in lines.values():
        np.testing.assert_array_equal(line.get_xdata(), [0.0, 0.1, 1.0])
    # the literal line joins the literal members' values, in kappa2 order
    lit = {l.get_label(): l for l in fig.axes[1].get_lines()}[
        "literal reading"].get_ydata()
    np.testing.assert_allclose(lit, [rundir.final_value(
        m["metrics"], "mean/entropy") for m in members[::2]])
    plt.close(fig)

  def test_identical_members_get_no_vs_kappa2_figure(self):
    members = [_member(1, 1), _member(1, 1)]
    self.assertIsNone(training_figures.vs_kappa2_figure(members))
    self.assertNotIn("fig6_vs_kappa2", training_figures.figures(members))

  def test_coinciding_members_are_distinct_and_noted(self):
    members = [_member(1, k) for k in (0.0, 0.1, 1.0)]      # all identical
    fig = training_figures.fig6_figure(members)
    ax = fig.axes[0]
    styles = {(line.get_linestyle(), line.get_marker(), line.get_linewidth())
              for line in ax.get_lines()}
    self.assertLen(styles, 3)
    widths = [line.get_linewidth() for line in ax.get_lines()]
    self.assertEqual(widths, sorted(widths, reverse=True))  # later thinner
    self.assertIn("curves 1=2=3 coincide", ax.get_title())
    other = training_figures.fig6_figure(_theory_members())
    self.assertNotIn("coincide", other.axes[0].get_title())

  def test_heatmap_colorbar_is_beside_the_panels(self):
    fig = training_figures.rho_heatmap_figure(_theory_members())
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    right = max(ax.get_position().x1 for ax in panels)
    self.assertLess(bar.get_position().x0 - right, 0.05)   # no empty strip
    self.assertGreater(right - panels[0].get_position().x0, 0.75)


if __name__ == "__main__":
  absltest.main()
