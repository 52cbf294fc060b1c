"""What trials and production share: the Workload protocol, batch structures, input stages,
the knob registry and ``Training`` (the one place each knob is applied), and the machine probe.

Both sides import from here and nothing here imports them: a knob applied in a trial window
and in a user's own loop goes through the same lines of code.
"""
