"""Whether an ended attempt is tried again: a pure policy, `decide(ended, history) -> Decision`.

Defaults follow AI Platform Training (reference/ai-platform-training-lifecycle.txt): SIGABRT
(exit 6, or 134 from a container) and SIGSEGV (11, or 139) look transient and are retried up
to 3 times; other errors, out-of-memory kills and stops are permanent. A trainer built on the
SageMaker training toolkit exits 1 and writes `ExitCode N` into its failure file, so the real
code is read from there; `ExitCode -N` there is a death by signal N.

An attempt whose monitor vanished without a record (the machine rebooted, someone killed the
monitor) is `lost`, one the host's shutdown ended is `interrupted`: that is the host's
doing, not the trainer's, so neither spends the job's retries; they have their own small
budget so a job that takes the machine down with it does not loop for ever.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainq.core.outcomes import Ending, Outcome
from trainq.core.spec import JobSpec

TOOLKIT_EXIT_CODE = re.compile(r"\bExitCode[:=]?\s+(-?\d+)")
MAX_LOST = 3
# Ends that are the host's doing, not the trainer's: retried at once, on their own budget.
HOST_FAULTS = {
    Outcome.LOST: "its monitor vanished (host restart?)",
    Outcome.INTERRUPTED: "the host shut down under it",
}
MAX_BACKOFF = 300.0
PERMANENT = frozenset(
    {
        Outcome.STOPPED,
        Outcome.TIMED_OUT,
        Outcome.START_FAILED,
        Outcome.ENGINE_ERROR,
        Outcome.FEEDER_FAILED,
        Outcome.OOM_KILLED,
    }
)


@dataclass(frozen=True)
class Decision:
    retry: bool
    delay: float = 0.0
    why: str = ""
    counts: bool = True  # spends one of the job's max_retries


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    transient_codes: frozenset[int] = frozenset({6, 134, 11, 139})
    backoff: float = 2.0

    @classmethod
    def for_spec(cls, spec: JobSpec) -> RetryPolicy:
        return cls(
            max_retries=spec.max_retries,
            transient_codes=frozenset(spec.retry_exit_codes),
            backoff=spec.retry_backoff_seconds,
        )

    def transient_signal(self, signum: int) -> bool:
        # A death by signal N shows up as N or as 128 + N depending on who reports it.
        return signum in self.transient_codes or 128 + signum in self.transient_codes

    def transient_cause(self, ended: Ending) -> str | None:
        """Why this ending looks transient, or None when it is permanent."""
        if ended.outcome == Outcome.SIGNALED and ended.signal is not None:
            if self.transient_signal(ended.signal):
                return f"killed by {signal_name(ended.signal)}"
            return None
        if ended.outcome != Outcome.EXITED or not ended.exit_code:
            return None
        if ended.exit_code in self.transient_codes:
            return f"exit status {ended.exit_code}"
        toolkit = TOOLKIT_EXIT_CODE.search(ended.reason or "")
        if toolkit is None:
            return None
        code = int(toolkit.group(1))
        if code < 0:
            # The toolkit reports its user script's death by signal N as `ExitCode -N`
            # (Python's subprocess convention): the signal rules apply, not the exit codes.
            if self.transient_signal(-code):
                return f"killed by {signal_name(-code)} (ExitCode {code} in the failure file)"
            return None
        if code in self.transient_codes:
            return f"ExitCode {code} in the failure file"
        return None

    def decide(self, ended: Ending, history: Sequence[Ending]) -> Decision:
        """`history`: the job's earlier ended attempts, oldest first."""
        if ended.outcome in HOST_FAULTS:
            lost = sum(1 for h in history if h.outcome in HOST_FAULTS)
            what = HOST_FAULTS[ended.outcome]
            if lost < MAX_LOST:
                return Decision(True, 0.0, what, counts=False)
            return Decision(False, why=f"{what}, {lost + 1} times")
        if ended.outcome in PERMANENT:
            return Decision(False, why=ended.outcome)
        cause = self.transient_cause(ended)
        if cause is None:
            return Decision(False, why="not transient")
        used = self.retries_used(history)
        if used >= self.max_retries:
            return Decision(False, why=f"{cause}, but all {self.max_retries} retries are used")
        delay = min(MAX_BACKOFF, self.backoff * (2**used))
        return Decision(
            True, delay, f"{cause} looks transient (retry {used + 1} of {self.max_retries})"
        )

    def retries_used(self, history: Iterable[Ending]) -> int:
        return sum(
            1
            for h in history
            if h.outcome not in HOST_FAULTS and self.transient_cause(h) is not None
        )


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
