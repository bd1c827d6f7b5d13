"""Fixtures of the paramserver Python tests: real ps_server processes on free loopback ports.

Environment: PS_SERVER_BINARY (required), PS_WORKER_BINARY (the training comparison),
PYTHONPATH pointing at the built package (ctest sets all three).
"""

import os
import re
import subprocess
import sys
import time

import pytest

SERVER_START_TIMEOUT_S = 30.0


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "training: trains on Fashion-MNIST (slow; ctest entry python_training)")


def server_binary():
    path = os.environ.get("PS_SERVER_BINARY", "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("PS_SERVER_BINARY is not set to an executable ps_server")
    return path


class Cluster:
    """N parameter servers on 127.0.0.1 (ports picked by the servers, read from port files).

    Always stop() it (the fixtures do, even when a test fails); every process gets SIGTERM,
    then SIGKILL after a grace period.
    """

    def __init__(self, workdir, num_servers=2, extra_flags=()):
        self.workdir = str(workdir)
        self.num_servers = num_servers
        self.extra_flags = list(extra_flags)
        self.procs = []
        self.logs = []
        self.addresses = []

    def start(self):
        binary = server_binary()
        os.makedirs(self.workdir, exist_ok=True)
        port_files = []
        for i in range(self.num_servers):
            port_file = os.path.join(self.workdir, f"server{i}.port")
            log_path = os.path.join(self.workdir, f"server{i}.log")
            for stale in (port_file, port_file + ".tmp"):
                if os.path.exists(stale):
                    os.remove(stale)
            log = open(log_path, "wb")
            self.logs.append((log_path, log))
            cmd = [binary, "--listen=127.0.0.1:0", f"--server_index={i}",
                   f"--num_servers={self.num_servers}", f"--port_file={port_file}",
                   "--metrics_listen=127.0.0.1:0", *self.extra_flags]
            self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))
            port_files.append(port_file)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        ports = [None] * self.num_servers
        while None in ports:
            for i, port_file in enumerate(port_files):
                if ports[i] is not None:
                    continue
                if self.procs[i].poll() is not None:
                    raise RuntimeError(f"server {i} exited with {self.procs[i].returncode}:\n"
                                       + self.log(i))
                try:
                    with open(port_file) as f:
                        text = f.read().strip()
                except FileNotFoundError:
                    continue
                if re.fullmatch(r"\d+", text):
                    ports[i] = int(text)
            if None in ports:
                if time.monotonic() > deadline:
                    raise RuntimeError("servers did not start in time:\n" +
                                       "\n".join(self.log(i) for i in range(self.num_servers)))
                time.sleep(0.05)
        self.addresses = [f"127.0.0.1:{p}" for p in ports]
        return self

    def log(self, i):
        path = self.logs[i][0]
        self.logs[i][1].flush()
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def kill(self, i):
        """Kills server i (SIGKILL) and waits for it."""
        proc = self.procs[i]
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5.0
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for _, log in self.logs:
            log.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two servers shared by the tests of a module (each test uses its own job)."""
    c = Cluster(tmp_path_factory.mktemp("servers"), num_servers=2)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def fresh_cluster(tmp_path):
    """Two servers of this test alone (tests that kill servers)."""
    c = Cluster(tmp_path / "servers", num_servers=2)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def job_id(request):
    """A job id unique to the test (tables and clocks are per job)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)
    return f"{name}-{os.getpid()}"[:100]


@pytest.fixture
def client(cluster, job_id):
    import paramserver

    c = paramserver.Client(cluster.addresses, job_id=job_id, rpc_timeout=30.0)
    try:
        yield c
    finally:
        c.close()


def python():
    return sys.executable
