"""Tuning experiments end to end: a real trainqd runs the trials of `examples/tune/train.py`
(a known learning curve) as ordinary jobs, searching with Optuna, stopping trials early, and
going on after a `kill -9` of trainqd with the same configurations."""

from __future__ import annotations

import json as _json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, event_reasons, running_daemon
from tests.support.factories import TUNE_EXAMPLE, TUNE_OBJECTIVE
from tests.support.waiting import wait_for


def base_spec(tmp_path: Path, epochs: int = 4, epoch_seconds: float = 0.05) -> dict[str, Any]:
    return {
        "command": [sys.executable, str(TUNE_EXAMPLE / "train.py")],
        "working_dir": str(tmp_path),
        "gpus": 1,
        "metric_definitions": [TUNE_OBJECTIVE],
        "hyperparameters": {"epochs": epochs, "epoch_seconds": epoch_seconds},
    }


def start(daemon: Daemon, spec: dict[str, Any], **tune: Any) -> dict[str, Any]:
    response = daemon.post("/v1/tunes", json={"spec": spec, "tune": tune})
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def ended(daemon: Daemon, tune_id: int, timeout: float = 120) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        tune: dict[str, Any] = daemon.get(f"/v1/tunes/{tune_id}").json()
        return tune if tune["state"] != "RUNNING" else None

    return wait_for(done, timeout=timeout, what=f"tune {tune_id} to end")


