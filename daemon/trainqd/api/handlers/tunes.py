"""The API's handlers for tuning experiments: start one, list them, show one, stop one.

A tune is admitted as a submission of its trials' job spec is (admission.admit), and its
`max_parallel` is held to the owner's limits; a refusal is one line and queues nothing.
Everyone may list tunes; their trials' hyperparameters and model directories are shown to the
owner and the admins only, as a job's are.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from trainq.core.errors import InvalidRequest, InvalidSpec, NotFound
from trainq.core.tuning import TuneRequest
from trainq.core.wire import Owner, TrialRecord, TuneList, TuneRecord
from trainqd.access.admission import admit
from trainqd.access.identity import account
from trainqd.api.handlers.common import Handlers
from trainqd.api.routing import INT64_MAX, Request, Response, Route, decimal
from trainqd.api.views import REDACTED_REASON
from trainqd.store import JobRow
from trainqd.store.tunes import TrialRow, TuneRow

if TYPE_CHECKING:
    from trainqd.experiments.tuner import Tuner


_BODY = "request body: "


def _ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def best_trial(tune: TuneRow, trials: list[TrialRow]) -> int | None:
    done = [t for t in trials if t.state == "completed" and t.best is not None]
    if not done:
        return None
    pick = min if tune.request.tune.direction == "minimize" else max
    return pick(done, key=lambda t: t.best if t.best is not None else 0.0).number


class TuneRoutes:
    def __init__(self, api: Handlers, tuner: Tuner) -> None:
        self.api = api
        self.tuner = tuner

    def _tune(self, request: Request) -> TuneRow:
        text = request.params["id"]
        tune_id = decimal(text)
        if tune_id is None or tune_id < 0:
            raise InvalidSpec(f"a tune id is a number, not {text!r}")
        if tune_id > INT64_MAX:
            raise NotFound(f"no tune {text}")
        return self.tuner.tunes.get(tune_id)

    def _reveal(self, uid: int, tune: TuneRow) -> bool:
        return uid == tune.owner.uid or self.api.authorizer.is_admin(uid)

    def record(self, tune: TuneRow, uid: int) -> TuneRecord:
        reveal = self._reveal(uid, tune)
        trials = self.tuner.tunes.trials(tune.id)
        records = []
        for trial in trials:
            job: JobRow | None
            try:
                job = self.api.store.get(trial.job_id)
            except NotFound:
                job = None
            records.append(
                TrialRecord(
                    number=trial.number,
                    job_id=trial.job_id,
                    job_state=None if job is None else job.state,
                    params=trial.params if reveal else None,
                    state=trial.state,
                    value=trial.value,
                    best=trial.best,
                    step=trial.step,
                    # A failed trial's is its job's failure reason (its stderr's tail):
                    # the owner's and the admins', as views.py shows any job's.
                    reason=trial.reason if reveal or trial.reason is None else REDACTED_REASON,
                    model_dir=str(self.api.dirs.ml_root(trial.job_id) / "model")
                    if reveal
                    else None,
                    history=list(trial.history) if reveal else None,
                )
            )
        settings = tune.request.tune
        return TuneRecord(
            id=tune.id,
            owner=Owner(uid=tune.owner.uid, user=tune.owner.user),
            state=tune.state,
            reason=tune.reason,
            objective=settings.objective,
            direction=settings.direction,
            search=settings.search,
            early_stopping=settings.early_stopping,
            max_trials=settings.max_trials,
            max_parallel=settings.max_parallel,
            group_id=tune.group_id,
            created_at=_ts(tune.created_at) or datetime.now(UTC),
            ended_at=_ts(tune.ended_at),
            trials=records,
            best_trial=best_trial(tune, trials),
        )

    def _check_limits(self, request: TuneRequest) -> None:
        """max_parallel within what the owner may run at once (beyond the host's GPUs, the
        trials queue as any jobs do, and fair share orders them among others' jobs)."""
        config, settings, spec = self.api.config, request.tune, request.spec
        parallel = settings.max_parallel
        if config.max_running_jobs_per_user and parallel > config.max_running_jobs_per_user:
            raise InvalidSpec(
                f"max_parallel {parallel} is beyond the {config.max_running_jobs_per_user} "
                "running jobs a user may have (max_running_jobs_per_user)"
            )
        gpus = parallel * spec.total_gpus
        if gpus and config.max_gpus_per_user and gpus > config.max_gpus_per_user:
            raise InvalidSpec(
                f"max_parallel {parallel} trials of {spec.total_gpus} GPUs need {gpus}, beyond the "
                f"{config.max_gpus_per_user} a user may hold (max_gpus_per_user)"
            )

    async def create(self, request: Request) -> Response:
        try:
            body = request.model(TuneRequest)
        except InvalidRequest as exc:  # the spec's or the table's problem: a spec's refusal
            if isinstance(exc, InvalidSpec) or not exc.message.startswith(_BODY):
                raise
            raise InvalidSpec(exc.message.removeprefix(_BODY)) from None
        self._check_limits(body)
        owner = await admit(body.spec, request.caller.uid, self.api.host(), self.api.authorizer)
        tune = self.tuner.create(body, owner)
        return Response(201, self.record(tune, request.caller.uid))

    async def list_tunes(self, request: Request) -> Response:
        uid = request.caller.uid
        tunes = [self.record(t, uid) for t in self.tuner.tunes.tunes()]
        return Response(200, TuneList(tunes=tunes))

    async def show(self, request: Request) -> Response:
        return Response(200, self.record(self._tune(request), request.caller.uid))

    async def stop(self, request: Request) -> Response:
        tune, uid = self._tune(request), request.caller.uid
        if not self._reveal(uid, tune):
            self.api.authorizer.require_admin(uid, f"stop tune {tune.id} of {tune.owner.user}")
        if tune.state == "RUNNING":
            await self.tuner.stop(tune, account(uid).user)
        self.api.control.changed()
        return Response(202, self.record(self.tuner.tunes.get(tune.id), uid))

    def routes(self) -> list[Route]:
        return [
            Route(
                "POST",
                "/v1/tunes",
                self.create,
                "Start a tuning experiment: trials of a job spec over a search space",
                request_model=TuneRequest,
                response_model=TuneRecord,
                status=201,
            ),
            Route(
                "GET",
                "/v1/tunes",
                self.list_tunes,
                "List tuning experiments",
                response_model=TuneList,
            ),
            Route(
                "GET",
                "/v1/tunes/{id}",
                self.show,
                "Show a tuning experiment and its trials",
                response_model=TuneRecord,
            ),
            Route(
                "POST",
                "/v1/tunes/{id}/stop",
                self.stop,
                "Stop a tuning experiment and its queued and running trials",
                response_model=TuneRecord,
                status=202,
            ),
        ]
