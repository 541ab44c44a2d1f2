"""Old name of `launch/run.py` for entropy_check, kept so that old commands work."""
import functools

from qkspec.experiments import cli

if __name__ == "__main__":
  cli.main(functools.partial(cli.run_experiment, default="entropy_check"),
           "experiment config", alias_of="launch/run.py")
