"""RecordIO framing for Pipe mode channels with `record_wrapper = "RecordIO"`.

Each source file becomes one record, framed the way MXNet's RecordIO frames raw data:

    uint32 LE magic 0xced7230a | uint32 LE (cflag << 29) | length | payload | zero padding to 4

The length field has 29 bits, so a payload of 2^29 bytes or more travels as several parts:
cflag 1 on the first, 2 on the middle ones, 3 on the last; a payload that fits is one part
with cflag 0. Every part is padded on its own, so a reader can skip from header to header.

Only headers and padding are built here; payloads never pass through this module (the
feeder splices them), which is why the framing is planned from a length alone.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

MAGIC = 0xCED7230A
# The largest length the 29-bit field holds. A module constant, read at call time, so tests
# can exercise the multi-part split with a small limit instead of half a gigabyte.
MAX_PART_LENGTH = (1 << 29) - 1

WHOLE = 0
FIRST = 1
MIDDLE = 2
LAST = 3

_HEADER = struct.Struct("<II")
_ZEROS = bytes(4)


def header(cflag: int, length: int) -> bytes:
    """The 8-byte header of one part."""
    if not 0 <= cflag <= LAST:
        raise ValueError(f"cflag {cflag} is not 0-3")
    if not 0 <= length < (1 << 29):
        raise ValueError(f"part length {length} does not fit in 29 bits")
    return _HEADER.pack(MAGIC, (cflag << 29) | length)


def padding(length: int) -> bytes:
    """The zero bytes that bring a part of `length` bytes to a multiple of 4."""
    return _ZEROS[: -length % 4]


def parts(total: int) -> Iterator[tuple[int, int]]:
    """(cflag, length) of each part of a payload of `total` bytes, in order."""
    limit = MAX_PART_LENGTH
    if total <= limit:
        yield WHOLE, total
        return
    offset = 0
    while offset < total:
        length = min(limit, total - offset)
        if offset == 0:
            cflag = FIRST
        elif offset + length == total:
            cflag = LAST
        else:
            cflag = MIDDLE
        yield cflag, length
        offset += length
