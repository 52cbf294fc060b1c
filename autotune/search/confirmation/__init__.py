"""The confirmation: the finalists and the baseline measured again in randomized rounds
(``confirm``; what one round runs and what the rounds keep, ``rounds``), the choice the
intervals support (``choose``), and the words of the rounds (``words``). See
``autotune.search``."""
