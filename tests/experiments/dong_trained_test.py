"""Dong et al.'s trained-network experiments.

The SAN classifier (qkspec.training.san_model) trained on the sorting task
and the dong_trained experiment. The generators (qkspec.data.synthetic) are
tested in synthetic_test.py, the classifier's forward pass in
san_model_test.py, restricted-path evaluation (qkspec.theory.path_eval) in
path_eval_test.py.
"""
# pylint: disable=invalid-name
import pathlib
import tempfile

from absl.testing import absltest
import jax
import numpy as np

from qkspec.data import synthetic
from qkspec.experiments import dong_measure
from qkspec.experiments import dong_trained
from qkspec.experiments import outputs
from qkspec.theory import san_paths
from qkspec.training import loop
from qkspec.training import model as model_lib
from qkspec.training import san_model
import testutil
import training_fixtures


# Sorting (T = 4, V = 4, chance 0.25) with a 2-layer skip SAN + MLP after
# SORT_STEPS updates reaches at least SORT_MIN_ACC token accuracy on held-out
# sequences (measured: SORT_MEASURED; the bound leaves room for platform
# noise but fails for a model that does not learn).
SORT_STEPS = 300
SORT_MIN_ACC = 0.9
SORT_MEASURED = 1.0   # on a 2-core CPU, seed 0 (run with -s to print it)


class TrainedTest(absltest.TestCase):

  @testutil.slow("600 training steps of a task SAN")
  def test_training_on_sorting_reaches_the_stated_accuracy(self):
    c = training_fixtures.sorting_config(SORT_STEPS)
    with tempfile.TemporaryDirectory() as tmp:
      state = loop.train_and_evaluate(c, tmp)
    batch = dong_measure.eval_data(c)
    model = san_model.make_classifier(
        c.model, 4, 4, model_lib.attention_temperature(c.model))
    logits = jax.jit(model.apply)({"params": state.params}, batch["inputs"])
    acc = float(synthetic.token_accuracy(logits, batch["targets"]))
    print(f"sorting accuracy after {SORT_STEPS} steps: {acc:.4f}")
    self.assertGreaterEqual(acc, SORT_MIN_ACC)

  @testutil.slow("the experiment's smoke run: four trainings")
  def test_smoke_experiment_writes_consistent_tables(self):
    config = testutil.get_config("dong_trained", "smoke")
    with tempfile.TemporaryDirectory() as tmp:
      out = dong_trained.run(config, tmp)
      for name in ("path_eval.csv", "rank_trained.csv", "layer_spectra.csv",
                   "summary.csv", "fig_paths_trained.png",
                   "fig_rank_trained.png"):
        self.assertTrue((pathlib.Path(tmp) / name).exists(), name)
      rows = outputs.read_csv(pathlib.Path(tmp) / "path_eval.csv")
    L = config.num_layers
    self.assertLen(rows, L + 1)
    # Paths of length <= L are the full network (per seed: exact scores).
    m = out["raw"][("sorting", "san_skip_mlp")]
    np.testing.assert_allclose(m["acc_k"][:, L], m["full_acc"], atol=1e-6)
    np.testing.assert_allclose(m["loss_k"][:, L], m["full_loss"], rtol=1e-5)
    np.testing.assert_allclose(
        [float(r["path_fraction"]) for r in rows],
        san_paths.path_length_fractions(L, config.num_heads))
    # Removing the skips of a trained 2-layer SAN shrinks the residual.
    ranks = {(r["weights"], r["eval_arch"], r["layer"]): r["rel_res"]
             for r in out["rank_trained"]}
    self.assertLess(ranks[("trained", "pure_san", L)],
                    ranks[("trained", "as_trained", L)])

  def test_bad_config_names_the_field(self):
    config = testutil.get_config("dong_trained", "smoke")
    config.tasks = ("sorting", "convex_hull")
    with self.assertRaisesRegex(ValueError, "config.tasks"):
      dong_trained.run(config, "/nonexistent/never/written")

  def test_spearman(self):
    self.assertAlmostEqual(dong_trained.spearman([1, 2, 3, 4], [1, 4, 9, 16]),
                           1.0)
    self.assertAlmostEqual(dong_trained.spearman([1, 2, 3], [3, 2, 1]), -1.0)
    self.assertTrue(np.isnan(dong_trained.spearman([1, 2], [2, 1])))


if __name__ == "__main__":
  absltest.main()
