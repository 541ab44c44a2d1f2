r"""`locater.LocaterHParams`, defined without jax: its `_fields` name the
config's `locater.*` and swept fields (`qkspec.config.schema`), which load
without jax."""
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
  import jax


class LocaterHParams(NamedTuple):
  r""":math:`(\kappa_1, \kappa_2, \tau)`, a pytree (a sweep stacks one per
  member); `_fields` are the config's `locater.*` fields, these defaults
  theirs."""
  kappa1: "float | jax.Array" = 0.0  # scale strength, tr(W_QK^T W_QK); 0 off
  kappa2: "float | jax.Array" = 0.0  # mean strength, (tr W_QK - tau)^2; 0 off
  target: "float | jax.Array" = 1.0  # tau, the eigen-sum tr(W_QK) is held to
                                     # (paper: 1)
