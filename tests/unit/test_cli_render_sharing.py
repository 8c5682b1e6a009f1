"""How `trainq gpus` and `trainq health` show drains (trainq.job_tables, trainq.humanize)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainq.core.wire import DrainRecord, GpuList, GpuRecord, HealthRecord
from trainq.humanize import health_line
from trainq.job_tables import gpu_table
from trainq.render import RenderOptions

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
PIPED = RenderOptions(now=NOW, tz=UTC)


def drain(gpu: int | None, reason: str = "fan noise", by: str = "carol") -> DrainRecord:
    return DrainRecord(gpu=gpu, reason=reason, by=by, since=NOW - timedelta(hours=1))


def gpu(index: int, **changes: object) -> GpuRecord:
    fields: dict[str, object] = {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": "Fake",
        "memory_total_mib": 1024,
        "available": True,
    }
    return GpuRecord.model_validate({**fields, **changes})


def test_a_drained_gpu_is_marked_with_who_and_why() -> None:
    gpus = GpuList(
        backend="fake",
        gpus=[gpu(0, available=False, drain=drain(0, "fan\nnoise")), gpu(1)],
    ).model_dump(mode="json")
    lines = gpu_table(gpus, PIPED).splitlines()
    assert lines[0].split()[-2:] == ["AVAILABLE", "DRAINED"]
    assert lines[1].split()[-5:] == ["no", "by", "carol:", "fan", "noise"]
    assert lines[2].split()[-2:] == ["yes", "-"]


def test_without_drains_there_is_no_drained_column() -> None:
    table = gpu_table(GpuList(backend="fake", gpus=[gpu(0)]).model_dump(mode="json"), PIPED)
    assert "DRAINED" not in table


def test_a_drained_host_is_a_line_under_the_table() -> None:
    gpus = GpuList(backend="nvml", gpus=[gpu(0)], host_drain=drain(None, "new driver", "root"))
    assert gpu_table(gpus.model_dump(mode="json"), PIPED).splitlines()[-1] == (
        "DRAINED: the whole host, by root: new driver; nothing new starts"
    )


def health(*drains: DrainRecord) -> dict[str, object]:
    return HealthRecord(
        status="ok",
        version="0.1.0",
        pid=1,
        uid=0,
        started_at=NOW,
        gpu_backend="fake",
        gpus=4,
        cpu_slots=2,
        jobs={},
        drains=list(drains),
    ).model_dump(mode="json")


def test_health_says_what_is_draining() -> None:
    assert "draining" not in health_line(health(), NOW)
    assert health_line(health(drain(2), drain(3)), NOW).endswith("; draining: yes, GPUs 2,3")
    assert health_line(health(drain(None), drain(3)), NOW).endswith(
        "; draining: yes, the whole host"
    )
