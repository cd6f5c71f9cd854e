"""The web server: daphne, with a hard cap on request bodies that holds before the body is read.

    python -m webapp.server -b 127.0.0.1 -p 8000 webapp.asgi:application

(`manage.py up` and docker/compose.yml start it so; it takes daphne's arguments.)

Why not a Django middleware: daphne runs the application only once the whole body has
arrived, and then hands it the whole body at once, in memory (its request queue); Django's
ASGIHandler then spools it to a temporary file before any middleware runs. A 572 MB upload
took the server from 415 MB to 2.17 GB before Django could refuse it. So the cap sits in the
HTTP protocol, where daphne's request (a twisted Request) learns the body's length:

- a declared Content-Length over KF_MAX_REQUEST_BYTES is answered 413 at once, and the
  connection closed, before one byte of the body is read;
- a body without a length (chunked) is counted as it arrives and cut off the same way when it
  passes the cap, its bytes discarded, not stored;
- a body longer than its declared length cannot be read past it: HTTP framing makes the rest
  the next request, which twisted refuses as malformed.

Anything accepted is at most KF_MAX_REQUEST_BYTES, so that bounds the memory a request costs.

Headers are bounded by twisted (16 KiB for the request line and headers together, and per
line), but twisted answers a section over the total with a bare 400 and a single line over
16 KiB (a large cookie, say) with no answer at all, just a closed connection: clients saw a
network error. The channel here answers both 431 Request Header Fields Too Large (414 URI Too
Long for a request line over the limit), with a message, and closes.
"""

from __future__ import annotations

import faulthandler
import json

from daphne import server as daphne_server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from django.template.defaultfilters import filesizeformat
from twisted.web.http import HTTPChannel, _GenericHTTPChannelProtocol

from webapp.api.errors import ErrorCode


class BoundedWebRequest(WebRequest):
    """daphne's request, refusing a body over the cap instead of storing it."""

    refused = False
    received = 0

    def gotLength(self, length: int | None) -> None:  # noqa: N802 (twisted's name)
        if length is not None and length > _cap():
            self._refuse(length)
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:  # noqa: N802 (twisted's name)
        if self.refused:
            return  # what the client sent before it saw the answer: dropped, never stored
        self.received += len(data)
        if self.received > _cap():
            self._refuse(None)
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:  # noqa: N802
        if not self.refused:
            super().requestReceived(command, path, version)

    def _refuse(self, length: int | None) -> None:
        self.refused = True
        path = getattr(self.channel, "_path", b"") or b""  # the request line's target
        body, content_type = _too_large_body(length, api=path.startswith(b"/api/"))
        head = (
            b"HTTP/1.1 413 Content Too Large\r\n"
            b"Content-Type: " + content_type + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n"
        )
        # As twisted answers a malformed request: write the answer, then close (the client
        # may still be sending; what arrives meanwhile is dropped above).
        self.channel.transport.write(head + body)
        self.channel.loseConnection()


def _cap() -> int:
    from django.conf import settings

    return settings.KF_MAX_REQUEST_BYTES


def _too_large_body(length: int | None, *, api: bool) -> tuple[bytes, bytes]:
    from django.conf import settings

    limit = _cap()
    size = f"{filesizeformat(length)} ({length} bytes)" if length is not None else "larger"
    message = (
        f"The upload is {size}; the limit is {filesizeformat(limit)} ({limit} bytes). "
        "A model is a .py in the KernelBench convention or a .zip of them."
    )
    if api:
        details = [{"limit_bytes": limit, "size_bytes": length}]
        error = {"code": "request_too_large", "message": message, "details": details}
        return json.dumps({"error": error}).encode(), b"application/json"
    # A browser: the job form checks each file against its own limit before sending (static/
    # js/job_form.js), so only a request past every limit lands here. Say both limits and
    # lead back to the form (a bare text page spoke of models only, issue 27).
    shapes = filesizeformat(settings.KF_MAX_SHAPE_FILE_BYTES)
    models = filesizeformat(settings.KF_MAX_MODEL_FILE_BYTES)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Upload too large'
        '</title><link rel="stylesheet" href="/static/css/app.css"></head><body><main>'
        '<section class="card"><h1>Upload too large</h1>'
        f"<p>The upload is {size}; the limit for one request is {filesizeformat(limit)}. "
        f"A shape file may be up to {shapes}, a model file (a .py in the KernelBench "
        f"convention, or a .zip of them) up to {models}. Nothing was saved.</p>"
        '<p><a class="button primary" href="/jobs/new/">Back to the job form</a> '
        '<a class="button" href="/">Jobs</a></p></section></main></body></html>'
    )
    return page.encode(), b"text/html; charset=utf-8"


class BoundedHTTPChannel(HTTPChannel):
    """twisted's HTTP/1.1 channel, answering oversized headers with 431 instead of 400 or nothing."""

    def lineReceived(self, line: bytes) -> None:  # noqa: N802 (twisted's name)
        # The same test twisted makes first (it counts the line, then answers a bare 400).
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._refuse_headers()
            return
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:  # noqa: N802 (twisted's name)
        self._refuse_headers()  # twisted's default: close without a word

    def _refuse_headers(self) -> None:
        # The request line is parsed once it is complete (twisted then knows the path).
        parsed = hasattr(self, "_path")
        api = parsed and self._path.startswith(b"/api/")
        status = b"431 Request Header Fields Too Large" if parsed else b"414 URI Too Long"
        what = "headers" if parsed else "request line"
        limit = self.totalHeadersSize
        message = f"The request's {what} exceed the limit of {limit} bytes."
        if api:
            code = ErrorCode.REQUEST_HEADER_TOO_LARGE if parsed else ErrorCode.REQUEST_URI_TOO_LONG
            body = json.dumps({"error": {"code": code, "message": message, "details": []}})
            content_type = b"application/json"
        else:
            body, content_type = message, b"text/plain; charset=utf-8"
        data = body.encode()
        self.transport.write(
            b"HTTP/1.1 " + status + b"\r\n"
            b"Content-Type: " + content_type + b"\r\n"
            b"Content-Length: " + str(len(data)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + data
        )
        self.loseConnection()
        # Whatever else the client sends is dropped, as twisted does after its own 400.
        self.dataReceived = self.lineReceived = lambda *args: None  # type: ignore[method-assign]


def _bounded_channel(factory: HTTPFactory) -> _GenericHTTPChannelProtocol:
    # twisted's HTTPFactory.protocol builds its private wrapper around a plain HTTPChannel;
    # this builds the same wrapper around ours (HTTP/1.1 only: daphne serves no TLS here).
    return _GenericHTTPChannelProtocol(BoundedHTTPChannel())


class BoundedHTTPFactory(HTTPFactory):
    protocol = _bounded_channel

    def buildProtocol(self, addr):  # noqa: ANN001, ANN201, N802 (twisted's name)
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedWebRequest
        return protocol


def main() -> None:
    # Issue 28 reported a segfault of the web server on SIGTERM (1 stop in 3) that 20 SIGTERMs
    # here did not reproduce (idle, under page load, with SSE and websocket clients, during a
    # job's events; exit code 0 each time): should it happen again, the log gets every
    # thread's Python stack, and `up` restarts the server.
    faulthandler.enable()
    # daphne's Server builds its HTTPFactory inside run() from this module global; there is no
    # setting for the request class, so this entry point swaps the bounded one in.
    daphne_server.HTTPFactory = BoundedHTTPFactory
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
