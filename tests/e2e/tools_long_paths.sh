#!/usr/bin/env bash
# Paths near Linux's PATH_MAX (4096 bytes with its NUL) are never cut short (issue H7): a path
# built in a fixed buffer and cut names another file or folder (a prefix of the intended one),
# which would then be read, created or removed. Each tool either does the job at the full path
# or refuses, naming the path; nothing is ever made at a cut path.
. "$(dirname "$0")/../lib/e2e.sh" tools_long_paths

# deep LENGTH: a folder under $tmp whose absolute path is LENGTH bytes (folders of 250 bytes,
# then one of the rest), made relative to the one above so no call sees the whole path.
deep() {
    $PY - "$tmp" "$1" <<'EOF'
import os, sys
base, want = sys.argv[1], int(sys.argv[2])
p = base
os.chdir(base)
while want - len(p) > 251 + 20:
    os.makedirs("d" * 250, exist_ok=True)
    os.chdir("d" * 250)
    p += "/" + "d" * 250
rest = want - len(p) - 1
os.makedirs("e" * rest, exist_ok=True)
print(p + "/" + "e" * rest)
EOF
}

# no_prefix DIR NAME: nothing in DIR is named by a proper prefix of NAME (a cut path's name).
no_prefix() {
    local f
    for f in $(cd "$1" && ls -A); do
        [ "$f" = "$2" ] || [ "${2#"$f"}" = "$2" ] || fail "$1/$f: made at a cut path of $1/$2"
    done
}

# mkdemo --photos DIR, where DIR/NAME.jpg is longer than a path can be: refused, naming it.
# Cut to 4095 bytes, the path named DIR/NAME without ".jpg", another photo (planted there),
# which mkdemo used to decode instead, silently.
photos=/usr/share/backgrounds/mate/nature
[ -d "$photos" ] || photos=${DLCACHE_DEMO_PHOTOS:-}
if [ -n "$photos" ] && [ -d "$photos" ]; then
    pdir=$(deep 3950)
    name=$(printf 'p%.0s' $(seq 200))
    first=$(ls "$photos" | grep -i '\.jpe\?g$' | sort | head -1)
    other=$(ls "$photos" | grep -i '\.jpe\?g$' | sort | sed -n 2p)
    cut=${name:0:$((4095 - ${#pdir} - 1))}
    (cd "$pdir" && cp "$photos/$first" "$name.jpg" && cp "$photos/$other" "$cut")
    rc=0
    "$DLC_BIN/mkdemo" "$tmp/demo-long" --count 4 --classes 1 --photos "$pdir" \
        >/dev/null 2>"$tmp/err.txt" || rc=$?
    [ "$rc" != 0 ] || fail "mkdemo --photos with a photo's path of $((${#pdir} + 205)) bytes succeeded"
    grep -qF "$name.jpg: path too long" "$tmp/err.txt" ||
        fail "mkdemo: the long photo path is not named: $(cut -c1-300 "$tmp/err.txt")"
    [ ! -e "$tmp/demo-long/train" ] || fail "mkdemo made images after the refusal"
fi

"$DLC_BIN/mkdemo" "$tmp/demo" --count 12 --classes 2 >/dev/null
cd "$tmp"

# cachebuild -o a store or a set whose path ends near PATH_MAX: built (and opened by cacheinfo
# and the loader) or refused, naming the path; never a file or folder at a cut path.
dir=$(deep 3990)
for len in 4060 4085 4090 4095 4100; do
    for kind in store set; do
        name=$(printf 'o%.0s' $(seq $((len - ${#dir} - 1))))
        out=$dir/$name
        args=(--size 24 --threads 1)
        [ $kind = store ] || args+=(--shards 2)
        if "$DLC_BIN/cachebuild" demo/train -o "$out" "${args[@]}" >/dev/null 2>"$tmp/err.txt" \
            </dev/null; then
            "$DLC_BIN/cacheinfo" "$out" >/dev/null 2>"$tmp/err.txt" ||
                fail "the $kind built at $len bytes does not open: $(cut -c1-200 "$tmp/err.txt")"
            "$DLC_BIN/cachebench" load "$out" --epochs 1 --batch 4 --crop 16 --threads 1 --seconds 0.1 \
                >/dev/null 2>"$tmp/err.txt" ||
                fail "the $kind built at $len bytes does not load: $(cut -c1-200 "$tmp/err.txt")"
        else
            grep -q "too long" "$tmp/err.txt" ||
                fail "cachebuild $kind at $len bytes: not refused as too long: $(cut -c1-200 "$tmp/err.txt")"
        fi
        no_prefix "$dir" "$name"
        (cd "$dir" && rm -rf ./o*)
    done
done
echo "tools_long_paths: ok"
