"""Try to open each device node given as an argument; record how each attempt went in
$SM_OUTPUT_DATA_DIR/devices.json ({path: "opened" | errno name}), how its tries to leave its
cgroups went, and its /proc/self/cgroup."""

import errno
import json
import os
import sys

report = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        report[path] = "opened"
    except OSError as exc:
        report[path] = errno.errorcode.get(exc.errno or 0, str(exc.errno))


def join(procs: str) -> str:
    try:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "moved"


def v2_root() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            before, _, after = line.partition(" - ")
            if after.startswith("cgroup2 "):
                return before.split()[4]
    return "/nonexistent"


# Leaving the confinement: join the devices hierarchy's root cgroup (v1), the v2 tree's root.
report["escape"] = join("/sys/fs/cgroup/devices/cgroup.procs")
report["escape_v2"] = join(os.path.join(v2_root(), "cgroup.procs"))
with open("/proc/self/cgroup") as f:
    report["cgroups"] = f.read().splitlines()
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "devices.json"), "w") as f:
    json.dump(report, f)
print("devices probed")
