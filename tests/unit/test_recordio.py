"""RecordIO framing: headers, padding and the split of payloads too long for 29 bits."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainqd.monitor import recordio


def test_header_is_magic_then_flag_and_length_little_endian() -> None:
    assert recordio.header(0, 5) == bytes.fromhex("0a23d7ce") + bytes.fromhex("05000000")
    assert recordio.header(3, 1) == struct.pack("<II", 0xCED7230A, (3 << 29) | 1)
    assert recordio.header(1, (1 << 29) - 1) == struct.pack("<II", 0xCED7230A, 0x3FFFFFFF)


@pytest.mark.parametrize(("cflag", "length"), [(4, 0), (-1, 0), (0, 1 << 29), (0, -1)])
def test_header_refuses_what_does_not_fit(cflag: int, length: int) -> None:
    with pytest.raises(ValueError, match=r"cflag|29 bits"):
        recordio.header(cflag, length)


@pytest.mark.parametrize(
    ("length", "pad"),
    [(0, b""), (1, b"\0\0\0"), (2, b"\0\0"), (3, b"\0"), (4, b""), (9, b"\0\0\0")],
)
def test_padding_reaches_a_multiple_of_four(length: int, pad: bytes) -> None:
    assert recordio.padding(length) == pad


def test_payload_below_two_to_the_29_is_one_whole_part() -> None:
    assert list(recordio.parts(0)) == [(recordio.WHOLE, 0)]
    assert list(recordio.parts((1 << 29) - 1)) == [(recordio.WHOLE, (1 << 29) - 1)]


def test_payload_of_two_to_the_29_or_more_is_split() -> None:
    limit = (1 << 29) - 1
    assert list(recordio.parts(1 << 29)) == [(recordio.FIRST, limit), (recordio.LAST, 1)]
    assert list(recordio.parts(3 * limit)) == [
        (recordio.FIRST, limit),
        (recordio.MIDDLE, limit),
        (recordio.LAST, limit),
    ]


@given(total=st.integers(min_value=0, max_value=200), limit=st.integers(min_value=1, max_value=50))
def test_parts_cover_the_payload_in_order(total: int, limit: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recordio, "MAX_PART_LENGTH", limit)
        planned = list(recordio.parts(total))
    assert sum(length for _, length in planned) == total
    assert all(0 < length <= limit for _, length in planned) or planned == [(0, 0)]
    flags = [cflag for cflag, _ in planned]
    if total <= limit:
        assert flags == [recordio.WHOLE]
    else:
        assert flags == [recordio.FIRST] + [recordio.MIDDLE] * (len(flags) - 2) + [recordio.LAST]
        assert all(length == limit for _, length in planned[:-1])
