#!/usr/bin/env bash
# cachewarm against a real S3 server (s3rver on loopback): a real store of
# ~170 MB arrives bit-exact and verified; a second run returns at once; the
# endpoint also comes from AWS_ENDPOINT_URL; a missing object, bad
# credentials and a corrupt store give clear errors and no file under the
# final name; secrets never appear in any output.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

warm_start_s3rver
warm_make_store "$warm_tmp/src" 300 448
s3_put "$STORE" imagenet/train.dlc
size=$(stat -c %s "$STORE")
note "store: $size bytes"

out=$warm_tmp/out
mkdir -p "$out"
# Secrets that must never be printed: the test key is S3RVER/S3RVER, which
# s3rver insists on, so the session token carries the marker.
export AWS_SESSION_TOKEN=SessionTokenMustNotLeak123

note "download, verify, publish"
"$DLC_BIN/cachewarm" s3://b/imagenet/train.dlc -o "$out/train.dlc" --endpoint "$S3_URL" \
    --connections 8 --chunk-size 8M $WARM_VERIFY --json >"$out/1.json" 2>"$out/1.err"
cmp "$STORE" "$out/train.dlc" || fail "the download differs from the object"
[ "$(json_get "$out/1.json" bytes)" = "$size" ] || fail "bytes in the report"
[ "$(json_get "$out/1.json" bytes_downloaded)" = "$size" ] || fail "bytes_downloaded"
[ "$(json_get "$out/1.json" resumed)" = false ] || fail "resumed on a fresh download"
if [ -z "$WARM_VERIFY" ]; then
    [ "$(json_get "$out/1.json" verified)" = true ] || fail "the store was not verified"
fi
for f in "$out/train.dlc.warm-part" "$out/train.dlc.warm-journal"; do
    [ ! -e "$f" ] || fail "$f left behind after publishing"
done

note "a second run finds the copy complete and downloads nothing"
AWS_ENDPOINT_URL=$S3_URL "$DLC_BIN/cachewarm" s3://b/imagenet/train.dlc -o "$out/train.dlc" \
    $WARM_VERIFY --json >"$out/2.json" 2>"$out/2.err"
[ "$(json_get "$out/2.json" already_complete)" = true ] || fail "second run downloaded again"
[ "$(json_get "$out/2.json" bytes_downloaded)" = 0 ] || fail "second run fetched bytes"

note "a changed object is fetched again"
head -c 3000000 /dev/urandom >"$warm_tmp/other.bin"
s3_put "$warm_tmp/other.bin" imagenet/other.bin
"$DLC_BIN/cachewarm" s3://b/imagenet/other.bin -o "$out/other.bin" --endpoint "$S3_URL" \
    --no-verify -q
head -c 3000001 /dev/urandom >"$warm_tmp/other.bin"
s3_put "$warm_tmp/other.bin" imagenet/other.bin
"$DLC_BIN/cachewarm" s3://b/imagenet/other.bin -o "$out/other.bin" --endpoint "$S3_URL" \
    --no-verify --json >"$out/3.json" 2>/dev/null
[ "$(json_get "$out/3.json" already_complete)" = false ] || fail "a changed object was not refetched"
cmp "$warm_tmp/other.bin" "$out/other.bin" || fail "the changed object differs"

note "a missing object: 404 named, no file"
set +e
"$DLC_BIN/cachewarm" s3://b/imagenet/missing.dlc -o "$out/missing.dlc" --endpoint "$S3_URL" \
    --json >"$out/404.json" 2>"$out/404.err"
rc=$?
set -e
[ $rc = 1 ] || fail "missing object: exit $rc"
grep -q "HTTP 404: NoSuchKey" "$out/404.err" || fail "404 not explained: $(cat "$out/404.err")"
grep -q "missing.dlc" "$out/404.err" || fail "404 does not name the object"
[ ! -e "$out/missing.dlc" ] || fail "a file under the final name after a 404"

note "bad credentials: 403 named, no file"
set +e
AWS_ACCESS_KEY_ID=NOTTHEKEY AWS_SECRET_ACCESS_KEY=SecretKeyMustNotLeak456 \
    "$DLC_BIN/cachewarm" s3://b/imagenet/train.dlc -o "$out/denied.dlc" --endpoint "$S3_URL" \
    --json >"$out/403.json" 2>"$out/403.err"
rc=$?
set -e
[ $rc = 1 ] || fail "bad credentials: exit $rc"
grep -q "HTTP 403: InvalidAccessKeyId" "$out/403.err" || fail "403 not explained: $(cat "$out/403.err")"
[ ! -e "$out/denied.dlc" ] || fail "a file under the final name after a 403"

if [ -z "$WARM_VERIFY" ]; then
    note "a corrupt store is refused and not published"
    "$PY" - "$STORE" "$warm_tmp/bad.dlc" <<'EOF'
import sys
d = bytearray(open(sys.argv[1], "rb").read())
for i in range(1, 8):  # several places, so that one is surely inside a payload
    d[i * len(d) // 8 + 777] ^= 0x55
open(sys.argv[2], "wb").write(d)
EOF
    s3_put "$warm_tmp/bad.dlc" imagenet/bad.dlc
    set +e
    "$DLC_BIN/cachewarm" s3://b/imagenet/bad.dlc -o "$out/bad.dlc" --endpoint "$S3_URL" \
        2>"$out/bad.err"
    rc=$?
    set -e
    [ $rc = 1 ] || fail "corrupt store: exit $rc"
    grep -q "not a valid store" "$out/bad.err" || fail "corruption not explained: $(cat "$out/bad.err")"
    [ ! -e "$out/bad.dlc" ] || fail "a corrupt store was published"
fi

note "secrets appear in no output"
if grep -rl -e SessionTokenMustNotLeak123 -e SecretKeyMustNotLeak456 -e 'S3RVER:' "$out"; then
    fail "a secret was printed"
fi
echo "warm_s3: ok"
