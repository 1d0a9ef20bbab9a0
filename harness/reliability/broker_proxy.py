"""A TCP proxy in front of a dedicated embedded broker, to take the broker away mid-batch and bring it back.

The embedded Tansu broker keeps its log in memory (`tansu broker --storage-engine`: this build refuses
`file://`, and `sqlite://` and `postgres://` need features it was built without; only `memory://` and an
S3 service remain), so a real stop and restart would lose every record. `FaultProxy` stands in for the
restart: it listens on its own port and forwards to the broker; `down()` closes its listener (new
connections are refused) and cuts every live connection, `up()` listens again on the same port.
`arm(api_key)` makes it go down by itself when a client sends a request with that Kafka API key (before
forwarding it), so the fault hits a precise step: the first Fetch is the batch's executor-side read, the
first ListOffsets its planning.

Kafka clients connect to the address the broker advertises in its metadata, not to the bootstrap address,
so the broker must advertise the proxy. `EmbeddedBroker` passes the same URL as listener and advertised
listener; `broker_behind_proxy` gives it a small wrapper as its binary that rewrites the advertised
listener before exec'ing Tansu (a public field of EmbeddedBroker; cohort/devtools/embedded_broker.py unchanged).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from cohort.devtools.embedded_broker import EmbeddedBroker, find_tansu_binary, free_port

__all__ = ["FETCH", "LIST_OFFSETS", "FaultProxy", "broker_behind_proxy"]

FETCH = 1
LIST_OFFSETS = 2
_HEADER = 6  # int32 size, int16 api key


class FaultProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`; can refuse and cut connections, then resume.

    Methods changing state: `start`, `down`, `up`, `arm`, `close` (all thread-safe). `tripped` is set when
    an armed request made it go down.
    """

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port if port is not None else free_port()
        self.tripped = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._stop_accepting = threading.Event()
        self._connections: set[socket.socket] = set()
        self._armed: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def start(self) -> FaultProxy:
        """Listen on `port` and forward every connection."""
        self.up()
        return self

    def up(self) -> None:
        """Listen again (on the same port) if down."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            listener.settimeout(0.05)
            self._listener = listener
            self._stop_accepting = threading.Event()
            self._acceptor = threading.Thread(
                target=self._accept, args=(listener, self._stop_accepting), name="fault-proxy-accept", daemon=True
            )
            self._acceptor.start()

    def down(self) -> None:
        """Stop listening (connections are refused) and cut every live connection."""
        with self._lock:
            listener, acceptor, self._listener, self._acceptor = self._listener, self._acceptor, None, None
            self._stop_accepting.set()
            connections, self._connections = self._connections, set()
        if acceptor is not None and acceptor is not threading.current_thread():
            acceptor.join()
        if listener is not None:
            listener.close()
        for connection in connections:
            _cut(connection)

    def arm(self, api_key: int | None) -> None:
        """Go down when a client sends a request with `api_key` (None: disarm)."""
        with self._lock:
            self._armed = api_key
            self.tripped.clear()

    def close(self) -> None:
        self.arm(None)
        self.down()

    # ------------------------------------------------------------------------------------------ threads

    def _accept(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                _cut(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if stop.is_set():
                    _cut(client)
                    _cut(upstream)
                    return
                self._connections |= {client, upstream}
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client -> broker, frame by frame, so an armed API key is seen before its request is forwarded."""
        buffer = b""
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                buffer += data
                while len(buffer) >= _HEADER:
                    api_key = int.from_bytes(buffer[4:6], "big", signed=True)
                    if self._armed is not None and api_key == self._armed:
                        self.tripped.set()
                        self.down()
                        return
                    size = 4 + int.from_bytes(buffer[:4], "big", signed=True)
                    if len(buffer) < size:
                        break
                    upstream.sendall(buffer[:size])
                    buffer = buffer[size:]
        except OSError:
            pass
        self._drop(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(65536):
                client.sendall(data)
        except OSError:
            pass
        self._drop(client, upstream)

    def _drop(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._connections.difference_update(sockets)
        for sock in sockets:
            _cut(sock)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _advertising_wrapper(directory: Path, advertised: str) -> Path:
    """An executable that runs Tansu with `--advertised-listener-url` replaced by `advertised`."""
    tansu = str(find_tansu_binary())
    script = directory / "tansu-behind-proxy"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "args[args.index('--advertised-listener-url') + 1] = " + repr(advertised) + "\n"
        f"os.execv({tansu!r}, [{tansu!r}, *args])\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@contextlib.contextmanager
def broker_behind_proxy(directory: Path) -> Iterator[tuple[EmbeddedBroker, FaultProxy]]:
    """A dedicated embedded broker advertising a `FaultProxy` in front of it; clients bootstrap at
    `proxy.bootstrap`, and every connection they make goes through the proxy."""
    directory.mkdir(parents=True, exist_ok=True)
    proxy = FaultProxy(target_port=free_port()).start()
    broker = EmbeddedBroker(port=proxy.target_port, binary=_advertising_wrapper(directory, f"tcp://{proxy.bootstrap}"))
    try:
        broker.start()
        yield broker, proxy
    finally:
        broker.stop()
        proxy.close()
        with contextlib.suppress(OSError):
            os.unlink(directory / "tansu-behind-proxy")
