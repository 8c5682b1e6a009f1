"""A trainer for tests/gpu: says which CUDA device it computed on, in its model directory.

`cuda_trainer.py SECONDS`: as a job; multiplies matrices on every visible device for SECONDS
(at least once), holding 2 GiB, then writes `cuda.json` into SM_MODEL_DIR.
`cuda_trainer.py hold`: outside trainq; keeps a CUDA context open until stdin closes.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import sys
import time

import torch  # type: ignore[import-not-found]


def device_node() -> str:
    """Whether this process may open a GPU's device node at all (not just what CUDA shows)."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if not nodes:
        return "absent"
    try:
        os.close(os.open(nodes[0], os.O_RDWR))
    except OSError as error:
        return "refused" if error.errno == errno.EPERM else f"error {error.errno}"
    return "opened"


def main() -> None:
    if sys.argv[1] == "hold":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        print("ready", flush=True)
        sys.stdin.read()
        return
    seconds = float(sys.argv[1])
    count = torch.cuda.device_count()
    seen: dict[str, object] = {
        "device_count": count,
        "device_node": device_node(),
        "env": {k: v for k, v in os.environ.items() if "VISIBLE" in k or k.startswith("CUDA")},
    }
    if count:
        device = torch.device("cuda", 0)
        seen["uuid"] = f"GPU-{torch.cuda.get_device_properties(device).uuid}"
        held = torch.empty(2 << 30, dtype=torch.uint8, device=device)
        a = torch.ones((4096, 4096), device=device)
        deadline = time.monotonic() + seconds
        product = a @ a
        while time.monotonic() < deadline:
            product = a @ a
            torch.cuda.synchronize()
        seen["product_ok"] = bool(torch.all(product == 4096).item())
        del held
    model = os.environ.get("SM_MODEL_DIR", "/opt/ml/model")
    with open(os.path.join(model, "cuda.json"), "w") as out:
        json.dump(seen, out)
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
