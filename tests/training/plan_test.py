"""qkspec.training.plan: a run's members, names, layout and mesh, once."""
from absl.testing import absltest
import jax

from qkspec.training import plan as plan_lib
from qkspec.training import sweep
import testutil
import training_fixtures


class PlanTest(absltest.TestCase):

  def test_a_sweep(self):
    c = testutil.get_config("theory_task", "smoke")       # 3 members, zipped
    plan = plan_lib.make_plan(c)
    self.assertIs(plan.config, c)
    self.assertEqual(plan.members, tuple(sweep.members(c)))
    self.assertEqual(plan.names[1], "kappa1=100,kappa2=1,target=1")
    self.assertTrue(plan.vmapped)
    n = jax.device_count()
    self.assertEqual(plan.layout, sweep.layout(3, n, n > 1))
    self.assertEqual(plan.mesh.devices.size, n)

  def test_a_single_run_and_a_sweep_of_one(self):
    c = training_fixtures.single_theory()
    plan = plan_lib.make_plan(c)
    self.assertEqual((plan.names, plan.vmapped), (("run",), False))
    self.assertEqual((plan.layout.members, plan.layout.groups), (1, 1))
    self.assertEqual(plan.mesh.axis_names, ("data",))
    c.sweep.kappa2 = (0.5,)          # swept, with one value: stacked
    plan = plan_lib.make_plan(c)
    self.assertEqual((plan.names, plan.vmapped), (("kappa2=0.5",), True))


if __name__ == "__main__":
  absltest.main()
