"""The root monitor's scratch tmpfs (where the job's /etc/hosts is made) stays mounted under
the ml root's bind on /opt/ml, since an unmount waits out an RCU grace period: a job cannot
uncover it, and /opt/ml is its ml root all the same."""

from __future__ import annotations

import json

import pytest

from tests.support.monitor import NOBODY, attempt_of, give_to, python

pytestmark = pytest.mark.multiuser

# As the job's owner: unmount what covers /opt/ml, then say what /opt/ml is.
UNCOVER = python(
    "import ctypes, json, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "said = {}\n"
    "for flags in (0, 2):  # plain, MNT_DETACH\n"
    "    r = libc.umount2(b'/opt/ml', flags)\n"
    "    said[str(flags)] = 'unmounted' if r == 0 else os.strerror(ctypes.get_errno())\n"
    "said['same'] = os.path.samestat(os.stat('/opt/ml'),\n"
    "                                os.stat(os.environ['SAGEMAKER_BASE_DIR']))\n"
    "said['hosts'] = 'algo-1' in open('/etc/hosts').read()\n"
    "print(json.dumps(said))"
)


def test_a_job_cannot_uncover_the_scratch_under_opt_ml() -> None:
    with attempt_of(UNCOVER, owner=NOBODY) as attempt:
        give_to(attempt, NOBODY)
        record = attempt.start().wait()
        assert (record.outcome, record.exit_code) == ("exited", 0), attempt.stderr()
        said = json.loads(attempt.stdout())
        assert said == {
            "0": "Operation not permitted",
            "2": "Operation not permitted",
            "same": True,
            "hosts": True,
        }
