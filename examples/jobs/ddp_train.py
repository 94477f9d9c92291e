"""A small data-parallel training job for trying toposched (`vgg16-4gpu.yaml`, ...).

What it does depends on what the machine has:

* PyTorch and a usable CUDA GPU: real training. Each worker joins the process group the way
  torchrun's workers do (env:// from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which
  toposched sets), takes the first GPU of its CUDA_VISIBLE_DEVICES, wraps the model in
  DistributedDataParallel (NCCL) and runs --steps steps of SGD on synthetic data (random
  images and labels: it measures the scheduler's placement, not accuracy). The model is
  torchvision's --model when torchvision is installed, else a small convolutional net (it says
  so). Rank 0 prints loss and images/s.
* No PyTorch, or no GPU it can use (CI, or a server emulating a dgx1-v100): no training at all.
  Each worker prints the environment toposched gave it and a few fake "steps", then exits 0:
  enough to watch placement, logs and the job's life cycle.

Run it by hand with: RANK=0 WORLD_SIZE=1 python examples/jobs/ddp_train.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="torchvision model name")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32, help="images per worker per step")
    parser.add_argument("--fake-steps", type=int, default=3, help="steps without a GPU")
    return parser.parse_args()


def why_no_gpu() -> str | None:
    """None when real training can run, else why not."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        return f"no CUDA GPU is usable (CUDA_VISIBLE_DEVICES={visible})"
    return None


def fake(args: argparse.Namespace, reason: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    print(f"[rank {rank}/{world}] not training: {reason}; showing the environment instead")
    for key in ENV:
        print(f"[rank {rank}/{world}] {key}={os.environ.get(key, '')}")
    for step in range(1, args.fake_steps + 1):
        time.sleep(0.1)
        print(f"[rank {rank}/{world}] fake step {step}/{args.fake_steps} ({args.model})")
    print(f"[rank {rank}/{world}] done")


def model_for(name: str) -> tuple[Any, str]:
    import torch.nn as nn

    try:
        import torchvision

        return getattr(torchvision.models, name)(num_classes=1000), name
    except (ImportError, AttributeError):
        small = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(128, 1000),
        )
        return small, f"a small CNN (torchvision has no {name!r} here)"


def train(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("nccl", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", 0)  # the first of this worker's CUDA_VISIBLE_DEVICES
    torch.cuda.set_device(device)
    model, what = model_for(args.model)
    model = DistributedDataParallel(model.to(device), device_ids=[0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, 224, 224, device=device)
    labels = torch.randint(0, 1000, (args.batch,), device=device)
    if rank == 0:
        print(f"training {what} on {world} worker(s), {args.batch} images each per step")
    began = time.perf_counter()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()  # DDP all-reduces the gradients here, over the links toposched chose
        optimizer.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps):
            torch.cuda.synchronize()
            rate = step * args.batch * world / (time.perf_counter() - began)
            print(f"step {step}/{args.steps} loss {loss.item():.3f} {rate:.0f} images/s")
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    args = parse_args()
    reason = why_no_gpu()
    if reason is not None:
        fake(args, reason)
    else:
        train(args)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
