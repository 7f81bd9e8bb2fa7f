#!/usr/bin/env bash
# Issue 23, items 6 and 9, through the tools, against tests/lib/netserver.py on loopback (no
# s3rver needed):
#   - an endpoint whose 403 and 503 bodies echo the request's headers (text, S3's XML, GCS's
#     JSON), reached as http://user:PASSWORD@HOST/b/set?X-Amz-Signature=SIG, s3:// (with an
#     access key id and a session token) and gs:// (a bearer token): none of the secrets
#     appears in the stderr or --json of cachewarm (a file and a set), cachebench load or
#     cacheinfo --plan, and every refusal still names the URL and the HTTP status;
#   - cachewarm and cachebench take --timeout and --retries: a server that accepts and never
#     answers fails them after retries + 1 attempts ("gave up after 2 attempts").
. "$(dirname "$0")/../lib/e2e.sh" net_secrets

srv_pids=()
cleanup() {
    local p
    for p in "${srv_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${srv_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

serve() { # MODE BODY: starts one (in this shell, so that cleanup stops it); its port in $port
    local out="$tmp/port.$1.$2"
    "$PY" "$DLC_SRC/tests/lib/netserver.py" --mode "$1" --body "$2" >"$out" 2>/dev/null &
    srv_pids+=($!)
    local i
    for i in $(seq 100); do
        [ -s "$out" ] && break
        sleep 0.1
    done
    [ -s "$out" ] || fail "netserver.py --mode $1 did not start"
    port=$(head -1 "$out")
}

export AWS_ACCESS_KEY_ID=AKIAEXAMPLEKEYID0001 AWS_SECRET_ACCESS_KEY=SECRETSECRET
export AWS_SESSION_TOKEN=SESSIONTOKENXYZ AWS_REGION=us-east-1
export GOOGLE_OAUTH_ACCESS_TOKEN=GCSBEARERTOKEN NO_PROXY=127.0.0.1,localhost
unset AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 DLCACHE_GCS_ENDPOINT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
secrets='PWSECRET|SIGSECRET|GCSBEARERTOKEN|SESSIONTOKENXYZ|AKIAEXAMPLEKEYID|SECRETSECRET|dXNlcjpQV1NFQ1JFVA'

check_clean() { # WHAT FILE
    if grep -Eq "$secrets" "$2"; then
        sed 's/^/  | /' "$2" >&2
        fail "$1: a secret reached the output"
    fi
}

n=0
for mode in echo403 echo503; do
    for body in text xml json; do
        serve "$mode" "$body"
        ep="http://127.0.0.1:$port"
        for url in "http://user:PWSECRET@127.0.0.1:$port/b/set?X-Amz-Signature=SIGSECRET" \
            s3://b/set gs://b/set; do
            n=$((n + 1))
            out="$tmp/out.$n"
            set +e
            {
                AWS_ENDPOINT_URL=$ep DLCACHE_GCS_ENDPOINT=$ep "$DLC_BIN/cachewarm" "$url" \
                    -o "$tmp/d$n" --retries 1 --no-verify
                AWS_ENDPOINT_URL=$ep DLCACHE_GCS_ENDPOINT=$ep "$DLC_BIN/cachewarm" "$url" \
                    -o "$tmp/j$n" --retries 1 --json
                AWS_ENDPOINT_URL=$ep DLCACHE_GCS_ENDPOINT=$ep "$DLC_BIN/cachebench" load "$url" \
                    --cache-dir "$tmp/c$n" --retries 1 --json
                AWS_ENDPOINT_URL=$ep DLCACHE_GCS_ENDPOINT=$ep "$DLC_BIN/cacheinfo" "$url" \
                    --plan --cache-dir "$tmp/p$n" --retries 1 --json
            } >"$out" 2>&1
            set -e
            check_clean "$mode $body $url" "$out"
            want=403
            [ "$mode" = echo503 ] && want=503
            [ "$(grep -c "HTTP $want" "$out")" -ge 4 ] ||
                { sed 's/^/  | /' "$out" >&2; fail "$mode $body $url: a refusal lost its status"; }
        done
    done
done

serve hang text
hang=$port
set +e
"$DLC_BIN/cachewarm" "http://127.0.0.1:$hang/b/set" -o "$tmp/h" --timeout 1 --retries 1 \
    >"$tmp/hang.out" 2>&1
rc=$?
"$DLC_BIN/cachebench" load "http://127.0.0.1:$hang/b/set" --cache-dir "$tmp/hc" --timeout 1 \
    --retries 1 >>"$tmp/hang.out" 2>&1
rc2=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc2" -ne 0 ] || fail "a server that never answers did not fail the tools"
[ "$(grep -c "gave up after 2 attempts" "$tmp/hang.out")" -eq 2 ] ||
    { sed 's/^/  | /' "$tmp/hang.out" >&2; fail "--timeout/--retries did not reach the downloads"; }
echo "net_secrets: $n URL and body combinations show no secret; --timeout/--retries work"
