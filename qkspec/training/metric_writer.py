"""A small metric writer: JSONL (+ TensorBoard if installed).

clu's MetricWriter method names without clu (which imports TensorFlow).
Writes `<logdir>/metrics.jsonl` (a JSON object per write, `{"step": s,
...}`, arrays as lists), `hparams.json` and, if `tensorboard` is
importable, scalar event files. A resumed run drops the records past its
checkpoint (`drop_records_after`); its event file starts with a
`SessionLog.START` at its first step, from which TensorBoard discards the
older events (as PyTorch's `SummaryWriter(purge_step=...)`).
"""
import json
import math
import os
import time
from typing import Any, Mapping

from absl import logging
import numpy as np

JSONL = "metrics.jsonl"


def _tensorboard_writer(logdir, purge_step=None):
  try:
    # pylint: disable=g-import-not-at-top
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.summary.writer import event_file_writer
  except ImportError:
    return None
  writer = event_file_writer.EventFileWriter(logdir)
  if purge_step is not None:
    writer.add_event(event_pb2.Event(
        wall_time=time.time(), step=int(purge_step),
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

  def write(step, scalars):
    values = [summary_pb2.Summary.Value(tag=k, simple_value=float(v))
              for k, v in scalars.items()]
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                     summary=summary_pb2.Summary(value=values)))
  return writer, write


def _plain(v: Any) -> Any:
  if hasattr(v, "__array__"):
    v = np.asarray(v).tolist()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)                          # JSON has no NaN/Inf
  return v


class MetricWriter:
  """Writes scalars and arrays to `<logdir>/metrics.jsonl` and scalars to
  TensorBoard if it is importable; `purge_step`: a resumed run's first new
  step."""

  def __init__(self, logdir: str, *, purge_step: int | None = None):
    self.logdir = logdir
    os.makedirs(logdir, exist_ok=True)
    # Line-buffered: every record reaches the disk as it is written, so an
    # interrupted or killed run loses no metrics.
    self._file = open(os.path.join(logdir, JSONL), "a", encoding="utf-8",
                      buffering=1)
    self._tb = _tensorboard_writer(logdir, purge_step)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]):
    scalars = {k: float(v) for k, v in scalars.items()}
    self.write_arrays(step, scalars)
    if self._tb is not None:
      self._tb[1](step, scalars)

  def write_arrays(self, step: int, arrays: Mapping[str, Any]):
    """Vector-valued metrics (JSONL only)."""
    self._file.write(json.dumps(
        {"step": int(step), **{k: _plain(v) for k, v in arrays.items()}})
                     + "\n")

  def write_hparams(self, hparams: Mapping[str, Any]):
    with open(os.path.join(self.logdir, "hparams.json"), "w",
              encoding="utf-8") as f:
      json.dump({k: _plain(v) for k, v in hparams.items()}, f, indent=1,
                default=str)

  def flush(self):
    self._file.flush()
    if self._tb is not None:
      self._tb[0].flush()

  def close(self):
    self._file.close()
    if self._tb is not None:
      self._tb[0].close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def drop_records_after(logdir: str, step: int) -> int:
  """Rewrites `metrics.jsonl` atomically without the records past `step`
  or unreadable lines (cut short by a kill); their count."""
  path = os.path.join(logdir, JSONL)
  if not os.path.exists(path):
    return 0
  with open(path, encoding="utf-8") as f:
    lines = [line for line in f if line.strip()]
  keep = []
  for line in lines:
    try:
      if json.loads(line)["step"] <= step:
        keep.append(line if line.endswith("\n") else line + "\n")
    except (ValueError, KeyError, TypeError):
      pass
  dropped = len(lines) - len(keep)
  if dropped:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
      f.writelines(keep)
    os.replace(tmp, path)
  return dropped


def open_writers(dirs: list[str], keep_to: int, lead: bool
                 ) -> list[MetricWriter]:
  """A writer per member directory for a run resuming after step `keep_to`
  (-1: fresh), the records past it dropped (those steps run again); none
  but on the `lead` process, which writes the files."""
  if not lead:
    return []
  dropped = sum(drop_records_after(d, keep_to) for d in dirs)
  if dropped:
    logging.info("dropped %d metric records past step %d (written after the "
                 "checkpoint; those steps run again)", dropped, keep_to)
  return [MetricWriter(d, purge_step=keep_to + 1) for d in dirs]


def read_metrics(logdir: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """`metrics.jsonl` -> {name: (steps int[n], values [n, ...])}; a step
  written twice keeps the last value."""
  series: dict[str, dict[int, Any]] = {}
  with open(os.path.join(logdir, JSONL), encoding="utf-8") as f:
    for line in f:
      if not line.strip():
        continue
      rec = json.loads(line)
      step = rec.pop("step")
      for k, v in rec.items():
        series.setdefault(k, {})[step] = float(v) if isinstance(v, str) else v
  out = {}
  for k, by_step in series.items():
    steps = np.array(sorted(by_step))
    out[k] = (steps, np.array([by_step[s] for s in steps], dtype=np.float64))
  return out
