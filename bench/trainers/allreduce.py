"""The nodes benchmark's all-reduce: torch.distributed (gloo, CPU) from the variables in the
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), one warm-up and ROUNDS timed
all-reduces of MIB MiB of float32; rank 0 prints the median seconds. Run by Debian's
/usr/bin/python3 (python3-torch).
usage: allreduce.py MIB ROUNDS"""

import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

mib, rounds = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=300))
tensor = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32)
dist.all_reduce(tensor)  # warm-up: connections made, pages touched
times = []
for _ in range(rounds):
    dist.barrier()
    began = time.perf_counter()
    dist.all_reduce(tensor)
    times.append(time.perf_counter() - began)
if dist.get_rank() == 0:
    print(f"allreduce {statistics.median(times):.4f}", flush=True)
dist.destroy_process_group()
