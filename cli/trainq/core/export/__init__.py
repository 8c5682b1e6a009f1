"""A job spec as another engine's artifact: a Slurm batch script (`slurm`), a Kubernetes
Job (`kubernetes`), a SageMaker CreateTrainingJob request (`sagemaker`).

Each target is a module of pure functions from a validated `JobSpec` (and the options only
the user can give, such as where a channel's data lives on the other side) to text or a
dict. What a target cannot express is refused with `Unsupported`, naming the field and why,
rather than exported with a meaning the job did not have.
"""

from trainq.core.export.common import TARGETS, Unsupported

__all__ = ["TARGETS", "Unsupported"]
