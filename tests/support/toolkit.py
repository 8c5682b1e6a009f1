"""What the SageMaker training toolkit computes and trainq gives a job may differ in."""

from __future__ import annotations

# Where the toolkit and trainq may disagree, and why. With no GPU given, the toolkit's
# count (what `nvidia-smi` lists: nothing on this machine) and the job's agree, so nothing
# is excused here; on a GPU host SM_NUM_GPUS is the job's own count by design.
EXCUSED: dict[str, str] = {}
