"""The text parsers of the GPU benchmarks, on fixed compiler output.

bench/trace_summary.py names what a trace's fusions compute from the
optimised HLO, and bench/deviceless.py reads registers and spills from
`ptxas -v`: both read text no CPU test produces, so a format slip would
pass silently; here they read excerpts of the real thing (an H100
compile, bench/gpu_results.md (6)).
"""
import os
import sys

from absl.testing import absltest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import deviceless
import startup
import trace_summary

PTXAS = """\
ptxas info    : Compiling entry function 'input_reduce_fusion' for 'sm_90a'
ptxas info    : Function properties for input_reduce_fusion
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 32 bytes smem
ptxas info    : Compiling entry function 'xent_forward' for 'sm_90a'
ptxas info    : Function properties for xent_forward
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 167 registers, used 1 barriers
ptxas info    : Compiling entry function 'xent_dh' for 'sm_90a'
ptxas info    : Function properties for xent_dh
    496 bytes stack frame, 492 bytes spill stores, 480 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""

HLO = """\
HloModule jit_train_many, is_scheduled=true

%fused_computation.7 (param_0.1: f32[5,128,33278], param_1.2: f32[5,128,33278]) -> (f32[5,128,33278], f32[5,2377]) {
  %param_0.1 = f32[5,128,33278]{2,1,0} parameter(0)
  %param_1.2 = f32[5,128,33278]{2,1,0} parameter(1)
  %multiply.3 = f32[5,128,33278]{2,1,0} multiply(%param_0.1, %param_1.2), metadata={op_name="jit(train_many)/while/body/mul" source_file="/x/optax/_adam.py" source_line=12}
  %add.4 = f32[5,128,33278]{2,1,0} add(%multiply.3, %param_0.1), metadata={op_name="jit(train_many)/while/body/add" source_file="/x/optax/_adam.py" source_line=13}
  %reduce.5 = f32[5,2377]{1,0} reduce(%add.4, %constant.6), dimensions={1}, to_apply=%region_0
  ROOT %tuple.8 = (f32[5,128,33278]{2,1,0}, f32[5,2377]{1,0}) tuple(%add.4, %reduce.5)
}

ENTRY %main.9 (p0: f32[5,128,33278], p1: f32[5,128,33278]) -> f32[5,2377] {
  %p0 = f32[5,128,33278]{2,1,0} parameter(0)
  %p1 = f32[5,128,33278]{2,1,0} parameter(1)
  %input_add_reduce_fusion = (f32[5,128,33278]{2,1,0}, f32[5,2377]{1,0}) fusion(%p0, %p1), kind=kInput, calls=%fused_computation.7, metadata={op_name="jit(train_many)/while/body/add"}
  ROOT %gte = f32[5,2377]{1,0} get-tuple-element(%input_add_reduce_fusion), index=1
}
"""


class ParsersTest(absltest.TestCase):

  def test_ptxas_registers_and_spills_of_the_loss_kernels(self):
    self.assertEqual(deviceless.kernel_resources(PTXAS),
                     {"xent_forward": (167, 0), "xent_dh": (255, 492)})

  def test_ptx_instruction_counts_of_the_loss_kernels(self):
    report = ("PTX loop_pad_fusion wgmma=0 wait0=0 cp_async=0 tma=0\n"
              "PTX xent_forward_dh wgmma=16 wait0=2 cp_async=32 tma=0\n"
              + PTXAS)
    self.assertEqual(deviceless.kernel_instructions(report), {
        "xent_forward_dh": dict(wgmma=16, wait0=2, cp_async=32, tma=0)})
    self.assertEqual(deviceless.kernel_resources(report),
                     {"xent_forward": (167, 0), "xent_dh": (255, 492)})

  def test_ptxas_registers_spills_and_serialization_of_layer_kernels(self):
    report = PTXAS + (
        "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async "
        "instructions are serialized due to insufficient register resources "
        "for the function 'qkv_attention_backward'\n"
        "ptxas warning : Registers are spilled to local memory in function "
        "'qkv_attention_backward', 64 bytes spill stores, 64 bytes spill "
        "loads\n") + """\
ptxas info    : Compiling entry function 'qkv_attention_backward' for 'sm_90a'
ptxas info    : Function properties for qkv_attention_backward
    64 bytes stack frame, 64 bytes spill stores, 64 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 64 bytes cumulative stack size
