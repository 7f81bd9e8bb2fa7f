# Shared by tests/e2e/warm_*.sh and tests/bench/bench_warm.sh (sourced, bash).
# Starts real servers on 127.0.0.1 (s3rver from npm, the project's own Python
# object server and fault proxy), each on a free port, and stops them on exit.
# A test that cannot run here (no node, npm offline) exits 77: ctest reports
# it as skipped (cmake/warm.cmake sets SKIP_RETURN_CODE).

: "${DLC_BIN:?DLC_BIN must name the bin directory of the build}"
: "${DLC_SRC:?DLC_SRC must name the source tree}"
WARM_DIR="$DLC_SRC/tests/lib"
PY=${PY:-/usr/bin/python3}
S3RVER_VERSION=3.7.1

warm_tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlc-warm.XXXXXX")
warm_pids=()
warm_cleanup() {
    local p
    for p in "${warm_pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${warm_pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ -n "${warm_mnt:-}" ]; then umount "$warm_mnt" 2>/dev/null || true; fi
    rm -rf "$warm_tmp"
}
trap warm_cleanup EXIT

skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }

for t in curl node npm "$PY"; do
    command -v "$t" >/dev/null || skip "$t is not installed"
done
[ -x "$DLC_BIN/cachewarm" ] || fail "$DLC_BIN/cachewarm is missing"

# The S3 test key of s3rver; the only one it accepts.
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION
unset GOOGLE_OAUTH_ACCESS_TOKEN DLCACHE_GCS_ENDPOINT
# Loopback servers must not go through a proxy of the environment.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export NO_PROXY=127.0.0.1,localhost

# Install s3rver (pinned by tests/lib/package-lock.json) once per build
# directory; concurrent tests wait for each other on a lock.
warm_install_s3rver() {
    local dir
    dir="$(cd "$DLC_BIN/.." && pwd)/warm-node"
    mkdir -p "$dir"
    (
        flock 9
        if [ -f "$dir/node_modules/s3rver/package.json" ] &&
            cmp -s "$WARM_DIR/package-lock.json" "$dir/package-lock.json"; then
            exit 0
        fi
        cp "$WARM_DIR/package.json" "$WARM_DIR/package-lock.json" "$dir/"
        cd "$dir" && timeout 300 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
            >"$dir/npm.log" 2>&1
    ) 9>"$dir.lock" || skip "npm ci of s3rver failed (offline?): $(tail -3 "$dir/npm.log" 2>/dev/null)"
    S3RVER_JS="$dir/node_modules/s3rver/bin/s3rver.js"
}

warm_free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# warm_wait_port FILE: wait for a server to write its port into FILE.
warm_wait_port() {
    local i
    for i in $(seq 1 100); do
        [ -s "$1" ] && { cat "$1"; return 0; }
        sleep 0.05
    done
    fail "a test server did not start ($1)"
}

# Start s3rver with bucket "b"; sets S3_PORT and S3_URL. Extra args go to
# s3rver (--key/--cert for TLS); S3_SCHEME=https with them.
warm_start_s3rver() {
    warm_install_s3rver
    local scheme=${S3_SCHEME:-http} i
    mkdir -p "$warm_tmp/s3data"
    for i in 1 2 3; do
        S3_PORT=$(warm_free_port)
        node --openssl-legacy-provider "$S3RVER_JS" -d "$warm_tmp/s3data" -a 127.0.0.1 \
            -p "$S3_PORT" --no-vhost-buckets --silent --configure-bucket b "$@" \
            >"$warm_tmp/s3rver.log" 2>&1 &
        S3RVER_PID=$!
        warm_pids+=("$S3RVER_PID")
        S3_URL="$scheme://127.0.0.1:$S3_PORT"
        local n
        for n in $(seq 1 100); do
            if curl -sk -o /dev/null "$S3_URL/"; then return 0; fi
            kill -0 "$S3RVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$S3RVER_PID" 2>/dev/null || true
    done
    fail "s3rver did not start: $(tail -5 "$warm_tmp/s3rver.log")"
}

# s3_put FILE KEY: upload with curl's own SigV4 signer.
s3_put() {
    curl -sSfk --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T "$1" "$S3_URL/b/$2" -o /dev/null ||
        fail "upload of $1 to s3rver failed"
}

# warm_start_proxy NAME UPSTREAM_PORT [faultproxy args]: sets PROXY_PORT.
warm_start_proxy() {
    local name=$1 up=$2
    shift 2
    "$PY" "$WARM_DIR/faultproxy.py" --upstream "127.0.0.1:$up" \
        --port-file "$warm_tmp/$name.port" "$@" 2>"$warm_tmp/$name.log" &
    warm_pids+=("$!")
    PROXY_PORT=$(warm_wait_port "$warm_tmp/$name.port")
}

# warm_start_gcs [gcsserver args]: sets GCS_PORT; serves $warm_tmp/gcsroot.
warm_start_gcs() {
    mkdir -p "$warm_tmp/gcsroot"
    "$PY" "$WARM_DIR/gcsserver.py" --root "$warm_tmp/gcsroot" \
        --port-file "$warm_tmp/gcs.port" "$@" 2>"$warm_tmp/gcs.log" &
    warm_pids+=("$!")
    GCS_PORT=$(warm_wait_port "$warm_tmp/gcs.port")
}

# json_get FILE KEY: one top-level value of a JSON report.
json_get() {
    "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(str(v).lower() if isinstance(v,bool) else v)' "$1" "$2"
}

# warm_make_store DIR IMAGES SIZE: a real store from mkdemo + cachebuild when
# those tools are built, else a random file (then WARM_VERIFY=--no-verify).
warm_make_store() {
    local dir=$1 count=$2 size=$3
    mkdir -p "$dir"
    if [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ]; then
        "$DLC_BIN/mkdemo" "$dir/demo" --count "$count" --seed 3 >/dev/null 2>&1 ||
            fail "mkdemo failed"
        "$DLC_BIN/cachebuild" "$dir/demo/train" -o "$dir/store.dlc" --size "$size" \
            >/dev/null 2>"$dir/build.log" || fail "cachebuild failed: $(tail -3 "$dir/build.log")"
        WARM_VERIFY=
    else
        note "mkdemo/cachebuild not built: using a random file with --no-verify"
        head -c $((count * size * size * 3)) /dev/urandom >"$dir/store.dlc"
        WARM_VERIFY=--no-verify
    fi
    STORE="$dir/store.dlc"
}
