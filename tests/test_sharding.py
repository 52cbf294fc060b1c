"""The sharding knobs (FSDP2): applied by the trials' own step on real gloo ranks under
torchrun (nothing mocked), searched only where they apply, and the blocks they shard."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotune.cli.app import ranked
from autotune.cli.config import LaunchConfig
from autotune.core.env import Env
from autotune.core.knobs import KnobError
from autotune.core.sharding import blocks, groups, mesh_shape, mp_dtypes
from autotune.core.space import build_space
from autotune.workloads.gpt import Block, GPTWorkload
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import ROOT, child_env


def test_each_sharding_knob_is_applied_on_real_ranks(tmp_path: Path) -> None:
    """Two gloo ranks, a 4-block GPT, the trials' Training with each knob: what FSDP2 got and
    did, and the gradients gathered from the shards against DDP's on the same batches."""
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(ROOT / "tests" / "fsdp_step_probe.py"), str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    ddp, full = seen["ddp"], seen["full_shard"]
    # One group per block and the root; the optimizer was built on the shards.
    assert full["groups"] == 5 and full["optimizer_on_shards"] is True
    assert seen["every_2"]["groups"] == 3
    # full_shard frees a block's parameters after its forward; shard_grad_op keeps them.
    assert full["resharded_after_forward"] is True
    assert seen["shard_grad_op"]["resharded_after_forward"] is False
    # Sharded or replicated, fp32: the same gradients (a reduce-scatter's mean is DDP's).
    for name in ("full_shard", "shard_grad_op", "every_2", "prefetch_2"):
        assert seen[name]["grads"] == pytest.approx(ddp["grads"], abs=1e-6), name
    # Mixed precision: bf16 gathers reduce in fp32 unless bf16 reduction was asked for.
    assert (seen["bf16_params"]["param_dtype"], seen["bf16_params"]["reduce_dtype"]) == (
        "torch.bfloat16", "torch.float32")
    assert (seen["bf16_reduce"]["param_dtype"], seen["bf16_reduce"]["reduce_dtype"]) == (
        "None", "torch.bfloat16")
    for name in ("bf16_params", "bf16_reduce"):  # rounded: close, not equal
        assert seen[name]["grads"] != ddp["grads"]
        assert seen[name]["grads"] == pytest.approx(ddp["grads"], abs=5e-2), name
    assert seen["prefetch_2"]["forward_prefetch"] == 2 and full["forward_prefetch"] == 0
    # Accumulating: without the knob every micro-batch reduces; with it the first keeps its
    # gradients unreduced and its parameters gathered, and the cycle ends with DDP's sums.
    assert seen["accumulating"]["reduced_after_first_micro_batch"] is True
    assert seen["no_sync"]["reduced_after_first_micro_batch"] is False
    for name in ("accumulating", "no_sync"):
        assert seen[name]["grads"] == pytest.approx(seen["ddp_accumulating"]["grads"], abs=1e-6)
    # The counterfactual: the step gathered beforehand runs without collectives, they
    # were counted (a block's all-gather in forward and again in backward: 4 blocks x 2 + the
    # root), and the next step's gradients are that step's alone.
    cf = full["counterfactual"]
    assert cf["all_gathers"] == 9 and cf["reduce_scatters"] == 5
    # Each pair's two timed steps: the real one makes them all, the gathered one none (what
    # the exposed share is the difference of; its value on real ranks is
    # tests/test_launched_honest.py's, a sharded verdict at or past its threshold).
    assert full["timed_collectives"] == {"with": {"all_gathers": 9, "reduce_scatters": 5},
                                         "without": {"all_gathers": 0, "reduce_scatters": 0}}
    assert cf["all_gather_ms"] > 0 and cf["reduce_scatter_ms"] > 0
    assert cf["collectives_source"] == "gloo"
    assert full["grads_after_counterfactual"] == full["grads"]
    # A beat after each timed unit (4 pairs) and each profiled step: long steps, no stall.
    assert full["beats"] == [1, 2, 3, 4, 5, 6, 7, 8, 1, 2] and ddp["beats"] == list(range(1, 9))
    no_sync = seen["no_sync"]["counterfactual"]
    assert no_sync["micro_steps_per_unit"] == 2 and no_sync["reduce_scatters"] < 5
    assert seen["no_sync"]["grads_after_counterfactual"] == seen["no_sync"]["grads"]


