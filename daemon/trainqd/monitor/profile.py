"""Step marks for profiling one dispatch (bench/profile_dispatch.py), off unless
TRAINQ_PROFILE=1 is in trainqd's environment (spawn.py passes it to the monitors).

Off, a mark is one call and one test of a constant. On, each mark is a monitor.log line
`profile <epoch seconds, us> <step>`: the benchmark reads these beside trainqd's own
`profile` log events to cut a dispatch into its steps.
"""

from __future__ import annotations

import os
import time

from trainqd.monitor.log import log

PROFILE_ENV = "TRAINQ_PROFILE"
ON = os.environ.get(PROFILE_ENV) == "1"


def mark(step: str) -> None:
    if ON:
        log(f"profile {time.time():.6f} {step}")
