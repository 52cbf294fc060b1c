"""Each knob is really applied to the training loop (checked on the built objects and inside
the forward), and the search space keeps its conditional structure."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
import torch

from autotune.core.env import Env
from autotune.core.knobs import KNOBS, KnobError
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.workloads.mlp import MLPWorkload
from autotune.workloads.resnet18 import ResNet18Workload


def small_resnet() -> ResNet18Workload:
    return ResNet18Workload(image_size=32, n_images=64, batch_size=8)


def knobs_for(env: Env, wl: Any, **pins: Any) -> dict[str, Any]:
    space = build_space(env, wl, {})
    return {**space.baseline, **pins}


def one_step(run: Training) -> torch.Tensor:
    inputs, targets = next(iter(run.loader))
    return run.step(*run.to_device(inputs, targets))


def test_loader_knobs_reach_the_dataloader(cpu_env: Env) -> None:
    wl = MLPWorkload(n_samples=256)
    run = Training(wl, knobs_for(cpu_env, wl, num_workers=2, prefetch_factor=4,
                                 persistent_workers=True, batch_size=16), "cpu")
    assert run.loader.num_workers == 2
    assert run.loader.prefetch_factor == 4
    assert run.loader.persistent_workers is True
    assert run.loader.batch_size == 16
    inputs, _ = next(iter(run.loader))
    assert inputs.shape[0] == 16


def test_pin_memory_is_passed_to_the_loader(cpu_env: Env) -> None:
    wl = MLPWorkload(n_samples=64)
    run = Training(wl, knobs_for(cpu_env, wl, pin_memory=True), "cpu")
    assert run.loader.pin_memory is True


def test_channels_last_applies_to_model_and_inputs(cpu_env: Env) -> None:
    wl = small_resnet()
    run = Training(wl, knobs_for(cpu_env, wl, channels_last=True), "cpu")
    conv = run.model.conv1.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    seen: list[bool] = []
    run.model.conv1.register_forward_pre_hook(
        lambda m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    one_step(run)
    assert seen == [True]


@pytest.mark.parametrize("amp,dtype", [("bf16", torch.bfloat16), ("off", torch.float32)])
def test_amp_dtype_is_seen_in_the_forward(cpu_env: Env, amp: str, dtype: torch.dtype) -> None:
    wl = MLPWorkload(n_samples=64)
    run = Training(wl, knobs_for(cpu_env, wl, amp=amp), "cpu")
    dtypes: list[torch.dtype] = []
    run.model[0].register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
    one_step(run)
    assert dtypes == [dtype]


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_set_to_none(cpu_env: Env, set_to_none: bool) -> None:
    wl = MLPWorkload(n_samples=64)
    run = Training(wl, knobs_for(cpu_env, wl, set_to_none=set_to_none), "cpu")
    one_step(run)
    grads: list[Any] = []
    first = run.model[0]
    first.register_forward_pre_hook(lambda m, a: grads.append(m.weight.grad))
    one_step(run)
    assert (grads[0] is None) is set_to_none


@pytest.mark.parametrize("impl,flag", [("foreach", "foreach"), ("fused", "fused")])
def test_optimizer_impl(cpu_env: Env, impl: str, flag: str) -> None:
    wl = MLPWorkload(n_samples=64)
    run = Training(wl, knobs_for(cpu_env, wl, optimizer_impl=impl), "cpu")
    assert run.optimizer.defaults[flag] is True
    one_step(run)


def test_backend_flags(cpu_env: Env) -> None:
    wl = MLPWorkload(n_samples=64)
    Training(wl, knobs_for(cpu_env, wl, tf32=True, cudnn_benchmark=True), "cpu")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
    Training(wl, knobs_for(cpu_env, wl), "cpu")
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.benchmark
    # The baseline keeps PyTorch's default of TF32 convolutions: turning them off would make
    # it slower than the user's real setup and every speedup look bigger than it is.
    assert torch.backends.cudnn.allow_tf32


def test_compiled_cuda_graphs_free_gradients_between_steps(cpu_env: Env) -> None:
    space = build_space(cpu_env, MLPWorkload(), {"compile": ["off", "reduce-overhead",
                                                             "max-autotune", "default"]})
    for mode, freed in (("off", False), ("default", False), ("reduce-overhead", True),
                       ("max-autotune", True)):
        knobs = space.complete({"compile": mode, "set_to_none": False})
        assert knobs["set_to_none"] is freed, mode


def test_compile_wraps_the_model(cpu_env: Env) -> None:
    wl = MLPWorkload(n_samples=64)
    run = Training(wl, knobs_for(cpu_env, wl, compile="default"), "cpu")
    assert isinstance(run.forward_module, torch._dynamo.eval_frame.OptimizedModule)


def test_cuda_graphs_refused_without_cuda(cpu_env: Env) -> None:
    wl = MLPWorkload(n_samples=64)
    with pytest.raises(ValueError, match="CUDA"):
        Training(wl, knobs_for(cpu_env, wl, cuda_graphs=True), "cpu")


@pytest.mark.gpu
def test_cuda_knobs_run_on_gpu(cpu_env: Env) -> None:
    from autotune.core.env import probe

    env = probe("cuda")
    # The compile modes on a tiny MLP: max-autotune on even a 32 px ResNet-18 benchmarks every
    # convolution's templates in-process (>3 minutes of a GPU session); an MLP has two matmuls.
    resnet, mlp = small_resnet(), MLPWorkload(n_samples=64, batch_size=8)
    for wl, pins in ((resnet, {"cuda_graphs": True, "amp": "bf16"}), (resnet, {"amp": "fp16"}),
                     (resnet, {"pin_memory": True, "non_blocking": True, "transform_split": 0}),
                     (mlp, {"compile": "reduce-overhead"}), (mlp, {"compile": "max-autotune"})):
        run = Training(wl, knobs_for(env, wl, **pins), "cuda")
        for _ in range(3):
            loss = one_step(run)
        assert torch.isfinite(loss).item(), pins


def test_cpu_space_fixes_cuda_knobs_with_reasons(cpu_env: Env) -> None:
    space = build_space(cpu_env, MLPWorkload(), {})
    fixed = space.fixed
    for name in ("pin_memory", "non_blocking", "cuda_graphs", "tf32", "cudnn_benchmark"):
        assert name in fixed and fixed[name][1], name
    assert "CUDA" in fixed["cuda_graphs"][1]
    assert "not 4-D images" in fixed["channels_last"][1]
    assert "host_allocator" not in fixed  # searched on CPU (glibc)


def test_the_header_says_each_reason_for_a_fixed_knob_once(cpu_env: Env) -> None:
    """A one-process study fixes the seven DDP knobs for one reason: one line names them all,
    and every fixed knob is still named with its value."""
    from autotune.cli.app import fixed_lines

    space = build_space(cpu_env, MLPWorkload(), {})
    lines = fixed_lines(space.fixed)
    reasons = [line.split(": ", 1)[1] for line in lines]
    assert len(reasons) == len(set(reasons)) < len(space.fixed)
    ddp = [line for line in lines if "no DistributedDataParallel" in line]
    assert len(ddp) == 1 and "bucket_cap_mb=25" in ddp[0] and "comm_hook=none" in ddp[0], ddp
    for name, (value, _) in space.fixed.items():
        assert sum(f"{name}={value}" in line for line in lines) == 1, name


def test_prefetch_factor_only_with_workers(cpu_env: Env) -> None:
    space = build_space(cpu_env, MLPWorkload(), {})
    study = optuna.create_study(direction="maximize")
    for _ in range(20):
        trial = study.ask()
        knobs = space.suggest(trial)
        assert ("prefetch_factor" in trial.params) == (knobs["num_workers"] > 0)
        assert ("persistent_workers" in trial.params) == (knobs["num_workers"] > 0)
        study.tell(trial, 1.0)
    assert set(space.complete(space.searched(knobs))) == {k.name for k in KNOBS}


def test_pinning_and_narrowing(cpu_env: Env) -> None:
    space = build_space(cpu_env, MLPWorkload(), {"batch_size": 64, "amp": ["off"], "num_workers": [0, 1]})
    assert space.domains["batch_size"].values == [64]
    assert space.baseline["batch_size"] == 64
    assert space.domains["num_workers"].values == [0, 1]


def test_more_threads_than_cores_are_accepted_and_said_as_such(cpu_env: Env) -> None:
    """knobs.cpu_threads=64 on a 2-core machine is the user's call, not an error, but the
    header's reason says what the window will measure: threads taking turns on the cores."""
    from dataclasses import replace

    env = replace(cpu_env, cpu_count=2)
    space = build_space(env, MLPWorkload(), {"cpu_threads": 64})
    assert space.domains["cpu_threads"].values == [64]
    reason = space.domains["cpu_threads"].reason or ""
    assert "pinned by knobs override" in reason
    assert "64 thread(s) are more than the 2 core(s)" in reason, reason
    within = build_space(env, MLPWorkload(), {"cpu_threads": [1, 2]})
    assert within.domains["cpu_threads"].reason == "narrowed by knobs override"


