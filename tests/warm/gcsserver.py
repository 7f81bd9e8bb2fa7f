#!/usr/bin/env python3
"""A small loopback object server for the cachewarm tests (Python stdlib only).

It serves the files under --root three ways:

  GCS JSON API   GET /storage/v1/b/BUCKET/o/OBJECT?alt=media  (bytes, with Range)
                 GET /storage/v1/b/BUCKET/o/OBJECT            (JSON metadata)
                 where --root/BUCKET/OBJECT is the file (OBJECT URL-encoded,
                 '/' as %2F). Requires "Authorization: Bearer TOKEN" when
                 --token is given: 401 without, 403 with another token.
  GCE metadata   GET /computeMetadata/v1/instance/service-accounts/default/token
                 with "Metadata-Flavor: Google" answers {"access_token": TOKEN}.
  plain URLs     GET /files/NAME[?sig=...] (a stand-in for pre-signed URLs):
                 with --sig, a query without sig=SIG gets 403 and S3's XML.
                 GET /norange/NAME ignores Range and answers 200 with the
                 whole file.

Ranges: "bytes=A-B" and "bytes=A-" give 206 with Content-Range; a start past
the end gives 416. ETag is the quoted hex of size and modification time.
GET /__stats answers {"gets": N, "data_gets": N, "auth": [...]} where auth
lists the Authorization schemes seen (never the tokens). The chosen port is
written to --port-file once the socket listens.
"""
import argparse
import http.server
import json
import os
import threading
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def _send(self, code, body, ctype="application/json", extra=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _gcs_error(self, code, message):
        self._send(code, json.dumps({"error": {"code": code, "message": message}}).encode())

    def _serve_file(self, path, ranges=True):
        st = os.stat(path)
        size = st.st_size
        etag = '"%x-%x"' % (size, st.st_mtime_ns)
        rng = self.headers.get("Range") if ranges else None
        start, end, code = 0, size - 1, 200
        if rng:
            unit, _, spec = rng.partition("=")
            a, _, b = spec.partition("-")
            if unit.strip() != "bytes" or not a.isdigit() or (b and not b.isdigit()):
                return self._send(400, b"bad range", "text/plain")
            start = int(a)
            end = min(int(b), size - 1) if b else size - 1
            if start >= size:
                return self._send(416, b"", "text/plain", {"Content-Range": "bytes */%d" % size})
            code = 206
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", etag)
        if code == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if self.command == "HEAD":
            return
        with self.server.lock:
            self.server.data_gets += 1
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                data = f.read(min(left, 1 << 20))
                if not data:
                    break
                try:
                    self.wfile.write(data)
                except OSError:
                    return
                left -= len(data)

    def do_GET(self):
        srv = self.server
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        with srv.lock:
            srv.gets += 1
            auth = self.headers.get("Authorization")
            if auth:
                srv.auth.append(auth.split(" ", 1)[0])
        if url.path == "/__stats":
            with srv.lock:
                body = json.dumps({"gets": srv.gets, "data_gets": srv.data_gets,
                                   "auth": srv.auth}).encode()
            return self._send(200, body)
        if url.path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, b"Missing Metadata-Flavor header", "text/plain")
            body = json.dumps({"access_token": srv.args.token or "anonymous",
                               "expires_in": 3599, "token_type": "Bearer"}).encode()
            return self._send(200, body)
        parts = url.path.split("/")
        if url.path.startswith("/storage/v1/b/") and len(parts) == 7 and parts[5] == "o":
            if srv.args.token:
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer "):
                    return self._gcs_error(401, "Anonymous caller does not have "
                                           "storage.objects.get access.")
                if auth[len("Bearer "):] != srv.args.token:
                    return self._gcs_error(403, "Invalid Credentials")
            bucket = urllib.parse.unquote(parts[4])
            name = urllib.parse.unquote(parts[6])
            path = os.path.join(srv.args.root, bucket, name)
            if ".." in name.split("/") or not os.path.isfile(path):
                return self._gcs_error(404, "No such object: %s/%s" % (bucket, name))
            if query.get("alt") == ["media"]:
                return self._serve_file(path)
            st = os.stat(path)
            body = json.dumps({"kind": "storage#object", "bucket": bucket, "name": name,
                               "size": str(st.st_size),
                               "etag": "%x-%x" % (st.st_size, st.st_mtime_ns)}).encode()
            return self._send(200, body)
        if url.path.startswith("/files/") or url.path.startswith("/norange/"):
            if srv.args.sig and query.get("sig") != [srv.args.sig]:
                return self._send(403, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                                  b'SignatureDoesNotMatch</Code><Message>The request signature'
                                  b' we calculated does not match the signature you provided.'
                                  b'</Message></Error>', "application/xml")
            name = urllib.parse.unquote(parts[2]) if len(parts) > 2 else ""
            path = os.path.join(srv.args.root, "files", name)
            if not name or ".." in name or not os.path.isfile(path):
                return self._send(404, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                                  b'NoSuchKey</Code><Message>The specified key does not exist.'
                                  b'</Message></Error>', "application/xml")
            return self._serve_file(path, ranges=url.path.startswith("/files/"))
        self._send(404, b"not found", "text/plain")

    do_HEAD = do_GET


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Clients stop reading on purpose (a probe, a canceled download):
        # a reset connection is not worth a traceback.
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--sig", default="")
    args = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    srv.args = args
    srv.lock = threading.Lock()
    srv.gets = srv.data_gets = 0
    srv.auth = []
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
