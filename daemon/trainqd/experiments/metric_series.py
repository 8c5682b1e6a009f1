"""An attempt's metric reports, kept in bounded memory whatever the trainer prints.

Each series keeps at most MAX_POINTS points: its first, its latest, and evenly thinned points
between (when the list fills, every other point goes and only every 2nd, then 4th, ... report
is kept from then on). The count, the latest and the best (least and greatest) value are
kept exactly. An attempt keeps at most MAX_SERIES series; reports of further names are
dropped and counted. So one attempt's metrics take at most about 32 x 500 points, a few
hundred KiB as JSON, however long it runs (README.md, "Metrics").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MAX_SERIES = 32
MAX_POINTS = 500


@dataclass
class Series:
    points: list[tuple[float, float]] = field(default_factory=list)  # (step, value)
    count: int = 0  # reports so far
    stride: int = 1  # every stride-th report is kept
    last: tuple[float, float] | None = None
    least: float | None = None
    greatest: float | None = None

    def add(self, step: float | None, value: float) -> None:
        """One report; `step` None: the number of reports so far, this one included."""
        self.count += 1
        point = (float(self.count) if step is None else step, value)
        self.last = point
        self.least = value if self.least is None else min(self.least, value)
        self.greatest = value if self.greatest is None else max(self.greatest, value)
        if (self.count - 1) % self.stride:
            return
        self.points.append(point)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
            self.stride *= 2

    def kept(self) -> list[tuple[float, float]]:
        """The kept points, the latest always among them."""
        if self.last is not None and (not self.points or self.points[-1] != self.last):
            return [*self.points, self.last]
        return list(self.points)

    def to_json(self) -> dict[str, Any]:
        return {
            "points": [list(p) for p in self.points],
            "count": self.count,
            "stride": self.stride,
            "last": None if self.last is None else list(self.last),
            "least": self.least,
            "greatest": self.greatest,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Series:
        last = data.get("last")
        return cls(
            points=[(float(s), float(v)) for s, v in data["points"]][: MAX_POINTS + 1],
            count=int(data["count"]),
            stride=max(1, int(data["stride"])),
            last=None if last is None else (float(last[0]), float(last[1])),
            least=None if data.get("least") is None else float(data["least"]),
            greatest=None if data.get("greatest") is None else float(data["greatest"]),
        )


@dataclass
class AttemptMetrics:
    """One attempt's series, and how far each of its sources has been read."""

    series: dict[str, Series] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)  # source file name -> bytes read
    dropped: int = 0  # reports of names beyond MAX_SERIES
    final: bool = False  # read to the end after the attempt ended
    changed: bool = False  # since it was last saved

    def report(self, name: str, step: float | None, value: float) -> None:
        if not math.isfinite(value) or (step is not None and not math.isfinite(step)):
            return
        series = self.series.get(name)
        if series is None:
            if len(self.series) >= MAX_SERIES:
                self.dropped += 1
                return
            series = self.series[name] = Series()
        series.add(step, value)
        self.changed = True

    def to_json(self) -> dict[str, Any]:
        return {
            "series": {name: s.to_json() for name, s in self.series.items()},
            "offsets": dict(self.offsets),
            "dropped": self.dropped,
            "final": self.final,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AttemptMetrics:
        series = {str(n): Series.from_json(s) for n, s in data["series"].items()}
        return cls(
            series=dict(list(series.items())[:MAX_SERIES]),
            offsets={str(k): int(v) for k, v in data["offsets"].items()},
            dropped=int(data.get("dropped", 0)),
            final=bool(data.get("final", False)),
        )
