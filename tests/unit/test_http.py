"""The bounded POST of deliveries: a slow-dripping receiver is cut off at the deadline."""

from __future__ import annotations

import time

from cs_daemon.integrations import http
from tests.support.receiver import Receiver


def test_a_receiver_dripping_one_byte_every_two_seconds_is_cut_off_at_about_10_s():
    receiver = Receiver(script=[("drip", 2.0)])
    try:
        start = time.monotonic()
        outcome = http.post(receiver.url, b"{}", {"Content-Type": "application/json"}, allow_private=True)
        elapsed = time.monotonic() - start
    finally:
        receiver.close()
    assert 9.5 <= elapsed <= 11.5
    assert not outcome.ok and "timed out" in outcome.error


def test_only_the_first_kibibyte_of_the_answer_is_kept():
    class Big(Receiver):
        def answer(self, handler):
            body = b"x" * 5000
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

    receiver = Big()
    try:
        outcome = http.post(receiver.url, b"{}", {}, allow_private=True)
    finally:
        receiver.close()
    assert outcome.ok and len(outcome.excerpt) == 1024


def test_refused_urls_are_never_contacted():
    outcome = http.post("http://127.0.0.1:9/", b"{}", {}, allow_private=False)
    assert not outcome.ok and outcome.error.startswith("refused:")
