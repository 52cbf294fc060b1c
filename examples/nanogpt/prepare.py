"""The tutorial's data, written once as nanoGPT's prepare.py writes its own: token ids in
uint16 files, ``train.bin`` and ``val.bin``, read back as a ``numpy.memmap``.

Nothing is downloaded: the tokens come from a fixed random Markov chain over 256 ids (each id
followed by one of 4 others), so a model can learn it (the loss falls from ln 256 = 5.5 toward
ln 4 = 1.4) and the files are the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path("data") / "nanogpt"
VOCAB, SUCCESSORS = 256, 4


def prepare(folder: Path = DATA, train_tokens: int = 1_000_000, seed: int = 0) -> Path:
    """Write ``train.bin`` and ``val.bin`` under ``folder`` unless they are there already."""
    if (folder / "val.bin").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, VOCAB, size=(VOCAB, SUCCESSORS))
    n = train_tokens + train_tokens // 10
    choice = rng.integers(0, SUCCESSORS, size=n)
    ids = np.empty(n, dtype=np.uint16)
    ids[0] = 0
    for i in range(1, n):  # 1.1 M steps: about a second
        ids[i] = successors[ids[i - 1], choice[i]]
    ids[:train_tokens].tofile(folder / "train.tmp")
    ids[train_tokens:].tofile(folder / "val.tmp")
    (folder / "train.tmp").replace(folder / "train.bin")
    (folder / "val.tmp").replace(folder / "val.bin")  # last: its presence means both are whole
    return folder


if __name__ == "__main__":
    print(prepare())
