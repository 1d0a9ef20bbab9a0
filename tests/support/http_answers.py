"""A plain HTTP server on a loopback port that gives every request the same answer (a status, a content type and
a body): what a proxy, a load balancer or a web server in front of the wrong path answers instead of a Schema
Registry. It counts the requests it served."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, cast

__all__ = ["FixedAnswerServer"]

NOT_FOUND_PAGE = "<html>\n<head><title>404 Not Found</title></head>\n<body>\n<h1>Not Found</h1>\n</body>\n</html>\n"
UNAVAILABLE_PAGE = "<html><body><h1>503 Service Unavailable</h1>\nNo server is available.\n</body></html>\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: FixedAnswerServer) -> None:
        self.answer = answer
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def do_GET(self) -> None:
        answer = cast(_Server, self.server).answer
        answer.requests += 1
        data = answer.body.encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET


class FixedAnswerServer:
    """Answers every request with `status`, `content_type` and `body`, on 127.0.0.1 while in its `with` block."""

    def __init__(self, status: int, body: str = NOT_FOUND_PAGE, content_type: str = "text/html") -> None:
        self.status, self.body, self.content_type = status, body, content_type
        self.requests = 0
        self._server: _Server | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """The base URL (kept once the server stopped)."""
        assert self._port, "start the server first"
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> FixedAnswerServer:
        self._server = _Server(self)
        self._port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
