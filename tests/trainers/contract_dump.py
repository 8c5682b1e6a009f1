"""A trainer that writes down everything the contract says it gets, then exits 0.

It records into $SM_OUTPUT_DATA_DIR/contract.json: its environment, identity, working
directory, the config files, the ml root's layout, and what it can do with each channel.
"""

import errno
import json
import os
import sys

base = os.environ["SAGEMAKER_BASE_DIR"]
report = {
    "argv": sys.argv,
    "env": dict(os.environ),
    "uid": os.getuid(),
    "gid": os.getgid(),
    "groups": sorted(os.getgroups()),
    "cwd": os.getcwd(),
    "pgid_is_own": os.getpgid(0) == os.getpid(),
    "config": {},
    "layout": {},
    "channels": {},
}
for name in ("hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"):
    with open(os.path.join(base, "input", "config", name)) as f:
        report["config"][name] = json.load(f)
for rel in ("model", "output", "output/data", "checkpoints", "input/data", "input/config"):
    report["layout"][rel] = os.path.isdir(os.path.join(base, rel))
for name, cfg in report["config"]["inputdataconfig.json"].items():
    if cfg["TrainingInputMode"] == "Pipe":
        continue
    path = os.path.join(base, "input", "data", name)
    files = {}
    for root, _dirs, names in os.walk(path, followlinks=True):
        for n in names:
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read().decode(errors="replace")
    try:
        with open(os.path.join(path, "written-by-trainer"), "w") as f:
            f.write("x")
        write = "ok"
    except OSError as exc:
        write = errno.errorcode.get(exc.errno or 0, str(exc))
    report["channels"][name] = {"files": files, "write": write}
os.makedirs(os.environ["SM_OUTPUT_DATA_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "contract.json"), "w") as f:
    json.dump(report, f)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as f:
    f.write("weights\n")
print("contract recorded")
