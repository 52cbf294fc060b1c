"""How far do the numerics knobs move the first 10 training losses on this CPU? The figures
behind numerics.DEFAULT_TOLERANCE: max relative loss deviation from the baseline knobs, same
seed and data order. Run from the repository's root: python -m benchmarks.numerics_deviation"""

from __future__ import annotations

from autotune.core.env import probe
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.core.workload import build_workload
from autotune.measure.batches import Batches
from autotune.search.checks.numerics import deviation

SPECS = {
 "mlp": {"_target_": "autotune.workloads.mlp.MLPWorkload"},
 "resnet18": {"_target_": "autotune.workloads.resnet18.ResNet18Workload", "image_size": 32, "n_images": 256, "batch_size": 16},
 "gpt": {"_target_": "autotune.workloads.gpt.GPTWorkload", "vocab": 256, "seq_len": 32, "d_model": 64, "n_layer": 2, "n_head": 4, "n_sequences": 256, "batch_size": 8},
}
def losses(wl, knobs, n=10):  # noqa: ANN001, ANN201
    run = Training(wl, knobs, "cpu", seed=0)
    b = Batches(run)
    return [float(run.step(*run.to_device(*next(b)))) for _ in range(n)]


def main() -> None:
    env = probe("cpu")
    for name, spec in SPECS.items():
        wl = build_workload(spec)
        base = build_space(env, wl, {}).baseline
        ref = losses(wl, base)
        for change in ({"amp": "bf16"}, {"channels_last": True}, {"optimizer_impl": "fused"}):
            if change.get("channels_last") and not wl.image_inputs:
                continue
            got = losses(wl, {**base, **change})
            print(name, change, f"max rel dev over 10 steps: {deviation(got, ref):.4%}")


if __name__ == "__main__":
    main()
