"""Test mode: deliveries of interventions made with an rt_test_ key go to a recording
sink instead of a real channel, and still move through every status."""

from __future__ import annotations

from ..integrations.http import Outcome

SINK_URL = "sink:test-mode"


def transport(claimed, secret, rt, now) -> Outcome:
    return Outcome(200, f"recorded by the test-mode sink instead of {claimed.headers.get('X-Service-Channel', 'the channel')}",
                   None, 0.0)
