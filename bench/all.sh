#!/bin/bash
# bench/all.sh: "make bench", the three benchmarks in one run (about 10
# minutes on the 2-core machine, loopback only), printed as they go and
# written to bench/results.md (OUT=file elsewhere): the machine, the exact
# commands, the verdicts against issue 3's and issue 7's targets, then each
# benchmark's own report.
#
#     bench/all.sh                     what make bench runs
#     QUIET_WAIT=300 bench/all.sh      first wait up to 5 min for a quiet
#                                      machine (request.sh's knob)
#     SMOKE=1 OUT=/tmp/r.md bench/all.sh
#                                      each benchmark's smoke run (~35 s):
#                                      what make test runs; without OUT it
#                                      writes nothing
#
# The analysis of these figures, profiles and before/after comparisons
# included, is bench/findings.md; it is written by hand, never by a run.

set -eu
set -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
if [ -n "${SMOKE:-}" ]; then
    out=${OUT:-}
    snap_args=quick
    admin_env="ROUNDS=1 DURATION=1 WARMUP=1 WORKERS=1000 PROFILE=0"
    request_env="SMOKE=1 PROFILE=0"
else
    out=${OUT:-$top/bench/results.md}
    snap_args=
    admin_env="PROFILE=1"
    request_env="PROFILE=1"
fi

nginx=${NGX_BIN:-/usr/sbin/nginx}

snapbench=$build/snapshot-bench
module=$build/ngx_http_dynamo_rl_module.so

for f in "$snapbench" "$module"; do
    [ -x "$f" ] || [ -f "$f" ] || { echo "$f is missing: make" >&2; exit 1; }
done

work=$(mktemp -d /tmp/dynamo-rl-bench-all.XXXXXX)
trap 'rm -rf "$work"' EXIT

t0=$(date +%s)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# what is measured, taken now: make may rebuild the module meanwhile (each
# benchmark runs a private copy it takes when it starts)
module_sum=$(sha256sum "$module" | cut -c1-12)
module_time=$(date -u -r "$module" '+%Y-%m-%d %H:%M UTC')
tree=$(git -C "$top" describe --always --dirty 2>/dev/null || echo '?')

echo "== snapshot-bench (about 15 s)" >&2
taskset -c 0 "$snapbench" $snap_args | tee "$work/snapshot.txt" >&2

echo "== bench/admin.sh (about 90 s)" >&2
env $admin_env MODULE="$module" SNAPSHOT_BENCH="$snapbench" \
    "$top/bench/admin.sh" | tee "$work/admin.md" >&2

echo "== bench/request.sh (about 8 minutes)" >&2
env $request_env MODULE="$module" "$top/bench/request.sh" \
    | tee "$work/request.md" >&2

t1=$(date +%s)

summary() {
    # summary file pattern: the first SUMMARY line matching the pattern
    grep -m1 "^SUMMARY $2" "$1" | sed 's/^SUMMARY //'
}

ratio() {
    # ratio line: the gateway CPU per request ratio of an admin SUMMARY
    echo "$1" | sed -n 's/.*gateway cpu\/req ratio \([0-9.]*\).*/\1/p'
}

verdict() {
    # verdict value op limit
    awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
        ok = (op == "<=") ? (v <= l) : (v >= l)
        print (v == "" ? "?" : (ok ? "met" : "**MISSED**")) }'
}

rebuild=$(summary "$work/snapshot.txt" 'rebuild/parse')
rebuild_v=$(echo "$rebuild" | sed -n 's/.* = \([0-9.]*\) .*/\1/p')
decision=$(summary "$work/snapshot.txt" 'decision')
same=$(summary "$work/admin.md" 'admin e2e [0-9]*/1, same worker')
random=$(summary "$work/admin.md" 'admin e2e [0-9]*/1, random workers')

{
echo "# Benchmark results: \`make bench\`"
echo
echo "Written by \`bench/all.sh\` ($started, $(( (t1 - t0) / 60 )) min" \
     "$(( (t1 - t0) % 60 )) s); the analysis is \`bench/findings.md\`."
echo
echo "- nginx: $("$nginx" -v 2>&1 | sed 's/.*: //'); module" \
     "\`$module_sum\` built $module_time, tree $tree"
echo "- CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
     "x $(nproc); kernel $(uname -r); load average before: $load_before"
echo "- commands: \`taskset -c 0 build/snapshot-bench${snap_args:+ $snap_args}\`," \
     "\`$admin_env bench/admin.sh\`," \
     "\`$request_env bench/request.sh\`"
echo
echo "## Verdicts"
echo
echo "| target | figure | verdict |"
echo "|---|---|---|"
echo "| index rebuild at 10,000 workers ≤ 1.5 × jansson's parse (3, 7)" \
     "| $rebuild | $(verdict "$rebuild_v" '<=' 1.5) |"
echo "| admin call against the large snapshot (10,000 workers; 1,000 in" \
     "a smoke), gateway CPU ≤ 1.10 × 1 worker, the same worker (3, 7) | $same | $(verdict "$(ratio "$same")" '<=' 1.10) |"
echo "| the same, a worker at random per call | $random" \
     "| $(verdict "$(ratio "$random")" '<=' 1.10) |"
echo "| the decision alone (snapshot-bench), for reference | $decision | |"
echo
echo "The request plane's verdicts (issue 7): see \"Verdicts\" in its report" \
     "below."
echo
sed -n '/^### Verdicts/,/^### Zone/p' "$work/request.md" | sed '$d'
echo
echo "## snapshot-bench"
echo
echo '```'
cat "$work/snapshot.txt"
echo '```'
echo
echo "## bench/admin.sh"
echo
sed 's/^## /### /' "$work/admin.md"
echo
echo "## bench/request.sh"
echo
sed 's/^## /### /' "$work/request.md"
} > "$work/results.md"

cat "$work/results.md"

if [ -n "$out" ]; then
    cp "$work/results.md" "$out"
    echo "written: $out" >&2
fi
