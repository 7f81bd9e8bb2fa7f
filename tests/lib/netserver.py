#!/usr/bin/env python3
"""A loopback server that misbehaves on purpose, for the network and secrets tests (stdlib only).

  --mode hang     accepts every connection and never answers (the socket stays open until the
                  client goes): a dead endpoint behind a live load balancer.
  --mode echo403  answers every request 403, its body echoing the request's line and headers,
                  as some proxies do;
  --mode echo503  the same with 503 (a retried status);
  --body xml|json|text  how the echo is dressed: S3's XML error (<Code>, <Message> holding the
                  headers, and a <RequestHeaders> element), GCS's JSON error, or plain text.

It prints its port on stdout's first line (--port 0 picks a free one) and serves until killed.
GET /__count answers the number of requests served before it (in echo modes)."""

import argparse
import socket
import sys
import threading
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
    ap.add_argument("--mode", choices=("hang", "echo403", "echo503"), required=True)
    ap.add_argument("--body", choices=("xml", "json", "text"), default="xml")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    if a.mode == "hang":
        hang(a.port)
        return
    counter = [0]
    srv = ThreadingHTTPServer(("127.0.0.1", a.port),
                              make_handler(403 if a.mode == "echo403" else 503, a.body, counter))
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
