"""Fork children that sleep until the kernel refuses one more, print how many it made and
why it could make no more ("63 EAGAIN"), then kill and reap them and exit 0."""

import errno
import os
import signal
import time

children = []
try:
    for _ in range(10_000):
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        children.append(pid)
    print("10000 none", flush=True)
except OSError as exc:
    print(len(children), errno.errorcode.get(exc.errno, str(exc.errno)), flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
