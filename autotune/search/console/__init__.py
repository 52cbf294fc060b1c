"""What a study says on the console: what it will cost and what it did (``cost``, from the
estimate of ``estimate``), its live view (``progress``) and its summary (``summary``). See
``autotune.search``."""