def test_invalid_pin_names_valid_values(cpu_env: Env) -> None:
    with pytest.raises(KnobError) as err:
        build_space(cpu_env, MLPWorkload(), {"pin_memory": True})
    assert "knobs.pin_memory" in str(err.value) and "[False]" in str(err.value)
    assert "CUDA only" in str(err.value)
    with pytest.raises(KnobError, match="amp"):
        build_space(cpu_env, MLPWorkload(), {"amp": "fp8"})


def test_a_trial_stored_before_a_knob_existed_resumes_with_what_it_ran(cpu_env: Env) -> None:
    """An old resnet18 study's trials lack transform_split: they ran every input stage on
    the host, not the domain's first value (0, all on the device)."""
    from autotune.search.loop.agent import candidate

    wl = small_resnet()
    space = build_space(cpu_env, wl, {})
    assert space.domains["transform_split"].values[0] == 0
    old = {k: v for k, v in space.baseline.items() if k != "transform_split"}
    old["num_workers"] = 0
    full = space.complete(space.searched(old))
    assert full["transform_split"] == len(wl.stages()) == 3
    # the agent's next proposal from such a trial keeps the split it ran, too
    proposed = candidate(space, old, {"knob": "num_workers", "value": 1})
    assert proposed is not None and proposed["transform_split"] == 3
    assert proposed["num_workers"] == 1
    # and it counts as tried: the agent does not re-run it as a "new" split-3 configuration
    from autotune.search.loop.agent import tried

    study = optuna.create_study()
    study.enqueue_trial({}, user_attrs={"knobs": old})
    study.optimize(lambda t: 1.0, n_trials=1)
    assert tried(study, space.complete(space.searched(old)), space)
    assert not tried(study, {**space.complete(space.searched(old)), "transform_split": 0}, space)


