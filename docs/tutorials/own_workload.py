"""Your own workload, tuned from Python (CPU, under a minute with the tiny settings below).

The documentation's "Tuning your own workload" page shows this file as it is, and the test
suite runs it (tests/test_docs_examples.py). Put the class in an importable module
(``my_project/tuning.py``) to tune it from the command line too:
``autotune workload._target_=my_project.tuning.MyWorkload +workload.hidden=1024``.
"""

import torch
from torch import nn
from torch.utils.data import TensorDataset

import autotune
from autotune import Workload


class MyWorkload(Workload):
    name = "my-model"
    image_inputs = False          # True: 4-D image batches, so channels_last can apply
    static_shapes = True          # every batch has the same shapes (CUDA Graphs possible)

    def __init__(self, hidden: int = 512, batch_size: int = 64):
        self.hidden = hidden
        # Your current settings: trial 0 (the baseline) runs exactly these.
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype):          # a torch Dataset of (inputs, targets)
        x, y = torch.randn(4096, 128), torch.randint(0, 10, (4096,))
        return TensorDataset(x, y)

    def model(self):
        return nn.Sequential(nn.Linear(128, self.hidden), nn.ReLU(),
                             nn.Linear(self.hidden, self.hidden), nn.ReLU(),
                             nn.Linear(self.hidden, 10))

    def loss(self, outputs, targets):
        return nn.functional.cross_entropy(outputs, targets)

    def optimizer(self, params, **impl):        # pass **impl on: it carries foreach=/fused=
        return torch.optim.AdamW(params, lr=1e-3, **impl)


if __name__ == "__main__":
    # Tiny settings so that this example runs in about a minute on a CPU; for a real study
    # drop the window.* overrides and the n_trials.
    short = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
             "window.min_measure_steps=2", "window.min_measure_seconds=1",
             "window.profile=false", "study.confirm_budget_s=20"]
    try:
        best = autotune.tune(short, workload=MyWorkload(hidden=1024), device="cpu",
                             name="my-model-docs", n_trials=3)
    except autotune.CouldNotMeasure as exc:  # a busy machine: the study says why, and its
        print(exc)                            # export keeps only what its intervals support
        best = exc.best
    print(best.document["speedup_text"], best.knobs["batch_size"])
