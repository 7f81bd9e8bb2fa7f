#!/usr/bin/env python3
"""A fault-injecting HTTP proxy for the cachewarm tests (Python stdlib only).

It sits in front of a real server (s3rver) on 127.0.0.1 and forwards each
request unchanged, except that the Nth data request (a GET with a body) gets the
fault named at position N of --pattern, cycling:

  ok      forward as is
  503     answer 503 SlowDown (S3's XML) without asking upstream
  reset   forward the headers and part of the body, then reset the connection
  stall   forward the headers and part of the body, then say nothing for
          --stall seconds and close
  short   forward the headers and part of the body, then close cleanly

With --only SUFFIX, only GETs of paths (query aside) ending with SUFFIX count
and get faults (--only .dlc: a store set's shards, not its index).

Uploads (PUT with a body: S3's UploadPart) get the fault at position N of
--put-pattern, cycling:

  ok      forward as is
  503     answer 503 SlowDown without asking upstream
  corrupt forward the body with one byte flipped (the server stores other bytes
          and says so in its ETag)
  etag    forward as is, then answer with another ETag than the server's
  reset   read the body, then reset the connection without an answer
  kms     forward as is, and answer as a bucket encrypting with KMS keys
          (x-amz-server-side-encryption: aws:kms)

With --complete trickle, S3's CompleteMultipartUpload (POST ...?uploadId=ID) is
not forwarded: it is answered 200 with a space every half second, for as long as
the client listens (S3 keeps the connection alive so while it joins the parts).

--s3-data DIR answers S3's ListParts (GET ...?uploadId=ID without partNumber),
which s3rver 3.7.1 lacks, from s3rver's own data directory: the parts it has
in DIR/BUCKET/._S3rver_uploads/ID/ (N and N.md5), or 404 NoSuchUpload.

It counts requests: GET /__proxy/stats answers
{"gets": N, "range_gets": N, "puts": N, "bytes": N, "put_bytes": N,
"faults": {...}} and POST /__proxy/reset sets the counters to zero. --rate
limits the bytes per second of all bodies together, both ways (for tests that
must stop a download or an upload midway). The chosen port is written to
--port-file once the socket listens.
"""
import argparse
import html
import http.client
import os
import urllib.parse
import http.server
import json
import socket
import struct
import threading
import time

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
       "trailers", "transfer-encoding", "upgrade"}


