"""A small threaded TCP proxy for outage tests.

`TcpProxy(target_host, target_port)` listens on 127.0.0.1 (a free port chosen on the first
`start()`, then kept) and forwards every connection to the target. `stop()` closes the
listener and every live connection, so a client sees the dependency as down (connection
refused, established connections reset); `start()` listens again on the same port.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1", port: int = 0):
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> "TcpProxy":
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(128)
        listener.settimeout(0.05)
        self.port = listener.getsockname()[1]
        self._stopping.clear()
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept_loop, args=(listener,),
                                           name=f"proxy-{self.port}", daemon=True)
        self._accepting.start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut every open one; returns once both are done."""
        self._stopping.set()
        if self._accepting is not None:
            self._accepting.join(5)
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            live, self._live = self._live, set()
        for sock in live:
            _cut(sock)

    close = stop

    @property
    def running(self) -> bool:
        return self._listener is not None

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- forwarding ------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=3)
                upstream.settimeout(None)
            except OSError:
                _cut(client)
                continue
            with self._lock:
                if self._stopping.is_set():
                    _cut(client)
                    _cut(upstream)
                    return
                self._live.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._live.discard(src)
                self._live.discard(dst)
            _cut(src)
            _cut(dst)


def _cut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
