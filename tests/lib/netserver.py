#!/usr/bin/env python3
"""A loopback server that misbehaves on purpose, for the network and secrets tests (stdlib only).

  --mode hang     accepts every connection and never answers (the socket stays open until the
                  client goes): a dead endpoint behind a live load balancer.
  --mode echo403  answers every request 403, its body echoing the request's line and headers,
                  as some proxies do;
  --mode echo503  the same with 503 (a retried status);
  --body xml|json|text  how the echo is dressed: S3's XML error (<Code>, <Message> holding the
                  headers, and a <RequestHeaders> element), GCS's JSON error, or plain text.

Hostile modes (issue 32), for every GET of any path; the object they pretend to serve has --size
bytes (default 1 MiB) and honours Range:
  --mode errbody  answers --status (default 503) with a body that never ends (no length, sent
                  as fast as the client reads, capped at 4 MiB/s);
  --mode onebyte  answers 206 (or 200 without Range) with the right Content-Range and length,
                  sends one byte of the body, then closes the connection;
  --mode trickle  the same headers, then the body at --rate bytes per second (default 3);
  --mode redirect answers 302 with a Location that holds a password and a signature;
  --mode redirectbody answers 302 to /elsewhere with a chunked body that never ends (libcurl,
                  following the redirect, reads such a body without handing it on);
  --mode bigheader answers 200 with a response header of --header-kb KiB (default 200).
With --root DIR the hostile modes serve the files under DIR (404 for others), honestly except
for paths ending with --only SUFFIX (default: every path), which get the mode with the file's
bytes and size: a store set whose index arrives and whose shards (--only .dlc) meet the mode.

It prints its port on stdout's first line (--port 0 picks a free one) and serves until killed.
GET /__count answers the number of requests served before it (in every mode but hang); in the
hostile modes GET /__counts answers them by path, as JSON."""

import argparse
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def make_handler(status, body_kind, counter):
    class Echo(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self):
            if self.path == "/__count":
                body = str(counter[0]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            counter[0] += 1
            echo = "%s %s\n%s" % (self.command, self.path, str(self.headers))
            if body_kind == "xml":
                body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                        "<Message>Request was: %s</Message><RequestHeaders>%s</RequestHeaders>"
                        "</Error>" % ("AccessDenied" if status == 403 else "SlowDown",
                                      _escape(echo), _escape(echo)))
                ctype = "application/xml"
            elif body_kind == "json":
                flat = echo.replace("\\", "\\\\").replace("\"", "'").replace("\n", "\\n")
                body = ("{\"error\": {\"code\": %d, \"message\": \"denied; you sent: %s\", "
                        "\"headers\": \"%s\"}}" % (status, flat, flat))
                ctype = "application/json"
            else:
                body = "Denied. You sent:\n" + echo
                ctype = "text/plain"
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer

    return Echo


def make_hostile(mode, a, counter):
    """The handler of the hostile modes (see the module's comment)."""
    lock = threading.Lock()
    by_path = {}

    class Hostile(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _range(self, size):
            m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
            if not m:
                return None
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            return (start, end) if start <= end else None

        def _object_headers(self, size, etag="\"hostile-1\""):
            """Headers of the object (or of the range asked for): its first byte and length."""
            r = self._range(size)
            if r:
                self.send_response(206)
                self.send_header("Content-Range", "bytes %d-%d/%d" % (r[0], r[1], size))
                first, n = r[0], r[1] - r[0] + 1
            else:
                self.send_response(200)
                first, n = 0, size
            self.send_header("Content-Length", str(n))
            self.send_header("ETag", etag)
            self.end_headers()
            return first, n

        def _file(self):
            """The file under --root the path names (query aside), or None."""
            rel = self.path.split("?", 1)[0].lstrip("/")
            p = os.path.realpath(os.path.join(a.root, rel))
            root = os.path.realpath(a.root)
            return p if p.startswith(root + os.sep) and os.path.isfile(p) else None

        def _honest(self, path):
            with open(path, "rb") as f:
                data = f.read()
            if self._range(len(data)) is None and self.headers.get("Range"):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            first, n = self._object_headers(len(data), "\"%d\"" % len(data))
            self._send(data[first:first + n])

        def _send(self, data):
            try:
                self.wfile.write(data)
                self.wfile.flush()
                return True
            except OSError:
                return False

        def do_GET(self):
            if self.path in ("/__count", "/__counts"):
                with lock:
                    body = (str(counter[0]) if self.path == "/__count" else
                            json.dumps(by_path)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            data = None
            if a.root:
                path = self._file()
                if path is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if not self.path.split("?", 1)[0].endswith(a.only):
                    self._honest(path)
                    return
                with open(path, "rb") as f:
                    data = f.read()
            size = a.size if data is None else len(data)
            body = (lambda first, n: b"D" * n) if data is None else \
                (lambda first, n: data[first:first + n])
            with lock:
                counter[0] += 1
                name = self.path.split("?", 1)[0]
                by_path[name] = by_path.get(name, 0) + 1
            self.close_connection = True
            if mode == "errbody":
                self.send_response(a.status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Connection", "close")
                self.end_headers()
                line = b"Slow down: this error body never ends. " + b"x" * 985 + b"\n"
                chunk = line * 64
                while self._send(chunk):
                    time.sleep(len(chunk) / (4 << 20))
            elif mode == "onebyte":
                first, n = self._object_headers(size)
                self._send(body(first, 1))
            elif mode == "trickle":
                first, n = self._object_headers(size)
                for i in range(n):
                    if not self._send(body(first + i, 1)):
                        break
                    time.sleep(1.0 / a.rate)
            elif mode == "redirectbody":
                self.send_response(302)
                self.send_header("Location", "/elsewhere")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
                while self._send(chunk):
                    time.sleep(len(chunk) / (4 << 20))
            elif mode == "redirect":
                self.send_response(302)
                self.send_header("Location", "http://user:PWSECRET@127.0.0.1:1/elsewhere"
                                 "?X-Amz-Signature=SIGSECRET")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:  # bigheader
                self.send_response(200)
                self.send_header("X-Big", "b" * (a.header_kb << 10))
                self.send_header("Content-Length", "1")
                self.end_headers()
                self._send(b"D")

        do_HEAD = do_GET

    return Hostile


def hang(port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    print(ls.getsockname()[1], flush=True)
    held = []
    while True:
        c, _ = ls.accept()
        held.append(c)  # never read from, never answered, never closed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("hang", "echo403", "echo503", "errbody", "onebyte",
                                       "trickle", "redirect", "redirectbody", "bigheader"),
                    required=True)
    ap.add_argument("--body", choices=("xml", "json", "text"), default="xml")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--status", type=int, default=503)
    ap.add_argument("--rate", type=float, default=3.0)
    ap.add_argument("--header-kb", type=int, default=200)
    ap.add_argument("--root", default=None)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    if a.mode == "hang":
        hang(a.port)
        return
    counter = [0]
    if a.mode.startswith("echo"):
        handler = make_handler(403 if a.mode == "echo403" else 503, a.body, counter)
    else:
        handler = make_hostile(a.mode, a, counter)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
