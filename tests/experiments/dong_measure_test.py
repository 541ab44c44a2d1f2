"""Tests for qkspec.experiments.dong_measure: the task SANs' training configs
and measurements."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import schema
from qkspec.experiments import dong_measure
from qkspec.theory import spectrum
from qkspec.training import model as model_lib
from qkspec.training import san_model
import testutil


def _train_config(variant="san_skip_mlp"):
  config = testutil.get_config("dong_trained", "smoke")
  return config, dong_measure.train_config(config, "sorting", variant)


class TrainConfigTest(absltest.TestCase):

  def test_carries_the_experiment_fields(self):
    config, tc = _train_config()
    schema.validate(tc)
    self.assertEqual((tc.task, tc.data.name), ("synthetic", "sorting"))
    self.assertEqual((tc.model.skip, tc.model.mlp), (True, True))
    self.assertEqual(
        (tc.model.num_layers, tc.model.num_heads, tc.model.d_model,
         tc.model.ffn_dim, tc.data.seq_len, tc.data.vocab_size, tc.opt.lr,
         tc.num_steps),
        (config.num_layers, config.num_heads, config.d_model,
         config.mlp_dim, config.seq_len, config.vocab_size, config.lr,
         config.num_steps))
    self.assertEqual(tc.sweep.seed, tuple(
        config.seed + i for i in range(config.num_seeds)))
    self.assertFalse(_train_config("san_skip")[1].model.mlp)


class MeasureTest(absltest.TestCase):

  def test_measures_agree_with_the_full_network_and_spectrum(self):
    _, tc = _train_config()
    lam = model_lib.attention_temperature(tc.model)
    model = san_model.make_classifier(tc.model, tc.data.vocab_size,
                                      tc.data.seq_len, lam)
    example = jnp.zeros((1, tc.data.seq_len), jnp.int32)
    params = model.init(jax.random.key(0), example)["params"]
    out = jax.device_get(dong_measure.measure_one(
        params, params, dong_measure.eval_data(tc),
        arch=san_model.architecture(tc.model), lam=lam,
        mlp_dim=tc.model.ffn_dim))
    # the paths of every length <= L are the whole network
    np.testing.assert_allclose(out["acc_k"][-1], out["full_acc"])
    np.testing.assert_allclose(out["loss_k"][-1], out["full_loss"],
                               rtol=1e-5)
    self.assertEqual(out["knockout_acc"].shape, (tc.model.num_layers,))
    stats = spectrum.spectrum_stats(
        san_model.san_params(params, tc.model.ffn_dim)["w_qk"],
        temperature=lam)
    for k in ("trace", "scale", "xi", "eta"):     # trained == init here
      np.testing.assert_allclose(out[f"spectrum/trained/{k}"], stats[k],
                                 rtol=1e-6)
      np.testing.assert_array_equal(out[f"spectrum/trained/{k}"],
                                    out[f"spectrum/init/{k}"])
    for name in dong_measure.EVAL_ARCHS:
      res = out[f"rel_res/trained/{name}"]
      self.assertEqual(res.shape, (tc.model.num_layers + 1,))
      np.testing.assert_array_equal(res, out[f"rel_res/init/{name}"])


if __name__ == "__main__":
  absltest.main()
