"""autotune.results.nsight: the Nsight commands best.yaml and the report hand the user. Pure
string work on a hand-made best.yaml document: no GPU, no Nsight, no study."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest

from autotune.results.hydra_export import override_value
from autotune.results.nsight import NCU_KERNELS, function_name, kernel_filter, nsight_commands

TARGET = "autotune.workloads.resnet18.ResNet18Workload"
KNOBS: dict[str, Any] = {"num_workers": 4, "pin_memory": True, "prefetch_factor": None,
                         "batch_size": 128, "amp": "bf16", "compile": "max-autotune",
                         "transfer_dtype": "uint8", "channels_last": False}
TEMPLATED = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>"
             "(int, at::native::AUnaryFunctor<float>, at::detail::Array<char*, 2>)")
KERNELS = [
    {"name": TEMPLATED, "ms_per_step": 3.21},
    {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
     "ms_per_step": 2.5},
    {"name": "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>"
             "(float*, float const*, int, int, int)", "ms_per_step": 1.0},
    {"name": "triton_poi_fused_add_relu_0", "ms_per_step": 0.4},
]


def _doc(device: str = "cuda", **extra: Any) -> dict[str, Any]:
    return {"device": {"type": device, "name": "NVIDIA H100"}, "knobs": dict(KNOBS),
            "study": {"name": "resnet18-cuda", "storage": "sqlite:///studies/x/study.db"}, **extra}


def _overrides(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("knobs.")]


def _expected_overrides() -> list[str]:
    return [f"knobs.{k}={override_value(v)}" for k, v in KNOBS.items()]


def test_nsys_command_runs_one_trial_of_the_exported_configuration() -> None:
    ns = nsight_commands(_doc(), TARGET, KERNELS)
    assert set(ns) == {"nsys", "ncu"}
    cmd = ns["nsys"]
    assert cmd.startswith("nsys profile ")
    args = shlex.split(cmd)
    trace = next(a for a in args if a.startswith("--trace="))
    assert {"cuda", "nvtx"} <= set(trace.split("=", 1)[1].split(","))
    assert "--trace-fork-before-exec=true" in args  # trials are forked without an exec
    run = args[args.index("autotune"):]  # nsys's own options come before the program
    assert all(a.startswith("-") for a in args[2:args.index("autotune")])
    assert f"workload._target_={TARGET}" in run
    assert _overrides(run) == _expected_overrides()  # shlex round-trips every override
    for pinned in ("study.n_trials=1", "device=cuda", "study.agent=false", "study.prune=false",
                   "study.confirm_runs=0", "study.numerics_steps=0", "window.profile=false"):
        assert pinned in run, pinned
    assert "study.name=resnet18-cuda-nsys" in run  # its own study: the original stays as it was


def test_ncu_commands_one_per_top_kernel() -> None:
    ns = nsight_commands(_doc(), TARGET, KERNELS)
    assert len(ns["ncu"]) == NCU_KERNELS
    names = set()
    for k, entry in zip(KERNELS, ns["ncu"], strict=False):
        assert entry["kernel"] == k["name"] and entry["ms_per_step"] == k["ms_per_step"]
        args = shlex.split(entry["command"])
        assert args[0] == "ncu"
        assert args[args.index("--target-processes") + 1] == "all"
        assert "--launch-count" in args and int(args[args.index("--launch-count") + 1]) >= 1
        nvtx = [args[i + 1] for i, a in enumerate(args) if a == "--nvtx-include"]
        assert "--nvtx" in args and "autotune@forward/" in nvtx  # the phases' domain, push/pop
        flt = args[args.index("-k") + 1]
        assert flt.startswith("regex:")
        pattern = re.compile(flt[len("regex:"):])
        assert pattern.search(k["name"]), (flt, k["name"])
        assert pattern.search(function_name(k["name"]))  # ncu's default: the base name
        run = args[args.index("autotune"):]
        assert _overrides(run) == _expected_overrides()
        assert f"workload._target_={TARGET}" in run and "study.n_trials=1" in run
        names.add(next(a for a in run if a.startswith("study.name=")))
    assert len(names) == NCU_KERNELS  # each its own study: a shared one would reuse the trial


@pytest.mark.parametrize(("name", "base"), [
    (TEMPLATED, "vectorized_elementwise_kernel"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>(float*)",
     "softmax_warp_forward"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(",
     "elementwise_kernel"),  # cut short at 160 characters: unbalanced brackets
    ("triton_poi_fused_add_relu_0", "triton_poi_fused_add_relu_0"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)",
     "Kernel2"),
])
def test_kernel_filter_is_a_valid_regex_for_any_demangled_name(name: str, base: str) -> None:
    assert function_name(name) == base
    flt = kernel_filter(name)
    pattern = re.compile(flt.removeprefix("regex:"))
    assert pattern.search(name) and pattern.search(base)
    assert shlex.split(shlex.quote(flt)) == [flt]


def test_string_overrides_survive_the_shell() -> None:
    doc = _doc()
    doc["knobs"]["odd"] = "it's $HOME \"quoted\""
    ns = nsight_commands(doc, None, KERNELS[:1])
    for cmd in (ns["nsys"], ns["ncu"][0]["command"]):
        args = shlex.split(cmd)
        assert f"knobs.odd={override_value(doc['knobs']['odd'])}" in args
        assert not any(a.startswith("workload.") for a in args)  # no target: none given


def test_keep_global_batch_is_kept() -> None:
    ns = nsight_commands(_doc(global_batch=256, grad_accum=2), TARGET, [])
    assert "study.keep_global_batch=true" in shlex.split(ns["nsys"])
    assert ns["ncu"] == []  # no kernel list recorded: no ncu command


def test_cpu_study_gets_the_reason_only() -> None:
    ns = nsight_commands(_doc("cpu"), TARGET, KERNELS)
    assert set(ns) == {"omitted"}
    assert "cpu" in ns["omitted"] and "CUDA" in ns["omitted"]
    assert "unknown device" in nsight_commands({"knobs": {}}, None, None)["omitted"]
