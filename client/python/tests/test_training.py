"""Training on Fashion-MNIST against real servers (marked `training`: slow)."""

import os
import re
import subprocess
import time

import pytest

from conftest import Cluster

pytestmark = pytest.mark.training

DATA_DIR = os.environ.get("PS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
MLP_EPOCHS = 2


@pytest.fixture(scope="module")
def data():
    if not os.path.exists(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"no Fashion-MNIST in {DATA_DIR}")
    from fashion_softmax import load_fashion_mnist
    return load_fashion_mnist(DATA_DIR)


def test_softmax_regression_numpy(cluster, data):
    """paramserver + numpy only, 2 servers: softmax regression reaches 84% test accuracy."""
    import fashion_softmax

    start = time.monotonic()
    acc = fashion_softmax.train(cluster.addresses, epochs=8, data=data)
    print(f"softmax regression: test accuracy {100 * acc:.2f}% in "
          f"{time.monotonic() - start:.1f} s")
    assert acc >= 0.84


def test_torch_mlp_matches_builtin_model(tmp_path, data):
    """The PyTorch version of fashion_mlp trains as well as the built-in model (within one
    point of test accuracy), each against 2 fresh servers."""
    torch = pytest.importorskip("torch")
    worker = os.environ.get("PS_WORKER_BINARY", "")
    if not worker or not os.access(worker, os.X_OK):
        pytest.skip("PS_WORKER_BINARY is not set to an executable ps_worker")
    import fashion_torch_mlp

    torch.set_num_threads(1)
    start = time.monotonic()
    with Cluster(tmp_path / "builtin", num_servers=2) as builtin_cluster, \
            Cluster(tmp_path / "torch", num_servers=2) as torch_cluster:
        # The built-in model in the background, the PyTorch one here.
        log_path = tmp_path / "ps_worker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [worker, "--servers=" + ",".join(builtin_cluster.addresses), "--num_workers=1",
                 "--worker_id=0", f"--epochs={MLP_EPOCHS}", "--consistency=sync", "--evaluate",
                 "--device=cpu", "--log_every_steps=0", "--metrics_listen=127.0.0.1:0",
                 "--job_id=builtin-mlp"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                torch_acc = fashion_torch_mlp.train(torch_cluster.addresses, epochs=MLP_EPOCHS,
                                                    data=data)
                torch_seconds = time.monotonic() - start
                proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        output = log_path.read_text(errors="replace")
        assert proc.returncode == 0, output[-3000:]
    match = re.search(r"final test accuracy ([0-9.]+)%", output)
    assert match, output[-3000:]
    builtin_acc = float(match.group(1)) / 100
    print(f"fashion_mlp, {MLP_EPOCHS} epochs: PyTorch + paramserver.torch "
          f"{100 * torch_acc:.2f}% ({torch_seconds:.1f} s), built-in {100 * builtin_acc:.2f}% "
          f"(both done after {time.monotonic() - start:.1f} s)")
    assert abs(torch_acc - builtin_acc) <= 0.01
    assert torch_acc > 0.80
