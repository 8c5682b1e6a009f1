"""Record what the sagemaker-training toolkit computes for this job next to what trainq gave
the process: $SM_OUTPUT_DATA_DIR/toolkit_env.json = {"toolkit": ..., "environ": ...}."""

import json
import os

# Taken first: constructing the toolkit's Environment writes a few variables of its own
# (CURRENT_HOST, SAGEMAKER_REGION, ...) into os.environ.
environ = dict(os.environ)

from sagemaker_training import environment  # noqa: E402

toolkit = environment.Environment().to_env_vars()
with open(os.path.join(environ["SM_OUTPUT_DATA_DIR"], "toolkit_env.json"), "w") as f:
    json.dump({"toolkit": toolkit, "environ": environ}, f)
print("toolkit environment recorded")
