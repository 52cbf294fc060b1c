"""A user's own script, as nanoGPT's train.py is written (issue 60): its autocast context kept
and entered at every step, batches from a function that slices a memmap rather than a
DataLoader, and an optimizer the model builds with parameter groups. Each is a Runtime call
(autotune/production/own_loop.py, batch_source.py) or the Workload's optimizer hook given the
model (core/workload.py); the tutorial that puts them together is tests/test_nanogpt_tutorial.py."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import autotune
from autotune.core.console import DETAIL
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.workloads.mlp import MLPWorkload


def _runtime(cpu_env: Any, **knobs: Any) -> autotune.Runtime:
    """A Runtime over a best.yaml document: the mlp's baseline knobs with ``knobs`` set."""
    baseline = build_space(cpu_env, MLPWorkload(), {}).baseline
    doc = {"schema": 1, "knobs": {**baseline, **knobs}, "device": {"type": "cpu"},
           "metrics": {"samples_per_sec": 100.0}}
    return autotune.Runtime(doc, device="cpu")


# --- the autocast context, kept and entered again ------------------------------------------
def test_the_autocast_context_is_entered_again_at_every_step(cpu_env: Any) -> None:
    """nanoGPT keeps ``ctx`` and enters it at every step: the second ``with`` failed
    (AttributeError: '_GeneratorContextManager' object has no attribute 'args'). Each entry
    applies the precision and the pinned SDPA backend afresh, nested entries too."""
    rt = _runtime(cpu_env, amp="bf16", attention="sdpa_math")
    ctx = rt.autocast()
    for _ in range(3):
        with ctx:
            assert torch.is_autocast_enabled("cpu")
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
            assert not torch.backends.cuda.flash_sdp_enabled()  # only math: pinned
            with ctx:  # nested (an evaluation inside a step's context)
                assert torch.is_autocast_enabled("cpu")
            assert torch.is_autocast_enabled("cpu")
        assert not torch.is_autocast_enabled("cpu")
        assert torch.backends.cuda.flash_sdp_enabled()  # restored after each

    @ctx  # and as a decorator, as a contextmanager-made one could be used
    def forward() -> torch.dtype:
        return nn.Linear(4, 4)(torch.randn(2, 4)).dtype

    assert forward() == forward() == torch.bfloat16


# --- batches from a function ------------------------------------------------------------------
def _memmap(tmp_path: Path) -> Path:
    path = tmp_path / "train.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    return path


def _get_batch(path: Path, batch_size: int, pause_s: float = 0.0) -> Any:
    """nanoGPT's get_batch: random slices of a memmap, opened anew for each batch."""
    def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(pause_s)
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - 9, (batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + 8].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 9].astype(np.int64)) for i in ix])
        return x, y

    return get_batch


