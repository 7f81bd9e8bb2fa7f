#!/usr/bin/env bash
# Issue 32, items 2-4 and the smaller items about answers, through the tools, against the hostile
# modes of tests/lib/netserver.py on loopback (no s3rver needed):
#   - errbody (a 503 whose body never ends), onebyte (one byte per connection, then it closes)
#     and trickle (3 bytes a second): cachewarm of a file, cachewarm of a set (its index served
#     honestly, its shards hostile) and the streaming loader (cachebench load of the set), with
#     --timeout 2 --retries 1, each fail with "gave up after 2 attempts"; for onebyte the server
#     saw at most a probe and two attempts per object, also when four threads of one stream
#     cache wait for the same shard (stream_cache_drive --together 4): each gets the failure of
#     the one download, and none starts it again;
#   - --timeout 0.0009, 1e-4 and 1e-300 of cachewarm, cachebench load and cacheinfo --plan
#     against a server that never answers are refused at once, naming the minimum;
#   - a 302 for an s3:// source says it is a redirect that is not followed and where to
#     (redacted); a 302 that an https source follows, whose chunked body never ends, fails its
#     attempts; a 200 KiB response header is called that, not "Out of memory".
# Every run is bounded by an outside timeout (120 s), so that a hang fails the test rather than
# the whole suite; nothing here measures time.
. "$(dirname "$0")/../lib/e2e.sh" net_hostile
for t in mkdemo cachebuild set_split cachewarm cachebench cacheinfo stream_cache_drive; do
    [ -x "$DLC_BIN/$t" ] || { echo "net_hostile: $t is not built" >&2; exit 77; }
done

srv_pids=()
cleanup() {
    local p
    for p in "${srv_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${srv_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

serve() { # NAME ARGS...: starts netserver.py (in this shell, so that cleanup stops it); port in $port
    local name=$1 out="$tmp/port.$1"
    shift
    "$PY" "$DLC_SRC/tests/lib/netserver.py" "$@" >"$out" 2>"$tmp/server.$name.err" &
    srv_pids+=($!)
    local i
    for i in $(seq 100); do
        [ -s "$out" ] && break
        sleep 0.1
    done
    [ -s "$out" ] || fail "netserver.py $* did not start: $(cat "$tmp/server.$name.err")"
    port=$(head -1 "$out")
}

# bounded OUT CMD...: runs CMD with stdout and stderr in OUT, under an outside timeout; fails
# the test when CMD hangs or succeeds, and when what it says does not end its attempts.
bounded() {
    local out=$1
    shift
    set +e
    timeout -k 5 "${NET_HOSTILE_LIMIT:-120}" "$@" >"$out" 2>&1
    local rc=$?
    set -e
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        sed 's/^/  | /' "$out" | tail -20 >&2
        fail "$(basename "$1") hung (killed after ${NET_HOSTILE_LIMIT:-120} s): $*"
    fi
    [ "$rc" -ne 0 ] || fail "$(basename "$1") succeeded against a hostile server: $*"
}

export NO_PROXY=127.0.0.1,localhost
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
unset AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 DLCACHE_GCS_ENDPOINT

# A small real set: its index is served honestly, its shards (.dlc) meet the hostile mode.
"$DLC_BIN/mkdemo" "$tmp/demo" --count 60 --classes 3 >/dev/null
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/s.dlc" --size 48 --threads 2 >/dev/null 2>&1
mkdir -p "$tmp/root"
"$DLC_BIN/set_split" "$tmp/s.dlc" 3 "$tmp/root/set" >/dev/null
cp "$tmp/s.dlc" "$tmp/root/one.dlc"

n=0
for mode in errbody onebyte trickle; do
    serve "$mode" --mode "$mode" --root "$tmp/root" --only .dlc
    base="http://127.0.0.1:$port"
    for what in file set stream; do
        n=$((n + 1))
        out="$tmp/out.$mode.$what"
        before=$(curl -s "$base/__count")
        case $what in
        file)
            bounded "$out" "$DLC_BIN/cachewarm" "$base/one.dlc" -o "$tmp/d$n" --timeout 2 \
                --retries 1
            ;;
        set)
            bounded "$out" "$DLC_BIN/cachewarm" "$base/set" -o "$tmp/d$n" --timeout 2 --retries 1 \
                --connections 1
            ;;
        stream)
            bounded "$out" "$DLC_BIN/cachebench" load "$base/set" --cache-dir "$tmp/c$n" \
                --crop 32 --batch 10 --epochs 1 --timeout 2 --retries 1
            ;;
        esac
        grep -q "gave up after 2 attempts" "$out" ||
            { sed 's/^/  | /' "$out" >&2; fail "$mode, $what: the attempts did not run out"; }
        case $mode in
        errbody) want="HTTP 503: Slow down" ;;
        onebyte) want="transfer closed" ;;
        trickle) want="too slow" ;;
        esac
        grep -q "$want" "$out" ||
            { sed 's/^/  | /' "$out" >&2; fail "$mode, $what: the failure does not say '$want'"; }
        if [ "$mode" = onebyte ]; then
            # A probe and two attempts per object: one file, or the set's three shards.
            requests=$(($(curl -s "$base/__count") - before))
            most=9
            [ "$what" = file ] && most=3
            [ "$requests" -le "$most" ] || fail "onebyte, $what: $requests requests for --retries 1"
        fi
    done
