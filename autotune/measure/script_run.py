"""``python -m autotune.measure.script_run python train.py ARGS``: the user's command run as a
script study's trial runs it (in this interpreter, ``__name__ == "__main__"``), with the
frameworks it imports hooked (measure/framework_hooks.py). The discovery run and each side
of ``autotune verify`` on a script study start the command this way, so that a Hugging Face
script with no autotune line is read and measured as its trials are."""

from __future__ import annotations

import sys

from autotune.measure.framework_hooks import install_hooks
from autotune.measure.script_trial import run_command


def main() -> None:
    install_hooks()
    run_command(sys.argv[1:])


if __name__ == "__main__":
    main()
