"""What is checked of the configuration to export before it is: its first losses against
the user's (``numerics``) and, for a launched study, its speed as one rank (``scaling``).
See ``autotune.search``."""
