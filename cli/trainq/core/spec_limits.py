"""What a job spec may hold: the patterns of its names and image references, the
variables trainq sets itself, and the limits on its sizes."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
CLASS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# An image reference as the engines accept it; never starting with "-" so it cannot be
# mistaken for an engine flag.
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}\Z")

# Variables trainq derives from the job itself; a job may not set them (docs/architecture.md).
RESERVED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "TRAINING_JOB_NAME",
        "TRAINING_JOB_ARN",
        "SAGEMAKER_BASE_DIR",
    }
)
RESERVED_ENV_PREFIXES = ("SM_", "TRAINQ_")

# SageMaker's own limits on hyperparameters.
MAX_HYPERPARAMETERS = 100
MAX_HP_KEY = 256
MAX_HP_VALUE = 2500
# The kernel refuses to start a program with any one environment string over 128 KiB, and
# the hyperparameters travel in SM_HPS (and twice in SM_TRAINING_ENV): their JSON is capped
# well below. The job's own variables get a cap of their own for the same reason.
MAX_HP_JSON = 32 * 1024
MAX_ENV_VALUE = 64 * 1024
MAX_ENV_TOTAL = 512 * 1024
# A container gets the job's variables in an --env-file, which the engines read a line at a
# time into a 64 KiB buffer; no value of them ever goes on a command line (docs/security.md).
ENV_FILE_LINE_LIMIT = 64 * 1024 - 1
# Budgets on a spec's lists, far above honest use: each variable is a line of an env file or
# a string of the trainer's environment, and the kernel refuses any one argument or
# environment string over 128 KiB (MAX_ARG_STRLEN, its NUL included). The number of channels
# (each one a bind mount for a container job) is the administrator's (trainqd's
# max_channels_per_job); the size of a whole spec too (max_spec_bytes).
MAX_ENV_VARS = 1000
MAX_PATH = 4096  # Linux's PATH_MAX, as a channel's source
MAX_COMMAND_ARGS = 4096
MAX_ARG_BYTES = 128 * 1024 - 1

TRANSIENT_EXIT_CODES = (6, 134, 11, 139)
# A job of several nodes (README.md, "Several nodes"): far above what one box holds.
MAX_NODES = 64
MAX_INSTANCE_GROUPS = 16
