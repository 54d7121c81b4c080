"""The event loop that holds a process's in-app streams (docs/channels.md, "Capacity"):
one asyncio loop in one thread, whatever the number of streams, so an open stream costs
a socket, a small object and a timer, not a thread.

The HTTP server (gunicorn in production, werkzeug in the embedded mode) answers the
request as usual: the route checks the token, `Last-Event-ID` and the caps, takes the
slot and registers the wake-up waiter (in_app_stream.OpenStream), and the app's answer
(status and headers) is composed. webapp/stream_handoff.py then hands the connection's
socket and that head to `adopt` here, and the server forgets the connection. From then
on the stream runs as the threaded one does (in_app_stream.events): the same reads
(`next_batch`, `settle`, in a small pool of threads, as they are short blocking
transactions), the same heartbeats, expiry, kill switch and withdrawals. A wake-up
(from Redis pub/sub or from this process) calls the waiter's `notify`, which hands over
to the loop thread; a client that hangs up is noticed at once (the loop sees the
connection close), and its slot is given back.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from . import in_app_stream
from .in_app_stream import OpenStream

log = logging.getLogger(__name__)

READERS = 8                    # threads running the streams' database reads (short transactions)
WRITE_BUFFER = 64 * 1024       # bytes queued for a slow client before its stream waits for it
FLUSH_SECONDS = 1.0            # at a stop: how long an ended stream's last bytes may take to leave
POLL_SECONDS = 0.01


class StreamLoop:
    """The loop thread of this process and the streams it holds."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.readers = ThreadPoolExecutor(READERS, thread_name_prefix="in-app reads")
        self.streams: set[LoopStream] = set()
        self.connected: set[LoopStream] = set()     # their connections, until closed (its bytes written)
        self.thread = threading.Thread(target=self._run, name="in-app streams", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def adopt(self, opened: OpenStream, sock: socket.socket, head: bytes, *, chunked: bool) -> None:
        """Hold the stream from now on (called from the server's thread). The loop writes
        `head` (the status line and headers) first, then the body (in HTTP/1.1 chunks when
        `chunked`); `opened` is closed when the stream ends."""
        sock.setblocking(False)
        self.loop.call_soon_threadsafe(self._start, opened, sock, head, chunked)

    def _start(self, opened: OpenStream, sock: socket.socket, head: bytes, chunked: bool) -> None:
        self.loop.create_task(LoopStream(self, opened, head, chunked).serve(sock))

    @property
    def open(self) -> int:
        return len(self.streams)

    def finish(self, timeout: float) -> bool:
        """Wait (from another thread) until every stream held here has ended, for `timeout`
        seconds at the most; one still held then (a read under way, a slow client) is ended
        at once. Then wait, FLUSH_SECONDS at the most, until their connections have been
        written out and closed. True when each ended by itself and was closed."""
        done = asyncio.run_coroutine_threadsafe(self._finish(timeout), self.loop)
        try:
            return done.result(timeout + FLUSH_SECONDS + 1)
        except Exception:           # the loop is stuck: the process exits all the same
            log.warning("in-app streams not ended in %.0f s", timeout + FLUSH_SECONDS)
            return False

    async def _finish(self, timeout: float) -> bool:
        deadline = self.loop.time() + timeout
        while self.streams and self.loop.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        cut = list(self.streams)
        for stream in cut:
            stream._end()
        deadline = self.loop.time() + FLUSH_SECONDS
        while self.connected and self.loop.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        if cut or self.connected:
            log.warning("in-app streams at the stop: %d ended before their next read, %d not closed",
                        len(cut), len(self.connected))
        return not cut and not self.connected


_home: StreamLoop | None = None
_home_lock = threading.Lock()


def home() -> StreamLoop:
    """The loop of this process, started with its first stream."""
    global _home
    with _home_lock:
        if _home is None:
            _home = StreamLoop()
        return _home


def finish(timeout: float) -> bool:
    """The end of a process that may hold streams (an API worker stopping gracefully):
    end each of them properly, a chunked body with its last, empty chunk, and wait until
    that is written and the connection closed (StreamLoop.finish), so that the process's
    exit does not cut a body off mid-way (its client would read a broken response, not
    an end, before it reconnects). True when there was nothing left to cut."""
    with _home_lock:
        held = _home
    if held is None:
        return True
    in_app_stream.end_all()
    return held.finish(timeout)


def _resolve(fut: asyncio.Future, value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


class LoopStream(asyncio.Protocol):
    """One stream on the loop: the connection's protocol and the task that writes it."""

    def __init__(self, home: StreamLoop, opened: OpenStream, head: bytes, chunked: bool):
        self.home = home
        self.opened = opened
        self.head = head
        self.chunked = chunked
        self.transport: asyncio.Transport | None = None
        self.gone = False
        self._wake: asyncio.Future | None = None
        self._writable: asyncio.Future | None = None

    # --- the connection ---------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.home.connected.add(self)
        transport.set_write_buffer_limits(high=WRITE_BUFFER)

    def data_received(self, data: bytes) -> None:
        pass        # the request was read by the server; nothing more is expected

    def eof_received(self) -> bool:
        self._lost()
        return False

    def connection_lost(self, exc) -> None:
        self.home.connected.discard(self)
        self._lost()

    def pause_writing(self) -> None:
        self._writable = self.home.loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            _resolve(self._writable, True)

    def _lost(self) -> None:
        self.gone = True
        for fut in (self._wake, self._writable):
            if fut is not None:
                _resolve(fut, False)

    def _send(self, text: str) -> None:
        if not self.gone and self.transport is not None:
            data = text.encode()
            self.transport.write(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data)

    async def _drained(self) -> None:
        """Once the client's socket took what was written (the kernel has the bytes)."""
        if self._writable is not None:
            await self._writable
            self._writable = None

    # --- the wake-ups -----------------------------------------------------------------

    def _woken(self) -> None:
        """A wake-up, on the loop thread."""
        fut = self._wake
        if fut is not None and not fut.done():
            self.opened.waiter.take()
            fut.set_result(True)

    async def _wait(self, timeout: float) -> bool:
        """True when woken, False after `timeout` seconds (or when the client is gone)."""
        if self.gone:
            return False
        if self.opened.waiter.take():
            return True
        loop = self.home.loop
        fut = self._wake = loop.create_future()
        timer = loop.call_later(timeout, _resolve, fut, False)
        try:
            return await fut
        finally:
            timer.cancel()
            self._wake = None

    # --- the stream -------------------------------------------------------------------

    async def serve(self, sock: socket.socket) -> None:
        loop = self.home.loop
        self.home.streams.add(self)
        try:
            await loop.connect_accepted_socket(lambda: self, sock)
        except OSError as exc:
            log.debug("in-app stream lost before it started: %s", exc)
            sock.close()
            self._end()
            return
        self.opened.waiter.notify = lambda: loop.call_soon_threadsafe(self._woken)
        try:
            await self._run()
        except Exception:       # a database outage, say: the client reconnects with Last-Event-ID
            log.exception("in-app stream ended on an error")
        finally:
            self._end()

    async def _run(self) -> None:
        loop, readers = self.home.loop, self.home.readers
        rt, grant, cursor = self.opened.rt, self.opened.grant, self.opened.cursor
        self.transport.write(self.head)
        self._send(f"retry: {in_app_stream.RETRY_MS}\n\n")
        read, held = True, False
        while not self.gone and rt.now() < grant.expires_at and not in_app_stream.ENDING.is_set():
            if read:
                batch = await loop.run_in_executor(readers, in_app_stream.next_batch, rt, grant, cursor)
                if self.gone:
                    return
                held = batch.held
                if batch.text:
                    self._send(batch.text)
                    await self._drained()
                    if self.gone:
                        return          # not handed over: it stays undelivered
                    await loop.run_in_executor(readers, in_app_stream.settle, rt, grant.tenant_id, batch.sent)
                if batch.full:
                    continue
            woken = await self._wait(in_app_stream.heartbeat_seconds(rt))
            if not woken:
                self._send(": heartbeat\n\n")
            read = woken or held

    def _end(self) -> None:
        """The stream's end (again a no-op after the first): the body's end written, the
        connection closed once its bytes are out, the slot given back."""
        self.home.streams.discard(self)
        self.opened.waiter.notify = None
        if self.transport is not None:
            if not self.gone and self.chunked:
                self.transport.write(b"0\r\n\r\n")     # the stream ended here (expiry, a stop)
            self.transport.close()
        self.gone = True
        self.opened.close()
