"""The one error of a config that cannot run."""


class ConfigError(ValueError):
  """A config field, `:arg` or command-line value that cannot run; the
  message names it. Validators raise it, and the command line prints it as
  one line `qkspec: error: ...` with exit status 2."""
