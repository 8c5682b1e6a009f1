"""One node of a job of several nodes, finding its peers only through what trainq gives it
(resourceconfig.json, SM_HOSTS, SM_CURRENT_HOST, PADDLE_PORT, TRAINQ_NODE_RANK, ...).

    gang_node.py sum          a parameter server on the first host (its own address and
                              PADDLE_PORT) and trainers on the others: each trainer sends
                              its rank, the server answers the sum to all, each prints it
    gang_node.py fail R CODE  every node but rank R listens and sleeps; rank R connects to
                              each of them (so all are up), then exits with CODE
    gang_node.py sleep        listen and sleep until stopped
    gang_node.py flaky R N    rank R exits 139 (transient) until TRAINQ_NODE_RESTARTS
                              reaches N, then 0 (N < 0: exits 3, a permanent error);
                              the others wait for it to succeed (its port), then exit 0
    gang_node.py ps           a parameter-server layout: the "pservers" group's nodes each
                              sum what every node of the "trainers" group sends them, answer
                              it and serve on (never exiting); each trainer sends its rank
                              to every server, prints the sums and exits 0

Every node writes its pid to <model dir>/pid once it listens (sleepers) or runs.
"""

import json
import os
import socket
import sys
import time

base = os.environ["SAGEMAKER_BASE_DIR"]
with open(os.path.join(base, "input", "config", "resourceconfig.json")) as f:
    resources = json.load(f)
me = resources["current_host"]
hosts = resources["hosts"]
assert me == os.environ["SM_CURRENT_HOST"]
assert json.loads(os.environ["SM_HOSTS"]) == hosts
rank = int(os.environ["TRAINQ_NODE_RANK"])
assert hosts[rank] == me
port = int(os.environ["PADDLE_PORT"])
mode = sys.argv[1]


def note_pid() -> None:
    path = os.path.join(os.environ["SM_MODEL_DIR"], "pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def listen() -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((socket.gethostbyname(me), port))  # each node on its own address
    server.listen(16)
    return server


def connect(host: str, deadline: float = 60.0) -> socket.socket:
    end = time.monotonic() + deadline
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def sleep_forever() -> None:
    server = listen()
    note_pid()
    print(f"{me} listening", flush=True)
    while True:
        conn, peer = server.accept()
        print(f"{me} accepted {peer[0]}", flush=True)
        conn.close()


if mode == "sum":
    note_pid()
    if rank == 0:
        server = listen()
        conns = [server.accept()[0] for _ in hosts[1:]]
        total = sum(int(c.makefile().readline()) for c in conns)
        for c in conns:
            c.sendall(f"{total}\n".encode())
            c.close()
        print(f"{me} served total={total}", flush=True)
    else:
        conn = connect(hosts[0])
        conn.sendall(f"{rank}\n".encode())
        print(f"{me} got total={conn.makefile().readline().strip()}", flush=True)
elif mode == "fail":
    failing, code = int(sys.argv[2]), int(sys.argv[3])
    if rank != failing:
        sleep_forever()
    note_pid()
    for host in hosts:
        if host != me:
            connect(host).close()
    print(f"{me} failing with {code}", file=sys.stderr, flush=True)
    sys.exit(code)
elif mode == "sleep":
    sleep_forever()
elif mode == "flaky":
    flaky, needed = int(sys.argv[2]), int(sys.argv[3])
    restarts = int(os.environ["TRAINQ_NODE_RESTARTS"])
    print(f"{me} restart {restarts}", flush=True)
    if rank == flaky:
        if needed < 0:
            sys.exit(3)
        if restarts < needed:
            sys.exit(139)
        server = listen()
        note_pid()
        for _ in hosts[1:]:
            server.accept()[0].close()
    else:
        note_pid()
        connect(hosts[flaky]).close()
elif mode == "ps":
    groups = {g["instance_group_name"]: g["hosts"] for g in resources["instance_groups"]}
    servers, trainers = groups["pservers"], groups["trainers"]
    if me in servers:
        server = listen()
        note_pid()
        conns = [server.accept()[0] for _ in trainers]
        total = sum(int(c.makefile().readline()) for c in conns)
        for c in conns:
            c.sendall(f"{total}\n".encode())
            c.close()
        print(f"{me} served total={total}", flush=True)
        while True:  # a parameter server serves until it is stopped
            server.accept()[0].close()
    else:
        sums = []
        for host in servers:
            conn = connect(host)
            conn.sendall(f"{rank}\n".encode())
            sums.append(conn.makefile().readline().strip())
        gpus = os.environ["CUDA_VISIBLE_DEVICES"]
        print(f"{me} on GPUs {gpus} got {','.join(sums)}", flush=True)
else:
    sys.exit(f"unknown mode {mode}")
