"""The curves image of `trainq tune show --plot`: a valid PNG whose pixels are where the
curves go."""

from __future__ import annotations

import struct
import zlib

from trainq.curve_png import BEST, HEIGHT, MARGIN, PALETTE, WIDTH, render


def pixels(png: bytes) -> tuple[int, int, bytes]:
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    at, data, size = 8, b"", (0, 0)
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) == crc
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            data += body
        at += 12 + length
    raw = zlib.decompress(data)
    width, height = size
    rows = [raw[y * (width * 3 + 1) + 1 : (y + 1) * (width * 3 + 1)] for y in range(height)]
    return width, height, b"".join(rows)


def colour(data: bytes, x: int, y: int) -> tuple[int, ...]:
    at = (y * WIDTH + x) * 3
    return tuple(data[at : at + 3])


def test_curves_are_drawn_where_they_go() -> None:
    rising = [(0.0, 0.0), (10.0, 1.0)]
    falling = [(0.0, 1.0), (10.0, 0.0)]
    width, height, data = pixels(render([rising, falling], best=1))
    assert (width, height) == (WIDTH, HEIGHT)
    left, right, top, bottom = MARGIN, WIDTH - MARGIN, MARGIN, HEIGHT - MARGIN
    assert colour(data, left + 1, bottom - 1) == PALETTE[0]  # the rising one's start
    assert colour(data, right - 1, top + 1) == PALETTE[0]
    assert colour(data, right - 1, bottom - 1) == BEST  # the falling one is the best
    assert colour(data, 5, 5) == (255, 255, 255)


def test_no_curves_still_make_an_image() -> None:
    assert pixels(render([]))[:2] == (WIDTH, HEIGHT)
