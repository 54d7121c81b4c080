"""A light loopback webhook receiver for bench/webhooks.py, in a process of its own.

    python bench/webhook_receiver.py [--port 0]

One asyncio event loop, HTTP/1.1 with keep-alive (the service's http.client opens a
connection per attempt; requests.Session keeps one per thread): every POST is read whole
(Content-Length) and answered `200 {"ok":true}` at once. `GET /stats` answers
{"posts": n, "ids": distinct webhook-id values, "bytes": body bytes}, so the bench can
count what arrived (and how many were sent twice) phase by phase. Prints
`listening on 127.0.0.1:PORT` once ready; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal

HOST = "127.0.0.1"
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Stats:
    def __init__(self):
        self.posts = 0
        self.bytes = 0
        self.ids: set[bytes] = set()


class Http(asyncio.Protocol):
    def __init__(self, stats: Stats):
        self.stats = stats
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            lines = head.split(b"\r\n")
            length = 0
            webhook_id = None
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip() or 0)
                elif name == b"webhook-id":
                    webhook_id = value.strip()
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            method = lines[0].split(b" ", 1)[0]
            if method == b"POST":
                self.stats.posts += 1
                self.stats.bytes += length
                if webhook_id is not None:
                    self.stats.ids.add(webhook_id)
                self.transport.write(OK)
            elif method == b"GET" and lines[0].split(b" ")[1] == b"/stats":
                body = json.dumps({"posts": self.stats.posts, "ids": len(self.stats.ids),
                                   "bytes": self.stats.bytes}).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                     + str(len(body)).encode() + b"\r\n\r\n" + body)
            else:
                self.transport.write(BAD)
                self.transport.close()
                return


async def serve(port: int) -> None:
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Http(stats), HOST, port, backlog=1024, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"listening on {HOST}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    asyncio.run(serve(ap.parse_args().port))


if __name__ == "__main__":
    main()
