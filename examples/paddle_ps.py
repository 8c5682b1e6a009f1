"""One node of a PaddlePaddle parameter-server job (README.md, "Several nodes").

PaddlePaddle's fleet reads the node's role, id and peers from the variables trainq sets
(TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT, ...):
a parameter server serves the model's parameters until trainq stops it, a trainer fits
y = x.w to a few batches of its own, exchanging its updates with the servers every few
steps (GEO-SGD), and prints its loss before and after.
"""

import os
import signal

os.environ.setdefault("GLOG_minloglevel", "2")  # Paddle's C++ logs: errors only

import numpy as np
import paddle
from paddle.distributed import fleet

STEPS = 40
paddle.enable_static()
paddle.seed(1)
fleet.init(fleet.PaddleCloudRoleMaker(is_collective=False))

x = paddle.static.data("x", [None, 4], "float32")
y = paddle.static.data("y", [None, 1], "float32")
loss = paddle.mean(paddle.nn.functional.square_error_cost(paddle.static.nn.fc(x, 1), y))
strategy = fleet.DistributedStrategy()
strategy.a_sync = True
strategy.a_sync_configs = {"k_steps": 5}  # GEO-SGD: exchange updates every 5 steps
fleet.distributed_optimizer(paddle.optimizer.SGD(0.05), strategy).minimize(loss)

me = os.environ["SM_CURRENT_HOST"]
if fleet.is_server():
    fleet.init_server()
    print(f"{me}: parameter server {fleet.server_index()} serving", flush=True)
    # It serves until trainq stops it, once the trainers are done: SIGTERM ends it quietly,
    # not through Paddle's handler, which reports it as a crash.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    fleet.run_server()
else:
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    rng = np.random.default_rng(fleet.worker_index())
    w = np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
    losses = []
    for _ in range(STEPS):
        batch = rng.normal(size=(32, 4)).astype("float32")
        (value,) = exe.run(feed={"x": batch, "y": batch @ w}, fetch_list=[loss])
        losses.append(float(value))
    fleet.stop_worker()
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print(f"{me}: trainer {fleet.worker_index()} loss {first:.3f} -> {last:.3f}", flush=True)
