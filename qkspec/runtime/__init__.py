"""The processes of a run, not its training: `processes.start` joins the
hosts of a multi-host run (the one call of `jax.distributed.initialize`),
`coordinator` runs the coordination service beside process 0 in a process
of its own, `peers` watches the others and names a lost one in one line
(exit 75), and `logs` keeps the libraries' chatter out of the terminal.
"""
