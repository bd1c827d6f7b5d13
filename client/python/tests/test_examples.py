"""The programs of examples/python run against real servers (short runs: they must not rot)."""

import os
import subprocess
import sys

import numpy as np

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "python")
sys.path.insert(0, EXAMPLES)

import ctr_data  # noqa: E402


def test_ctr_data_is_deterministic_and_power_law():
    a, b = ctr_data.CtrData(seed=3), ctr_data.CtrData(seed=3)
    ids1, dense1, labels1 = a.batch(worker=1, step=5, batch_size=2000)
    ids2, dense2, labels2 = b.batch(worker=1, step=5, batch_size=2000)
    np.testing.assert_array_equal(ids1, ids2)
    np.testing.assert_array_equal(dense1, dense2)
    np.testing.assert_array_equal(labels1, labels2)
    other, _, _ = a.batch(worker=0, step=5, batch_size=2000)
    assert not np.array_equal(other, ids1), "workers must read different examples"
    assert ids1.shape == (2000, ctr_data.NUM_FIELDS)
    assert (ids1 >= 0).all() and (ids1 < ctr_data.VOCAB).all()
    # Power law: the most frequent id of the biggest field is far more common than the median.
    _, counts = np.unique(ids1[:, 0], return_counts=True)
    assert counts.max() > 20 * np.median(counts)
    # Keys: field << 40 | id, distinct across fields.
    keys = ctr_data.keys_of(ids1[:1])
    assert len(set(keys[0].tolist())) == ctr_data.NUM_FIELDS
    test = a.test_set(5000)
    assert 0.8 < a.teacher_auc(test) < 1.0
    assert ctr_data.auc(np.array([0, 1, 0, 1]), np.array([0.1, 0.9, 0.2, 0.8])) == 1.0


def test_ctr_torch_trains_and_reports_auc(cluster, job_id):
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, "ctr_torch.py"),
         "--servers=" + ",".join(cluster.addresses), f"--job_id={job_id}", "--steps=30",
         "--batch=256", "--test_examples=3000", "--log_every=10", "--consistency=async"],
        env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "step 30/30 loss" in out.stdout
    last = out.stdout.strip().splitlines()[-1].split()
    assert last[0] == "auc" and last[2] == "teacher_auc", out.stdout
    assert 0.5 < float(last[1]) <= float(last[3]) + 0.02
