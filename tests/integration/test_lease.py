"""Leader election on a real Lease: one holder at a time; a holder that stops renewing is replaced once the record
has stood still for the lease duration; a released lease is taken at once."""

import asyncio
import time

from superpod.k8s.kube import KubeAPI
from superpod.k8s.lease import LeaderLease


def test_one_leader_at_a_time_and_takeover_after_expiry(cluster, namespace):
    async def main():
        api = KubeAPI(cluster.api)
        a = LeaderLease(api, namespace, "superpod-scheduler", "replica-a", duration=3, renew_deadline=2,
                        retry_period=1)
        b = LeaderLease(api, namespace, "superpod-scheduler", "replica-b", duration=3, renew_deadline=2,
                        retry_period=1)
        assert await a.step() is True
        assert await b.step() is False
        assert await a.step() is True, "the holder renews"
        await asyncio.sleep(2.1)
        assert not a.is_leading(), "past its renew deadline a holder stops counting itself leader"
        assert await b.step() is False, "b saw the last renewal less than 3s ago"
        started = time.monotonic()  # b saw a's last renewal about now: it may take over 3s later, not before
        while not await b.step():
            await asyncio.sleep(0.2)
        assert 2.5 < time.monotonic() - started < 4.5 and b.term == 1
        assert await a.step() is False
        await b.release()
        assert await a.step() is True, "a released lease is taken at once"

    asyncio.run(main())
