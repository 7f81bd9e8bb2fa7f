#!/usr/bin/env bash
# cachebench and cacheinfo on a mixture of three real stores (include/dlcache/loader.h,
# "Mixtures"): `cacheinfo A B C --plan --weights` says each source's samples per epoch and
# passes; `cachebench load A B C --weights` loads it with the same digest whatever the threads
# and prefetch, says the shares on stderr, and refuses bad weights naming them. No timing is
# asserted.
. "$(dirname "$0")/../lib/e2e.sh" mix_tools
B=$DLC_BIN/cachebench I=$DLC_BIN/cacheinfo

"$DLC_BIN/mkdemo" "$tmp/demo" --count 60 --classes 3 >/dev/null
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/s.dlc" --size 48 --threads 2 >/dev/null 2>&1
"$DLC_BIN/set_split" "$tmp/s.dlc" 3 "$tmp/parts" >/dev/null
p=$tmp/parts/part-0000
A=${p}0-of-00003.dlc C=${p}2-of-00003.dlc
# A set is a source too: the whole set beside two of its own parts.
SET=$tmp/parts

"$I" "$A" "$C" "$SET" --plan --weights 0.5,0.3,0.2 --samples-per-epoch 100 --batch 10 --json \
    >"$tmp/plan.json" || fail "cacheinfo --plan of a mixture"
$PY - "$tmp/plan.json" <<'PYEOF' || fail "plan JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["sources"] == 3 and r["batches_per_rank"] == 10, r
got = [s["samples_per_epoch"] for s in r["mixture"]]
assert got == [50, 30, 20], got
assert [s["records"] for s in r["mixture"]] == [20, 20, 60], r
assert abs(r["mixture"][0]["passes_per_epoch"] - 2.5) < 1e-9, r
assert r["epoch_samples"] == 100, r
PYEOF
"$I" "$A" "$C" --plan | grep -q "repeats its passes\|spreads a pass" || fail "plan text"

run() { # run OUT.json ARGS...
    local out=$1; shift
    "$B" load "$A" "$C" "$SET" --weights 0.5,0.3,0.2 --batch 10 --crop 32 --epochs 2 \
        --seconds 0.2 --json "$@" >"$out" 2>"$out.err" || { cat "$out.err" >&2; fail "load $*"; }
}
run "$tmp/a.json" --threads 1 --prefetch 1
run "$tmp/b.json" --threads 2 --prefetch 3
$PY - "$tmp/a.json" "$tmp/b.json" <<'PYEOF' || fail "load JSON or digests"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["digest"] and a["digest"] == b["digest"], (a["digest"], b["digest"])
assert a["samples_per_s"] > 0 and a["digest_samples"] == 2 * 100, a["digest_samples"]
PYEOF
grep -q "mixture: source 0 .*50 samples per epoch" "$tmp/a.json.err" || {
    cat "$tmp/a.json.err" >&2
    fail "shares on stderr"
}
if "$B" load "$A" "$C" --weights 1,-1 --crop 32 --seconds 0.1 2>"$tmp/bad.err"; then
    fail "a negative weight was taken"
fi
grep -q "weight -1" "$tmp/bad.err" || fail "the negative weight is not named: $(cat "$tmp/bad.err")"
if "$B" load "$A" "$C" --weights 1 --crop 32 --seconds 0.1 2>"$tmp/bad2.err"; then
    fail "one weight for two stores was taken"
fi
grep -q "1 numbers for 2 STOREs" "$tmp/bad2.err" || fail "weight count: $(cat "$tmp/bad2.err")"
echo "mix_tools: ok"
