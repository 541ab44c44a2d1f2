"""Tests for qkspec.experiments.theory_rho: Lemma 2's table, Figs. 2-3."""
import itertools
import json
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from scipy import special  # pylint: disable=g-import-not-at-top,wrong-import-position

from qkspec.theory import propagation  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import outputs  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import theory_rho  # pylint: disable=g-import-not-at-top,wrong-import-position
import testutil  # pylint: disable=g-import-not-at-top,wrong-import-position


def _eq6_rho(theta, xi, eta, variant):
  """Eq. (6) in float64 NumPy: c(theta) = 2 theta^2 + 7/12 as printed,
  less 2 theta re-derived ("corrected")."""
  c = 2 * theta**2 + 7 / 12 - (2 * theta if variant == "corrected" else 0)
  root, z = np.sqrt(2 * c), (theta - 0.5) * xi
  return 0.5 * (special.erf(z / root) - special.erf((z - 1 / eta) / root))


def _eq6_slope(theta, xi, eta, variant, h=1e-6):
  return (_eq6_rho(theta + h, xi, eta, variant)
          - _eq6_rho(theta - h, xi, eta, variant)) / (2 * h)


def _lemma2_deviations(config) -> list[tuple[str, str, float, float]]:
  """(case, variant, max deviation, tolerance) of each Lemma 2 check of
  `theory_rho.lemma2_table`, in its order, computed here."""
  lem, out = config.lemma2, []
  theta = np.linspace(0.0, 1.0, config.num_theta)
  for variant in config.variants:
    for r in lem.r_values:                    # (1-2): |xi| -> inf, xi eta = r
      rho = _eq6_rho(theta, np.sign(r) * lem.xi, abs(r) / lem.xi, variant)
      edge = 0.5 + 1 / r
      limit = ((theta >= 0.5) & (theta <= edge) if r > 0
               else (theta >= edge) & (theta <= 0.5))
      keep = (np.abs(theta - 0.5) > lem.exclude) & (
          np.abs(theta - edge) > lem.exclude)
      case = ("1" if r > 0 else "2") + (
          " middle-site" if abs(r) > 2 else
          (" late-site" if r > 0 else " early-site"))
      if r < -2:
        case += " (mirrored)"
      out.append((case, variant, np.abs(rho - limit)[keep].max(), lem.tol))
    for eta in lem.uniform_etas:              # (3): rho' -> its xi = 0 value
      dev = np.abs(_eq6_slope(theta, min(lem.uniform_xis), eta, variant)
                   - _eq6_slope(theta, 0.0, eta, variant)).max()
      out.append(("3 uniformity (xi-part of rho')", variant, dev,
                  lem.slope_tol))
    for eta in lem.zero_xi_etas:              # (3) as printed: rho' -> 0
      out.append(("3 uniformity as printed (|rho'| at xi=0)", variant,
                  np.abs(_eq6_slope(theta, 0.0, eta, variant)).max(),
                  lem.slope_tol))
    for xi in lem.vanish_xis:                 # (4): rho -> 0 as eta -> inf
      out.append(("4 vanishing", variant,
                  np.abs(_eq6_rho(theta, xi, lem.vanish_eta, variant)).max(),
                  lem.tol))
  return [(case, variant, float(dev), tol) for case, variant, dev, tol in out]


def _overlapping_tick_labels(fig, gap_px=3.0):
  """Pairs of visible tick labels closer than `gap_px` after drawing."""
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  boxes = []
  for ax in fig.axes:
    for axis, index in ((ax.xaxis, 0), (ax.yaxis, 1)):
      low, high = sorted(axis.get_view_interval())
      for label in axis.get_ticklabels():
        inside = low - 1e-9 <= label.get_position()[index] <= high + 1e-9
        if inside and label.get_visible() and label.get_text():
          box = label.get_window_extent(renderer).expanded(1.0, 1.0)
          boxes.append((label.get_text(), box.padded(gap_px / 2)))
  return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2)
          if ba.overlaps(bb) and ba.width > 0 and bb.width > 0]


class TheoryTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = pathlib.Path(tempfile.mkdtemp()) / "theory"
    cls.addClassCleanup(shutil.rmtree, cls.workdir.parent, ignore_errors=True)
    cls.result = theory_rho.run(testutil.get_config("theory_rho", "smoke"),
                            cls.workdir)

  def test_writes_figures_tables_and_config(self):
    testutil.assert_files(self, self.workdir, [
        "config.json", "fig2_paper.png", "fig2_corrected.png",
        "fig2_compare.png", "fig3_localized.png", "fig2_rho.csv",
        "fig3_rho.json", "lemma2.csv", "lemma2.json"])
    rows = outputs.read_csv(self.workdir / "lemma2.csv")
    self.assertLen(rows, len(self.result["lemma2"]))
    saved = json.loads((self.workdir / "config.json").read_text())
    self.assertEqual(saved["num_theta"], 101)

  def test_lemma2_table_recomputed_from_eq6(self):
    """Each row of lemma2.csv: its deviation recomputed from Eq. (6) in
    NumPy (`_eq6_rho`, slopes by central differences) against Lemma 2's
    limits written here, and its `passed` column the verdict of that."""
    config = testutil.get_config("theory_rho", "smoke")
    rows = outputs.read_csv(self.workdir / "lemma2.csv")
    want = _lemma2_deviations(config)
    self.assertEqual([(r["case"], r["variant"]) for r in rows],
                     [(case, variant) for case, variant, _, _ in want])
    for row, (_, _, dev, tol) in zip(rows, want):
      np.testing.assert_allclose(float(row["max_abs_deviation"]), dev,
                                 rtol=1e-3, atol=2e-5, err_msg=str(row))
      self.assertEqual(float(row["tolerance"]), tol, row)
      self.assertEqual(row["passed"], str(dev <= tol), row)

  def test_lemma2_limits_hold_under_both_variants(self):
    checked = [(case, variant, dev, tol) for case, variant, dev, tol
               in _lemma2_deviations(testutil.get_config("theory_rho",
                                                         "smoke"))
               if not case.startswith("3 uniformity as printed")]
    self.assertLen({variant for _, variant, _, _ in checked}, 2)
    for case, variant, dev, tol in checked:
      self.assertLessEqual(dev, tol, (case, variant))

  def test_uniformity_as_printed_fails_at_moderate_eta(self):
    # Lemma 2.3 erratum: at xi = 0, rho = erf(1/(eta sqrt(2c(theta))))/2
    # still depends on theta, so |rho'| does not vanish at eta = 1.
    rows = [r for r in self.result["lemma2"]
            if r["case"].startswith("3 uniformity as printed")
            and r["parameters"] == "xi=0, eta=1"]
    self.assertLen(rows, 2)
    for row in rows:
      self.assertFalse(row["passed"], row)
      self.assertGreater(row["max_abs_deviation"], 0.2)

  def test_fig3_middle_site_band(self):
    theta = np.linspace(0.0, 1.0, 101)
    rho = self.result["fig3"][("corrected", 512.0, 0.01)]
    band = (theta > 0.52) & (theta < 0.5 + 1 / 5.12 - 0.02)
    outside = (theta < 0.48) | (theta > 0.5 + 1 / 5.12 + 0.02)
    np.testing.assert_allclose(rho[band], 1.0, atol=1e-3)
    np.testing.assert_allclose(rho[outside], 0.0, atol=1e-3)

  def test_fig2_grid_matches_rho_theta(self):
    maps = self.result["fig2"]["paper"]
    config = testutil.get_config("theory_rho", "smoke")
    chex.assert_shape(maps, (len(config.eta_values), config.num_xi,
                             config.num_theta))
    xi = jax.numpy.linspace(-config.xi_max, config.xi_max, config.num_xi)
    theta = jax.numpy.linspace(0.0, 1.0, config.num_theta)
    e, x = 1, 7
    np.testing.assert_allclose(
        maps[e, x], propagation.rho_theta(theta, xi[x], config.eta_values[e],
                                          "paper"), atol=1e-5)


class TheoryFiguresTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = testutil.get_config("theory_rho")
    theta = jnp.linspace(0.0, 1.0, 21)
    xi = jnp.linspace(-cls.config.xi_max, cls.config.xi_max, 11)
    eta = jnp.asarray(cls.config.eta_values, jnp.float32)
    cls.maps = {v: np.asarray(theory_rho.rho_theta_map(theta, xi, eta, v))
                for v in cls.config.variants}

  def tearDown(self):
    plt.close("all")
    super().tearDown()

  def test_fig2_uses_symbols_and_tick_labels_do_not_collide(self):
    figs = theory_rho.fig2_figures(self.maps, self.config)
    self.assertEqual(set(figs), {"fig2_paper", "fig2_corrected",
                                 "fig2_compare"})
    for stem, fig in figs.items():
      with self.subTest(stem):
        self.assertEqual(_overlapping_tick_labels(fig), [])
        texts = [ax.get_title() + ax.get_xlabel() + ax.get_ylabel()
                 for ax in fig.axes]
        self.assertTrue(any(r"$\eta$" in t for t in texts))
        self.assertTrue(any(r"$\xi$" in t for t in texts))
        self.assertTrue(any(r"$\theta" in t for t in texts))
        self.assertFalse([t for t in texts if "eta =" in t
                          and r"$\eta$" not in t])
        for ax in fig.axes:
          if ax.get_label() != "<colorbar>" and ax.get_subplotspec() and (
              ax.get_subplotspec().is_last_row()):
            self.assertEqual(ax.get_xlabel(), r"$\xi$")

  def test_fig3_labels(self):
    theta = np.linspace(0.0, 1.0, 11)
    curves = {(v, xi, eta): theta for v in self.config.variants
              for xi, eta in self.config.localized}
    fig = theory_rho.fig3_figure(theta, curves, self.config)
    for ax in fig.axes:
      self.assertEqual(ax.get_xlabel(), r"$\theta = i/T$")
      self.assertEqual(ax.get_ylabel(), r"$\rho(\theta)$")
    self.assertEqual(_overlapping_tick_labels(fig), [])


if __name__ == "__main__":
  absltest.main()
