"""Decompressing a channel's gzip files while they are fed (`compression = "Gzip"`).

A file may hold several gzip members one after another (what `cat a.gz b.gz` or pigz
produces), and zero bytes after a member (block padding from a tape or a device), as
gzip(1) and Python's gzip module accept them. Input is read and output produced in large
chunks, each bounded, so a small file that inflates enormously never needs more than a
chunk of memory.
Every member's CRC and length are checked by zlib; a bad one is a CorruptGzip.
"""

from __future__ import annotations

import os
import zlib

INPUT_CHUNK = 1 << 20
OUTPUT_CHUNK = 1 << 20
_GZIP_ONLY = 16 + zlib.MAX_WBITS


class CorruptGzip(ValueError):
    pass


class GzipStream:
    """The decompressed content of the gzip file open at `fd`, read from its current offset."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._input = b""
        self._input_ended = False
        self._member: zlib._Decompress | None = None
        self._after_member = False  # zero padding is allowed only after a member

    def read(self) -> bytes:
        """The next chunk of decompressed content (at most OUTPUT_CHUNK bytes); b"" at the end."""
        while True:
            if not self._input and not self._input_ended:
                self._input = os.read(self._fd, INPUT_CHUNK)
                self._input_ended = not self._input
            if self._member is None:
                if self._after_member:
                    self._input = self._input.lstrip(b"\0")
                if not self._input:
                    if self._input_ended:
                        return b""
                    continue
                self._member = zlib.decompressobj(_GZIP_ONLY)
            member = self._member
            try:
                # Called with b"" only once the file has ended: to drain what zlib still holds.
                out = member.decompress(self._input, OUTPUT_CHUNK)
            except zlib.error as exc:
                raise CorruptGzip(_reason(exc)) from None
            if member.eof:
                self._input = member.unused_data
                self._member = None
                self._after_member = True
            else:
                self._input = member.unconsumed_tail
            if out:
                return out
            if self._member is not None and not self._input and self._input_ended:
                raise CorruptGzip("the file ends inside a gzip member (truncated)")


def _reason(exc: zlib.error) -> str:
    # zlib's text reads "Error -3 while decompressing data: incorrect header check".
    text = str(exc)
    return text.split(": ", 1)[-1] if ": " in text else text
