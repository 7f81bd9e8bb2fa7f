#!/usr/bin/env bash
# What the tools refuse, at once and said once (issue 23): a FIFO where a store, a set's part,
# a manifest or a tar shard should be is named and refused, never waited on (opening a FIFO for
# reading blocks until a writer comes: cacheinfo FIFO hung forever); cachebuild creates the
# missing folders above its output as mkdir -p would, and when it cannot, it names the folder
# and says the reason once; mkdemo writes no image through a link or into a FIFO.
. "$(dirname "$0")/../lib/e2e.sh" tools_refusals

"$DLC_BIN/mkdemo" "$tmp/demo" --count 12 --classes 2 >/dev/null
cd "$tmp"
mkfifo fifo.dlc fifo.tsv fifo.tar
# Each runs under a KILL timeout: a hang is a failure (137), not a stuck test.
refused() { # WORDS COMMAND...: fails, within 60 s, with WORDS on stderr
    local words=$1
    shift
    local rc=0
    timeout -s KILL 60 "$@" >out.txt 2>err.txt || rc=$?
    [ "$rc" != 137 ] || fail "$*: still waiting after 60 s"
    [ "$rc" != 0 ] || fail "$*: succeeded"
    grep -qF -- "$words" err.txt || fail "$*: no \"$words\" in: $(cat err.txt)"
}
refused "fifo.dlc: a FIFO, not a regular file" "$DLC_BIN/cacheinfo" fifo.dlc
refused "fifo.dlc: a FIFO, not a regular file" "$DLC_BIN/cachebench" load fifo.dlc
refused "fifo.tsv: a FIFO, not a regular file (a manifest" \
    "$DLC_BIN/cachebuild" fifo.tsv -o x.dlc
refused "fifo.tar: a FIFO, not a regular file (a tar shard" \
    "$DLC_BIN/cachebuild" fifo.tar -o x.dlc
# Pushing a FIFO: refused before any request (the endpoint is a closed port).
AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=y refused "fifo.dlc: a FIFO, not a regular file" \
    "$DLC_BIN/cachewarm" push fifo.dlc s3://b/x.dlc --endpoint http://127.0.0.1:9
# A set whose part is a FIFO.
"$DLC_BIN/cachebuild" demo/train -o set --shards 2 --size 24 2>/dev/null
part=$(ls set/part-*.dlc | head -1)
rm "$part" && mkfifo "$part"
refused "shard ${part#set/}: a FIFO, not a regular file" "$DLC_BIN/cacheinfo" set

# The output's missing folders are made; a folder that cannot be is named, once.
"$DLC_BIN/cachebuild" demo/train -o runs/today/train.dlc --size 24 2>err.txt ||
    fail "cachebuild into missing folders: $(cat err.txt)"
"$DLC_BIN/cacheinfo" runs/today/train.dlc >/dev/null || fail "the store built there does not open"
"$DLC_BIN/cachebuild" demo/train -o runs/sets/train --shards 2 --size 24 2>err.txt ||
    fail "cachebuild of a set into missing folders: $(cat err.txt)"
"$DLC_BIN/cacheinfo" runs/sets/train >/dev/null || fail "the set built there does not open"
touch plain
refused "cannot create plain/sub, a folder of plain/sub/x.dlc: Not a directory" \
    "$DLC_BIN/cachebuild" demo/train -o plain/sub/x.dlc --size 24
[ "$(grep -c "Not a directory" err.txt)" = 1 ] || fail "the reason said more than once: $(cat err.txt)"
# A missing source: its reason once, after its path.
refused "missing: cannot open source: No such file or directory" \
    "$DLC_BIN/cachebuild" missing -o y.dlc
[ "$(grep -o "No such file or directory" err.txt | wc -l)" = 1 ] ||
    fail "the reason said more than once: $(cat err.txt)"
# mkdemo rerun into its folder: a link or a FIFO in the place of one of its images is not
# followed, truncated or waited on; the file the link names is left as it was.
ls demo/train >classes.txt
cls=$(head -1 classes.txt)
echo "theirs" >victim.txt
rm "demo/train/$cls/00001.jpg"
ln -s "$tmp/victim.txt" "demo/train/$cls/00001.jpg"
refused "00001.jpg: it is a symbolic link, which mkdemo does not follow" \
    "$DLC_BIN/mkdemo" demo --count 12 --classes 2
[ "$(cat victim.txt)" = theirs ] || fail "mkdemo wrote through a link"
rm "demo/train/$cls/00001.jpg"
mkfifo "demo/train/$cls/00001.jpg"
refused "00001.jpg: it is a FIFO" "$DLC_BIN/mkdemo" demo --count 12 --classes 2
rm "demo/train/$cls/00001.jpg"
"$DLC_BIN/mkdemo" demo --count 12 --classes 2 >/dev/null 2>err.txt ||
    fail "mkdemo rerun over its own images: $(cat err.txt)"
echo "tools_refusals: ok"