class State:
    def __init__(self, args):
        self.args = args
        self.pattern = [p.strip() for p in args.pattern.split(",") if p.strip()] or ["ok"]
        self.put_pattern = [p.strip() for p in args.put_pattern.split(",") if p.strip()] or ["ok"]
        self.lock = threading.Lock()
        self.reset()
        self.rate_next = time.monotonic()

    def reset(self):
        with getattr(self, "lock", threading.Lock()):
            self.gets = 0
            self.range_gets = 0
            self.puts = 0
            self.bytes = 0
            self.put_bytes = 0
            self.faults = {}
            self.n = 0
            self.put_n = 0

    def next_fault(self):
        with self.lock:
            f = self.pattern[self.n % len(self.pattern)]
            self.n += 1
            if f != "ok":
                self.faults[f] = self.faults.get(f, 0) + 1
            return f

    def next_put_fault(self):
        with self.lock:
            f = self.put_pattern[self.put_n % len(self.put_pattern)]
            self.put_n += 1
            self.puts += 1
            if f != "ok":
                self.faults["put-" + f] = self.faults.get("put-" + f, 0) + 1
            return f

    def throttle(self, n):
        """Token bucket over every connection: sleep until n bytes may go."""
        rate = self.args.rate
        if rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.rate_next)
            self.rate_next = start + n / rate
        delay = start - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):  # quiet: the test reads the stats instead
        pass

    def _stats(self):
        st = self.server.state
        with st.lock:
            body = json.dumps({"gets": st.gets, "range_gets": st.range_gets, "puts": st.puts,
                               "bytes": st.bytes, "put_bytes": st.put_bytes,
                               "faults": st.faults}).encode()
        self._reply(200, body, "application/json")

    def _reply(self, code, body, ctype="application/xml"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _kill(self, hard):
        # SO_LINGER with a zero timeout turns close() into a TCP reset.
        sock = self.connection
        if hard:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            sock.close()
        except OSError:
            pass
        self.close_connection = True

    def _list_parts(self, url, query):
        """S3 ListParts from s3rver's data directory (s3rver answers 405)."""
        bucket = urllib.parse.unquote(url.path.split("/")[1])
        upload = query["uploadId"][0]
        d = os.path.join(self.server.state.args.s3_data, bucket, "._S3rver_uploads", upload)
        if "/" in upload or ".." in upload or not os.path.isdir(d):
            return self._reply(404, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                               b'NoSuchUpload</Code><Message>The specified upload does not '
                               b'exist.</Message></Error>')
        marker = int(query.get("part-number-marker", ["0"])[0])
        # s3rver writes N.md5 once part N is complete.
        nums = sorted(int(n) for n in os.listdir(d) if n.isdigit() and int(n) > marker and
                      os.path.exists(os.path.join(d, n + ".md5")))
        parts = []
        for n in nums[:int(query.get("max-parts", ["1000"])[0])]:
            md5 = open(os.path.join(d, "%d.md5" % n)).read().strip()
            size = os.path.getsize(os.path.join(d, str(n)))
            parts.append("<Part><PartNumber>%d</PartNumber><ETag>%s</ETag><Size>%d</Size></Part>"
                         % (n, html.escape('"%s"' % md5), size))
        more = len(parts) < len(nums)
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListPartsResult><UploadId>%s</UploadId>'
                '<IsTruncated>%s</IsTruncated><NextPartNumberMarker>%d</NextPartNumberMarker>%s'
                '</ListPartsResult>' % (upload, "true" if more else "false",
                                        nums[len(parts) - 1] if parts else 0, "".join(parts)))
        return self._reply(200, body.encode())

    def _read_body(self, length):
        """The request body, at --rate like response bodies."""
        st = self.server.state
        chunks = []
        while length > 0:
            data = self.rfile.read(min(length, 256 * 1024))
            if not data:
                break
            st.throttle(len(data))
            chunks.append(data)
            length -= len(data)
        return b"".join(chunks)

    def _trickle(self):
        with self.server.state.lock:
            self.server.state.faults["complete-trickle"] = (
                self.server.state.faults.get("complete-trickle", 0) + 1)
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.end_headers()
        self.close_connection = True
        try:
            while True:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            return

    def _forward(self):
        st = self.server.state
        if self.path == "/__proxy/stats":
            return self._stats()
        if self.path == "/__proxy/reset":
            st.reset()
            return self._reply(200, b"{}", "application/json")
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if (st.args.s3_data and self.command == "GET" and "uploadId" in query and
                "partNumber" not in query):
            return self._list_parts(url, query)
        length = int(self.headers.get("Content-Length") or 0)
        body = self._read_body(length) if length else None
        if (st.args.complete == "trickle" and self.command == "POST" and "uploadId" in query):
            return self._trickle()
        put_fault = "ok"
        if self.command == "PUT" and body:
            with st.lock:
                st.put_bytes += len(body)
            put_fault = st.next_put_fault()
            if put_fault == "503":
                return self._reply(503, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                                   b'SlowDown</Code><Message>Please reduce your request rate.'
                                   b'</Message></Error>')
            if put_fault == "reset":
                return self._kill(hard=True)
            if put_fault == "corrupt":
                body = bytearray(body)
                body[len(body) // 2] ^= 0x01
                body = bytes(body)
        fault = "ok"
        if self.command == "GET":
            with st.lock:
                st.gets += 1
                if "Range" in self.headers:
                    st.range_gets += 1
            if self.path.split("?", 1)[0].endswith(st.args.only):
                fault = st.next_fault()
        if fault == "503":
            return self._reply(503, b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown'
                               b'</Code><Message>Please reduce your request rate.</Message></Error>')
        up = http.client.HTTPConnection(st.args.upstream_host, st.args.upstream_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        up.request(self.command, self.path, body=body, headers=headers)
        resp = up.getresponse()
        self.send_response(resp.status, resp.reason)
        if put_fault == "kms":
            self.send_header("x-amz-server-side-encryption", "aws:kms")
        for k, v in resp.getheaders():
            if k.lower() == "etag" and put_fault == "etag":
                v = '"0123456789abcdef0123456789abcdef"'
            if k.lower() not in HOP:
                self.send_header(k, v)
        if resp.getheader("Content-Length") is None:
            self.close_connection = True
        self.end_headers()
        sent = 0
        cut = None
        if fault in ("reset", "stall", "short"):
            total = int(resp.getheader("Content-Length") or 0)
            cut = max(1, total // 3)
        while True:
            want = 256 * 1024
            if cut is not None:
                want = min(want, cut - sent)
                if want <= 0:
                    break
            data = resp.read(want)
            if not data:
                break
            st.throttle(len(data))
            try:
                self.wfile.write(data)
            except OSError:
                up.close()
                self.close_connection = True
                return
            sent += len(data)
            with st.lock:
                st.bytes += len(data)
        up.close()
        if cut is not None:
            self.wfile.flush()
            if fault == "stall":
                time.sleep(st.args.stall)
            self._kill(hard=(fault == "reset"))

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Resets are what this proxy is for; no tracebacks.
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the real server")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--pattern", default="ok")
    ap.add_argument("--put-pattern", default="ok")
    ap.add_argument("--complete", default="ok", choices=["ok", "trickle"],
                    help="trickle: answer CompleteMultipartUpload with spaces, for ever")
    ap.add_argument("--s3-data", default="", help="s3rver's data directory: answer ListParts")
    ap.add_argument("--stall", type=float, default=5.0)
    ap.add_argument("--only", default="", help="--pattern applies to GETs of paths ending so")
    ap.add_argument("--rate", type=float, default=0.0, help="bytes per second, all bodies")
    args = ap.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    args.upstream_host, args.upstream_port = host, int(port)
    srv = Server(("127.0.0.1", 0), Handler)
    srv.state = State(args)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
