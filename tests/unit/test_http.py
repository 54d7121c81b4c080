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


class _CountingServer:
    """A loopback HTTP/1.1 server that counts connections and requests; `close_after`
    closes each connection after answering (without saying so), as a receiver whose idle
    time-out is shorter than ours; `body` is what it answers."""

    def __init__(self, body: bytes = b'{"ok": true}', close_after: bool = False):
        import socket
        import threading

        self.body, self.close_after = body, close_after
        self.connections = self.requests = 0
        self.hung_up = threading.Event()      # set once the server closed a connection
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            self._answer(conn)
        finally:
            conn.close()
            self.hung_up.set()

    def _answer(self, conn):
        with conn.makefile("rb") as rfile:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = rfile.readline()
                    if not line:
                        return
                    head += line
                length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                rfile.read(length[0] if length else 0)
                self.requests += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(self.body), self.body))
                if self.close_after:
                    return

    def close(self):
        self.sock.close()


def test_a_connection_is_kept_alive_between_attempts():
    server = _CountingServer()
    try:
        outcomes = [http.post(server.url, b"{}", {}, allow_private=True) for _ in range(5)]
    finally:
        server.close()
    assert all(o.ok for o in outcomes)
    assert (server.requests, server.connections) == (5, 1)


def test_a_kept_connection_the_receiver_closed_is_replaced_and_the_post_made_once():
    server = _CountingServer(close_after=True)
    try:
        first = http.post(server.url, b"{}", {}, allow_private=True)
        assert server.hung_up.wait(5)         # the server has closed its end
        second = http.post(server.url, b"{}", {}, allow_private=True)
    finally:
        server.close()
    assert first.ok and second.ok
    assert (server.requests, server.connections) == (2, 2)


def test_an_answer_not_read_whole_closes_its_connection():
    server = _CountingServer(body=b"x" * 5000)
    try:
        outcomes = [http.post(server.url, b"{}", {}, allow_private=True) for _ in range(3)]
    finally:
        server.close()
    assert all(o.ok and len(o.excerpt) == 1024 for o in outcomes)
    assert server.connections == 3