ptxas info    : Compiling entry function 'ffn_norm' for 'sm_90a'
ptxas info    : Function properties for ffn_norm
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 126 registers, used 1 barriers
"""
    self.assertEqual(
        deviceless.kernel_resources(report, deviceless.layer_kernel),
        {"qkv_attention_backward": (255, 64), "ffn_norm": (126, 0)})
    self.assertEqual(deviceless.serialized_wgmma(report),
                     {"qkv_attention_backward"})
    self.assertEqual(deviceless.serialized_wgmma(PTXAS), set())

  def test_fusion_named_by_what_it_computes(self):
    fusions = trace_summary.hlo_fusions(HLO)
    self.assertEqual(list(fusions), ["input_add_reduce_fusion"])
    text = fusions["input_add_reduce_fusion"].summary
    self.assertTrue(text.startswith(
        "(f32[5,128,33278]{2,1,0}, f32[5,2377]{1,0}) kInput: "), text)
    for op in ("multiply x1", "add x1", "reduce x1"):
      self.assertIn(op, text)
    self.assertNotIn("parameter", text)
    self.assertTrue(text.endswith(
        "from jit(train_many)/while/body/add (_adam.py:13)"), text)

  def test_kernels_of_the_step_loops_body(self):
    """The entry's while body: its fusions, custom calls and copies count,
    its tuple plumbing does not; a fusion's inner ops, the condition and
    the entry's own kernels do not."""
    loop = """\
%body.1 (arg: (s32[], f32[4])) -> (s32[], f32[4]) {
  %arg = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %x = f32[4]{0} get-tuple-element(%arg), index=1
  %f1 = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_computation.7
  %f2 = (f32[4]{0}, s32[]) fusion(%f1, %i), kind=kInput, calls=%fused_computation.7
  %g = f32[4]{0} get-tuple-element(%f2), index=0
  %cc = f32[4]{0} custom-call(%g), custom_call_target="__gpu$xla.gpu.triton"
  %c = f32[4]{0} copy(%cc)
  %b = f32[4]{0} bitcast(%c)
  ROOT %t = (s32[], f32[4]{0}) tuple(%i, %b)
}

%cond.2 (arg.1: (s32[], f32[4])) -> pred[] {
  %arg.1 = (s32[], f32[4]{0}) parameter(0)
  ROOT %lt = pred[] fusion(%arg.1), kind=kLoop, calls=%fused_computation.7
}

ENTRY %main.3 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %z = s32[] constant(0)
  %t0 = (s32[], f32[4]{0}) tuple(%z, %p)
  %w = (s32[], f32[4]{0}) while(%t0), condition=%cond.2, body=%body.1
  %out = f32[4]{0} get-tuple-element(%w), index=1
  ROOT %last = f32[4]{0} fusion(%out), kind=kLoop, calls=%fused_computation.7
}
"""
    self.assertEqual(trace_summary.loop_kernels(loop),
                     {"fusion": 2, "custom-call": 1, "copy": 1})
    self.assertEqual(trace_summary.loop_kernels(HLO), {})   # no loop
    # a program without a loop: the entry computation's own kernels
    self.assertEqual(trace_summary.entry_kernels(HLO), {"fusion": 1})
    self.assertEqual(trace_summary.describe_kernels(
        trace_summary.loop_kernels(loop)),
        "4 kernels (fusion 2, custom-call 1, copy 1)")

  def test_config_overrides_are_literals_or_strings(self):
    self.assertEqual(startup.parse_override("model.fused_qkv=False"),
                     ("model.fused_qkv", False))
    self.assertEqual(startup.parse_override("model.attention_impl=xla"),
                     ("model.attention_impl", "xla"))
    self.assertEqual(startup.parse_override("steps_per_call=250"),
                     ("steps_per_call", 250))

  def test_bytes_of_an_hlo_shape(self):
    self.assertEqual(deviceless.hlo_bytes("(f32[5,128]{1,0}, pred[5]{0})"),
                     5 * 128 * 4 + 5)
    self.assertEqual(deviceless.hlo_bytes("bf16[3,4]{1,0}"), 24)
    self.assertEqual(deviceless.hlo_bytes("f32[]"), 4)


if __name__ == "__main__":
  absltest.main()
