"""The search loop: one worker's trials (``driver``) and what runs between them (the race
of the finalists, the time budget's stop, the agent's proposals, the reaping of a dead worker's
trials); the same-training trial after it. See ``autotune.search``."""
