"""Write the example trainer's data: points of the line y = 3x + 1, with a little noise.

    python3 make_data.py [DIR]    # default: data/ beside this file

DIR/train/ holds the training set (train.py reads it in File mode), DIR/validation/ the
points it is scored on after each epoch (read in Pipe mode, streamed through a FIFO). Each
is a few CSV files of `x,y` lines. The same DIR always gets the same points.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

SLOPE, INTERCEPT = 3.0, 1.0


def write_split(directory: Path, files: int, rows: int, rng: random.Random) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        lines = []
        for _ in range(rows):
            x = rng.uniform(-1.0, 1.0)
            y = SLOPE * x + INTERCEPT + rng.gauss(0.0, 0.05)
            lines.append(f"{x:.6f},{y:.6f}\n")
        (directory / f"part-{index}.csv").write_text("".join(lines))


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"usage: {Path(__file__).name} [DIR]", file=sys.stderr)
        return 2
    base = Path(argv[0]) if argv else Path(__file__).resolve().parent / "data"
    rng = random.Random(7)  # noqa: S311 (reproducible data, not secrets)
    write_split(base / "train", files=4, rows=250, rng=rng)
    write_split(base / "validation", files=2, rows=100, rng=rng)
    print(f"wrote {base}/train and {base}/validation")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
