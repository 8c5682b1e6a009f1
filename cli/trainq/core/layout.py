"""The ml root's directories, as the SageMaker contract lays them out under /opt/ml.

trainqd's monitor makes them for every attempt (trainqd.monitor.mlroot) and the Kubernetes
export's init container makes the same ones (trainq.core.export.kubernetes). Standard
library only: the monitor may import it.
"""

ML_DIRS = (
    "input/config",
    "input/data",
    "model",
    "output/data",
    "output/intermediate",
    "checkpoints",
    "code",
)
