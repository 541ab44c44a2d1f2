r"""Where a train step's GPU time goes, from a `jax.profiler` Perfetto trace.

  python bench/trace_summary.py TRACE.json.gz [TRACE2.json.gz ...]

Reads the Chrome/Perfetto JSON that `jax.profiler.trace(...,
create_perfetto_trace=True)` writes (bench/gpu_paper.py --stages trace), takes
the complete events ("ph": "X") of the GPU stream threads, and prints per
trace: the wall span, the GPU busy time (union of kernel intervals) and so
the idle fraction (launch gaps, host work), then the kernel time by kind:
matmul (gemm / cublas / cutlass / triton gemm), reduction, elementwise
fusion, copy / memset, other, each as a fraction of the busy time, and the
ten longest kernels. Where the traced program's optimised HLO lies beside
the trace (WORKDIR/hlo/NAME.txt.gz for WORKDIR/traces/NAME.json.gz, as
bench/gpu_paper.py's trace stage writes it), each of those kernels that is
an XLA fusion gets a line saying what it computes: its output shape, the
ops inside it, and the JAX operation and source line it came from.
"""
import collections
import gzip
import json
import os
import re
import sys
import typing

KINDS = (
    ("matmul", re.compile(r"gemm|cublas|cutlass|matmul|dot|wgmma|sm90_xmma",
                          re.I)),
    ("reduction", re.compile(r"reduc|reduce", re.I)),
    ("copy/memset", re.compile(r"memcpy|memset|copy|transpose", re.I)),
    ("elementwise fusion", re.compile(r"fusion|loop_|elementwise|convert|"
                                      r"broadcast|select|add|multiply", re.I)),
)


def kind_of(name: str) -> str:
  for kind, pattern in KINDS:
    if pattern.search(name):
      return kind
  return "other"


def gpu_events(trace: dict) -> list[dict]:
  """The kernel events: complete events of a GPU process's stream threads.

  A GPU process also has "XLA Ops" / "XLA Modules" threads that repeat the
  same time as ops; only its "Stream" threads (or, if it has none, all of
  its threads) are kept, so no time is counted twice.
  """
  procs, threads = {}, {}
  for e in trace.get("traceEvents", []):
    if e.get("ph") != "M":
      continue
    name = str(e.get("args", {}).get("name", ""))
    if e.get("name") == "process_name":
      procs[e.get("pid")] = name
    elif e.get("name") == "thread_name":
      threads[(e.get("pid"), e.get("tid"))] = name
  gpu = {pid for pid, n in procs.items()
         if re.search(r"gpu|device:|/device", n, re.I)
         and not re.search(r"host|cpu", n, re.I)}
  streams = {key for key, n in threads.items()
             if key[0] in gpu and re.search(r"stream", n, re.I)}
  keep = ((lambda e: (e.get("pid"), e.get("tid")) in streams) if streams
          else (lambda e: e.get("pid") in gpu))
  return [e for e in trace.get("traceEvents", [])
          if e.get("ph") == "X" and "dur" in e and keep(e)]


def busy_time(events) -> float:
  """Length of the union of the [ts, ts + dur) intervals (microseconds)."""
  total, end = 0.0, -float("inf")
  for ts, dur in sorted((float(e["ts"]), float(e["dur"])) for e in events):
    if ts >= end:
      total += dur
      end = ts + dur
    elif ts + dur > end:
      total += ts + dur - end
      end = ts + dur
  return total


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
_HEADER = re.compile(r"^\s*(?:ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$")


def _shape_and_opcode(rest: str) -> tuple[str, str]:
  """("f32[5,128]{1,0}", "fusion") of an instruction's right-hand side."""
  if rest.startswith("("):             # a tuple shape: up to its ")"
    depth = 0
    for i, c in enumerate(rest):
      depth += (c == "(") - (c == ")")
      if depth == 0:
        shape, rest = rest[:i + 1], rest[i + 1:].lstrip()
        break
    else:
      return rest, ""
  else:
    shape, _, rest = rest.partition(" ")
  return shape, rest.partition("(")[0]


class Fusion(typing.NamedTuple):
  shape: str      # its output's HLO shape, e.g. "(f32[5,128]{1,0}, ...)"
  summary: str    # "SHAPE kind: op xN, ...; from OP_NAME (FILE:LINE)"


def _computations(text: str) -> tuple[str, dict[str, list[tuple[str, str]]]]:
  """(the entry computation's name, computation name -> its instructions
  as (name, right-hand side), in order) of an HLO module's text."""
  bodies, current, entry = collections.defaultdict(list), None, ""
  for line in text.splitlines():
    header = _HEADER.match(line)
    if header and "=" not in line.split("(")[0]:
      current = header.group(1)
      entry = current if line.lstrip().startswith("ENTRY") else entry
      continue
    m = _INSTRUCTION.match(line)
    if m:
      bodies[current].append(m.groups())
  return entry, bodies


