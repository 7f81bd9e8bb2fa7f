#!/usr/bin/env bash
# The loader streaming a store set from gs:// (the project's GCS JSON API server,
# tests/lib/gcsserver.py, which checks the bearer token) and from https:// (the same server's
# plain files over TLS, its certificate signed by a test CA made here with openssl and trusted
# through CURL_CA_BUNDLE), through `cachebench load URL --cache-dir DIR --cache-limit SIZE`:
#   1. gs://: the batches are those of the same set read locally in shard windows, byte for
#      byte, with no cache limit and with the smallest limit the loader accepts;
#   2. https://: the same, at the smallest limit;
#   3. https:// without the test CA is refused, naming the certificate;
#   4. an https set URL with a query string (a token for the prefix, which the server requires
#      on every request: --sig) streams and warms: the shards' and the index's URLs keep the
#      query after the name (dlc__url_child());
#   5. neither token appears in any output.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
bench=$DLC_BIN/cachebench
[ -x "$bench" ] && [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] ||
    skip "cachebench, mkdemo and cachebuild are needed"
command -v openssl >/dev/null || skip "openssl is not installed"

src=$warm_tmp/src
mkdir -p "$src"
"$DLC_BIN/mkdemo" "$src/demo" --count 200 --seed 5 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/set" --shards 20 --size 64 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
out=$warm_tmp/out
mkdir -p "$out"

common=(--batch 16 --crop 48 --sampler windows --window-shards 2 --streams 2 --epochs 2 --json)
# load NAME ARGS...: cachebench load with the common options, its JSON in $out/NAME.json.
load() {
    local name=$1
    shift
    "$bench" load "$@" "${common[@]}" >"$out/$name.json" 2>"$out/$name.err" ||
        fail "$name: $(tail -3 "$out/$name.err")"
}
# smallest URL ARGS...: the smallest cache_limit the loader accepts for URL.
smallest() {
    local url=$1
    shift
    "$bench" load "$url" --cache-dir "$warm_tmp/probe" --cache-limit 4096 "$@" "${common[@]}" \
        2>&1 >/dev/null | sed -n 's/.* = 4096 bytes is too small: \([0-9]*\) bytes are needed.*/\1/p' ||
        true
}
# same NAME: the run's digest is the local set's.
same() {
    local got
    got=$(json_get "$out/$1.json" digest)
    [ "$got" = "$want" ] || fail "$1: digest $got, the local set's is $want"
    note "$1: digest equal, $(json_get "$out/$1.json" bytes_fetched) bytes fetched," \
        "peak $(json_get "$out/$1.json" peak_cache_bytes)"
}

load local "$src/set" --threads 2
want=$(json_get "$out/local.json" digest)
[ -n "$want" ] && [ "$want" != None ] || fail "no digest from the local run"
note "local set, shard windows: digest $want"

note "1. gs://"
TOKEN=ya29.StreamTokenMustNotLeak42
warm_start_gcs --token "$TOKEN"
gcs=http://127.0.0.1:$GCS_PORT
mkdir -p "$warm_tmp/gcsroot/bkt"
GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN "$DLC_BIN/cachewarm" push "$src/set" gs://bkt/sets/s \
    --endpoint "$gcs" -q 2>"$warm_tmp/push.err" || fail "push: $(cat "$warm_tmp/push.err")"
export GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN
need=$(smallest gs://bkt/sets/s --endpoint "$gcs")
[ -n "$need" ] || fail "gs://: a 4 KiB cache was not refused with the bytes needed"
load gs-0 gs://bkt/sets/s --endpoint "$gcs" --cache-dir "$warm_tmp/gs0" --threads 2
same gs-0
load gs-min gs://bkt/sets/s --endpoint "$gcs" --cache-dir "$warm_tmp/gsmin" \
    --cache-limit "$need" --threads 2
same gs-min
[ "$(json_get "$out/gs-min.json" peak_cache_bytes)" -le "$need" ] || fail "gs-min: over its limit"
unset GOOGLE_OAUTH_ACCESS_TOKEN

note "2. https:// with a test CA"
ca=$warm_tmp/ca
mkdir -p "$ca"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=dlcache test CA" \
    -keyout "$ca/ca.key" -out "$ca/ca.pem" >/dev/null 2>&1 || fail "openssl: no CA"
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$ca/srv.key" \
    -out "$ca/srv.csr" >/dev/null 2>&1 || fail "openssl: no request"
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$ca/ext"
openssl x509 -req -in "$ca/srv.csr" -CA "$ca/ca.pem" -CAkey "$ca/ca.key" -CAcreateserial \
    -days 2 -extfile "$ca/ext" -out "$ca/srv.pem" >/dev/null 2>&1 || fail "openssl: no certificate"
tls=$warm_tmp/tlsroot
mkdir -p "$tls/files"
cp -r "$src/set" "$tls/files/set"
"$PY" "$WARM_DIR/gcsserver.py" --root "$tls" --port-file "$warm_tmp/tls.port" \
    --cert "$ca/srv.pem" --key "$ca/srv.key" 2>"$warm_tmp/tls.log" &
warm_pids+=("$!")
TLS_PORT=$(warm_wait_port "$warm_tmp/tls.port")
url=https://127.0.0.1:$TLS_PORT/files/set
export CURL_CA_BUNDLE=$ca/ca.pem
need=$(smallest "$url")
[ -n "$need" ] || fail "https://: a 4 KiB cache was not refused with the bytes needed"
load https-min "$url" --cache-dir "$warm_tmp/httpsmin" --cache-limit "$need" --threads 2
same https-min
[ "$(json_get "$out/https-min.json" peak_cache_bytes)" -le "$need" ] ||
    fail "https-min: over its limit"

note "3. https:// without the test CA: refused"
unset CURL_CA_BUNDLE
set +e
"$bench" load "$url" --cache-dir "$warm_tmp/noca" "${common[@]}" \
    >"$out/noca.json" 2>"$out/noca.err"
rc=$?
set -e
[ $rc != 0 ] || fail "https:// with an unknown CA was accepted"
grep -qi "certificate" "$out/noca.err" || fail "the refusal does not say why: $(cat "$out/noca.err")"

note "4. https:// with a query string the server requires"
SIG=PrefixTokenMustNotLeak77
"$PY" "$WARM_DIR/gcsserver.py" --root "$tls" --port-file "$warm_tmp/tlssig.port" --sig "$SIG" \
    --cert "$ca/srv.pem" --key "$ca/srv.key" 2>"$warm_tmp/tlssig.log" &
warm_pids+=("$!")
SIG_PORT=$(warm_wait_port "$warm_tmp/tlssig.port")
export CURL_CA_BUNDLE=$ca/ca.pem
qurl="https://127.0.0.1:$SIG_PORT/files/set/?sig=$SIG"
load https-query "$qurl" --cache-dir "$warm_tmp/httpsq" --threads 2
same https-query
"$DLC_BIN/cachewarm" "$qurl" -o "$warm_tmp/warmq" -q >"$out/warmq.out" 2>"$out/warmq.err" ||
    fail "cachewarm of the https set with a query: $(tail -3 "$out/warmq.err")"
load warmq "$warm_tmp/warmq" --threads 2
same warmq
# Without the token the server refuses, and the refusal shows the URL redacted.
set +e
"$DLC_BIN/cachewarm" "https://127.0.0.1:$SIG_PORT/files/set?sig=Wrong$SIG" -o "$warm_tmp/warmbad" \
    -q >"$out/warmbad.out" 2>"$out/warmbad.err"
rc=$?
set -e
[ $rc != 0 ] || fail "a wrong token was accepted"
grep -q "files/set" "$out/warmbad.err" || fail "the refusal names no URL: $(cat "$out/warmbad.err")"
unset CURL_CA_BUNDLE

note "5. the tokens appear in no output"
if grep -rl -e "$TOKEN" -e "$SIG" "$out"; then
    fail "the token was printed"
fi
echo "stream_gs_https: ok"
