"""The chaos soak: real users, real checkpointing trainers, and trainqd's processes killed
at random, with trainq's invariants checked after every event.

    sudo .venv/bin/python -m bench.chaos --minutes 30 [--gpus fake:4] [--seed N]

Root is needed (real unix users, a root trainqd as on the workstation). The users are the
soak's own (chaos_accounts.py: tqchaos-ann, tqchaos-ben, and tqchaos-cat of tqchaos-admins,
trainqd's admin group); each acts through an agent of their own (chaos_users.py). The trainers
(trainers/chaos_trainer.py) checkpoint and resume and write each step to a ledger per job.

Events, drawn at random (Soak.EVENTS): submissions and sweeps (some with a time limit, some
that crash once and are retried, some of the class that may preempt), stops by the owner, by
an admin, of a whole sweep, and refused ones by another user; holds, releases, priority
changes, an admin's drains; `kill -9` of trainqd (sometimes while a sweep is being submitted)
and its restart, a clean restart, trainqd frozen; `kill -9` of a random monitor and of the
monitor fork server, the fork server frozen. Fair-share preemption and the urgent class
preempt the preemptible default class.

After each event (chaos_checks.py, chaos_ledger.py): no acknowledged job lost; a job's
attempts one after another, never two at once (trainqd's records and the trainers' ledgers);
no GPU given to two jobs at once (trainqd's records, and the GPUs each trainer saw), none
started on a drained GPU; a stopped job ends in bounded time and never runs again; no
process of an ended attempt alive (chaos_procs.py); every resumed trainer went on from its
last checkpoint; the usage report equals what the attempts add up to. At the end every job
is stopped, everything must end, the checks run once more, and trainqd must stop cleanly
with no error in its log. The counts of events and checks are printed; the exit status is 1
if any invariant broke.

A hard time limit (the soak's length plus FINISH_LIMIT) ends it whatever happens; users,
processes and the temporary directory are cleaned up on any exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bench import chaos_checks as checks
from bench.chaos_accounts import ADMINS, Busy, chaos_accounts
from bench.chaos_ledger import Ledger, judge_against_api, judge_attempts, judge_gpu_sharing
from bench.chaos_procs import Proc, ProcessView
from bench.chaos_users import Agent, Answer
from tests.support.accounts import Accounts, User
from tests.support.daemon import SYSTEM_PYTHON, Daemon, kill_all_jobs, scratch_dir
from tests.support.waiting import WaitTimeout

TRAINER = Path(__file__).resolve().parent / "trainers" / "chaos_trainer.py"
CONFIG = f"""
admin_group = "{ADMINS}"
default_stop_grace_seconds = 3
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 3
preempt_for_fair_share = true
default_class = "batch"
gpu_sample_seconds = 2

[classes.batch]
preemptible = true
may_preempt = true

