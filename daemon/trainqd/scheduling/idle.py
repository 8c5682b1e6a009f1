"""The idle-GPU rule: a running job whose GPUs all stay under a utilization threshold for a
while is flagged idle, and an administrator may have trainq notify or stop such jobs.

A job is idle only on evidence: a sample whose utilization is unknown (a failed NVML call)
neither starts nor ends an idle spell, so a flaky driver cannot get a job stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IdleAction = Literal["flag", "notify", "stop"]


@dataclass(frozen=True)
class IdlePolicy:
    threshold_percent: float = 5.0
    after_seconds: float = 1800.0
    action: IdleAction = "flag"
    stop_after_seconds: float = 3600.0  # further idle time before "stop" stops the job


@dataclass
class IdleWatch:
    """One attempt's idle state, fed one sample at a time."""

    policy: IdlePolicy
    idle_since: float | None = None  # the first idle sample of the current spell
    flagged_since: float | None = None  # idle_since, once the spell has lasted long enough
    stop_due: bool = False
    idle_seconds: float = 0.0  # over the whole attempt, for usage reports
    _last: float | None = None

    def observe(self, now: float, utilization: float | None) -> bool:
        """Take one sample; True when the flag was just raised or a stop just fell due."""
        if utilization is None:  # neither starts nor ends a spell, nor splits one
            return False
        last, self._last = self._last, now
        if utilization >= self.policy.threshold_percent:
            self.idle_since = self.flagged_since = None
            self.stop_due = False
            return False
        if self.idle_since is None:
            self.idle_since = now
        elif last is not None:
            self.idle_seconds += now - last
        spell = now - self.idle_since
        if self.flagged_since is None and spell >= self.policy.after_seconds:
            self.flagged_since = self.idle_since
            return True
        stop_at = self.policy.after_seconds + self.policy.stop_after_seconds
        if self.policy.action == "stop" and not self.stop_due and spell >= stop_at:
            self.stop_due = True
            return True
        return False


def duration(seconds: float) -> str:
    """A spell's length as event reasons and stop reasons say it: 45s, 30m, 2h5m."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"