done

serve together --mode onebyte --root "$tmp/root" --only .dlc
base="http://127.0.0.1:$port"
before=$(curl -s "$base/__count")
bounded "$tmp/out.together" "$DLC_BIN/stream_cache_drive" --url "$base/set" --dir "$tmp/ct" \
    --order 0 --retries 1 --timeout 2 --together 4
got=$(grep -c "gave up after 2 attempts: transfer closed" "$tmp/out.together" || true)
[ "$got" = 4 ] || { sed 's/^/  | /' "$tmp/out.together" >&2; fail "together: $got of 4 waiters got the failure"; }
requests=$(($(curl -s "$base/__count") - before))
[ "$requests" -le 3 ] || fail "together: $requests requests for one shard with --retries 1"

serve hang --mode hang
hang="http://127.0.0.1:$port"
for t in 0.0009 1e-4 1e-300; do
    for tool in cachewarm cachebench cacheinfo; do
        out="$tmp/small.$tool.$t"
        case $tool in
        cachewarm) bounded "$out" "$DLC_BIN/cachewarm" "$hang/x.dlc" -o "$tmp/h" --timeout "$t" ;;
        cachebench)
            bounded "$out" "$DLC_BIN/cachebench" load "$hang/set" --cache-dir "$tmp/hc" --timeout "$t"
            ;;
        cacheinfo)
            bounded "$out" "$DLC_BIN/cacheinfo" "$hang/set" --plan --cache-dir "$tmp/hp" --timeout "$t"
            ;;
        esac
        grep -q "below the minimum of 0.1 s" "$out" ||
            { sed 's/^/  | /' "$out" >&2; fail "$tool --timeout $t: not refused"; }
    done
done

serve redirect --mode redirect
out="$tmp/redirect"
bounded "$out" env AWS_ENDPOINT_URL="http://127.0.0.1:$port" "$DLC_BIN/cachewarm" s3://b/x.dlc \
    -o "$tmp/r" --retries 1
grep -q "HTTP 302: a redirect to http://REDACTED@127.0.0.1:1/elsewhere?REDACTED, which is not followed" \
    "$out" || { sed 's/^/  | /' "$out" >&2; fail "a redirect is not called one"; }
! grep -Eq "PWSECRET|SIGSECRET" "$out" || fail "the redirect's secrets reached the output"

serve redirectbody --mode redirectbody
out="$tmp/redirectbody"
bounded "$out" "$DLC_BIN/cachewarm" "http://127.0.0.1:$port/x.dlc" -o "$tmp/rb" --timeout 2 \
    --retries 1
grep -q "gave up after 2 attempts: the body of a redirect (HTTP 302) went on past 64 KiB" "$out" ||
    { sed 's/^/  | /' "$out" >&2; fail "a redirect whose body never ends held the download"; }

serve bigheader --mode bigheader
out="$tmp/bigheader"
bounded "$out" "$DLC_BIN/cachewarm" "http://127.0.0.1:$port/x.dlc?X-Amz-Signature=SIGSECRET" \
    -o "$tmp/b" --retries 1
grep -q "a response header larger than libcurl accepts (100 KiB)" "$out" ||
    { sed 's/^/  | /' "$out" >&2; fail "a giant header is not called one"; }
! grep -q SIGSECRET "$out" || fail "the URL's signature reached the output"
echo "net_hostile: $n hostile runs ended; tiny timeouts refused; a redirect and a giant header named"
