#!/usr/bin/env bash
# docs/SETS.md's Slurm recipe, run for real: a one-node Slurm on localhost (munged, slurmctld
# and slurmd of this test's own, with their key, configuration, state, spool and logs under
# $tmp, 2 CPUs, on free ports) runs the doc's fenced blocks `build.sbatch`, `join.sbatch`,
# `slurm-submit` and `slurm-rerun` as written, so the doc and the test cannot drift. The jobs
# run as the user nobody, as users' jobs do (and so that a source can be made unreadable).
#  1. The array and the join that waits for it (afterok) make the set that a local --shards
#     build of the same sources makes (the same content digest).
#  2. One source unreadable: its part fails (--strict), the join is never run (it stays
#     pending, DependencyNeverSatisfied), the set's directory has no index and opens as
#     nothing; a join run anyway names the missing part. The source readable again, the
#     doc's rerun of that index and a new join complete the set, equal to the local one.
# Every job is cancelled and every daemon stopped, by PID, at exit, whatever the outcome.
# Needs root and Debian's slurm-wlm and munge (make test installs them); skipped (77) without.
. "$(dirname "$0")/../lib/e2e.sh" set_slurm
skip() {
    echo "SKIP: $*" >&2
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (it starts munged, slurmctld and slurmd of its own)"
for c in munged munge slurmctld slurmd sbatch scontrol squeue scancel sinfo setpriv; do
    command -v "$c" >/dev/null || skip "$c is not installed (Debian: slurm-wlm munge)"
done
getent passwd nobody >/dev/null || skip "no user nobody to run the jobs as"
uid=$(id -u nobody)
gid=$(id -g nobody)

# The doc's fenced block opened by "```sh NAME", exactly.
block() {
    awk -v open='```sh '"$1" '$0 == open { on = 1; next } on && /^```/ { exit } on' \
        "$DLC_SRC/docs/SETS.md"
}
for b in build.sbatch join.sbatch slurm-submit slurm-rerun; do
    [ -n "$(block "$b")" ] || fail "docs/SETS.md has no block \`\`\`sh $b"
done

pids=() # the daemons, in the order started
S=$tmp/slurm
cleanup() {
    local rc=$? i p t
    trap - EXIT
    # The jobs first (slurmd's children), while the controller is there to cancel them.
    if [ ${#pids[@]} -ge 3 ] && kill -0 "${pids[1]}" 2>/dev/null; then
        timeout 10 scancel --quiet --user=nobody 2>/dev/null || true
        for t in $(seq 50); do
            [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        p=${pids[i]}
        kill -TERM "$p" 2>/dev/null || continue
        for t in $(seq 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        for f in "$S"/log/* "$tmp"/work/logs/*; do
            [ -f "$f" ] && { echo "--- $f" && tail -n 15 "$f"; } >&2
        done
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

# The jobs run as nobody: every folder on their way must be searchable and the sources
# readable (munged wants its socket's folders searchable by all, too).
umask 022
chmod 755 "$tmp"
mkdir -p "$S/munge" "$S/state" "$S/spool" "$S/log" "$tmp/work" "$tmp/sets"
chown "$uid:$gid" "$tmp/work" "$tmp/sets"
# The jobs' tools: copies of the build's, which may be where nobody cannot go (/root/...).
mkdir "$tmp/bin"
cp "$DLC_BIN/cachebuild" "$DLC_BIN/cacheinfo" "$tmp/bin/"
as_nobody() { setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"; }
as_nobody "$tmp/bin/cachebuild" --help >/dev/null || fail "the user nobody cannot run cachebuild"

(umask 077 && head -c 1024 /dev/urandom >"$S/munge/key")
chmod 400 "$S/munge/key"
# -F: in the foreground, so that $! is its PID; it logs to stderr.
munged -F --socket="$S/munge/socket" --key-file="$S/munge/key" --pid-file="$S/munge/pid" \
    --seed-file="$S/munge/seed" >"$S/log/munged.log" 2>&1 &
pids+=($!)
for t in $(seq 50); do
    munge -S "$S/munge/socket" -n >/dev/null 2>&1 && break
    sleep 0.2
done
munge -S "$S/munge/socket" -n >/dev/null || fail "munged did not start"

read -r ctld_port slurmd_port < <($PY -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
host=$(uname -n)
host=${host%%.*} # Slurm's name for this machine: gethostname() up to the first dot
# No cgroups (a container may not delegate them): processes tracked through /proc, no task
# binding, no accounting. config_overrides: the node has the 2 CPUs said here, whatever it has.
# batch_sched_delay=0: a batch job is started as soon as it can be (not up to 3 s later).
cat >"$S/slurm.conf" <<EOF
ClusterName=dlctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=dlc Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$S/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$S/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$S/log/slurmd.out" 2>&1 &
pids+=($!)
for t in $(seq 150); do
    [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
    sleep 0.2
done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || fail "the node is not idle: $(sinfo 2>&1)"

# The sources, and the set that the same options make here with --shards.
"$DLC_BIN/mkdemo" "$tmp/demo" --count 160 --classes 4 >/dev/null
tree=$tmp/demo/train
opts=(--size 256 --strict) # as build.sbatch builds
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/local" --shards 4 "${opts[@]}" --threads 2 2>/dev/null
dig() { "$DLC_BIN/cacheinfo" "$1" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["content_digest"])'; }
want=$(dig "$tmp/local")

cd "$tmp/work"
block build.sbatch >build.sbatch
block join.sbatch >join.sbatch
# A block run as nobody, in the folder of the scripts, with the environment a user sets:
# the tools on PATH, the sources, the set and N. Prints the block's output,
# then "array=JOBID" (the block's $jid).
submit() { # submit SET BLOCK_TEXT
    as_nobody env PATH="$tmp/bin:$PATH" HOME="$tmp/work" DLC_SOURCES="$tree" DLC_SET="$1" \
        DLC_PARTS=4 bash -euo pipefail -c "$2"$'\necho "array=$jid"'
}
submitted() { sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$1"; }
array_of() { sed -n 's/^array=\([0-9]*\)$/\1/p' <<<"$1"; }
# One "TASK STATE REASON" line per job of JOBID (an array: per task), sorted.
states() {
    scontrol -o show job "$1" | awk '{
        id = task = st = why = ""
        for (i = 1; i <= NF; i++) {
            k = $i; sub(/=.*/, "", k); v = substr($i, length(k) + 2)
            if (k == "JobId") id = v; else if (k == "ArrayTaskId") task = v
            else if (k == "JobState") st = v; else if (k == "Reason") why = v
        }
        print (task != "" ? task : id), st, why
    }' | sort -n
}
# Until no job of JOBID is pending or running; with REASON, until JOBID pends for REASON
# (and it fails if JOBID ends instead).
settle() { # settle JOBID [REASON]
    local t
    for t in $(seq 600); do # 120 s
        if [ -n "${2:-}" ] && scontrol -o show job "$1" | grep -q " JobState=PENDING Reason=$2 "; then
            return 0
        fi
        if [ -z "$(squeue -h -j "$1" -o %i 2>/dev/null)" ]; then
            [ -z "${2:-}" ] && return 0
            fail "job $1 ended instead of pending for $2: $(states "$1")"
        fi
        sleep 0.2
    done
    fail "job $1 did not ${2:+pend for }${2:-end} in 120 s: $(states "$1")"
}

# 1. The array and the join, as written.
out=$(submit "$tmp/sets/a" "$(block slurm-submit)") || fail "slurm-submit failed: $out"
array=$(array_of "$out")
join=$(submitted "$out")
[ -n "$array" ] && [ -n "$join" ] || fail "no job ids in: $out"
settle "$array"
settle "$join"
[ "$(states "$array")" = "$(printf '%s COMPLETED None\n' 0 1 2 3)" ] ||
    fail "the array's tasks: $(states "$array")"
[ "$(states "$join" | cut -d' ' -f2)" = COMPLETED ] || fail "the join: $(states "$join")"
grep -q '"ok": true' "logs/join-$join.out" || fail "the join's report: $(cat "logs/join-$join.out")"
grep -q '^set ' "logs/join-$join.out" || fail "no cacheinfo in the join's log"
[ "$(dig "$tmp/sets/a")" = "$want" ] || fail "the set built by Slurm differs from --shards 4"

# 2. A part fails: its source unreadable (to nobody; its size and time unchanged).
bad=$tree/$(ls "$tree" | LC_ALL=C sort | tail -n 1)
bad=$bad/$(ls "$bad" | LC_ALL=C sort | tail -n 1) # the last item: part 3's
chmod 000 "$bad"
out=$(submit "$tmp/sets/b" "$(block slurm-submit)") || fail "slurm-submit failed: $out"
array=$(array_of "$out")
join=$(submitted "$out")
settle "$array"
settle "$join" DependencyNeverSatisfied
[ "$(states "$array")" = "$(printf '0 COMPLETED None\n1 COMPLETED None\n2 COMPLETED None\n3 FAILED NonZeroExitCode')" ] ||
    fail "the array's tasks with part 3 unreadable: $(states "$array")"
[ "$(states "$join" | cut -d' ' -f2)" = PENDING ] || fail "the join ran: $(states "$join")"
[ ! -e "logs/join-$join.out" ] || fail "the join left a log: $(cat "logs/join-$join.out")"
grep -q "$bad: cannot open: Permission denied" "logs/build-${array}_3.out" ||
    fail "part 3's log does not name the source: $(cat "logs/build-${array}_3.out")"
[ "$(ls "$tmp/sets/b")" = "$(printf 'part-%05d-of-00004.dlc\n' 0 1 2)" ] ||
    fail "the set's folder after a failed part: $(ls -a "$tmp/sets/b")"
if "$DLC_BIN/cacheinfo" "$tmp/sets/b" >/dev/null 2>&1; then fail "a set without index opens"; fi
if "$DLC_BIN/cachebuild" --join "$tmp/sets/b" 2>"$tmp/join.err"; then fail "a join with a missing part"; fi
grep -q "1 of 4 parts missing: part-00003-of-00004.dlc" "$tmp/join.err" ||
    fail "the join does not name the missing part: $(cat "$tmp/join.err")"
[ ! -e "$tmp/sets/b/index.dlcset" ] || fail "a refused join wrote an index"

# The source readable again; the doc's rerun of the failed index, then its join.
chmod 644 "$bad"
rerun=$(block slurm-rerun)
[ "$(sed -n '1s/^failed=[0-9,]*\( .*\)\{0,1\}$/ok/p' <<<"$rerun")" = ok ] ||
    fail "slurm-rerun does not open with failed=INDICES: $(head -n 1 <<<"$rerun")"
out=$(submit "$tmp/sets/b" "$(sed '1s/^failed=[0-9,]*/failed=3/' <<<"$rerun")") ||
    fail "slurm-rerun failed: $out"
settle "$join" # cancelled by the block
[ "$(states "$join" | cut -d' ' -f2)" = CANCELLED ] || fail "the stuck join: $(states "$join")"
[ ! -e "logs/join-$join.out" ] || fail "the stuck join ran"
array=$(array_of "$out")
join=$(submitted "$out")
settle "$array"
settle "$join"
[ "$(states "$array")" = "3 COMPLETED None" ] || fail "the rerun: $(states "$array")"
[ "$(states "$join" | cut -d' ' -f2)" = COMPLETED ] || fail "the join after the rerun: $(states "$join")"
[ "$(dig "$tmp/sets/b")" = "$want" ] || fail "the set completed by a rerun differs from --shards 4"
echo "set_slurm: ok"
