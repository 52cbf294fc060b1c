"""The SFT step as TRL runs it (issue 70 item 9; adapters/hf/trl.py): each micro-batch reads
back its entropy, token accuracy and token count (SFTTrainer.compute_loss's metrics), each
summed over the ranks first as ``accelerator.gather_for_metrics`` does. Two real gloo ranks."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytest.importorskip("trl")

from autotune.adapters.hf.trl import batch_tokens, gathered  # noqa: E402


def test_the_token_count_is_the_masks_or_a_packed_rows_length() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert int(batch_tokens({"attention_mask": mask})) == 5
    assert int(batch_tokens({"position_ids": torch.tensor([[0, 1, 2, 0, 1, 0]])})) == 6
    assert batch_tokens({"input_ids": mask}) is None
    assert gathered(torch.tensor(7)) == 7  # one process: itself


def _rank(rank: int, port: int, out: Any) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        out[rank] = int(gathered(torch.tensor(rank + 3)))  # 3 + 4 on both ranks
    finally:
        dist.destroy_process_group()


def test_a_metric_is_summed_over_the_ranks_as_gather_for_metrics_sums_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.get_context("spawn").Manager().dict()
    mp.start_processes(_rank, args=(port, out), nprocs=2, start_method="spawn")
    assert dict(out) == {0: 7, 1: 7}
