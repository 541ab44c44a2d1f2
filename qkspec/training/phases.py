"""Where an invocation's wall time goes: setup, compilation, steps, ...

A 50,000-step GPU run spends most of its time in steps, but its wall time
also holds the setup (data, initialisation or restore), the compilation of
the train step, the periodic evaluations, logs and checkpoints, and the
final wait for the last checkpoint. `PhaseClock` adds up the wall seconds
of each; the loop (`qkspec.training.loop`) wraps each part in
`clock.phase(name)`, writes `clock.summary()` to run_info.jsonl
("phases_s") and logs `clock.describe()` at the end.

Device work runs asynchronously, so the loop waits for the state to be
ready (in "steps") before it runs the actions due at a step: an action's
phase then holds its own work, not the steps queued before it. It only
waits where an action is due, and every action either reads the device
(log, evaluation, checkpoint) or is cheap, so the run syncs no more often
than without the clock. The first dispatch of a compiled step is
"compile" (jax compiles it before it returns; with `config.precompile` it
waits there for the worker that compiles it, `qkspec.training.precompile`,
so "compile" is the compilation the run could not hide behind its setup);
whatever no phase holds is "other".
"""
import contextlib
import time

PHASES = ("setup", "compile", "steps", "eval", "log", "checkpoint",
          "finish")


class PhaseClock:
  """Wall seconds per named phase of one invocation, from `t0`."""

  def __init__(self, t0: float | None = None, clock=time.time):
    self._clock = clock
    self.t0 = clock() if t0 is None else t0
    self.seconds: dict[str, float] = {}

  def elapsed(self) -> float:
    """Wall seconds since t0."""
    return self._clock() - self.t0

  def add(self, name: str, seconds: float) -> None:
    if name not in PHASES:
      raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
    self.seconds[name] = self.seconds.get(name, 0.0) + seconds

  @contextlib.contextmanager
  def phase(self, name: str):
    """Adds the wall time of the `with` body to phase `name`."""
    start = self._clock()
    try:
      yield
    finally:
      self.add(name, self._clock() - start)

  def summary(self) -> dict[str, float]:
    """{phase: seconds} in PHASES order (those that ran), and "other": the
    wall time since t0 that no phase holds."""
    out = {k: round(self.seconds[k], 1) for k in PHASES if k in self.seconds}
    out["other"] = round(max(self.elapsed() - sum(self.seconds.values()),
                             0.0), 1)
    return out

  def describe(self) -> str:
    """"wall 159.1 s: setup 4.2, compile 11.3, steps 124.0, ..." """
    parts = ", ".join(f"{k} {v:.1f}" for k, v in self.summary().items())
    return f"wall {self.elapsed():.1f} s: {parts}"
