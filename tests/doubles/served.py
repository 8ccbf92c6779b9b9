"""The life cycle the scripted servers share: serve on a free port in a daemon thread, on
127.0.0.1 unless ``host`` names another of this machine's addresses."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # 256 streams connect at once in the soak test


class Served:
    """Base of a scripted server; ``handler()`` names its request handler class, whose
    instances reach the server as ``self.double``."""

    _port = 0
    _httpd: _Server | None = None
    host = "127.0.0.1"  # the address it listens on; an instance may set another before start

    def start(self):
        handler = type("Handler", (self.handler(),), {"double": self})
        self._httpd = _Server((self.host, self._port), handler)
        self._port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()  # short poll: stop() returns quickly
        return self

    def handler(self) -> type:
        raise NotImplementedError

    def stop(self) -> None:
        """Close the listening socket: from now on connections are refused."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"
