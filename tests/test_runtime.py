"""The runtime API: best.yaml applied to a plain user loop through the trials' own code."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

import autotune
from autotune.core.training import Training
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import ROOT, TINY_ARGS, child_env, run_cli

# Knobs a real study is pinned to: every one differs from the mlp workload's defaults where
# the CPU allows it, so "applied as measured" cannot pass by accident.
PINNED = {"num_workers": 1, "prefetch_factor": 4, "persistent_workers": True, "batch_size": 16,
          "optimizer_impl": "foreach", "set_to_none": False}


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real one-trial CPU study of mlp, its knobs pinned, exported by the real CLI."""
    cwd = tmp_path_factory.mktemp("rt")
    proc = run_cli(["workload=mlp", "device=cpu", "study.n_trials=1", "study.name=rt",
                    "study.confirm_runs=0", *TINY_ARGS,
                    *(f"knobs.{k}={str(v).lower() if isinstance(v, bool) else v}"
                      for k, v in PINNED.items())], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd / "studies" / "rt"


def _user_model() -> nn.Module:
    """The user's own model: built by their code, not by a Workload (the mlp's shape)."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def _impl(opt: torch.optim.Optimizer) -> tuple[Any, Any]:
    g = opt.param_groups[0]
    return g.get("foreach"), g.get("fused")


def _same_as_trial(rt: autotune.Runtime, loader: Any, run: Training, ref: Training) -> None:
    for key in ("batch_size", "num_workers", "pin_memory", "prefetch_factor",
                "persistent_workers", "drop_last"):
        assert getattr(loader, key) == getattr(ref.loader, key), key
    assert type(run.forward_module) is type(ref.forward_module)  # compiled or not
    assert _impl(run.optimizer) == _impl(ref.optimizer)
    assert (run.amp_dtype, run.scaler is None, run.set_to_none, run.non_blocking) == (
        ref.amp_dtype, ref.scaler is None, ref.set_to_none, ref.non_blocking)
    mine, theirs = (r.prepare(r.to_device(*next(iter(loader)))[0]) for r in (run, ref))
    assert mine.dtype == theirs.dtype and mine.device == theirs.device
    for fmt in (torch.contiguous_format, torch.channels_last):
        assert mine.is_contiguous(memory_format=fmt) == theirs.is_contiguous(memory_format=fmt)


def test_plain_loop_applies_what_the_trial_window_applied(study_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same machine: no environment warning, no override
        best = autotune.load_best(study_dir / "best.yaml")
        assert {k: best.knobs[k] for k in PINNED} == PINNED
        rt = autotune.Runtime(best, device="cpu")
        dataset = MLPWorkload(n_samples=512).dataset("float32")
        loader = rt.dataloader(dataset, shuffle=True)
        model = rt.model(_user_model())
        opt = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01, momentum=0.9)
        run = rt.wrap(model, opt, nn.functional.cross_entropy, loader=loader)
        losses = []
        for step, (inputs, targets) in enumerate(loader):  # the user's own loop
            losses.append(float(run.step(*run.to_device(inputs, targets))))
            if step == 5:
                break
    assert all(torch.isfinite(torch.tensor(losses)))
    assert _impl(opt) == (True, None)  # foreach, as measured
    ref = Training(MLPWorkload(n_samples=512), best.knobs, "cpu")  # what the trial ran
    _same_as_trial(rt, loader, run, ref)


@pytest.mark.parametrize("change", [{"compile": "default"}, {"optimizer_impl": "fused"},
                                    {"amp": "bf16", "set_to_none": True}])
def test_each_knob_matches_the_trial(study_dir: Path, change: dict[str, Any]) -> None:
    """Knob values the pinned study did not cover, applied by both paths (nothing compiles:
    the compile wrapper is lazy and no step is taken through it)."""
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    doc["knobs"].update(change)
    rt = autotune.Runtime(doc, device="cpu")  # a mapping, as a Hydra app passes it
    loader = rt.dataloader(MLPWorkload(n_samples=256).dataset("float32"))
    model = rt.model(_user_model())
    run = rt.wrap(model, rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01),
                  nn.functional.cross_entropy, loader=loader)
    ref = Training(MLPWorkload(n_samples=256), doc["knobs"], "cpu")
    _same_as_trial(rt, loader, run, ref)
    if "compile" in change:
        assert isinstance(run.forward_module, torch._dynamo.eval_frame.OptimizedModule)


def test_channels_last_reaches_model_and_inputs(study_dir: Path) -> None:
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    doc["knobs"].update(channels_last=True, num_workers=0, prefetch_factor=None,
                        persistent_workers=False)
    rt = autotune.Runtime(doc, device="cpu")
    data = torch.utils.data.TensorDataset(torch.randn(32, 3, 8, 8), torch.randint(0, 4, (32,)))
    model = rt.model(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 4)))
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    run = rt.wrap(model, rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.1),
                  nn.functional.cross_entropy)
    inputs, targets = run.to_device(*next(iter(rt.dataloader(data))))
    assert run.prepare(inputs).is_contiguous(memory_format=torch.channels_last)
    assert torch.isfinite(run.step(inputs, targets))


def test_user_overrides_warn_once_and_stand(study_dir: Path) -> None:
    rt = autotune.Runtime(study_dir / "best.yaml", device="cpu")
    data = MLPWorkload(n_samples=256).dataset("float32")
    with pytest.warns(autotune.KnobOverridden) as record:
        loader = rt.dataloader(data, num_workers=0, prefetch_factor=None,
                               persistent_workers=False)
        rt.check_loader(loader)  # the same difference again: no second warning
        model = rt.model(torch.compile(_user_model()))  # compiled by the user: kept as is
        opt = torch.optim.SGD(model.parameters(), lr=0.01)  # built without foreach=
        run = rt.wrap(model, opt, nn.functional.cross_entropy, loader=loader)
    texts = [str(w.message) for w in record if w.category is autotune.KnobOverridden]
    assert loader.num_workers == 0 and run.forward_module is model
    assert sum("num_workers=0" in t for t in texts) == 1, texts
    assert sum("compile=" in t for t in texts) == 1, texts
    assert sum("optimizer_impl='default'" in t and "'foreach'" in t for t in texts) == 1, texts


def test_example_script_trains_from_best_yaml(study_dir: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "train_plain.py"),
                           str(study_dir / "best.yaml"), "--steps", "5"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 5" in proc.stdout and "loss" in proc.stdout


# --- load_best checks the environment --------------------------------------------------------
def test_load_best_warns_once_naming_each_difference(study_dir: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert doc["device"]["torch"] == torch.__version__ and doc["device"]["cpu"]
    doc["device"].update(torch="2.0.0", name="Imaginary CPU 9000")
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.warns(autotune.EnvironmentChanged) as record:
        best = autotune.load_best(path)
    assert len(record) == 1
    text = str(record[0].message)
    assert f"torch: measured 2.0.0, here {torch.__version__}" in text
    assert "CPU: measured Imaginary CPU 9000" in text
    assert best.knobs == doc["knobs"]


def test_load_best_reads_an_older_schema_1_file(study_dir: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    del doc["device"]["cpu"], doc["metrics"]["data_wait_share"]  # not recorded back then
    doc["device"]["name"] = "an older CPU"
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.warns(autotune.EnvironmentChanged, match="CPU: measured an older CPU"):
        assert autotune.load_best(path).knobs == doc["knobs"]
    path.write_text("schema: 1\nworkload: mlp\n")
    with pytest.raises(ValueError, match="'knobs' mapping"):
        autotune.load_best(path)


# --- the production meter --------------------------------------------------------------------
def _loop(meter: autotune.Meter, steps: int, step_s: float = 0.0, load_s: float = 0.0) -> None:
    def batches() -> Any:
        while True:
            time.sleep(load_s)
            yield 8

    for i, batch in enumerate(meter.wrap(batches())):
        time.sleep(step_s)
        meter.step(batch)
        if i + 1 == steps:
            return


def test_meter_silent_on_target() -> None:
    # 8 samples per step of ~2 ms: far above 1 sample/s however loaded the machine is.
    meter = autotune.Meter(1.0, warmup_steps=2, window_steps=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _loop(meter, 22, step_s=0.002)
    assert meter.warning is None and meter.samples_per_sec is not None


@pytest.mark.parametrize("slow", ["step", "loader"])
def test_meter_warns_once_with_the_cause(slow: str) -> None:
    # Steps of >= 20 ms, 8 samples each: at most 400 samples/s against 100,000 measured.
    meter = autotune.Meter(100_000.0, knobs={"num_workers": 0, "batch_size": 8}, device="cpu",
                           measured_data_wait=0.02, warmup_steps=2, window_steps=4)
    with pytest.warns(autotune.SlowerThanMeasured) as record:
        _loop(meter, 22, **({"step_s": 0.02} if slow == "step" else {"load_s": 0.02}))
    assert len(record) == 1
    text = str(record[0].message)
    assert "below the study's confirmed 100,000.0 samples/s" in text
    if "the machine was busy with other work" in text:  # a busy CI machine's, rightly said
        pytest.skip(f"the machine was busy during the loop: {text}")
    if slow == "loader":
        assert "the loader is slower than measured" in text and "study measured 2%" in text
        assert "num_workers=" in text  # the diagnosis rule's fix
    else:
        assert "the step itself is slower than measured" in text


def test_meter_beside_another_job_names_the_busy_machine_as_the_cause() -> None:
    """The study's figure is a quiet machine's: a production run beside another job (busy
    processes on every core, outside the run's process tree) is slower for that reason, and
    the meter's one warning says so rather than blaming the loader or the step; its summary
    carries the reading (autotune verify leaves such a round out)."""
    from tests.test_contention import cpu_hog

    if (os.cpu_count() or 1) > 8:
        pytest.skip("one busy process per core is needed to load the machine; many here")
    meter = autotune.Meter(100_000.0, knobs={"num_workers": 0, "batch_size": 8}, device="cpu",
                           warmup_steps=2, window_steps=10)
    a = torch.randn(256, 256)
    # A thread per core, as a CPU training run has: an earlier test may have left this process
    # one, which the scheduler can keep on a core of its own beside the hog (not delayed, so
    # rightly not contended).
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        with cpu_hog(seconds=30), pytest.warns(autotune.SlowerThanMeasured) as record:
            for _ in range(32):  # steps of matmuls on torch's threads, ~0.1 s each
                end = time.monotonic() + 0.1
                while time.monotonic() < end:
                    a = torch.tanh(a @ a)
                meter.step(8)
    finally:
        torch.set_num_threads(threads)
    text = str(record[0].message)
    assert "Likely cause: the machine was busy with other work while it ran: other " \
           "processes used" in text, (text, meter.contention())
    load = meter.contention()
    assert load is not None and load["contended"] and load["other_cpu_cores"] >= 0.5, load
    assert meter.summary()["contention"] == load


# --- exports for the ecosystem ---------------------------------------------------------------
HYDRA_APP = '''
import json, hydra, autotune

@hydra.main(config_path=".", config_name="config", version_base=None)
def main(cfg):
    rt = autotune.Runtime(cfg.autotune, device="cpu")
    print("APP", cfg.lr, json.dumps(rt.knobs), rt.best.metrics["samples_per_sec"])

main()
'''


def test_hydra_app_applies_the_study_with_plus_autotune_best(study_dir: Path,
                                                             tmp_path: Path) -> None:
    """The command written in the config-group file's header, run by a real @hydra.main app."""
    group = study_dir / "hydra" / "autotune" / "best.yaml"
    line = next(s for s in group.read_text().splitlines() if "python train.py" in s)
    args = line.split("python train.py", 1)[1].split()  # ['hydra.searchpath=[file://...]', ...]
    (tmp_path / "train.py").write_text(HYDRA_APP)
    (tmp_path / "config.yaml").write_text("lr: 0.1\n")
    proc = subprocess.run([sys.executable, "train.py", *(a.strip("'") for a in args),
                           f"hydra.run.dir={tmp_path / 'out'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = next(s for s in proc.stdout.splitlines() if s.startswith("APP "))
    _, lr, rest = out.split(" ", 2)
    knobs, rate = rest.rsplit(" ", 1)
    best = autotune.load_best(study_dir / "best.yaml")
    assert (float(lr), yaml.safe_load(knobs), float(rate)) == (
        0.1, best.knobs, best.metrics["samples_per_sec"])


def test_override_list_composes_to_the_best_knobs(study_dir: Path) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from autotune.cli.config import register_configs

    lines = (study_dir / "overrides.txt").read_text().splitlines()
    assert "knobs.num_workers=1" in lines and "knobs.transfer_dtype='float32'" in lines
    register_configs()
    with initialize_config_dir(str(ROOT / "autotune" / "conf"), version_base=None):
        cfg = compose("config", overrides=["workload=mlp", *lines])
    assert OmegaConf.to_container(cfg.knobs) == autotune.load_best(study_dir / "best.yaml").knobs


class _OwnLoss(nn.Module):
    """A Hugging Face-style model: keyword inputs, labels inside, returns its own loss."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(64, 10)

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": nn.functional.cross_entropy(self.net(features), labels)}


class _DictData(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"features": torch.randn(64), "labels": torch.tensor(i % 10)}


def test_mapping_batches_and_accumulation_from_best_yaml(study_dir: Path) -> None:
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    doc["knobs"].update(num_workers=0, prefetch_factor=None, persistent_workers=False,
                        batch_size=8)
    doc["grad_accum"] = 2  # study.keep_global_batch: global batch 16 = 2 x 8
    rt = autotune.Runtime(doc, device="cpu")
    model = rt.model(_OwnLoss())
    opt = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    steps: list[int] = []
    opt.register_step_post_hook(lambda *_: steps.append(1))
    run = rt.wrap(model, opt)  # no loss_fn: the model's own
    loader = rt.dataloader(_DictData())
    for i, batch in enumerate(loader):
        inputs, targets = run.split(batch)
        assert isinstance(inputs, dict) and targets is None
        assert torch.isfinite(run.step(*run.to_device(inputs, targets)))
        if i == 3:
            break
    assert len(steps) == 2  # one optimizer step per 2 micro-batches


@pytest.mark.gpu
def test_cuda_knobs_match_the_trial_and_a_graph_replays() -> None:
    """Pinning, asynchronous copies, bf16 autocast, the fused optimizer and a captured CUDA
    Graph, applied to a user loop as the trial window applies them. The configuration is
    trial 0's on this GPU with those knobs set, not the module's CPU study (25 s of the GPU
    check's time, 2026-11-26, for knobs this test sets itself)."""
    from tests.workloads_diag import baseline_knobs

    doc = {"knobs": baseline_knobs(MLPWorkload(n_samples=512), "cuda")}
    doc["knobs"].update(num_workers=0, prefetch_factor=None, persistent_workers=False,
                        pin_memory=True, non_blocking=True, amp="bf16", compile="off",
                        optimizer_impl="fused", cuda_graphs=True, set_to_none=True)
    rt = autotune.Runtime(doc, device="cuda")
    loader = rt.dataloader(MLPWorkload(n_samples=512).dataset("float32"), shuffle=True)
    model = rt.model(_user_model())
    opt = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01, momentum=0.9)
    run = rt.wrap(model, opt, nn.functional.cross_entropy, loader=loader)
    assert run.graph is not None and _impl(opt)[1] is True
    ref = Training(MLPWorkload(n_samples=512), doc["knobs"], "cuda")
    _same_as_trial(rt, loader, run, ref)
    assert loader.pin_memory and run.amp_dtype is torch.bfloat16
    for step, (inputs, targets) in enumerate(loader):
        loss = run.step(*run.to_device(inputs, targets))
        if step == 3:
            break
    assert torch.isfinite(loss)


def test_optimizer_without_the_measured_flag_warns_and_builds(study_dir: Path) -> None:
    class PlainSGD(torch.optim.SGD):  # a user's optimizer that takes no foreach=/fused=
        def __init__(self, params: Any, lr: float) -> None:
            super().__init__(params, lr=lr)

    rt = autotune.Runtime(study_dir / "best.yaml", device="cpu")  # measured foreach
    model = rt.model(_user_model())
    with pytest.warns(autotune.KnobOverridden, match="PlainSGD without foreach="):
        opt = rt.optimizer(PlainSGD, model.parameters(), lr=0.1)
    assert isinstance(opt, PlainSGD)


class _StagedData(MLPWorkload):
    """A staged workload: raw uint8 features, then to_float and normalize (both batched)."""

    name = "staged"

    def raw_dataset(self) -> torch.utils.data.TensorDataset:
        g = torch.Generator().manual_seed(0)
        return torch.utils.data.TensorDataset(
            torch.randint(0, 256, (64, 64), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (64,), generator=g))

    def stages(self) -> list[autotune.core.stages.Stage]:
        from autotune.core.stages import Stage
        return [Stage("to_float", lambda x: x.float() / 255, lambda b: b.float() / 255),
                Stage("normalize", lambda x: (x - 0.5) / 0.5, lambda b: (b - 0.5) / 0.5)]


def _staged_best(study_dir: Path, split: int) -> dict[str, Any]:
    """The mlp study's best.yaml as a staged study with this split would have exported it."""
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert doc["input_stages"] == 0  # the mlp declares no input stages
    group = yaml.safe_load((study_dir / "hydra" / "autotune" / "best.yaml").read_text())
    assert group["input_stages"] == 0  # Runtime(cfg.autotune) can tell, too
    return {**doc, "input_stages": 2, "knobs": {**doc["knobs"], "transform_split": split}}


def test_transform_split_applied_to_the_users_loader_as_in_the_trial(study_dir: Path) -> None:
    """best.yaml moved every stage to the device: the runtime's loader ships the raw uint8
    items and the step finishes them on the device, exactly as the trial window did."""
    wl = _StagedData()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the split is applied: nothing to warn about
        rt = autotune.Runtime(_staged_best(study_dir, 0), device="cpu")
        loader = rt.dataloader(wl.raw_dataset(), stages=wl.stages())
        model = rt.model(_user_model())
        opt = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01)
        run = rt.wrap(model, opt, nn.functional.cross_entropy, loader=loader)
    inputs, targets = next(iter(loader))
    assert inputs.dtype == torch.uint8  # the host part: nothing ran per sample
    ref = Training(wl, rt.knobs, "cpu")  # the trial window's own objects, same knobs
    ref_inputs, _ = next(iter(ref.loader))
    assert ref_inputs.dtype == torch.uint8 and ref_inputs.shape == inputs.shape
    mine = run.prepare(run.to_device(inputs, targets)[0])
    torch.testing.assert_close(mine, ref.prepare(ref.to_device(inputs, targets)[0]))
    host = autotune.core.stages.StagedDataset(wl.raw_dataset(), wl.stages())  # every stage per item
    all_host = torch.stack([host[i][0] for i in range(len(inputs))])
    torch.testing.assert_close(mine, all_host)  # and what the all-host pipeline gives
    assert torch.isfinite(run.step(*run.to_device(inputs, targets)))


def test_a_plain_loader_warns_when_best_yaml_moved_stages_to_the_device(study_dir: Path) -> None:
    wl = _StagedData()
    rt = autotune.Runtime(_staged_best(study_dir, 0), device="cpu")
    model = rt.model(_user_model())
    opt = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01)
    plain = torch.utils.data.DataLoader(wl.dataset("float32"), **rt.loader_kwargs())
    with pytest.warns(autotune.KnobOverridden, match=r"transform_split.*stages=") as caught:
        rt.wrap(model, opt, nn.functional.cross_entropy, loader=plain)
        rt.dataloader(wl.dataset("float32"))
    assert len([w for w in caught if "transform_split" in str(w.message)]) == 1  # once
    # all stages on the host (the split a plain loader runs): nothing to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rt = autotune.Runtime(_staged_best(study_dir, 2), device="cpu")
        rt.wrap(model, opt, nn.functional.cross_entropy, loader=rt.dataloader(wl.dataset("float32")))


def test_compile_warning_only_for_another_mode(study_dir: Path) -> None:
    """A model the user compiled in the measured mode is silent; another mode names both."""
    doc = yaml.safe_load((study_dir / "best.yaml").read_text())
    best = {**doc, "knobs": {**doc["knobs"], "compile": "default"}}
    assert autotune.production.runtime.compiled_mode(torch.compile(_user_model())) == "default"
    assert autotune.production.runtime.compiled_mode(
        torch.compile(_user_model(), mode="max-autotune")) == "max-autotune"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.Runtime(best, device="cpu").model(torch.compile(_user_model()))
    with pytest.warns(autotune.KnobOverridden, match=r"compile='max-autotune-no-cudagraphs'.*"
                                                     r"measured compile='default'"):
        autotune.Runtime(best, device="cpu").model(
            torch.compile(_user_model(), mode="max-autotune-no-cudagraphs"))
    with pytest.warns(autotune.KnobOverridden, match="cannot be told"):
        autotune.Runtime(best, device="cpu").model(torch.compile(_user_model(), backend="eager"))
