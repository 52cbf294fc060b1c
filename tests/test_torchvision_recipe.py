"""examples/torchvision_recipe.py is the recipe it says (docs/benchmarks.md's study of it):
random crops and flips per image at the image size, SGD lr 0.1 with momentum 0.9 and weight
decay, batch 32 from 2 workers."""

from __future__ import annotations

import torch

from examples.torchvision_recipe import TorchvisionRecipe


def test_the_recipe_crops_at_random_and_steps_its_sgd() -> None:
    wl = TorchvisionRecipe(n_images=40).cpu_sized()
    assert wl.defaults == {"batch_size": 32, "num_workers": 2}
    assert [s.name for s in wl.stages()] == ["decode", "crop_flip", "to_float", "normalize"]
    raw, _ = wl.raw_dataset()[0]
    decoded = wl.stages()[0].host(raw)
    torch.manual_seed(0)
    crops = [wl.stages()[1].host(decoded) for _ in range(4)]
    assert all(c.shape == (3, 64, 64) for c in crops)
    assert any(not torch.equal(crops[0], c) for c in crops[1:])  # random, not a center crop
    opt = wl.optimizer(torch.nn.Linear(2, 2).parameters())
    group = opt.param_groups[0]
    assert type(opt) is torch.optim.SGD
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.1, 0.9, 1e-4)
