"""The tutorial's training script (docs/guide/nanogpt.md): nanoGPT's train.py cut down to one
process (no DDP, no checkpoints, no logging service), training the tutorial's GPT on batches
sliced from a memmap. train_original.py is the script before the study; train.py is the same
with the study's result applied, in 10 changed lines::

    python examples/nanogpt/train_original.py --steps 300
    python examples/nanogpt/train.py --steps 300
    autotune verify studies/nanogpt --script examples/nanogpt/train.py --steps 300
"""

import argparse
import math

import numpy as np
import torch
from model import GPT, GPTConfig
from prepare import prepare

import autotune

ap = argparse.ArgumentParser(description="train the tutorial's GPT (nanoGPT's loop)")
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--eval-every", type=int, default=100)
args = ap.parse_args()

# The configuration, as nanoGPT's train.py keeps it.
rt = autotune.Runtime("studies/nanogpt/best.yaml")  # or AUTOTUNE_BEST, as verify sets it
batch_size, block_size = rt.setting("batch_size", 16), 64
learning_rate, min_lr, warmup_iters = 1e-3, 1e-4, 20
weight_decay, beta1, beta2, grad_clip = 0.1, 0.9, 0.95, 1.0
eval_iters, log_interval = 10, 50
dtype = "float32"  # "bfloat16" or "float16" on a GPU
compile = False
device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
data_dir = prepare()
torch.manual_seed(1337)


def get_batch(split):
    data = np.memmap(data_dir / f"{split}.bin", dtype=np.uint16, mode="r")  # anew each batch
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64))
                     for i in ix])
    if device_type == "cuda":
        return (x.pin_memory().to(device, non_blocking=True),
                y.pin_memory().to(device, non_blocking=True))
    return x.to(device), y.to(device)


get_batch = rt.batches(get_batch)  # timed for the meter; what applies to it is said once

model = GPT(GPTConfig(block_size=block_size)).to(device)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
rt.apply_optimizer(optimizer)  # fused= / foreach= as measured, in every parameter group
model = rt.compile(model)
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = rt.autocast()
scaler = rt.grad_scaler()


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = min(1.0, (it - warmup_iters) / max(1, args.steps - warmup_iters))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


X, Y = get_batch("train")
for it in range(args.steps + 1):
    for group in optimizer.param_groups:
        group["lr"] = get_lr(it)
    if it % args.eval_every == 0:
        losses = estimate_loss()
        print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if it == args.steps:
        break
    with ctx:
        logits, loss = model(X, Y)
    X, Y = get_batch("train")  # the next batch while the device works, as nanoGPT does
    scaler.scale(loss).backward()
    if grad_clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    rt.zero_grad(optimizer)
    rt.meter().step(batch_size, loss=loss)
    if it % log_interval == 0:
        print(f"iter {it}: loss {loss.item():.4f}")