def test_expandable_segments_is_named_out_on_the_cpu_and_exported_as_environment(
        cpu_env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA allocator's expandable segments: fixed off on the CPU with why; a GPU
    study's value reaches a framework's process as PYTORCH_CUDA_ALLOC_CONF (the adapters'
    environment), and a user whose environment already sets it is measured with it."""
    from dataclasses import replace

    from autotune.adapters import environment
    from autotune.core import host

    space = build_space(cpu_env, MLPWorkload(), {})
    value, why = space.fixed["expandable_segments"]
    assert value is False and "CUDA only" in why
    assert environment({"expandable_segments": True})["PYTORCH_CUDA_ALLOC_CONF"] == \
        "expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in environment({"expandable_segments": False})
    cuda = replace(cpu_env, device="cuda", cuda_capability=(9, 0), gpu_count=1)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,expandable_segments:True")
    assert host.expandable_in_env()
    assert build_space(cuda, MLPWorkload(), {}).baseline["expandable_segments"] is True
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert build_space(cuda, MLPWorkload(), {}).baseline["expandable_segments"] is False
    assert build_space(cuda, MLPWorkload(), {}).domains["expandable_segments"].values == \
        [False, True]


EXPANDABLE_PROBE = """
import json, sys, torch
from autotune.core.host import apply_process_knobs
knobs = {"tf32": False, "cudnn_benchmark": False, "host_allocator": "default",
         "cpu_threads": None, "expandable_segments": sys.argv[1] == "on"}
apply_process_knobs(knobs)
keep = []
for i in range(1, 40):  # batches of growing, varying size: what fragments the allocator
    x = torch.empty(i * (3 << 20) + (i % 3) * 4096, dtype=torch.uint8, device="cuda")
    if i % 4 == 0:
        keep.append(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
    del x
segs = torch.cuda.memory_snapshot()
print(json.dumps({"expandable": any(s.get("is_expandable") for s in segs),
                  "reserved_gb": torch.cuda.max_memory_reserved() / 2**30,
                  "allocated_gb": torch.cuda.max_memory_allocated() / 2**30}))
"""


@pytest.mark.gpu
def test_expandable_segments_reaches_the_cuda_allocator_and_the_peak_it_reserves() -> None:
    """Applied in a fresh process (as a trial is), the allocator's segments are expandable;
    the peak reserved memory (the window's peak reading) is printed for both settings, the
    figure the GPU check records."""
    import json
    import subprocess
    import sys

    out = {}
    for mode in ("off", "on"):
        done = subprocess.run([sys.executable, "-c", EXPANDABLE_PROBE, mode], check=True,
                              capture_output=True, text=True, timeout=120,
                              env={**__import__("os").environ, "PYTORCH_CUDA_ALLOC_CONF": ""})
        out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print("expandable_segments peak reserved:", out)
    assert out["on"]["expandable"] and not out["off"]["expandable"]
    # The same allocations: the reserved peak can only be as large as what was allocated at
    # most; expandable segments keep it closer to that (printed, not asserted: a figure).
    assert out["on"]["allocated_gb"] == pytest.approx(out["off"]["allocated_gb"], rel=0.01)
