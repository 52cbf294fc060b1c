"""A Lightning training script as teams write one: argparse, a LightningModule, a DataLoader
given to ``Trainer.fit``, a checkpoint at the end. It has no autotune line: ``autotune --
python examples/lightning_train.py --batch-size 32`` tunes it as it is (docs/guide/script.md),
and ``autotune apply STUDY -- python examples/lightning_train.py ...`` runs it with the answer.
It prints what its first batch and Trainer hold (the tests read it)."""
import argparse

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))

    def training_step(self, batch, i):
        x, y = batch
        if i == 0:
            print(f"BATCH {len(x)} precision={self.trainer.precision} "
                  f"accum={self.trainer.accumulate_grad_batches} "
                  f"root={self.trainer.default_root_dir} world={self.trainer.world_size}",
                  flush=True)
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-steps", type=int, default=5000)
    a = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(8192, 32)
    y = (x @ torch.randn(32, 4)).argmax(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=a.batch_size, shuffle=True, drop_last=True)
    trainer = L.Trainer(max_steps=a.max_steps, accelerator="cpu", devices=1,
                        accumulate_grad_batches=2, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir="lout")
    trainer.fit(Net(), loader)
    trainer.save_checkpoint("lout/final.ckpt")


if __name__ == "__main__":
    main()
