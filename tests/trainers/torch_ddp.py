"""DDP training (torch.distributed, gloo, CPU) that resumes where it stopped, run by Debian's
/usr/bin/python3 with python3-torch. It joins the process group from what trainq gives each
node alone (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and trains a small model with SGD
and momentum for STEPS steps on a seeded data stream (each node's batch a function of the
step and its rank), so a run's weights depend only on STEPS and the number of nodes.

Every node checkpoints model, optimizer state and step after each step into its own
checkpoints/ (per node, as SageMaker's hosts do), keeping its last two: a stop can come
between one node's save and another's, so at start the nodes agree on the least step they
all hold (an all-reduce of MIN) and each loads that one. At the end each prints its weights'
digest, and rank 0 saves the model into its model/.

usage: torch_ddp.py STEPS [--stall-after K] [--crash-after K]
    --stall-after K  on a fresh start (no checkpoint), the last rank stops after step K
                     without saving it and waits to be stopped, the others blocked in step
                     K + 1: a stand-in for a long step that trainq stops (`trainq hold`)
    --crash-after K  on a fresh start, every node exits 139 (a crash's status, which trainq
                     retries) once it saved step K
"""

import argparse
import hashlib
import os
import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

SEED = 1234
parser = argparse.ArgumentParser()
parser.add_argument("steps", type=int)
parser.add_argument("--stall-after", type=int, default=0)
parser.add_argument("--crash-after", type=int, default=0)
args = parser.parse_args()

torch.set_num_threads(1)  # the same sums in the same order, run after run
dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=300))
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["TRAINQ_NODE_RANK"])
host = os.environ["SM_CURRENT_HOST"]
base = os.environ["SAGEMAKER_BASE_DIR"]
checkpoints = os.path.join(base, "checkpoints")
os.makedirs(checkpoints, exist_ok=True)


def saved_steps() -> list[int]:
    found = (re.fullmatch(r"step-(\d+)\.pt", name) for name in os.listdir(checkpoints))
    return sorted(int(m.group(1)) for m in found if m)


def checkpoint_path(step: int) -> str:
    return os.path.join(checkpoints, f"step-{step}.pt")


def digest(module: torch.nn.Module) -> str:
    weights = torch.cat([p.detach().flatten() for p in module.parameters()])
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]


torch.manual_seed(SEED)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

latest = torch.tensor([max(saved_steps(), default=0)])
dist.all_reduce(latest, op=dist.ReduceOp.MIN)
start = int(latest.item())
if start:
    state = torch.load(checkpoint_path(start))
    net.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    print(f"{host} resumed from step {start}: {digest(net)}", flush=True)

model = DistributedDataParallel(net)  # broadcasts rank 0's weights, equal anyway
truth = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.Generator().manual_seed(SEED + step * world + rank)
    inputs = torch.randn(32, 8, generator=data)
    return inputs, torch.tanh(inputs @ truth) + 0.1 * torch.randn(32, 1, generator=data)


def gradients(step: int) -> torch.Tensor:
    optimizer.zero_grad()
    inputs, targets = batch(step)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()  # DDP all-reduces the gradients here
    return loss


# DDP lays its gradients out anew after its first backward pass, and where a value lies
# decides the order gloo sums it in across 3 or more nodes: a pass whose gradients are
# dropped makes the first step after a start sum as every later one does.
gradients(0)
for step in range(start + 1, args.steps + 1):
    loss = gradients(step)
    optimizer.step()
    if start == 0 and step == args.stall_after and rank == world - 1:
        print(f"{host} stalls after step {step}", flush=True)
        while True:
            time.sleep(1)
    path = checkpoint_path(step)
    state = {"step": step, "model": net.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    for old in saved_steps()[:-2]:
        os.remove(checkpoint_path(old))
    print(f"{host} step {step} loss {loss.item():.6f}", flush=True)
    if start == 0 and step == args.crash_after:
        print(f"{host} crashes after step {step}", flush=True)
        os._exit(139)  # at once, as a crash does: no clean-up of the process group

print(f"{host} weights {digest(net)} after step {args.steps}", flush=True)
if rank == 0:
    torch.save(net.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
dist.destroy_process_group()
