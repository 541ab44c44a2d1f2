r"""Rank collapse, entropy and rho of deep pure SANs over eigen-(mean, scale).

  python launch/spectrum_collapse.py --config configs/spectrum_collapse.py --workdir /tmp/collapse_runs/spectrum_collapse

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_draws=2`). See configs/spectrum_collapse.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import spectrum_collapse

if __name__ == "__main__":
  cli.main(spectrum_collapse.run, "spectrum_collapse config")
