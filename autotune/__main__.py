"""``python -m autotune ...``: the same command line as the ``autotune`` script."""

from autotune.cli.main import main

if __name__ == "__main__":
    main()
