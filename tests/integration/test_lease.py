"""Leader election on a real Lease: one holder at a time; a dead holder is replaced once its lease expires."""

import time

from superpod.k8s.lease import LeaderLease


def test_one_leader_at_a_time_and_takeover_after_expiry(cluster, namespace):
    a = LeaderLease(cluster.api, namespace, "superpod-scheduler", "replica-a", duration=2)
    b = LeaderLease(cluster.api, namespace, "superpod-scheduler", "replica-b", duration=2)
    assert a.step() is True
    assert b.step() is False
    assert a.step() is True, "the holder renews"
    time.sleep(2.5)  # a stops renewing, as if killed
    assert b.step() is True
    assert a.step() is False
    b.release()
    assert a.step() is True, "a released lease is taken at once"