[classes.urgent]
weight = 10
may_preempt = true
groups = ["{ADMINS}"]
"""
STEP_SECONDS = 0.25
CHECKPOINT_EVERY = 4
# How long a process may outlive the record of its attempt's end (a kill takes effect).
LEFTOVER_GRACE = 2.0
# How long an acknowledged stop may take to end its job: the stop's grace (3 s at most
# here) and whatever restarts and freezes of trainqd fall in between.
STOP_LIMIT = 30.0
# At the end: how long every job has to end once stopped, and the monitors to exit.
DRAIN_LIMIT = 120.0
FINISH_LIMIT = 300


class HardLimit(BaseException):
    """The soak ran past its hard time limit."""


@dataclass
class Tally:
    events: Counter[str] = field(default_factory=Counter)
    rounds: Counter[str] = field(default_factory=Counter)  # how often each check ran
    items: Counter[str] = field(default_factory=Counter)  # what it looked at, in all
    broken: list[str] = field(default_factory=list)


class Soak:
    def __init__(
        self,
        base: Path,
        accounts: Accounts,
        gpus: str,
        rng: random.Random,
        say: Callable[[str], None],
    ) -> None:
        self.base = base
        self.rng = rng
        self.say = say
        self.tally = Tally()
        self.daemon = Daemon(base, gpus=gpus)
        self.daemon.config_file.write_text(CONFIG)
        self.view = ProcessView(self.daemon.state_dir)
        self.users: dict[str, User] = {u.name: u for u in accounts.all}
        self.admin = accounts.carol
        self.ledgers = base / "ledgers"
        self.ledgers.mkdir()
        for user in self.users.values():
            own = self.ledgers / user.name
            own.mkdir(mode=0o700)
            os.chown(own, user.uid, user.gid)
        self.agents: dict[str, Agent] = {}
        self.acknowledged: dict[int, str] = {}
        self.groups: dict[int, str] = {}
        self.jobs: dict[int, checks.Job] = {}
        self.gpu_count = int(gpus.removeprefix("fake:"))
        self.drained: int | None = None  # the GPU drained now
        self.drains: list[checks.Drain] = []  # (GPU, drained at, resumed at)
        self.stops: dict[int, float] = {}  # job: when its stop was acknowledged
        self.began = time.monotonic()

    # -- life -----------------------------------------------------------------------------

    def start(self) -> None:
        self.daemon.start()
        self.agents = {name: Agent(user, self.daemon.socket) for name, user in self.users.items()}

    def close(self) -> None:
        for agent in self.agents.values():
            with contextlib.suppress(Exception):
                agent.close()
        with contextlib.suppress(Exception):
            if self.daemon.proc is not None:
                self.daemon.stop()
        kill_all_jobs(self.daemon)
        # And whatever else runs as the soak's users (it would keep userdel from them).
        uids = {user.uid for user in self.users.values()}
        for proc in self.view.scan():
            if proc.uid in uids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)

    def note(self, event: str, detail: str = "") -> None:
        self.tally.events[event] += 1
        elapsed = time.monotonic() - self.began
        self.say(f"[{elapsed:7.1f}s] {event}{': ' + detail if detail else ''}")

    def broke(self, what: str) -> None:
        # A broken invariant stays broken: each is told once, however often it is found.
        if what not in self.tally.broken:
            self.tally.broken.append(what)
            self.say(f"  BROKEN: {what}")

    # -- what users do --------------------------------------------------------------------

    def spec(self, user: str) -> dict[str, Any]:
        steps = self.rng.randint(6, 40)
        spec: dict[str, Any] = {
            "name": f"chaos-{steps}",
            "command": [
                SYSTEM_PYTHON,
                "-I",
                str(TRAINER),
                str(self.ledgers / user),
                str(steps),
                str(STEP_SECONDS),
                str(CHECKPOINT_EVERY),
            ],
            "gpus": self.rng.choice([0, 1, 1, 1, 2, 2]),
            "priority": self.rng.randint(-5, 5),
            "stop_grace_seconds": self.rng.choice([1.0, 3.0]),
        }
        if self.rng.random() < 0.15:
            spec["max_runtime_seconds"] = self.rng.randint(2, 8)
        if user == self.admin.name and self.rng.random() < 0.5:
            spec["class"] = "urgent"
        if self.rng.random() < 0.15:  # a crash trainq retries: the retry resumes
            spec["command"].append(str(self.rng.randint(1, steps)))
            spec["retry_backoff_seconds"] = 0.5
        return spec

    def answered(self, user: str, what: str, answer: Answer) -> bool:
        """Count an answer; a server error is a broken invariant, no answer is only noted."""
        if answer.status == 0:
            self.note("unanswered request", f"{user} {what}: {answer.error}")
            return False
        if answer.status >= 500:
            self.broke(f"{user} {what}: trainqd answered {answer}")
            return False
        if answer.status >= 400:  # a stop of a job that ended meanwhile, say: counted, shown
            self.note("refused request", f"{user} {what}: {answer}")
            return False
        return 200 <= answer.status < 300

    def acknowledge(self, user: str, answer: Answer) -> list[int]:
        records = answer.body.get("jobs", [answer.body])
        ids = [int(r["id"]) for r in records]
        for job_id in ids:
            self.acknowledged[job_id] = user
        if "jobs" in answer.body:  # a sweep: one group
            self.groups[int(answer.body["group_id"])] = user
        return ids

    def submit(self) -> None:
        user = self.rng.choice(list(self.users))
        answer = self.agents[user].ask("POST", "/v1/jobs", self.spec(user))
        if self.answered(user, "submit", answer):
            self.note("submit", f"{user} job {self.acknowledge(user, answer)[0]}")

    def sweep(self) -> None:
        user = self.rng.choice(list(self.users))
        specs = [self.spec(user) for _ in range(self.rng.randint(2, 6))]
        answer = self.agents[user].ask("POST", "/v1/jobs", specs)
        if self.answered(user, "sweep", answer):
            self.note("sweep", f"{user} jobs {self.acknowledge(user, answer)}")

    def unfinished(self, owner: str | None = None) -> list[checks.Job]:
        return [
            job
            for job in self.jobs.values()
            if job["state"] not in checks.TERMINAL
            and (owner is None or job["owner"]["user"] == owner)
        ]

    def stop_own(self) -> None:
        unfinished = self.unfinished()
        if not unfinished:
            return
        job = self.rng.choice(unfinished)
        user = job["owner"]["user"]
        grace = self.rng.choice([0.0, 0.5, 2.0])
        body = {"grace_seconds": grace}
        answer = self.agents[user].ask("POST", f"/v1/jobs/{job['id']}/stop", body)
        if self.answered(user, "stop", answer):
            self.stopped_at([job["id"]])
            self.note("stop by owner", f"{user} job {job['id']} ({job['state']})")

    def stopped_at(self, ids: list[int]) -> None:
        """Remember when trainqd acknowledged each job's stop (the first time)."""
        now = time.time()
        for job_id in ids:
            self.stops.setdefault(int(job_id), now)

    def stop_group(self) -> None:
        running = {j["group_id"] for j in self.unfinished()}
        groups = sorted((g, u) for g, u in self.groups.items() if g in running)
        if not groups:
            return
        group, user = self.rng.choice(groups)
        answer = self.agents[user].ask("POST", f"/v1/groups/{group}/stop", {"grace_seconds": 1})
        if self.answered(user, "group stop", answer):
            self.stopped_at(answer.body["stopped"])
            self.note("stop of a sweep", f"{user} group {group}: {answer.body['stopped']}")

    def stop_as_admin(self) -> None:
        others = [j for j in self.unfinished() if j["owner"]["user"] != self.admin.name]
        if not others:
            return
        job = self.rng.choice(others)
        answer = self.agents[self.admin.name].ask(
            "POST", f"/v1/jobs/{job['id']}/stop", {"grace_seconds": 1}
        )
        if self.answered(self.admin.name, "admin stop", answer):
            self.stopped_at([job["id"]])
            self.note("stop by an admin", f"job {job['id']} of {job['owner']['user']}")

    def stop_foreign(self) -> None:
        """An ordinary user tries to stop another user's job: refused, the job untouched."""
        ordinary = [name for name in self.users if name != self.admin.name]
        user = self.rng.choice(ordinary)
        theirs = [j for j in self.unfinished() if j["owner"]["user"] != user]
        if not theirs:
            return
        job = self.rng.choice(theirs)
        answer = self.agents[user].ask("POST", f"/v1/jobs/{job['id']}/stop", {"grace_seconds": 0})
        if answer.status == 0:
            self.note("unanswered request", f"{user} foreign stop: {answer.error}")
            return
        self.tally.rounds["another user's stop refused"] += 1
        self.tally.items["another user's stop refused"] += 1
        if answer.status not in (403, 404):
            self.broke(f"{user} stopping job {job['id']} of another user: {answer}")
        self.note("refused stop", f"{user} on job {job['id']}: {answer.status}")

    # -- what breaks ----------------------------------------------------------------------

    def come_back(self) -> None:
        try:
            self.daemon.start()
        except (AssertionError, WaitTimeout) as error:
            self.broke(f"trainqd did not come back: {str(error)[-600:]}")
            raise

    def kill_trainqd(self) -> None:
        """kill -9 of trainqd, half the time while a sweep is on its way in; then a restart."""
        assert self.daemon.proc is not None
        pid = self.daemon.proc.pid
        user, agent = None, None
        if self.rng.random() < 0.5:
            user = self.rng.choice(list(self.users))
            agent = self.agents[user]
            agent.send("POST", "/v1/jobs", [self.spec(user) for _ in range(self.rng.randint(2, 8))])
            time.sleep(self.rng.uniform(0, 0.05))
        self.daemon.kill()
        detail = f"pid {pid}"
        if agent is not None and user is not None:
            answer = agent.receive()
            if self.answered(user, "sweep during the kill", answer):
                detail += f", sweep acknowledged: {self.acknowledge(user, answer)}"
            else:
                detail += ", sweep not acknowledged"
        self.note("kill -9 trainqd", detail)
        self.come_back()
        self.note("restart trainqd", f"pid {self.daemon.proc.pid if self.daemon.proc else '?'}")

    def restart_trainqd(self) -> None:
        self.daemon.stop()
        self.come_back()
        self.note("clean restart of trainqd")

    def kill_monitor(self) -> None:
        # A job started a moment ago may not have its monitor yet: a short, bounded look.
        deadline = time.monotonic() + 3
        while not (monitors := self.view.monitors()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not monitors:
            return
        victim = self.rng.choice(monitors)
        if self.kill(victim):
            self.note("kill -9 a monitor", f"job {victim.job} attempt {victim.attempt}")

    def kill_fork_server(self) -> None:
        assert self.daemon.proc is not None
        servers = self.view.fork_servers(self.daemon.proc.pid)
        if servers and self.kill(servers[0]):
            self.note("kill -9 the fork server", f"pid {servers[0].pid}")

    def freeze_trainqd(self) -> None:
        """SIGSTOP trainqd for a few seconds: jobs end and monitors exit meanwhile."""
        assert self.daemon.proc is not None
        pid, seconds = self.daemon.proc.pid, self.rng.uniform(1, 4)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.note("trainqd frozen", f"{seconds:.1f} s")

    def freeze_fork_server(self) -> None:
        """SIGSTOP the fork server past trainqd's wait for its answer, while a job starts."""
        assert self.daemon.proc is not None
        servers = self.view.fork_servers(self.daemon.proc.pid)
        if not servers:
            return
        pid, seconds = servers[0].pid, self.rng.uniform(5.5, 8)
        os.kill(pid, signal.SIGSTOP)
        try:
            self.submit()
            time.sleep(seconds)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.note("fork server frozen", f"{seconds:.1f} s")

    def hold_or_release(self) -> None:
        user = self.rng.choice(list(self.users))
        pending = [j for j in self.unfinished(user) if j["state"] == "PENDING"]
        if not pending:
            return
        job = self.rng.choice(pending)
        action = "release" if job["held_by"] else "hold"
        answer = self.agents[user].ask("POST", f"/v1/jobs/{job['id']}/{action}")
        if self.answered(user, action, answer):
            self.note(action, f"{user} job {job['id']}")

    def change_priority(self) -> None:
        user = self.rng.choice(list(self.users))
        pending = [j for j in self.unfinished(user) if j["state"] == "PENDING"]
        if not pending:
            return
        job, priority = self.rng.choice(pending), self.rng.randint(-5, 5)
        answer = self.agents[user].ask("PATCH", f"/v1/jobs/{job['id']}", {"priority": priority})
        if self.answered(user, "update", answer):
            self.note("priority changed", f"{user} job {job['id']} to {priority}")

    def drain_or_resume(self) -> None:
        """An admin drains one GPU, or lifts the drain: nothing may start there meanwhile."""
        admin = self.agents[self.admin.name]
        if self.drained is None:
            gpu = self.rng.randrange(self.gpu_count)
            answer = admin.ask("POST", "/v1/drain", {"gpus": [gpu], "reason": "chaos"})
            if self.answered(self.admin.name, "drain", answer):
                self.drained = gpu
                self.drains.append((gpu, time.time(), None))
                self.note("drain a GPU", f"GPU {gpu}")
            return
        gpu = self.drained
        until = time.time()
        answer = admin.ask("POST", "/v1/resume", {"gpus": [gpu]})
        if self.answered(self.admin.name, "resume", answer):
            self.drained = None
            self.drains[-1] = (gpu, self.drains[-1][1], until)
            self.note("resume a GPU", f"GPU {gpu}")

    def kill(self, proc: Proc) -> bool:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    EVENTS: tuple[tuple[str, float], ...] = (
        ("submit", 8),
        ("sweep", 3),
        ("stop_own", 3),
        ("stop_group", 1),
        ("stop_as_admin", 1),
        ("stop_foreign", 1),
        ("kill_trainqd", 1.5),
        ("restart_trainqd", 0.5),
        ("kill_monitor", 2),
        ("kill_fork_server", 1),
        ("freeze_trainqd", 0.5),
        ("freeze_fork_server", 0.3),
        ("hold_or_release", 1),
        ("change_priority", 1),
        ("drain_or_resume", 0.5),
    )

    def event(self) -> None:
        names = [name for name, _ in self.EVENTS]
        weights = [weight for _, weight in self.EVENTS]
        getattr(self, self.rng.choices(names, weights)[0])()

    # -- the invariants -------------------------------------------------------------------

    def list_jobs(self) -> dict[int, checks.Job]:
        found: dict[int, checks.Job] = {}
        after = 0
        while True:
            response = self.daemon.get(
                "/v1/jobs", params={"all": "true", "limit": 1000, "after": after}
            )
            response.raise_for_status()
            page = response.json()
            for job in page["jobs"]:
                found[int(job["id"])] = job
            if not page["jobs"] or page.get("next") is None:
                return found
            after = max(found)

    def read_ledgers(self) -> list[Ledger]:
        return [Ledger.read(path) for path in sorted(self.ledgers.glob("*/*.jsonl"))]

    def held(self, name: str, broken: list[str], items: int) -> None:
        self.tally.rounds[name] += 1
        self.tally.items[name] += items
        for what in broken:
            self.broke(f"{name}: {what}")

    def check(self, final: bool = False) -> None:
        before = self.list_jobs()
        report = self.daemon.get("/v1/report").json()
        ledgers = self.read_ledgers()  # after `before`: every attempt it shows is known
        jobs = self.list_jobs()
        self.jobs = jobs
        self.held(
            "acknowledged jobs kept",
            checks.acknowledged_kept(self.acknowledged, jobs),
            len(self.acknowledged),
        )
        self.held("attempts one at a time", checks.attempts_in_turn(jobs.values()), len(jobs))
        attempts = sum(len(j["attempts"]) for j in jobs.values())
        self.held("no GPU given twice (API)", checks.gpus_exclusive(jobs.values()), attempts)
        self.held(
            "a stopped job never runs again",
            checks.stopped_stay_stopped(self.stops, jobs),
            len(self.stops),
        )
        self.held(
            "no job failed by trainq's doing", checks.failed_by_trainq(jobs.values()), len(jobs)
        )
        self.held(
            "a stop takes effect",
            checks.stops_take_effect(self.stops, jobs, time.time(), STOP_LIMIT),
            len(self.stops),
        )
        self.held(
            "nothing started on a drained GPU",
            checks.none_started_on_drained(self.drains, jobs.values()),
            attempts,
        )
        spans = []
        broken: list[str] = []
        against: list[str] = []
        for ledger in ledgers:
            broken += judge_attempts(ledger)
            job = jobs.get(ledger.job)
            if job is None:
                against.append(f"job {ledger.job} ran and trainqd does not know it")
            else:
                against += judge_against_api(ledger, job)
            spans += ledger.spans()
        self.held("never run twice, resumed from checkpoint (ledgers)", broken, len(spans))
        self.held("ledgers agree with trainqd", against, len(spans))
        self.held("no GPU used twice (trainers' own view)", judge_gpu_sharing(spans), len(spans))
        if final:
            self.held("completed jobs did every step", self.all_done(jobs, ledgers), len(jobs))
        if checks.attempts_signature(before.values()) == checks.attempts_signature(jobs.values()):
            self.held(
                "usage report equals attempts",
                checks.usage_matches(report, jobs.values()),
                len(jobs),
            )
        else:
            self.tally.events["usage check skipped (an attempt began or ended meanwhile)"] += 1
        self.check_processes(jobs)

    def all_done(self, jobs: dict[int, checks.Job], ledgers: list[Ledger]) -> list[str]:
        by_job = {ledger.job: ledger for ledger in ledgers}
        broken = []
        for job in jobs.values():
            if job["state"] != "COMPLETED":
                continue
            ledger = by_job.get(job["id"])
            spans = ledger.spans() if ledger else []
            if not spans or not spans[-1].done:
                broken.append(f"job {job['id']} COMPLETED without its trainer's last step")
        return broken

    def check_processes(self, jobs: dict[int, checks.Job]) -> None:
        uids = {user.uid: name for name, user in self.users.items()}
        ours = {agent.pid for agent in self.agents.values()}
        procs = self.view.scan()
        suspects = checks.leftovers(procs, jobs, uids, ours)
        deadline = time.monotonic() + LEFTOVER_GRACE
        while suspects and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = {p.pid: p for p in self.view.scan()}
            suspects = [p for p in suspects if alive.get(p.pid) == p]
        self.held(
            "no process of an ended attempt alive",
            [f"{p.describe()} is alive {LEFTOVER_GRACE:g} s after its end" for p in suspects],
            len(procs),
        )

    # -- the run --------------------------------------------------------------------------

    def run(self, seconds: float, opening: Sequence[str] = ()) -> None:
        """Events for `seconds`: those named in `opening` first, in order, then at random."""
        self.start()
        deadline = time.monotonic() + seconds
        planned = list(opening)
        while time.monotonic() < deadline or planned:
            if planned:
                getattr(self, planned.pop(0))()
            else:
                self.event()
            time.sleep(self.rng.uniform(0.1, 1.0))  # let the event take effect, or not
            self.check()
        self.finish()

    def finish(self) -> None:
        """Stop what is left, wait for everything to end, and check once more."""
        self.note("end of chaos: every unfinished job stopped")
        if self.daemon.proc is None:
            self.come_back()
        for job in self.unfinished():
            self.daemon.post(f"/v1/jobs/{job['id']}/stop", json={"grace_seconds": 1})
        deadline = time.monotonic() + DRAIN_LIMIT
        while True:
            jobs = self.list_jobs()
            left = [j for j in jobs.values() if j["state"] not in checks.TERMINAL]
            busy = [p for p in self.view.scan() if p.job is not None]
            if not left and not busy:
                break
            if time.monotonic() > deadline:
                self.broke(
                    f"{DRAIN_LIMIT:g} s after the stops: jobs not ended "
                    f"{[(j['id'], j['state']) for j in left]}, processes "
                    f"{[p.describe() for p in busy][:5]}"
                )
                break
            time.sleep(0.2)
        self.check(final=True)
        status = self.daemon.stop()
        broken = self.log_errors()
        if status != 0:
            broken.append(f"trainqd exited with {status} on SIGTERM")
        self.held("trainqd stops cleanly and logged no error", broken, 1)

    def log_errors(self) -> list[str]:
        """trainqd's log lines of level error or worse, and any line not its JSON (a
        traceback on stderr)."""
        found: list[str] = []
        other: list[str] = []  # lines in a row that are not its JSON: told as one
        for text in [*self.daemon.log_file.read_text(errors="replace").splitlines(), "{}"]:
            try:
                entry = json.loads(text)
            except ValueError:
                other.append(text)
                continue
            if other:
                found.append(
                    f"trainqd wrote {len(other)} lines: {other[0][:100]} ... {other[-1][:200]}"
                )
                other = []
            if isinstance(entry, dict) and entry.get("level") in ("error", "critical"):
                found.append(f"trainqd logged: {text[:300]}")
        return found

    def report(self, minutes: float) -> str:
        lines = [
            f"chaos soak: {minutes:g} minutes of events, {time.monotonic() - self.began:.0f} s "
            f"in all, trainqd --gpus {self.daemon.gpus}, users {', '.join(self.users)}",
            f"jobs: {len(self.jobs)} ({len(self.acknowledged)} acknowledged; the answer to the "
            f"other {len(set(self.jobs) - set(self.acknowledged))} was lost to a kill), "
            f"states {dict(Counter(j['state'] for j in self.jobs.values()))}",
            f"attempts: {sum(len(j['attempts']) for j in self.jobs.values())}, outcomes "
            f"{dict(Counter(a['outcome'] for j in self.jobs.values() for a in j['attempts']))}",
            *(
                f"  job {j['id']} FAILED: {j['failure_reason']!r}; its last attempt "
                f"{j['attempts'][-1]['outcome'] if j['attempts'] else None}: "
                f"{j['attempts'][-1]['reason'] if j['attempts'] else None!r}"
                for j in self.jobs.values()
                if j["state"] == "FAILED"
            ),
            "events:",
            *(f"  {name:<58} {n:>6}" for name, n in sorted(self.tally.events.items())),
            "checks (rounds, things looked at):",
            *(
                f"  {name:<58} {n:>6} {self.tally.items[name]:>9}"
                for name, n in sorted(self.tally.rounds.items())
            ),
            f"broken invariants: {len(self.tally.broken)}",
            *(f"  {what}" for what in self.tally.broken),
        ]
        return "\n".join(lines)


@contextlib.contextmanager
def hard_limit(seconds: float) -> Iterator[None]:
    """HardLimit raised in the main thread after `seconds`; SIGTERM and SIGINT raise
    KeyboardInterrupt."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise HardLimit(f"the hard time limit of {seconds:.0f} s")

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a shell starts a background job with it ignored, and Python then never
    # turns it into KeyboardInterrupt.
    handlers = {signal.SIGALRM: expire, signal.SIGTERM: interrupt, signal.SIGINT: interrupt}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@dataclass(frozen=True)
class Result:
    tally: Tally
    text: str


def soak(
    minutes: float,
    gpus: str = "fake:4",
    seed: int | None = None,
    say: Callable[[str], None] = print,
    opening: Sequence[str] = (),
) -> Result:
    """Run the soak for `minutes` of events (`opening`'s first: names of Soak.EVENTS);
    its tally and the printed report."""
    if os.geteuid() != 0:
        raise SystemExit("bench.chaos: run it as root (it makes unix users, trainqd runs as root)")
    # A soak's events, not secrets: a seed that reproduces them.
    seed = random.randrange(1 << 32) if seed is None else seed  # noqa: S311
    say(f"seed {seed}")
    base = scratch_dir("tqchaos")
    try:
        with chaos_accounts() as accounts:
            run = Soak(base, accounts, gpus, random.Random(seed), say)  # noqa: S311
            try:
                with hard_limit(minutes * 60 + FINISH_LIMIT):
                    try:
                        run.run(minutes * 60, opening)
                    except HardLimit as error:
                        run.broke(f"stopped by {error}")
            finally:
                run.close()
            return Result(run.tally, run.report(minutes))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="how long events go on")
    parser.add_argument("--gpus", default="fake:4", help="trainqd's --gpus (fake:N)")
    parser.add_argument("--seed", type=int, default=None, help="the random seed (printed)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be more than 0")
    try:
        result = soak(args.minutes, args.gpus, args.seed)
    except Busy as error:
        print(f"bench.chaos: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench.chaos: interrupted (its users, processes and files are gone)", file=sys.stderr)
        return 130
    print(result.text)
    return 1 if result.tally.broken else 0


if __name__ == "__main__":
    sys.exit(main())