def test_a_seeded_random_tune_runs_its_trials_as_jobs(daemon: Daemon, tmp_path: Path) -> None:
    space = {"lr": {"loguniform": [1e-4, 1e-1]}, "layers": {"int": [2, 8]}}
    tune = start(
        daemon,
        base_spec(tmp_path),
        objective="val_loss",
        search="random",
        max_trials=4,
        max_parallel=2,
        seed=3,
        space=space,
    )
    done = ended(daemon, tune["id"])
    assert (done["state"], done["reason"]) == ("COMPLETED", "4 trials run")
    trials = done["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 4
    jobs = [daemon.job(t["job_id"]) for t in trials]
    assert {j["group_id"] for j in jobs} == {done["group_id"]}
    for trial, job in zip(trials, jobs, strict=True):
        assert job["state"] == "COMPLETED"
        hps = job["spec"]["hyperparameters"]
        assert float(hps["lr"]) == trial["params"]["lr"]
        assert int(hps["layers"]) == trial["params"]["layers"]
        assert trial["step"] == 4
    best = min(trials, key=lambda t: t["best"])
    assert done["best_trial"] == best["number"]
    assert Path(best["model_dir"], "model.json").exists()

    # The same seed proposes the same configurations.
    again = ended(
        daemon,
        start(
            daemon,
            base_spec(tmp_path),
            objective="val_loss",
            search="random",
            max_trials=4,
            max_parallel=2,
            seed=3,
            space=space,
        )["id"],
    )
    assert [t["params"] for t in again["trials"]] == [t["params"] for t in trials]

    shown = daemon.cli("tune", "show", str(tune["id"]), "--plot", "curves.png", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"best: trial {best['number']} (job {best['job_id']})" in shown.stdout
    assert "val_loss by step:" in shown.stdout
    assert shown.stderr == f"trainq: wrote the curves of 4 trials to {tmp_path / 'curves.png'}\n"
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    listed = daemon.cli("tune", "ls")
    assert listed.stdout.count("COMPLETED") == 2


def test_median_stopping_stops_bad_trials_as_stopped_not_failed(
    daemon: Daemon, tmp_path: Path
) -> None:
    # A grid whose later points are much worse: the median rule stops them at step 1 or 2.
    tune = start(
        daemon,
        # Long enough epochs for a bad trial to be seen before it ends.
        base_spec(tmp_path, epochs=8, epoch_seconds=0.5),
        objective="val_loss",
        search="grid",
        early_stopping="median",
        max_trials=6,
        max_parallel=1,
        seed=0,
        space={"lr": {"choice": [0.01, 0.011, 0.012, 0.9, 0.95, 0.99]}},
    )
    done = ended(daemon, tune["id"], timeout=180)
    assert done["state"] == "COMPLETED"
    pruned = [t for t in done["trials"] if t["state"] == "pruned"]
    assert pruned, done["trials"]
    for trial in pruned:
        assert trial["params"]["lr"] >= 0.9
        job = daemon.job(trial["job_id"])
        assert job["state"] == "STOPPED"
        assert job["stop_reason"].startswith(f"stopped early by tune {tune['id']}: val_loss ")
        assert "worse than the median" in job["stop_reason"]
        assert trial["step"] < 8


@pytest.mark.parametrize("search", ["grid", "random"])
def test_kill_9_of_trainqd_loses_no_trial_and_repeats_none(
    daemon: Daemon, tmp_path: Path, search: str
) -> None:
    space = {"lr": {"choice": [0.001, 0.01, 0.1]}, "layers": {"int": [2, 5]}}
    settings = {
        "objective": "val_loss",
        "search": search,
        "max_trials": 6,
        "max_parallel": 2,
        "seed": 11,
        "space": space,
    }
    spec = base_spec(tmp_path, epochs=3, epoch_seconds=0.4)
    tune = start(daemon, spec, **settings)

    def two_started() -> bool:
        return len(daemon.get(f"/v1/tunes/{tune['id']}").json()["trials"]) >= 3

    wait_for(two_started, timeout=60, what="the third trial to be queued")
    daemon.kill()
    daemon.start()
    crashed = ended(daemon, tune["id"])
    assert crashed["state"] == "COMPLETED"
    numbers = [t["number"] for t in crashed["trials"]]
    assert numbers == list(range(6))
    assert len({t["job_id"] for t in crashed["trials"]}) == 6
    assert all(t["state"] == "completed" for t in crashed["trials"])
    # The same configurations as a tune that never saw a crash.
    calm = ended(daemon, start(daemon, spec, **settings)["id"])
    assert [t["params"] for t in crashed["trials"]] == [t["params"] for t in calm["trials"]]


@pytest.mark.parametrize(
    ("tune", "says"),
    [
        ({"objective": "val_loss", "space": {}}, "the search space is empty"),
        (
            {"objective": "accuracy", "space": {"lr": {"uniform": [0, 1]}}},
            "objective 'accuracy' is not one of the metric_definitions (val_loss)",
        ),
        (
            {"objective": "val_loss", "search": "grid", "space": {"lr": {"uniform": [0, 1]}}},
            "a grid search needs discrete ranges: lr is uniform",
        ),
        (
            {"objective": "val_loss", "max_parallel": 65, "space": {"lr": {"uniform": [0, 1]}}},
            "max_parallel",
        ),
        (
            {"objective": "val_loss", "space": {"lr": {"loguniform": [0, 1]}}},
            "both ends must be above 0",
        ),
    ],
)
def test_bad_tunes_are_refused_with_one_line_and_queue_nothing(
    shared_daemon: Daemon, tmp_path: Path, tune: dict[str, Any], says: str
) -> None:
    spec_file = tmp_path / "tune.toml"
    regex = _json.dumps(TUNE_OBJECTIVE["regex"])
    lines = [
        f"command = {_json.dumps([sys.executable, str(TUNE_EXAMPLE / 'train.py')])}",
        "gpus = 1",
        f"metric_definitions = [{{name = 'val_loss', regex = {regex}}}]",
        "[tune]",
        *(f"{k} = {_json.dumps(v)}" for k, v in tune.items() if k != "space"),
        "[tune.space]",
        *(
            f"{name} = {{{', '.join(f'{k} = {_json.dumps(v)}' for k, v in rng.items())}}}"
            for name, rng in tune["space"].items()
        ),
    ]
    spec_file.write_text("\n".join(lines) + "\n")
    before = shared_daemon.get("/v1/jobs", params={"all": "true"}).json()["total"]
    refused = shared_daemon.cli("tune", "-f", str(spec_file), cwd=tmp_path)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert says in refused.stderr
    assert shared_daemon.get("/v1/jobs", params={"all": "true"}).json()["total"] == before
    assert shared_daemon.get("/v1/tunes").json()["tunes"] == []


def test_the_readme_example_runs_as_written(daemon: Daemon, tmp_path: Path) -> None:
    workdir = tmp_path / "tune"
    shutil.copytree(TUNE_EXAMPLE, workdir)
    # As written, but quicker: fewer trials and epochs.
    text = (workdir / "tune.toml").read_text()
    text = text.replace("max_trials = 12", "max_trials = 3").replace("epochs = 8", "epochs = 3")
    (workdir / "tune.toml").write_text(text)
    started = daemon.cli("tune", "-f", "tune.toml", cwd=workdir)
    assert started.returncode == 0, started.stderr
    done = ended(daemon, int(started.stdout))
    assert done["state"] == "COMPLETED"
    assert len(done["trials"]) == 3


def loaded(daemon: Daemon, library: str) -> bool:
    assert daemon.proc is not None
    maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
    return f"/{library}" in maps


def test_optuna_is_loaded_only_once_a_tune_exists(daemon: Daemon, tmp_path: Path) -> None:
    job = daemon.submit({"command": ["true"], "metric_definitions": [TUNE_OBJECTIVE]})
    daemon.wait_state(job["id"])
    assert daemon.get(f"/v1/jobs/{job['id']}/metrics").status_code == 200
    assert not loaded(daemon, "numpy")  # Optuna's first native import
    start(
        daemon,
        base_spec(tmp_path, epochs=1),
        objective="val_loss",
        max_trials=1,
        space={"layers": {"int": [2, 3]}},
    )
    wait_for(lambda: loaded(daemon, "numpy"), timeout=30, what="Optuna to be imported")


def test_stopping_a_tune_stops_its_trials(daemon: Daemon, tmp_path: Path) -> None:
    tune = start(
        daemon,
        base_spec(tmp_path, epochs=200, epoch_seconds=0.5),
        objective="val_loss",
        search="random",
        max_trials=8,
        max_parallel=2,
        space={"lr": {"loguniform": [1e-3, 1e-1]}},
    )

    def two_running() -> bool:
        trials = daemon.get(f"/v1/tunes/{tune['id']}").json()["trials"]
        return [t["job_state"] for t in trials] == ["RUNNING", "RUNNING"]

    wait_for(two_running, timeout=30, what="two trials to run")
    stopped = daemon.cli("tune", "stop", str(tune["id"]))
    assert (stopped.returncode, stopped.stdout) == (0, "STOPPED\n"), stopped.stderr
    done = daemon.get(f"/v1/tunes/{tune['id']}").json()
    assert (done["state"], done["reason"]) == ("STOPPED", "stopped by root")
    for trial in done["trials"]:
        job = daemon.wait_state(trial["job_id"])
        assert (job["state"], job["stop_reason"]) == (
            "STOPPED",
            f"stopped by tune {tune['id']}: the tune ended",
        )
    assert len(daemon.get(f"/v1/tunes/{tune['id']}").json()["trials"]) == 2


def test_a_tune_gives_up_after_max_failures(daemon: Daemon, tmp_path: Path) -> None:
    spec = base_spec(tmp_path)
    spec["command"] = [sys.executable, "-c", "import sys; sys.exit(1)"]
    tune = start(
        daemon,
        spec,
        objective="val_loss",
        search="random",
        max_trials=10,
        max_parallel=1,
        max_failures=1,
        space={"lr": {"loguniform": [1e-3, 1e-1]}},
    )
    done = ended(daemon, tune["id"])
    assert (done["state"], done["reason"]) == (
        "FAILED",
        "2 trials failed, over max_failures (1)",
    )
    assert [t["state"] for t in done["trials"]] == ["failed", "failed"]


def test_max_parallel_beyond_the_users_limits_is_refused(tmp_path: Path) -> None:
    config = {"max_running_jobs_per_user": 2, "max_gpus_per_user": 3}
    with running_daemon(gpus="fake:4", config=config) as daemon:
        for parallel, says in (
            (3, "max_parallel 3 is beyond the 2 running jobs a user may have"),
            (2, "max_parallel 2 trials of 2 GPUs need 4, beyond the 3 a user may hold"),
        ):
            spec = {**base_spec(tmp_path), "gpus": 2 if parallel == 2 else 1}
            response = daemon.post(
                "/v1/tunes",
                json={
                    "spec": spec,
                    "tune": {
                        "objective": "val_loss",
                        "max_parallel": parallel,
                        "space": {"lr": {"uniform": [0, 1]}},
                    },
                },
            )
            assert response.status_code == 400, response.text
            assert says in response.json()["error"]["message"]
        assert daemon.get("/v1/tunes").json()["tunes"] == []
        assert daemon.get("/v1/jobs", params={"all": "true"}).json()["total"] == 0


# Reports steps Optuna cannot take and values that are no numbers, then real ones.
HOSTILE = """
import json, os
path = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "metrics.jsonl")
with open(path, "w") as f:
    for step, value in ((-3, 0.5), (1e300, 0.4), (-0.5, 0.3), (1, "nan")):
        f.write(json.dumps({"step": step, "val_loss": value}) + "\\n")
print("epoch 1 val_loss=1e999", flush=True)
for epoch in (1, 2):
    print(f"epoch {epoch} val_loss={1.0 / epoch}", flush=True)
"""


def test_a_trial_printing_nonsense_does_not_stall_its_tune(daemon: Daemon, tmp_path: Path) -> None:
    spec = base_spec(tmp_path)
    spec["command"] = [sys.executable, "-c", HOSTILE]
    tune = start(
        daemon,
        spec,
        objective="val_loss",
        search="random",
        early_stopping="median",
        max_trials=3,
        max_parallel=3,
        space={"lr": {"uniform": [0.1, 0.2]}},
    )
    done = ended(daemon, tune["id"])
    assert done["state"] == "COMPLETED"
    assert [t["state"] for t in done["trials"]] == ["completed"] * 3
    assert {t["value"] for t in done["trials"]} == {0.5}
    assert "tune step failed" not in daemon.log()


def test_pbt_resumes_the_worst_trial_from_the_best_ones_checkpoints(
    daemon: Daemon, tmp_path: Path
) -> None:
    tune = start(
        daemon,
        base_spec(tmp_path, epochs=12, epoch_seconds=0.5),
        objective="val_loss",
        search="random",
        early_stopping="pbt",
        perturbation_interval=3,
        quantile=0.25,
        max_trials=4,
        max_parallel=4,
        seed=5,
        space={"lr": {"loguniform": [1e-4, 1e-1]}},
    )
    done = ended(daemon, tune["id"], timeout=180)
    assert done["state"] == "COMPLETED", done
    assert [t["state"] for t in done["trials"]] == ["completed"] * 4
    moved = [t for t in done["trials"] if t["history"]]
    assert moved, done["trials"]
    for trial in moved:
        job = daemon.job(trial["job_id"])
        last = trial["history"][-1]
        assert job["spec"]["hyperparameters"]["lr"] == repr(last["params"]["lr"])
        assert trial["params"] == last["params"]
        assert len(job["attempts"]) == last["attempt"]
        assert job["attempts"][0]["outcome"] == "preempted"  # paused, no retry spent
        # The resumed attempt went on from the donor's checkpoint, not from epoch 1: the
        # newest the donor had kept when the copy was made, which may be behind this trial's
        # own (trials run side by side; the first to reach the interval is ranked first).
        resumed = daemon.cli("logs", "--attempt", str(last["attempt"]), str(trial["job_id"]))
        first_epoch = int(resumed.stdout.split()[1])
        assert first_epoch > 1, resumed.stdout
        said = event_reasons(daemon, trial["job_id"])
        assert any(r.startswith(f"paused by tune {tune['id']} (pbt): val_loss ") for r in said)
        assert f"resumed by tune {tune['id']} (pbt)" in said


def test_the_python_client_tunes_and_reads_metrics(daemon: Daemon, tmp_path: Path) -> None:
    from trainq import Client, InvalidSpec
    from trainq.core.wire import JobMetrics, TuneRecord

    tq = Client(daemon.socket)
    settings = {"objective": "val_loss", "max_trials": 1, "space": {"layers": {"int": [2, 3]}}}
    tune = tq.tune(base_spec(tmp_path, epochs=2), settings)
    assert isinstance(tune, TuneRecord)
    done = ended(daemon, tune.id)
    shown = tq.show_tune(tune.id)
    assert (shown.state, shown.best_trial) == ("COMPLETED", 0) == (done["state"], 0)
    assert [t.id for t in tq.tunes()] == [tune.id]
    metrics = tq.metrics(shown.trials[0].job_id)
    assert isinstance(metrics, JobMetrics)
    assert metrics.attempts[0].series["val_loss"].count == 2
    assert tq.stop_tune(tune.id).state == "COMPLETED"  # an ended tune stays as it ended
    with pytest.raises(InvalidSpec, match="the search space is empty"):
        tq.tune(base_spec(tmp_path), {"objective": "val_loss", "space": {}})


def test_a_pbt_move_cut_by_kill_9_is_finished_after_the_restart(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The trainer ignores SIGTERM, so each pause takes its whole grace: trainqd is killed
    while a trial is being paused for a copy, and the next trainqd carries the move out."""
    deaf = (
        "import runpy, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"runpy.run_path({str(TUNE_EXAMPLE / 'train.py')!r}, run_name='__main__')"
    )
    spec = {
        **base_spec(tmp_path, epochs=12, epoch_seconds=0.5),
        "command": [sys.executable, "-c", deaf],
        "stop_grace_seconds": 3.0,
    }
    tune = start(
        daemon,
        spec,
        objective="val_loss",
        search="random",
        early_stopping="pbt",
        perturbation_interval=3,
        max_trials=4,
        max_parallel=4,
        seed=5,
        space={"lr": {"loguniform": [1e-4, 1e-1]}},
    )
    paused_by = f"paused by tune {tune['id']} (pbt)"

    def pausing() -> int | None:
        for trial in daemon.get(f"/v1/tunes/{tune['id']}").json()["trials"]:
            if any(r.startswith(paused_by) for r in event_reasons(daemon, trial["job_id"])):
                return int(trial["job_id"])
        return None

    job_id = wait_for(pausing, timeout=60, what="a trial to be paused for a copy")
    assert daemon.job(job_id)["state"] == "STOPPING"  # within its grace
    daemon.kill()
    daemon.start()
    done = ended(daemon, tune["id"], timeout=180)
    assert done["state"] == "COMPLETED", done
    (moved,) = [t for t in done["trials"] if t["job_id"] == job_id]
    assert moved["history"], moved
    assert f"resumed by tune {tune['id']} (pbt)" in event_reasons(daemon, job_id)
    assert daemon.job(job_id)["state"] == "COMPLETED"
