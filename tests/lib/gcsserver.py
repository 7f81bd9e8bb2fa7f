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
  plain URLs     GET /files/NAME[?sig=...] (a stand-in for pre-signed URLs,
                 and a plain https:// server with --cert; NAME may hold '/'):
                 with --sig, a query without sig=SIG gets 403 and S3's XML.
                 GET /norange/NAME ignores Range and answers 200 with the
                 whole file.

Ranges: "bytes=A-B" and "bytes=A-" give 206 with Content-Range; a start past
the end gives 416. ETag is the quoted hex of size and modification time;
with --long-etag N it is N bytes long (quotes included), a fixed filler
first, so that every version of a file shares all but its last few bytes
(a server with long ETags, such as W/"<long path>-<mtime>").
Uploads, the JSON API's resumable sessions (as cachewarm push uses them):
                 POST /upload/storage/v1/b/BUCKET/o?uploadType=resumable&name=OBJECT
                 (a JSON body may carry {"metadata": {...}}) answers 200 with the
                 session URI in Location (built from the request's Host, so that
                 a proxy in front stays in the path); its upload_id contains
                 "UploadSessionMustNotLeak" so that tests can grep for it.
                 PUT SESSION with "Content-Range: bytes A-B/TOTAL" appends a chunk
                 (every chunk but the last a multiple of 256 KiB; a chunk that
                 starts before what is persisted has those bytes skipped) and
                 answers 308 with "Range: bytes=0-N", or, after the last byte,
                 200 with the object's JSON (size, md5Hash, etag, metadata).
                 PUT SESSION with "Content-Range: bytes */TOTAL" asks how far it
                 got. An unknown session is 404. --short-every K persists only
                 the first half (rounded to 256 KiB) of every K-th chunk, as GCS
                 may. Sessions and partial data live under --root/.uploads.
                 DELETE /storage/v1/b/BUCKET/o/OBJECT deletes.
Uploaded objects keep their metadata and MD5 in --root/.meta: the metadata
JSON has md5Hash, and media downloads send x-goog-hash md5 and
x-goog-meta-KEY headers.

GET /__stats answers {"gets": N, "data_gets": N, "auth": [...], "uploads": N,
"upload_bytes": N} where auth lists the Authorization schemes seen (never the
tokens). The chosen port is written to --port-file once the socket listens.
With --cert and --key (PEM files) it speaks TLS (https://) instead.
"""
import argparse
import base64
import hashlib
import http.server
import json
import os
import secrets
import ssl
import threading
import urllib.parse

QUANTUM = 256 * 1024


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

    def _meta(self, bucket, name):
        """What an upload recorded about the object: md5Hash, metadata; {} for others."""
        try:
            with open(os.path.join(self.server.args.root, ".meta", bucket, name + ".json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _serve_file(self, path, ranges=True, meta=None):
        st = os.stat(path)
        size = st.st_size
        etag = '"%x-%x"' % (size, st.st_mtime_ns)
        if self.server.args.long_etag > len(etag):
            etag = '"' + "v" * (self.server.args.long_etag - len(etag)) + etag[1:]
        meta = meta or {}
        extra = {}
        if "md5Hash" in meta:
            extra["x-goog-hash"] = "md5=" + meta["md5Hash"]
        for k, v in meta.get("metadata", {}).items():
            extra["x-goog-meta-" + k] = v
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
        for k, v in extra.items():
            self.send_header(k, v)
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
                                   "auth": srv.auth, "uploads": srv.uploads,
                                   "upload_bytes": srv.upload_bytes}).encode()
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
            meta = self._meta(bucket, name)
            if query.get("alt") == ["media"]:
                return self._serve_file(path, meta=meta)
            return self._send(200, json.dumps(self._object_json(bucket, name)).encode())
        if url.path.startswith("/files/") or url.path.startswith("/norange/"):
            if srv.args.sig and query.get("sig") != [srv.args.sig]:
                return self._send(403, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                                  b'SignatureDoesNotMatch</Code><Message>The request signature'
                                  b' we calculated does not match the signature you provided.'
                                  b'</Message></Error>', "application/xml")
            name = urllib.parse.unquote("/".join(parts[2:]))
            path = os.path.join(srv.args.root, "files", name)
            if not name or ".." in name or name.startswith("/") or not os.path.isfile(path):
                return self._send(404, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                                  b'NoSuchKey</Code><Message>The specified key does not exist.'
                                  b'</Message></Error>', "application/xml")
            return self._serve_file(path, ranges=url.path.startswith("/files/"))
        self._send(404, b"not found", "text/plain")

    do_HEAD = do_GET

    # ---- Uploads ---------------------------------------------------------------------------

    def _object_json(self, bucket, name):
        path = os.path.join(self.server.args.root, bucket, name)
        st = os.stat(path)
        obj = {"kind": "storage#object", "bucket": bucket, "name": name, "size": str(st.st_size),
               "etag": "%x-%x" % (st.st_size, st.st_mtime_ns)}
        meta = self._meta(bucket, name)
        if "md5Hash" in meta:
            obj["md5Hash"] = meta["md5Hash"]
        if meta.get("metadata"):
            obj["metadata"] = meta["metadata"]
        return obj

    def _authorized(self):
        token = self.server.args.token
        if not token:
            return True
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            self._gcs_error(401, "Anonymous caller does not have storage.objects.create access.")
            return False
        if auth[len("Bearer "):] != token:
            self._gcs_error(403, "Invalid Credentials")
            return False
        return True

    def _read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _session_path(self, upload_id):
        if not upload_id.isalnum():
            return None
        return os.path.join(self.server.args.root, ".uploads", upload_id)

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = url.path.split("/")
        body = self._read_body()
        if not (url.path.startswith("/upload/storage/v1/b/") and len(parts) == 7 and
                parts[6] == "o" and query.get("uploadType") == ["resumable"]):
            return self._send(404, b"not found", "text/plain")
        if not self._authorized():
            return
        bucket, name = urllib.parse.unquote(parts[5]), query.get("name", [""])[0]
        if not name or ".." in name.split("/"):
            return self._gcs_error(400, "Required parameter: name")
        if not os.path.isdir(os.path.join(self.server.args.root, bucket)):
            return self._gcs_error(404, "The specified bucket does not exist.")
        metadata = json.loads(body or b"{}").get("metadata", {})
        upload_id = "UploadSessionMustNotLeak" + secrets.token_hex(12)
        sess = self._session_path(upload_id)
        os.makedirs(os.path.dirname(sess), exist_ok=True)
        with open(sess + ".json", "w") as f:
            json.dump({"bucket": bucket, "name": name, "metadata": metadata,
                       "total": self.headers.get("X-Upload-Content-Length")}, f)
        open(sess + ".data", "wb").close()
        location = "http://%s/upload/storage/v1/b/%s/o?uploadType=resumable&upload_id=%s" % (
            self.headers.get("Host"), parts[5], upload_id)
        self._send(200, b"", "text/plain", {"Location": location})

    def _finish_upload(self, sess, info):
        root = self.server.args.root
        data = open(sess + ".data", "rb").read()
        path = os.path.join(root, info["bucket"], info["name"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.replace(sess + ".data", path)
        meta_path = os.path.join(root, ".meta", info["bucket"], info["name"] + ".json")
        os.makedirs(os.path.dirname(meta_path), exist_ok=True)
        with open(meta_path, "w") as f:
            json.dump({"md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
                       "metadata": info["metadata"]}, f)
        with open(sess + ".json", "w") as f:
            json.dump(dict(info, done=True), f)
        return self._send(200, json.dumps(self._object_json(info["bucket"], info["name"])).encode())

    def _persisted(self, n):
        extra = {"Range": "bytes=0-%d" % (n - 1)} if n > 0 else {}
        return self._send(308, b"", "text/plain", extra)

    def do_PUT(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        body = self._read_body()
        sess = self._session_path(query.get("upload_id", [""])[0])
        if not url.path.startswith("/upload/storage/v1/b/") or not sess:
            return self._send(404, b"not found", "text/plain")
        if not self._authorized():
            return
        if not os.path.exists(sess + ".json"):
            return self._gcs_error(404, "No such upload session")
        info = json.load(open(sess + ".json"))
        if info.get("done"):
            return self._send(200, json.dumps(self._object_json(info["bucket"],
                                                                info["name"])).encode())
        have = os.path.getsize(sess + ".data")
        unit, _, spec = self.headers.get("Content-Range", "").partition(" ")
        rng, _, total = spec.partition("/")
        if unit != "bytes" or not total.isdigit():
            return self._gcs_error(400, "Bad Content-Range")
        total = int(total)
        if rng == "*":
            return self._finish_upload(sess, info) if have == total else self._persisted(have)
        a, _, b = rng.partition("-")
        a, b = int(a), int(b)
        if a > have or b - a + 1 != len(body) or b >= total:
            return self._gcs_error(400, "Invalid request: bytes %d-%d with %d persisted" % (
                a, b, have))
        if b + 1 < total and len(body) % QUANTUM:
            return self._gcs_error(400, "Chunk size must be a multiple of 256 KiB")
        new = body[have - a:]
        with self.server.lock:
            self.server.uploads += 1
            self.server.upload_bytes += len(body)
            k = self.server.args.short_every
            if k and self.server.uploads % k == 0 and b + 1 < total and len(new) > QUANTUM:
                new = new[:len(new) // 2 // QUANTUM * QUANTUM]
        with open(sess + ".data", "ab") as f:
            f.write(new)
        have += len(new)
        return self._finish_upload(sess, info) if have == total else self._persisted(have)

    def do_DELETE(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.split("/")
        if not (url.path.startswith("/storage/v1/b/") and len(parts) == 7 and parts[5] == "o"):
            return self._send(404, b"not found", "text/plain")
        if not self._authorized():
            return
        bucket, name = urllib.parse.unquote(parts[4]), urllib.parse.unquote(parts[6])
        path = os.path.join(self.server.args.root, bucket, name)
        if ".." in name.split("/") or not os.path.isfile(path):
            return self._gcs_error(404, "No such object: %s/%s" % (bucket, name))
        os.unlink(path)
        self._send(204, b"", "text/plain")


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
    ap.add_argument("--short-every", type=int, default=0)
    ap.add_argument("--long-etag", type=int, default=0,
                    help="pad the ETags of file downloads to this many bytes")
    ap.add_argument("--cert", help="PEM certificate chain: serve https")
    ap.add_argument("--key", help="PEM private key of --cert")
    args = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.args = args
    srv.lock = threading.Lock()
    srv.gets = srv.data_gets = srv.uploads = srv.upload_bytes = 0
    srv.auth = []
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
