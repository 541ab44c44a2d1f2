"""Tests for qkspec.training.layer_stats: per-head xi, eta, r as logged."""
import tempfile

from absl.testing import absltest
import numpy as np

from qkspec.training import loop
from qkspec.training import metric_writer
from qkspec.training import model as model_lib
import training_fixtures


class MeasurementTest(absltest.TestCase):

  def test_logged_eta_and_r_use_the_head_temperature(self):
    # H = 2 heads of width D = d / 2: lambda = sqrt(D), not sqrt(d). The
    # logged xi, eta and r of each head equal Lemma 1's statistics of the
    # final W_QK with that lambda.
    c = training_fixtures.single_theory(num_steps=2, log_every=2, eval_every=2,
                                        checkpoint_every=2)
    c.model.num_heads, c.model.out_proj = 2, True
    d = c.model.d_model
    with tempfile.TemporaryDirectory() as tmp:
      state = loop.train_and_evaluate(c, tmp)
      m = metric_writer.read_metrics(tmp)
    w = np.asarray(model_lib.qk_matrices(state.params), np.float64)[0]
    sym = (w + np.swapaxes(w, -1, -2)) / 2
    trace = np.trace(sym, axis1=-2, axis2=-1)
    root = np.sqrt(np.einsum("hij,hji->h", sym, sym))
    lam = np.sqrt(d / 2)
    for h in range(2):
      np.testing.assert_array_equal(m[f"l0/h{h}/eta"][0], [0, 2])
      got = {k: m[f"l0/h{h}/{k}"][1][-1] for k in ("xi", "eta", "r")}
      np.testing.assert_allclose(got["xi"], trace[h] / root[h], rtol=1e-4)
      np.testing.assert_allclose(got["eta"], root[h] / lam, rtol=1e-4)
      np.testing.assert_allclose(got["r"], trace[h] / lam, rtol=1e-4,
                                 atol=1e-6)
      self.assertGreater(abs(got["eta"] - root[h] / np.sqrt(d)), 1e-3)


if __name__ == "__main__":
  absltest.main()
