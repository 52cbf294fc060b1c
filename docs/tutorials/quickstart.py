"""Quickstart: tune a model of yours, then train it with the result (CPU, a few minutes).

The documentation's quickstart shows this file as it is, and the test suite runs it
(tests/test_docs_examples.py), so it works as written.
"""

import torch
from torch import nn
from torch.utils.data import TensorDataset

import autotune


# --- your own code: a dataset and a model ---------------------------------------------------------
def my_dataset():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (8192,), generator=g)
    x = torch.randn(8192, 64, generator=g) + y[:, None].float() / 4
    return TensorDataset(x, y)


def my_model():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


# --- 1. what you train, and how you train it today ------------------------------------------------
class MyTraining(autotune.Workload):
    name = "quickstart"
    image_inputs = False          # no 4-D image batches: channels_last does not apply

    def __init__(self):
        self.defaults = {"batch_size": 32, "num_workers": 0}   # your settings: trial 0 runs them

    def dataset(self, transfer_dtype):
        return my_dataset()

    def model(self):
        return my_model()

    def loss(self, outputs, targets):
        return nn.functional.cross_entropy(outputs, targets)

    def optimizer(self, params, **impl):  # pass **impl on: the study tries foreach / fused
        return torch.optim.AdamW(params, lr=1e-3, **impl)


# --- 2. tune ---------------------------------------------------------------------------------------
# A short study, so that this example runs in a few minutes on a CPU: short windows, and a
# confirmation of at least 3 rounds within 20 s. For a real study drop these overrides.
short = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
         "window.min_measure_steps=2", "window.min_measure_seconds=1",
         "window.profile=false", "study.confirm_budget_s=20"]
try:
    best = autotune.tune(short, workload=MyTraining(), device="cpu", name="quickstart",
                         n_trials=4)
except autotune.CouldNotMeasure as exc:  # a busy machine (exit code 4): the study says why,
    print(exc)                            # and best.yaml keeps what its intervals support
    best = exc.best
print("speedup:", best.document["speedup_text"])
print("batch size:", best.knobs["batch_size"], "(yours: 32)")

# --- 3. train with the result, in your own loop -----------------------------------------------------
rt = autotune.Runtime(best)                       # or autotune.Runtime("studies/quickstart/best.yaml")
loader = rt.dataloader(my_dataset(), shuffle=True)          # batch size, workers, pinning, prefetch
model = rt.model(my_model())                                # device, memory format, compile
optimizer = rt.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)   # foreach / fused
run = rt.wrap(model, optimizer, nn.functional.cross_entropy, loader=loader)  # autocast, zero_grad
for epoch in range(2):
    for inputs, targets in loader:
        loss = run.step(*run.to_device(inputs, targets))
    print(f"epoch {epoch}: loss {loss.item():.3f}")
