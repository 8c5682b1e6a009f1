"""Write the network interfaces this trainer can see (its network namespace's, from
/sys/class/net) to output/data/interfaces.json, sorted, then exit 0."""

import json
import os

data = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data")
with open(os.path.join(data, "interfaces.json"), "w") as f:
    json.dump(sorted(os.listdir("/sys/class/net")), f)
