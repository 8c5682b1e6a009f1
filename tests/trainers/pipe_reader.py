"""A Pipe mode trainer for tests: reads its channels the way SageMaker's contract says to.

    pipe_reader.py OUT_DIR CHANNEL:EPOCHS[:CLOSE_AFTER] ...

Each channel is read in a thread of its own, at the same time as the others. For epoch
N = 0 .. EPOCHS-1 it waits for $SAGEMAKER_BASE_DIR/input/data/CHANNEL_N to appear (the
contract's "retry until the pipe is created"), opens it, reads it to EOF, or closes it
after CLOSE_AFTER bytes, and writes what it read to OUT_DIR/CHANNEL_N. Before opening
epoch N it checks the sequencing: epoch N-1 is gone and epoch N+1 is not there yet.
Exits 0 when everything was read, 1 with a line on stderr otherwise.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time

POLL_SECONDS = 0.005
WAIT_SECONDS = 20.0


def fifo_exists(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def read_channel(
    data_dir: str, out_dir: str, name: str, epochs: int, close_after: int | None
) -> None:
    for epoch in range(epochs):
        path = os.path.join(data_dir, f"{name}_{epoch}")
        deadline = time.monotonic() + WAIT_SECONDS
        while not fifo_exists(path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path} never appeared")
            time.sleep(POLL_SECONDS)
        if epoch > 0 and os.path.lexists(os.path.join(data_dir, f"{name}_{epoch - 1}")):
            raise RuntimeError(f"{name}_{epoch - 1} still exists beside {name}_{epoch}")
        if os.path.lexists(os.path.join(data_dir, f"{name}_{epoch + 1}")):
            raise RuntimeError(f"{name}_{epoch + 1} exists before {name}_{epoch} was read")
        data = bytearray()
        with open(path, "rb", buffering=0) as fifo:
            while close_after is None or len(data) < close_after:
                chunk = fifo.read(1 << 20 if close_after is None else close_after - len(data))
                if not chunk:
                    break
                data += chunk
        with open(os.path.join(out_dir, f"{name}_{epoch}"), "wb") as out:
            out.write(data)


def main() -> int:
    out_dir = sys.argv[1]
    data_dir = os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "input", "data")
    failures: list[str] = []

    def run(name: str, epochs: int, close_after: int | None) -> None:
        try:
            read_channel(data_dir, out_dir, name, epochs, close_after)
        except Exception as exc:
            failures.append(f"channel {name}: {exc}")

    threads = []
    for arg in sys.argv[2:]:
        name, epochs, *rest = arg.split(":")
        close_after = int(rest[0]) if rest else None
        threads.append(threading.Thread(target=run, args=(name, int(epochs), close_after)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
