"""A trainer with a process tree that tries to outlive it.

    monitor_tree.py [--trainer-ignores-term] [--children-ignore-term] [--exit]

It starts three processes that sleep forever: a plain child (same process group), a
child that left for a session of its own (setsid), and a grandchild whose parent exited
at once (a double fork: it is reparented away from the trainer). It writes
"<trainer> <plain> <setsid> <orphan>" to output/data/tree once all of them run, then
sleeps forever too, or exits 0 at once with --exit (leaving the others behind).
"""

import os
import signal
import sys
import time
from collections.abc import Callable

base = os.environ["SAGEMAKER_BASE_DIR"]
children_ignore = "--children-ignore-term" in sys.argv
if "--trainer-ignores-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def sleep_forever(ignore_term: bool) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term else signal.SIG_DFL)
    while True:
        time.sleep(60)


def child(setup: Callable[[], object]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            setup()
            sleep_forever(children_ignore)
        finally:
            os._exit(0)
    return pid


plain = child(lambda: None)
in_own_session = child(os.setsid)

read_end, write_end = os.pipe()
middle = os.fork()
if middle == 0:
    orphan = os.fork()
    if orphan == 0:
        try:
            os.close(read_end)
            os.close(write_end)
            sleep_forever(children_ignore)
        finally:
            os._exit(0)
    os.write(write_end, str(orphan).encode())
    os._exit(0)
os.close(write_end)
orphan = int(os.read(read_end, 64))
os.waitpid(middle, 0)

tree = os.path.join(base, "output", "data", "tree")
with open(tree + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {plain} {in_own_session} {orphan}")
os.replace(tree + ".tmp", tree)
if "--exit" in sys.argv:
    sys.exit(0)
while True:
    time.sleep(60)
