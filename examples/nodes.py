"""One node of a job of several nodes (README.md, "Several nodes"), in plain Python.

The first host is a parameter server, the others are trainers: each trainer connects to it
by its host name, sends its rank, and gets back the sum of them all. Everything a node needs
comes from what trainq gives it: its host name and the others' (SM_CURRENT_HOST, SM_HOSTS,
or input/config/resourceconfig.json), its rank and the port the nodes meet on.
"""

import json
import os
import socket
import time

me = os.environ["SM_CURRENT_HOST"]
hosts = json.loads(os.environ["SM_HOSTS"])
rank = int(os.environ["TRAINQ_NODE_RANK"])
port = int(os.environ["PADDLE_PORT"])

if rank == 0:
    server = socket.create_server((me, port))  # its own address: every node has one
    trainers = [server.accept()[0] for _ in hosts[1:]]
    total = sum(int(conn.makefile().readline()) for conn in trainers)
    for conn in trainers:
        conn.sendall(f"{total}\n".encode())
    print(f"{me}: the {len(hosts) - 1} trainers' ranks sum to {total}")
else:
    for _ in range(600):  # the server may not listen yet: the nodes start together
        try:
            conn = socket.create_connection((hosts[0], port))
            break
        except OSError:
            time.sleep(0.1)
    conn.sendall(f"{rank}\n".encode())
    print(f"{me}: rank {rank}, sum {conn.makefile().readline().strip()}")
