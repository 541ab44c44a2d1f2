r"""Rank collapse per layer: SAN, +skip, +MLP, +LN, full block (Dong Fig. 1 style).

  python launch/collapse.py --config configs/rank_collapse.py --workdir /tmp/collapse_runs/rank_collapse

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_layers=12`). See configs/rank_collapse.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import rank_collapse

if __name__ == "__main__":
  cli.main(rank_collapse.run, "rank_collapse config")
