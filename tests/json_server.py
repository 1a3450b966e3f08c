"""A scripted JSON endpoint on a loopback port, faked at the wire: the base
of the embeddings' and the reranker's (tests/embeddings_server.py,
tests/rerank_server.py).

A real HTTP/1.1 server, in a thread of the test's process (the indexer
calls it from a thread, a search from the event loop). It keeps every
request to its endpoint (path, body, Authorization) and answers what
`answer` returns.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONServer:
    path = ""  # the end of the path of the endpoint it plays; anything else is a 404

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self.path.endswith(server.path):
                    # Not the endpoint this server plays: a stray client (a
                    # process of another test, whose server had this port
                    # before) gets a 404, and the test never sees it.
                    status, payload = 404, {"error": {"message": f"no {self.path} here"}}
                else:
                    server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                    status, payload = server.answer(body)
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    # No connection kept in a client's pool past its test's event loop.
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        # A short poll: shutdown() waits for it, at the end of every test.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, body: Any) -> tuple[int, Any]:
        """The status and JSON payload for a request's body (in the server's thread)."""
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
