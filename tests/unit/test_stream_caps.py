"""The stream caps (cs_daemon/channels/stream_caps.py): plain counting, per process,
tenant and token, that a threaded or an asyncio server can share."""

from __future__ import annotations

import pytest

from cs_daemon.channels.stream_caps import Caps, Counts, StreamsFull


def test_a_tenant_gets_its_share_of_the_slots_and_at_least_one():
    assert Caps.of(slots=1000, tenant_share=50, per_token=5, capped=True) == Caps(1000, 500, 5)
    assert Caps.of(slots=1, tenant_share=50, per_token=5, capped=True).tenant == 1
    assert Caps.of(slots=1000, tenant_share=50, per_token=5, capped=False).process is None


def test_each_cap_refuses_with_its_reason_and_counts_nothing():
    counts = Counts(Caps(process=3, tenant=2, token=1))
    a1 = counts.take("a", "t1")
    with pytest.raises(StreamsFull, match="stream token"):
        counts.take("a", "t1")
    counts.take("a", "t2")
    with pytest.raises(StreamsFull, match="tenant") as refused:
        counts.take("a", "t3")
    assert refused.value.retry_after == 30
    counts.take("b", "t4")
    with pytest.raises(StreamsFull, match="this server") as full:
        counts.take("c", "t5")
    assert full.value.retry_after == 5
    assert counts.open == 3
    counts.give_back(a1)
    assert counts.take("a", "t1") and counts.open == 3
    assert dict(counts.by_tenant) == {"a": 2, "b": 1}
