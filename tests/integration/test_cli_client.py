"""The API client refused by the socket's mode: a forked child, dropped to an ordinary user,
is told which group to ask for."""

from __future__ import annotations

import os
import socket
import tempfile

import pytest

from trainq.client import Client
from trainq.core.errors import (
    Forbidden,
)


@pytest.mark.multiuser
def test_permission_denied_names_the_socket_and_its_group() -> None:
    import grp  # loaded before the fork: the child may not read the interpreter's files

    assert os.geteuid() == 0, "needs root to switch to the user nobody"
    with tempfile.TemporaryDirectory(prefix="tq-", dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)  # noqa: S103 (the other user must reach the socket)
        path = os.path.join(tmp, "trainq.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(1)
            os.chmod(path, 0o660)
            os.chown(path, 0, 0)
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: an ordinary user, not in the socket's group
                message = "no error"
                try:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    Client(path).request("GET", "/v1/health")
                except Forbidden as exc:
                    message = exc.message
                except BaseException as exc:
                    message = f"{type(exc).__name__}: {exc}"
                finally:
                    os.write(write_end, message.encode())
                    os._exit(0)
            os.close(write_end)
            with os.fdopen(read_end, "rb") as reader:
                message = reader.read().decode()
            os.waitpid(pid, 0)
    group = grp.getgrgid(0).gr_name
    assert message == (
        f"cannot reach trainqd at {path}: permission denied (the socket is mode 0660, "
        f"group {group}; ask an administrator to add you to group {group})"
    )
