"""Use SageMaker's fixed paths and host name the way training code does, and record what
happened in $SM_OUTPUT_DATA_DIR/paths.json."""

import json
import os
import socket
import subprocess

report = {}
os.makedirs("/opt/ml/checkpoints", exist_ok=True)
with open("/opt/ml/checkpoints/x", "w") as f:
    f.write(f"attempt {os.environ['TRAINQ_ATTEMPT']}\n")
report["config_via_opt_ml"] = os.path.exists("/opt/ml/input/config/resourceconfig.json")
with open("/opt/ml/input/config/resourceconfig.json") as f:
    current_host = json.load(f)["current_host"]
report["current_host"] = current_host
report["resolved"] = socket.gethostbyname(current_host)
getent = subprocess.run(
    ["getent", "hosts", current_host], capture_output=True, text=True, check=False
)
report["getent"] = getent.stdout.split()
report["hostname"] = socket.gethostname()
with open("/etc/hosts") as f:
    report["etc_hosts"] = f.read()
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "paths.json"), "w") as f:
    json.dump(report, f)
print("paths recorded")