def test_batches_from_a_function_say_once_which_loader_knobs_do_not_apply(
        cpu_env: Any, tmp_path: Path) -> None:
    """A study that measured DataLoader workers, applied to a loop whose batches come from
    get_batch: one KnobOverridden warning when the loop sets up names each loader knob that
    cannot apply with its value, and says what does; none at the following calls."""
    rt = _runtime(cpu_env, num_workers=2, prefetch_factor=4, persistent_workers=True,
                  batch_size=8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        get_batch = rt.batches(_get_batch(_memmap(tmp_path), rt.batch_size))
        for _ in range(5):
            x, y = get_batch("train")
    said = [str(w.message) for w in seen if issubclass(w.category, autotune.KnobOverridden)]
    assert len(said) == 1, said
    assert "get_batch()" in said[0]
    assert "num_workers=2, prefetch_factor=4, persistent_workers=True" in said[0]
    assert "batch_size=8 applies where the function reads rt.batch_size" in said[0]
    assert x.shape == y.shape == (8, 8) and torch.equal(x[:, 1:], y[:, :-1])
    assert get_batch.__name__ == "get_batch"  # the function's own name and docstring


def test_batches_from_a_function_with_nothing_lost_are_a_log_line(
        cpu_env: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt = _runtime(cpu_env, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing measured is lost
        with caplog.at_level(DETAIL, logger="autotune"):
            rt.batches(_get_batch(_memmap(tmp_path), 4))("train")
    lines = [r.getMessage() for r in caplog.records if "get_batch()" in r.getMessage()]
    assert len(lines) == 1 and "no loader knob of the study is lost" in lines[0]


def test_the_meter_counts_steps_and_times_batches_without_a_loader(
        cpu_env: Any, tmp_path: Path) -> None:
    """``rt.meter()`` is the run's one meter, stepped without a loader; ``rt.batches`` times
    each call as the loop's wait for its batch, so the meter's slower-than-measured warning
    names a loader cause instead of asking for ``meter.wrap(loader)``, and its summary (what
    ``autotune verify`` reads) splits each step into the wait and the rest."""
    rt = _runtime(cpu_env, num_workers=0, batch_size=4)
    meter = rt.meter(warmup_steps=2, window_steps=4)
    assert rt.meter() is meter
    with pytest.raises(ValueError, match="meter exists already"):
        rt.meter(window_steps=10)
    get_batch = rt.batches(_get_batch(_memmap(tmp_path), 4, pause_s=0.02))
    with pytest.warns(autotune.SlowerThanMeasured) as record:
        for _ in range(14):  # 4 samples per >= 50 ms (20 of them waiting for the batch):
            get_batch("train")  # at most 80 samples/s against the 100 measured
            time.sleep(0.03)
            rt.meter().step(rt.batch_size)
    text = str(record[0].message)
    assert "meter.wrap(loader)" not in text and "unknown" not in text
    # On a busy machine the cause named is the load (the meter reads it: a busy CI runner).
    assert "the loader is slower than measured" in text or "busy with other work" in text
    summary = meter.summary()
    assert summary["steps"] == 14 and summary["data_wait_share"] > 0.2
    assert summary["between_ms"] >= 20 and summary["inside_ms"] >= 25
    assert summary["step_ms"] == pytest.approx(summary["between_ms"] + summary["inside_ms"])


def test_a_meter_that_times_nothing_says_how_to_time_batches_from_a_function() -> None:
    meter = autotune.Meter(100_000.0, warmup_steps=1, window_steps=2)
    with pytest.warns(autotune.SlowerThanMeasured) as record:
        for _ in range(5):
            time.sleep(0.01)
            meter.step(8)
    text = str(record[0].message)  # on a busy machine the load is the cause it names
    assert "rt.batches(get_batch)" in text or "busy with other work" in text
    with meter.wait():  # the context a loop of its own puts around its batch call
        time.sleep(0.01)
    assert meter._wait >= 0.01


# --- an optimizer the model builds, with parameter groups ------------------------------------
class TinyGPT(nn.Module):
    """Two parameter groups as nanoGPT's configure_optimizers makes them; each group given
    its own implementation keys, which override a constructor argument."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 16)
        self.seen: list[Any] = []

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        logits = self.head(self.norm(self.emb(idx)))
        return logits, F.cross_entropy(logits.view(-1, 16), targets.view(-1))

    def configure_optimizers(self, own: dict[str, Any]) -> torch.optim.AdamW:
        params = list(self.parameters())
        return torch.optim.AdamW([
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1, **own},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, **own}],
            lr=1e-3)


def _kernels(opt: torch.optim.Optimizer, model: TinyGPT) -> str:
    """The optimizer kernels one real step runs (profiler op names)."""
    idx = torch.randint(0, 16, (4, 6))
    model(idx, idx)[1].backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    return " ".join(e.key for e in prof.key_averages())


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_apply_optimizer_sets_the_knob_in_every_parameter_group(cpu_env: Any, impl: str) -> None:
    """Groups that name the other implementation themselves (``fused=False, foreach=...``)
    step with the measured one: every group and the defaults are set, and the profiler sees
    the measured kernels, not the others."""
    model = TinyGPT()
    own = {"fused": False, "foreach": False}
    opt = model.configure_optimizers(own)
    assert _runtime(cpu_env, optimizer_impl=impl).apply_optimizer(opt) is opt
    assert all(g[impl] is True for g in [*opt.param_groups, opt.defaults])
    other = "foreach" if impl == "fused" else "fused"
    assert all(not g[other] for g in opt.param_groups)
    ran = _kernels(opt, model)  # (fused AdamW counts its steps with a _foreach_add_)
    if impl == "fused":
        assert "_fused_adamw_" in ran and "_foreach_addcdiv_" not in ran, ran
    else:
        assert "_foreach_addcdiv_" in ran and "_fused_adamw_" not in ran, ran
    # Unchanged, the groups' own keys win: the plain for-loop kernels.
    plain = TinyGPT()
    ran = _kernels(plain.configure_optimizers(own), plain)
    assert "_fused_adamw_" not in ran and "_foreach_addcdiv_" not in ran, ran


def test_apply_optimizer_refuses_what_it_cannot_set(cpu_env: Any) -> None:
    rt = _runtime(cpu_env, optimizer_impl="fused")
    model = nn.Linear(4, 4)
    with pytest.raises(ValueError, match=r"RMSprop takes no fused= argument.*RMSprop takes "
                                         r"foreach=.*knobs\.optimizer_impl=\[default,foreach\]"):
        rt.apply_optimizer(torch.optim.RMSprop(model.parameters()))
    stepped = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    stepped.step()
    with pytest.raises(ValueError, match="already stepped; set it before the first step"):
        rt.apply_optimizer(stepped)
    with pytest.raises(ValueError, match="at most one of fused=True or foreach=True"):
        autotune.apply_optimizer_impl(stepped, fused=True, foreach=True)
    default = torch.optim.AdamW(model.parameters(), foreach=True)  # optimizer_impl=default:
    _runtime(cpu_env, optimizer_impl="default").apply_optimizer(default)  # as built
    assert default.param_groups[0]["foreach"] is True


class GroupsWorkload(autotune.Workload):
    """A workload whose optimizer the model builds: its hook names ``model``."""

    name = "groups"

    def __init__(self) -> None:
        self.defaults = {"batch_size": 4, "num_workers": 0}
        self.given: list[Any] = []

    def dataset(self, transfer_dtype: str) -> Any:
        idx = torch.randint(0, 16, (64, 6))
        return [{"idx": i, "targets": i} for i in idx]

    def model(self) -> nn.Module:
        return TinyGPT()

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return outputs[1]

    def optimizer(self, params: Any, model: TinyGPT, **impl: Any) -> torch.optim.Optimizer:
        self.given.append(model)
        opt = model.configure_optimizers({"foreach": False})
        return autotune.apply_optimizer_impl(opt, **impl)


def test_the_workload_optimizer_hook_is_given_the_model(cpu_env: Any) -> None:
    """A hook naming ``model`` gets the model the trial trains and the measured
    implementation reaches every group of what it builds; a hook without it is called as
    before (its ``**impl`` goes to a constructor that would refuse ``model=``)."""
    wl = GroupsWorkload()
    knobs = {**build_space(cpu_env, wl, {}).baseline, "optimizer_impl": "foreach"}
    run = Training(wl, knobs, "cpu")
    assert len(wl.given) == 1 and wl.given[0] is run.model
    assert all(g["foreach"] is True for g in run.optimizer.param_groups)
    run.step(*run.to_device(*run.split(next(iter(run.loader)))))
    plain = Training(MLPWorkload(), {**build_space(cpu_env, MLPWorkload(), {}).baseline,
                                     "optimizer_impl": "foreach"}, "cpu")
    assert plain.optimizer.param_groups[0]["foreach"] is True
