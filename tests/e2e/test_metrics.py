"""GPU use per job, idle jobs and the Prometheus metrics, against a real trainqd whose
simulated GPUs report the readings the test writes."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import Daemon, python_job, running_daemon, scratch_dir
from tests.support.waiting import wait_for
from tests.support.watching import watched_daemon, write_readings

BUSY = {"utilization": 87, "memory_used_mib": 20480, "power_watts": 300.5}
IDLE = {"utilization": 1, "memory_used_mib": 512, "power_watts": 60}


def scrape(daemon: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = daemon.get("/v1/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return values


def series(values: dict[Any, float], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (metric, labels), value in values.items() if metric == name}


def test_a_scrape_parses_and_matches_the_api() -> None:
    with watched_daemon([BUSY, BUSY, IDLE, IDLE]) as (daemon, _):
        running = daemon.submit(python_job("sleeper.py", gpus=2))
        done = daemon.submit({"command": ["true"], "gpus": 1})
        failed = daemon.submit(
            {
                **python_job("exit_with.py", "3", "secret-reason-in-failure"),
                "environment": {"API_TOKEN": "secret-env-value"},
            }
        )
        daemon.wait_state(running["id"], "RUNNING")
        daemon.wait_state(done["id"])
        daemon.wait_state(failed["id"])
        job = wait_for(
            lambda: (j := daemon.job(running["id"]))["gpu_util"] is not None and j,
            what="the running job to be sampled",
        )
        values = scrape(daemon)

        jobs = daemon.get("/v1/jobs", params={"all": "true"}).json()["jobs"]
        by_state = Counter((j["state"], j["owner"]["user"]) for j in jobs)
        assert {
            (dict(labels)["state"], dict(labels)["user"]): value
            for labels, value in series(values, "trainq_jobs").items()
        } == by_state

        gpus = daemon.get("/v1/gpus").json()["gpus"]
        held = [g for g in gpus if g["job_id"] is not None]
        assert values["trainq_gpus", ()] == len(gpus) == 4
        assert values["trainq_gpus_allocated", ()] == len(held) == 2
        for gpu in gpus:
            labels = (("gpu", str(gpu["index"])), ("uuid", gpu["uuid"]))
            expected = BUSY if gpu["index"] < 2 else IDLE
            assert values["trainq_gpu_allocated", labels] == (gpu["job_id"] is not None)
            assert values["trainq_gpu_utilization_percent", labels] == expected["utilization"]
            assert values["trainq_gpu_memory_used_mib", labels] == expected["memory_used_mib"]
            assert values["trainq_gpu_power_watts", labels] == expected["power_watts"]

        labels = (("job", str(running["id"])), ("user", running["owner"]["user"]))
        assert values["trainq_job_gpu_utilization_percent", labels] == job["gpu_util"]
        assert values["trainq_job_gpu_memory_used_mib", labels] == job["gpu_memory_used_mib"]
        assert values["trainq_job_gpu_idle", labels] == 0

        user = (("user", running["owner"]["user"]),)
        assert values["trainq_jobs_submitted_total", user] == 3
        assert values["trainq_jobs_ended_total", (("state", "COMPLETED"),)] == 1
        assert values["trainq_jobs_ended_total", (("state", "FAILED"),)] == 1
        assert values["trainq_queue_wait_seconds_count", ()] == 3
        assert values["trainq_dispatch_latency_seconds_count", ()] == 3
        posted = (("method", "POST"), ("route", "/v1/jobs"))
        assert values["trainq_api_request_seconds_count", posted] == 3

        # What only the owner may read never reaches a scraper.
        text = daemon.get("/v1/metrics").text
        # Every series the Grafana dashboard queries is one trainqd exposes.
        dashboard = (Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text()
        queried = set(re.findall(r"trainq_[a-z_]+", dashboard))
        assert queried
        assert queried <= set(re.findall(r"^(trainq_[a-z_]+)", text, re.MULTILINE))
        assert "secret-reason-in-failure" not in text
        assert "secret-env-value" not in text
        assert "API_TOKEN" not in text
        assert str(daemon.state_dir) not in text
        daemon.cli("stop", "--grace", "0", str(running["id"]))
        daemon.wait_state(running["id"])


def test_an_ended_attempt_keeps_its_peak_and_mean() -> None:
    with watched_daemon([BUSY]) as (daemon, gpus_file):
        job = daemon.submit(python_job("sleeper.py", gpus=1))
        wait_for(lambda: daemon.job(job["id"])["gpu_util"] == 87, what="a busy sample")
        write_readings(gpus_file, [{"utilization": 13, "memory_used_mib": 100}])
        wait_for(lambda: daemon.job(job["id"])["gpu_util"] == 13, what="a quieter sample")
        daemon.cli("stop", "--grace", "0", str(job["id"]))
        attempt = daemon.wait_state(job["id"])["attempts"][0]
        assert attempt["gpu_util_peak"] == 87
        assert 13 < attempt["gpu_util_mean"] < 87
        assert attempt["gpu_memory_peak_mib"] == 20480
        assert attempt["gpu_idle_seconds"] == 0
        shown = daemon.cli("show", str(job["id"]))
        assert shown.returncode == 0, shown.stderr
        assert "GPU USE" in shown.stdout
        assert "/87%" in shown.stdout


def idle_events(daemon: Daemon, job_id: int) -> list[dict[str, Any]]:
    with daemon.client() as client:
        lines = []
        with client.stream(
            "GET", "/v1/events", params={"job": job_id, "since": 0}, timeout=5
        ) as stream:
            for line in stream.iter_lines():
                event = json.loads(line)
                lines.append(event)
                if (event["reason"] or "").startswith("GPUs idle"):
                    break
        return [e for e in lines if (e["reason"] or "").startswith("GPUs idle")]


def test_an_idle_job_is_flagged_within_the_configured_time_and_unflagged_by_work() -> None:
    with watched_daemon([IDLE, IDLE], idle_after_seconds=1) as (daemon, gpus_file):
        job = daemon.submit(python_job("sleeper.py", gpus=1))
        daemon.wait_state(job["id"], "RUNNING")
        flagged = wait_for(
            lambda: daemon.job(job["id"])["gpu_idle_since"], timeout=5, what="the idle flag"
        )
        assert flagged
        events = idle_events(daemon, job["id"])
        assert events[0]["from_state"] == events[0]["to_state"] == "RUNNING"
        assert events[0]["reason"] == "GPUs idle: under 5% for 1s"
        values = scrape(daemon)
        labels = (("job", str(job["id"])), ("user", job["owner"]["user"]))
        assert values["trainq_job_gpu_idle", labels] == 1
        assert values["trainq_jobs_idle_flagged_total", ()] == 1
        listing = daemon.cli("ls")
        assert listing.returncode == 0, listing.stderr
        assert "GPUs idle since" in listing.stdout

        write_readings(gpus_file, [BUSY, BUSY])
        wait_for(lambda: daemon.job(job["id"])["gpu_idle_since"] is None, what="the flag to clear")
        assert daemon.job(job["id"])["state"] == "RUNNING"  # flagging alone stops nothing
        daemon.cli("stop", "--grace", "0", str(job["id"]))
        attempt = daemon.wait_state(job["id"])["attempts"][0]
        assert attempt["gpu_idle_seconds"] >= 1


def test_the_stop_policy_stops_a_job_idle_past_the_further_time() -> None:
    config = {"idle_after_seconds": 0.5, "idle_action": "stop", "idle_stop_after_seconds": 0.5}
    with watched_daemon([BUSY, BUSY], **config) as (daemon, gpus_file):
        idle = daemon.submit(python_job("sleeper.py", gpus=1))
        busy = daemon.submit(python_job("sleeper.py", gpus=1))
        [gpu] = daemon.wait_state(idle["id"], "RUNNING")["gpus"]
        daemon.wait_state(busy["id"], "RUNNING")
        write_readings(gpus_file, [IDLE if index == gpu else BUSY for index in range(2)])
        done = daemon.wait_state(idle["id"], timeout=20)
        assert done["state"] == "STOPPED"
        assert done["stop_reason"].startswith("stopped by trainq: its GPUs were idle for")
        # The busy job on the other GPU runs on, and the daemon serves as before.
        assert daemon.job(busy["id"])["state"] == "RUNNING"
        assert daemon.cli("ls").returncode == 0
        daemon.cli("stop", "--grace", "0", str(busy["id"]))
        daemon.wait_state(busy["id"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_tcp_listener_serves_metrics_only_and_reads_only() -> None:
    address = f"127.0.0.1:{_free_port()}"
    with watched_daemon([BUSY], metrics_listen=address) as (daemon, _):
        job = daemon.submit(python_job("sleeper.py", gpus=1))
        daemon.wait_state(job["id"], "RUNNING")
        with httpx.Client(base_url=f"http://{address}", timeout=10) as scraper:
            response = scraper.get("/metrics")
            assert response.status_code == 200
            families = {f.name for f in text_string_to_metric_families(response.text)}
            assert {"trainq_jobs", "trainq_gpu_utilization_percent"} <= families
            # Nothing but /metrics, and nothing that changes anything.
            assert scraper.get("/v1/jobs").status_code == 404
            assert scraper.get("/v1/metrics").status_code == 404
            assert scraper.post("/metrics").status_code == 405
            assert scraper.post("/v1/jobs", json={"command": ["true"]}).status_code == 404
        assert [j["id"] for j in daemon.get("/v1/jobs").json()["jobs"]] == [job["id"]]
        daemon.cli("stop", "--grace", "0", str(job["id"]))
        daemon.wait_state(job["id"])


def test_a_bad_listen_address_stops_the_daemon_with_one_line() -> None:
    base = scratch_dir()
    try:
        daemon = Daemon(base, config={"metrics_listen": "localhost"})
        result = subprocess.run(
            daemon.argv(), capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 78
        assert result.stderr.count("\n") == 1
        assert "metrics_listen" in result.stderr
        assert "HOST:PORT" in result.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_event_loop_probe_reports_a_daemon_held_still() -> None:
    with running_daemon(gpus="none") as daemon:
        assert daemon.proc is not None

        def late_wakeups() -> tuple[float, float]:
            values = scrape(daemon)
            over = values["trainq_event_loop_lag_seconds_count", ()]
            under = values["trainq_event_loop_lag_seconds_bucket", (("le", "0.25"),)]
            return over - under, over

        before, _ = late_wakeups()
        # Freeze the whole daemon for longer than the 0.25 s bucket: its probe must wake up
        # that late once it runs again. The pause is the stimulus, not a wait for a result.
        daemon.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(0.4)
        finally:
            daemon.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: late_wakeups()[0] > before, what="the probe to report the freeze")
        # And the probe goes on after the freeze.
        _, count = late_wakeups()
        wait_for(lambda: late_wakeups()[1] >= count + 20, what="more on-time wake-ups")
