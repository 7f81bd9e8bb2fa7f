#!/usr/bin/env bash
# cachewarm to a DEST near Linux's PATH_MAX (4096 bytes with its NUL), a store and a set, from
# the project's loopback GCS server (issue H7): each is downloaded whole or refused; nothing is
# ever made at a cut path (a prefix of DEST or of the names beside it: DEST.lock, DEST.warm,
# DEST.warm-part, DEST.warm-journal, DEST.warm-set), which a path built in a fixed buffer and cut
# short would name.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

TOKEN=ya29.LongPathsToken
warm_start_gcs --token "$TOKEN"
root=$warm_tmp/gcsroot
mkdir -p "$root/bkt"
"$DLC_BIN/mkdemo" "$warm_tmp/demo" --count 12 --classes 2 >/dev/null
"$DLC_BIN/cachebuild" "$warm_tmp/demo/train" -o "$root/bkt/one.dlc" --size 24 >/dev/null 2>&1 ||
    fail "cachebuild of the store"
"$DLC_BIN/cachebuild" "$warm_tmp/demo/train" -o "$root/bkt/set" --shards 2 --size 24 \
    >/dev/null 2>&1 || fail "cachebuild of the set"
export GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN DLCACHE_GCS_ENDPOINT=http://127.0.0.1:$GCS_PORT

# A folder whose absolute path is 3990 bytes, made relative to the one above.
dir=$("$PY" - "$warm_tmp" <<'EOF'
import os, sys
p = sys.argv[1]
while 3990 - len(p) - 1 > 250:
    p = os.path.join(p, "d" * 200)
p = os.path.join(p, "e" * (3990 - len(p) - 1))
os.makedirs(p)
print(p)
EOF
)

got=
for len in 4040 4060 4085 4095; do
    for src in one.dlc set; do
        name=$(printf 'o%.0s' $(seq $((len - ${#dir} - 1))))
        dest=$dir/$name
        if "$DLC_BIN/cachewarm" "gs://bkt/$src" -o "$dest" -q 2>"$warm_tmp/err"; then
            got+=" $src@$len:downloaded"
            if [ "$src" = set ]; then
                for f in "$root/bkt/set"/*; do
                    cmp "$f" "$dest/${f##*/}" || fail "$src at $len bytes: ${f##*/} differs"
                done
            else
                cmp "$root/bkt/one.dlc" "$dest" || fail "$src at $len bytes differs"
            fi
        else
            got+=" $src@$len:refused"
            grep -q "too long" "$warm_tmp/err" ||
                fail "$src at $len bytes: $(cut -c1-300 "$warm_tmp/err")"
        fi
        # Nothing but DEST and its own neighbours; never a prefix of one of them.
        for f in $(cd "$dir" && ls -A); do
            case ${f#"$name"} in
            "" | .lock | .warm | .warm-part | .warm-journal | .warm-set) ;;
            *) fail "$src at $len bytes: $f made beside DEST (a cut path?)" ;;
            esac
        done
        (cd "$dir" && rm -rf ./o*)
    done
done
note "$got"
# The shortest is well within every limit: a refusal there is a bug, not a limit.
case $got in
*one.dlc@4040:downloaded*set@4040:downloaded*) ;;
*) fail "DEST of 4040 bytes not downloaded:$got" ;;
esac
echo "warm_long_paths: ok"
