"""`trainq tune show ID --plot FILE.png`: the trials' objective curves as a PNG image, drawn
with the standard library alone (zlib and struct): one colour per trial, the best in black,
step on the x axis, the objective on the y axis, a light grid at tenths of each range."""

from __future__ import annotations

import itertools
import struct
import zlib
from pathlib import Path

WIDTH, HEIGHT, MARGIN = 800, 500, 40
WHITE = (255, 255, 255)
GRID = (228, 228, 228)
AXIS = (120, 120, 120)
BEST = (0, 0, 0)
PALETTE = [
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
]  # fmt: skip

Curve = list[tuple[float, float]]


class _Canvas:
    def __init__(self) -> None:
        self.pixels = bytearray(WHITE * (WIDTH * HEIGHT))

    def dot(self, x: int, y: int, colour: tuple[int, int, int]) -> None:
        if 0 <= x < WIDTH and 0 <= y < HEIGHT:
            at = (y * WIDTH + x) * 3
            self.pixels[at : at + 3] = bytes(colour)

    def line(self, a: tuple[int, int], b: tuple[int, int], colour: tuple[int, int, int]) -> None:
        """Bresenham's line, two pixels thick."""
        (x0, y0), (x1, y1) = a, b
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        while True:
            self.dot(x0, y0, colour)
            self.dot(x0, y0 + 1, colour)
            if (x0, y0) == (x1, y1):
                return
            double = 2 * error
            if double >= dy:
                error += dy
                x0 += sx
            if double <= dx:
                error += dx
                y0 += sy

    def png(self) -> bytes:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[y * WIDTH * 3 : (y + 1) * WIDTH * 3]) for y in range(HEIGHT)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", WIDTH, HEIGHT, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b"")
        )


def render(curves: list[Curve], best: int | None = None) -> bytes:
    """The PNG of `curves` (each a list of (step, value)); `best` is the index drawn in black."""
    canvas = _Canvas()
    points = [p for curve in curves for p in curve]
    left, right, top, bottom = MARGIN, WIDTH - MARGIN, MARGIN, HEIGHT - MARGIN
    for tenth in range(11):
        x = left + (right - left) * tenth // 10
        y = top + (bottom - top) * tenth // 10
        canvas.line((x, top), (x, bottom), GRID)
        canvas.line((left, y), (right, y), GRID)
    canvas.line((left, bottom), (right, bottom), AXIS)
    canvas.line((left, top), (left, bottom), AXIS)
    if not points:
        return canvas.png()
    low_x, high_x = min(s for s, _ in points), max(s for s, _ in points)
    low_y, high_y = min(v for _, v in points), max(v for _, v in points)
    span_x, span_y = (high_x - low_x) or 1.0, (high_y - low_y) or 1.0

    def place(step: float, value: float) -> tuple[int, int]:
        x = left + round((step - low_x) / span_x * (right - left))
        y = bottom - round((value - low_y) / span_y * (bottom - top))
        return x, y

    order = [i for i in range(len(curves)) if i != best] + ([best] if best is not None else [])
    for index in order:
        colour = BEST if index == best else PALETTE[index % len(PALETTE)]
        placed = [place(s, v) for s, v in curves[index]]
        for a, b in itertools.pairwise(placed):
            canvas.line(a, b, colour)
        for x, y in placed:
            for ox in (-1, 0, 1):
                canvas.dot(x + ox, y - 1, colour)
    return canvas.png()


def write(path: Path, curves: list[Curve], best: int | None = None) -> None:
    path.write_bytes(render(curves, best))