def test_the_sharding_knobs_are_searched_only_where_they_apply(cpu_env: Env) -> None:
    wl = GPTWorkload().cpu_sized()  # 2 blocks
    one = build_space(cpu_env, wl, {})
    for name in ("sharding", "fsdp_wrap_blocks", "fsdp_param_dtype", "fsdp_prefetch"):
        assert len(one.domains[name].values) == 1 and "one process" in one.domains[name].reason
    with pytest.raises(KnobError, match="sharding"):
        build_space(cpu_env, wl, {"sharding": "full_shard"})

    two_env = ranked(cpu_env, LaunchConfig(nproc_per_node=2))
    two = build_space(two_env, wl, {})
    assert two.domains["sharding"].values == ["no_shard", "full_shard", "shard_grad_op"]
    assert "launch.nnodes > 1" in two.domains["sharding"].reason
    assert two.baseline["sharding"] == "no_shard"  # the user's DDP run today
    assert two.domains["fsdp_wrap_blocks"].values == [1, 2]  # counted on the meta device
    assert two.domains["fsdp_prefetch"].values == [0, 1, 2]
    # bf16 reduction and CPU offload are opt-in; offload is for a GPU's shards only.
    assert two.domains["fsdp_reduce_dtype"].values == ["fp32"]
    assert "knobs.fsdp_reduce_dtype=[fp32,bf16]" in two.domains["fsdp_reduce_dtype"].reason
    listed = build_space(two_env, wl, {"fsdp_reduce_dtype": ["fp32", "bf16"]})
    assert listed.domains["fsdp_reduce_dtype"].values == ["fp32", "bf16"]
    assert two.domains["fsdp_cpu_offload"].values == [False]
    with pytest.raises(KnobError, match="fsdp_cpu_offload"):
        build_space(two_env, wl, {"fsdp_cpu_offload": [False, True]})
    assert "release" in two.domains["host_allocator"].values
    # Each setting applies where the model is in its wrapper: the FSDP2 ones when sharded,
    # the DDP ones when not.
    searched = {**two.baseline, "sharding": "full_shard", "fsdp_wrap_blocks": 2,
                "bucket_cap_mb": 100}
    sharded = two.complete(two.searched(searched))
    assert sharded["fsdp_wrap_blocks"] == 2 and sharded["bucket_cap_mb"] == 25
    ddp = two.complete(two.searched({**searched, "sharding": "no_shard"}))
    assert ddp["fsdp_wrap_blocks"] == 1 and ddp["bucket_cap_mb"] == 100
    # Several nodes: hybrid sharding too, over a 2-D mesh (nodes x local ranks).
    nodes = dataclasses.replace(two_env, ranks=4, nodes=2)
    assert "hybrid_shard" in build_space(nodes, wl, {}).domains["sharding"].values
    assert mesh_shape({"sharding": "hybrid_shard"}, 4, 2) == (2, 2)
    assert mesh_shape({"sharding": "full_shard"}, 4, 2) == (4,)
    # A model without named blocks: one group, the root's, said so.
    mlp = build_space(two_env, MLPWorkload(), {}).domains["fsdp_wrap_blocks"]
    assert mlp.values == [1] and "names no blocks" in mlp.reason


def test_fused_sgd_is_never_tried_sharded(cpu_env: Env) -> None:
    """torch's fused SGD has no DTensor rule: a sharded trial with it fails at its first step
    (a two-node study of an SGD workload lost one trial of four to it). The value rule keeps
    that pair out of the sampler's trials and the agent's proposals; fused stays searched for
    DDP ranks, and for AdamW everywhere."""
    import optuna

    two_env = ranked(cpu_env, LaunchConfig(nproc_per_node=2))
    space = build_space(two_env, MLPWorkload(), {})  # SGD with momentum
    assert space.domains["optimizer_impl"].refuses is not None
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        knobs = space.suggest(trial)
        seen.add((knobs["sharding"] != "no_shard", knobs["optimizer_impl"]))
        study.tell(trial, 1.0)
        assert space.complete(study.trials[-1].params)["optimizer_impl"] == knobs["optimizer_impl"]
    assert (True, "fused") not in seen and (False, "fused") in seen and (True, "foreach") in seen
    proposal = space.complete(space.searched({**space.baseline, "sharding": "full_shard",
                                              "optimizer_impl": "fused"}))
    assert proposal["sharding"] == "full_shard" and proposal["optimizer_impl"] != "fused"
    # AdamW's fused kernel runs sharded: no rule; nor for one process.
    assert build_space(two_env, GPTWorkload().cpu_sized(), {}).domains["optimizer_impl"].refuses is None
    assert build_space(cpu_env, MLPWorkload(), {}).domains["optimizer_impl"].refuses is None


def test_the_shards_mixed_precision_keeps_the_reduction_fp32_unless_asked() -> None:
    assert mp_dtypes({}) == (None, None)
    assert mp_dtypes({"fsdp_param_dtype": "bf16"}) == (torch.bfloat16, torch.float32)
    assert mp_dtypes({"fsdp_param_dtype": "bf16", "fsdp_reduce_dtype": "bf16"}) == (
        torch.bfloat16, torch.bfloat16)
    assert mp_dtypes({"fsdp_reduce_dtype": "bf16"}) == (None, torch.bfloat16)


def test_the_blocks_are_found_by_type_by_hugging_face_name_and_inside_checkpointing() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
    )
    from transformers import LlamaConfig, LlamaForCausalLM

    gpt = GPTWorkload(vocab=32, seq_len=8, d_model=8, n_layer=3, n_head=2).model()
    found = blocks(gpt, (Block,))
    assert found == list(gpt.blocks)
    assert [len(g) for g in groups(found, 2)] == [2, 1]
    apply_activation_checkpointing(gpt, check_fn=lambda m: isinstance(m, Block))
    wrapped = blocks(gpt, (Block,))  # the checkpoint wrapper is sharded with its block
    assert len(wrapped) == 3 and all(hasattr(m, "_checkpoint_wrapped_module") for m in wrapped)
    with torch.device("meta"):
        llama = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                             num_hidden_layers=3, num_attention_heads=2))
    assert [type(m).__name__ for m in blocks(llama)] == ["LlamaDecoderLayer"] * 3
    assert blocks(torch.nn.Linear(2, 2)) == []


def test_a_sharded_models_blocks_are_still_found_by_their_own_name() -> None:
    """fully_shard swaps each block's class for an FSDP subclass: the blocks of a sharded
    Hugging Face model are found by their own name, and named so in the export."""
    from autotune.measure.comm import _unsharded_name

    with torch.device("meta"):
        from transformers import LlamaConfig, LlamaForCausalLM

        llama = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                             num_hidden_layers=2, num_attention_heads=2))
    layer = llama.model.layers[0]
    from torch.distributed.fsdp import FSDPModule

    # as fully_shard does
    layer.__class__ = type("FSDPLlamaDecoderLayer", (FSDPModule, type(layer)), {})
    assert len(blocks(llama)) == 2
    assert _unsharded_name(layer) == "LlamaDecoderLayer"
