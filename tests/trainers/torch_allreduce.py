"""A node of a real torch.distributed job (gloo, CPU), run by Debian's /usr/bin/python3 with
python3-torch: it joins the process group from the variables trainq gives it alone
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), all-reduces its rank + 1, trains a small DDP
model for a few steps on data of its own, and prints the sum and its weights' digest."""

import hashlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["TRAINQ_NODE_RANK"])
host = os.environ["SM_CURRENT_HOST"]

total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"{host} rank {rank} of {world}: sum {total.item():g}", flush=True)

torch.manual_seed(1000 + rank)  # DDP starts every node from rank 0's weights all the same
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    inputs, targets = torch.randn(16, 8), torch.randn(16, 1)  # each node's own batch
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
digest = hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]
print(f"{host} weights {digest}", flush=True)
dist.destroy_process_group()
