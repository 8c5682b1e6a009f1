"""A framework module for the toolkit's `train` (SAGEMAKER_TRAINING_MODULE=env_report:main):
records the toolkit's `Environment().to_env_vars()` next to the SM_* variables the process
was given, in $SM_OUTPUT_DATA_DIR/toolkit_env.json."""

import json
import os

from sagemaker_training import environment


def main():
    given = {k: v for k, v in os.environ.items() if k.startswith("SM_")}
    toolkit = environment.Environment().to_env_vars()
    with open(os.path.join(given["SM_OUTPUT_DATA_DIR"], "toolkit_env.json"), "w") as f:
        json.dump({"toolkit": toolkit, "environ": given}, f)
    print("toolkit environment recorded")