def hlo_fusions(text: str) -> dict[str, Fusion]:
  """Fusion instruction name -> `Fusion` from an HLO module's text
  (`compiled.as_text()`): what each fusion computes."""
  bodies, fusions = collections.defaultdict(list), {}
  for computation, instructions in _computations(text)[1].items():
    for name, rest in instructions:
      shape, opcode = _shape_and_opcode(rest)
      op_name = re.search(r'op_name="([^"]*)"', rest)
      source = re.search(r'source_file="([^"]*)" source_line=(\d+)', rest)
      where = (op_name.group(1) if op_name else "") + (
          f" ({os.path.basename(source.group(1))}:{source.group(2)})"
          if source else "")
      bodies[computation].append((opcode, where))
      calls = re.search(r"calls=%([\w.\-]+)", rest)
      kind = re.search(r"kind=(k\w+)", rest)
      if opcode == "fusion" and calls:
        fusions[name] = (shape, kind.group(1) if kind else "",
                         calls.group(1), where)
  out = {}
  for name, (shape, kind, called, where) in fusions.items():
    ops = collections.Counter(op for op, _ in bodies[called]
                              if op not in ("parameter", "constant"))
    origins = [w for _, w in bodies[called] if w] or [where]
    out[name] = Fusion(shape, f"{shape} {kind}: "
                       + ", ".join(f"{op} x{n}"
                                   for op, n in ops.most_common(6))
                       + f"; from {origins[-1][:160]}")
  return out


# Opcodes of an optimised GPU module that run no kernel of their own.
_NO_KERNEL = {"parameter", "constant", "get-tuple-element", "tuple",
              "bitcast"}


def _launches(instructions) -> collections.Counter:
  """Opcode -> count of `instructions` ((name, right-hand side) pairs)
  that launch a kernel (a fusion, a custom call, a copy, ...)."""
  return collections.Counter(
      op for op in (_shape_and_opcode(rest)[1] for _, rest in instructions)
      if op not in _NO_KERNEL)


def loop_kernels(text: str) -> collections.Counter:
  """Opcode -> count of the kernels in the body of the entry
  computation's while loops (the scanned train steps): the kernels one
  step launches."""
  entry, bodies = _computations(text)
  out = collections.Counter()
  for _, rest in bodies.get(entry, []):
    body = re.search(r"body=%([\w.\-]+)", rest)
    if _shape_and_opcode(rest)[1] == "while" and body:
      out.update(_launches(bodies[body.group(1)]))
  return out


def entry_kernels(text: str) -> collections.Counter:
  """Opcode -> count of the kernels the entry computation launches itself
  (a program without a loop: all of them)."""
  entry, bodies = _computations(text)
  return _launches(bodies.get(entry, []))


def describe_kernels(kernels: collections.Counter) -> str:
  """"N kernels (fusion n, custom-call m, ...)"."""
  return f"{sum(kernels.values())} kernels (" + ", ".join(
      f"{op} {n}" for op, n in kernels.most_common()) + ")"


def _hlo_beside(path: str) -> dict[str, Fusion]:
  """hlo_fusions of WORKDIR/hlo/NAME.txt.gz for WORKDIR/traces/NAME.json.gz,
  or {} where there is none."""
  name = os.path.basename(path).split(".json")[0]
  hlo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))),
                     "hlo", f"{name}.txt.gz")
  if not os.path.exists(hlo):
    return {}
  with gzip.open(hlo, "rt") as f:
    return hlo_fusions(f.read())


def summarize(path: str) -> str:
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as f:
    events = gpu_events(json.load(f))
  if not events:
    return f"{path}: no GPU kernel events found"
  fusions = _hlo_beside(path)
  start = min(float(e["ts"]) for e in events)
  stop = max(float(e["ts"]) + float(e["dur"]) for e in events)
  busy = busy_time(events)
  by_kind, by_name = collections.Counter(), collections.Counter()
  for e in events:
    by_kind[kind_of(e["name"])] += float(e["dur"])
    by_name[e["name"][:70]] += float(e["dur"])
  kernel_total = sum(by_kind.values())
  lines = [f"{path}: {len(events)} kernels, span {(stop - start) / 1e3:.2f} "
           f"ms, GPU busy {busy / 1e3:.2f} ms ({busy / (stop - start):.0%}; "
           f"idle {1 - busy / (stop - start):.0%})"]
  for kind, t in by_kind.most_common():
    lines.append(f"  {kind:20s} {t / 1e3:9.2f} ms  {t / kernel_total:6.1%}")
  lines.append("  longest kernels (total over the trace):")
  for name, t in by_name.most_common(10):
    lines.append(f"    {t / 1e3:8.2f} ms  {t / kernel_total:6.1%}  {name}")
    if name in fusions:
      lines.append(f"                       = {fusions[name].summary}")
  return "\n".join(lines)


if __name__ == "__main__":
  for p in sys.argv[1:]:
    print(summarize(p))
