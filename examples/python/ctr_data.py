"""A click-through-rate data set, generated deterministically from a hidden "teacher" model.

The kind of data parameter servers exist for: every example has NUM_FIELDS categorical fields
(user, item, site, ... ids) whose vocabularies together hold millions of ids drawn with
power-law frequencies (a few ids are everywhere, most are rare), plus a few dense features.
The label is a click drawn from the teacher's probability, so the best AUC any model can reach
on the data is known: the teacher's own AUC, printed beside a model's.

The teacher: logit = bias + sum_f w_f[id_f] + sum_{f<g in PAIRS} <e_f[id_f], e_g[id_g]>
                     + dense . v
where w (one weight per id) and e (a 4-float vector per id) are pseudo-random functions of
(field, id): nothing of size vocabulary is stored, so any vocabulary size works. Ids are
frequency ranks (id 0 is a field's most frequent value), and an id's effect shrinks with its
rank (as 1/(1 + rank/50)), as in real click logs: the signal sits in the ids a model sees
often, while the long tail of rare ids (most of the millions) adds little.

    from ctr_data import CtrData
    data = CtrData(seed=1)
    ids, dense, labels = data.batch(worker=0, step=0, batch_size=512)  # ids: (512, 26) int64
    test = data.test_set(20000)
    print(data.teacher_auc(test))

Run as a script to print the data set's figures: python3 ctr_data.py [--examples=N]
"""

import argparse

import numpy as np

NUM_FIELDS = 26
NUM_DENSE = 8
# Vocabulary sizes: a few huge fields (user, item), the rest from hundreds to 10^5.
VOCAB = np.array([2_000_000, 1_000_000, 300_000, 100_000, 50_000, 20_000, 10_000, 5_000, 2_000,
                  1_000, 500, 200, 100, 100_000, 30_000, 10_000, 3_000, 1_000, 300, 100, 50,
                  20, 10, 1_000, 500, 200], dtype=np.int64)
assert len(VOCAB) == NUM_FIELDS
# Field pairs whose ids interact in the teacher (what an MLP over embeddings can learn).
PAIRS = [(0, 1), (0, 2), (1, 3), (2, 4), (5, 6), (7, 8), (9, 10), (13, 14)]
ZIPF_EXPONENT = 1.15
EMB = 4
KEY_FIELD_SHIFT = 40  # a model's key for (field, id): field << 40 | id


def _mix(x):
    """splitmix64 of a uint64 array (a pseudo-random function of its input)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _normal(keys, salt, scale):
    """A deterministic normal(0, scale) value per key (Box-Muller over two hashed uniforms)."""
    with np.errstate(over="ignore"):
        a = _mix(keys ^ np.uint64(salt))
        b = _mix(a ^ np.uint64(0x5555555555555555))
    u1 = (a >> np.uint64(11)).astype(np.float64) / float(1 << 53) + 1e-12
    u2 = (b >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2) * scale).astype(np.float32)


def keys_of(ids):
    """The parameter-server keys of an (n, NUM_FIELDS) id array: field << 40 | id (uint64)."""
    fields = np.arange(NUM_FIELDS, dtype=np.uint64) << np.uint64(KEY_FIELD_SHIFT)
    return ids.astype(np.uint64) | fields


class CtrData:
    """The data set of one seed. Every call is a pure function of its arguments."""

    def __init__(self, seed=1):
        self.seed = int(seed)
        rng = np.random.default_rng(self.seed)
        self.dense_weights = rng.normal(0.0, 0.5, NUM_DENSE).astype(np.float32)
        self.bias = np.float32(-1.2)  # about 36% clicks

    def _ids(self, rng, n):
        """Power-law ids: rank r with probability ~ r^-ZIPF_EXPONENT, within each vocabulary."""
        ids = np.empty((n, NUM_FIELDS), dtype=np.int64)
        for f in range(NUM_FIELDS):
            ranks = rng.zipf(ZIPF_EXPONENT, n).astype(np.int64) - 1
            ids[:, f] = ranks % VOCAB[f]
        return ids

    def teacher_logits(self, ids, dense):
        keys = keys_of(ids)
        salt = self.seed * 1000
        # An id's effect: full for the most frequent ids, shrinking as 1/(1 + rank/50): the
        # signal sits in the ids a learner sees often (rank 1000 keeps 5% of it), the long tail
        # of rare ids adds little, as in real click logs.
        shrink = (1.0 / (1.0 + ids / 50.0)).astype(np.float32)
        logit = np.full(len(ids), self.bias, dtype=np.float32)
        logit += (_normal(keys, salt + 1, 0.5) * shrink).sum(axis=1)
        for f, g in PAIRS:
            ef = np.stack([_normal(keys[:, f], salt + 10 + k, 0.7) for k in range(EMB)], axis=1)
            eg = np.stack([_normal(keys[:, g], salt + 10 + k, 0.7) for k in range(EMB)], axis=1)
            logit += (ef * eg).sum(axis=1) * shrink[:, f] * shrink[:, g]
        logit += dense @ self.dense_weights
        return logit

    def _examples(self, rng, n):
        ids = self._ids(rng, n)
        dense = rng.normal(0.0, 1.0, (n, NUM_DENSE)).astype(np.float32)
        p = 1.0 / (1.0 + np.exp(-self.teacher_logits(ids, dense)))
        labels = (rng.random(n) < p).astype(np.float32)
        return ids, dense, labels

    def batch(self, worker, step, batch_size):
        """Training batch `step` of worker `worker`: (ids int64 (n, F), dense (n, D), labels)."""
        rng = np.random.default_rng([self.seed, 1, int(worker), int(step)])
        return self._examples(rng, batch_size)

    def test_set(self, n):
        """The held-out examples (the same for every worker)."""
        rng = np.random.default_rng([self.seed, 2])
        return self._examples(rng, n)

    def teacher_auc(self, test):
        ids, dense, labels = test
        return auc(labels, self.teacher_logits(ids, dense))


def auc(labels, scores):
    """Area under the ROC curve (ties count half)."""
    labels = np.asarray(labels, dtype=np.float64)
    order = np.argsort(scores, kind="mergesort")
    scores = np.asarray(scores)[order]
    labels = labels[order]
    # Average ranks for tied scores.
    ranks = np.empty(len(scores), dtype=np.float64)
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and scores[j + 1] == scores[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    positives = labels.sum()
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2.0)
                 / (positives * negatives))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--examples", type=int, default=200_000)
    args = parser.parse_args()
    data = CtrData(args.seed)
    ids, dense, labels = data.batch(0, 0, args.examples)
    distinct = sum(len(np.unique(ids[:, f])) for f in range(NUM_FIELDS))
    test = data.test_set(50_000)
    print(f"{NUM_FIELDS} fields, {int(VOCAB.sum()):,} possible ids, {NUM_DENSE} dense features")
    print(f"{args.examples:,} examples: {distinct:,} distinct ids, "
          f"click rate {labels.mean():.3f}")
    print(f"teacher AUC on 50,000 held-out examples: {data.teacher_auc(test):.4f}")


if __name__ == "__main__":
    main()
