#!/bin/bash
# bench/callgrind.sh: instructions per request of the request plane, by
# callgrind, which other processes sharing the machine do not move.
#
# An upstream nginx ("return 200" with the ~600-byte completion) and one
# gateway run single-process under "valgrind --tool=callgrind", loaded by
# "wrk -t1 -c16 -s bench/wrk-request.lua" (POST /v1/completions, the
# 55-byte body, minted ids).  After a warm-up the counters are zeroed
# (callgrind_control -z), a measured run follows, the counters are dumped
# (callgrind_control -d) and divided by the requests wrk completed.
#
#     bench/callgrind.sh [VARIANT...]   plain module body-off ledger-off
#                                       id-header-off floor
#     MODULE=/tmp/old.so bench/callgrind.sh module    another build
#
# Knobs: MODULE (the .so), DURATION (5 s), WARMUP (2 s), SDK=1 (the
# requests carry an OpenAI SDK's headers, see wrk-request.lua), CACHE_SIM=1
# (--cache-sim=yes: L1i and last-level misses too), KEEP=1 (the scratch
# directory with the callgrind.out files, for callgrind_annotate).
# Prints one line per variant: instructions per request, the part of them
# in glibc's malloc.c (which moves with the heap's state from run to run),
# the others, and with CACHE_SIM=1 the misses per request.

set -eu
set -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
bench_name=callgrind.sh

. "$top/bench/lib.sh"

duration=${DURATION:-5}
warmup=${WARMUP:-2}
variants=${*:-plain module}
load_cpu=${LOAD_CPU:-1}
gw_cpu=${GATEWAY_CPU:-0}

command -v valgrind > /dev/null || die "valgrind is not installed"
command -v wrk > /dev/null || die "wrk is not installed"

prefix=$(mktemp -d /tmp/dynamo-rl-callgrind-XXXXXX)
instances="up"
vg_pid=
bench_traps

stop_vg() {
    if [ -n "$vg_pid" ]; then
        kill -TERM "$vg_pid" 2>/dev/null || true
        wait "$vg_pid" 2>/dev/null || true
        vg_pid=
    fi
}

trap 'stop_vg; cleanup' EXIT
trap 'stop_vg; cleanup; exit 130' INT TERM

free_ports 2
up_port=$base
gw_port=$((base + 1))

cp "$module" "$prefix/module.so"
mkdir -p "$prefix/up" "$prefix/gw"

cat > "$prefix/up/nginx.conf" <<EOF
$(upstream_head "$up_port")
    }
}
EOF

start up "$load_cpu"
wait_for "$up_port"

gateway_conf() {
    # gateway_conf variant: the gateway, as bench/request.sh's
    case $1 in
    plain) ;;
    *) echo "load_module  $prefix/module.so;" ;;
    esac
    cat <<EOF
$(conf_head gw single)

http {
$(temp_paths "$prefix/gw")
    access_log  off;
    keepalive_requests  1000000;

EOF
    [ "$1" = plain ] || cat <<EOF
    dynamo_rl_zone         zone=rl:8m;
    dynamo_rl_attempt_ttl  10m;

EOF
    cat <<EOF
    upstream completions {
        server              127.0.0.1:$up_port;
        keepalive           32;
        keepalive_requests  1000000;
    }

    server {
        listen  127.0.0.1:$gw_port backlog=4096;

        proxy_http_version       1.1;
        proxy_set_header         Connection "";
        proxy_buffering          off;
        proxy_request_buffering  off;

        location /v1/ {
EOF
    case $1 in
    plain) ;;
    module) echo "            dynamo_rl_plane  request;" ;;
    body-off)
        echo "            dynamo_rl_plane        request;"
        echo "            dynamo_rl_body_policy  off;" ;;
    ledger-off)
        echo "            dynamo_rl_plane  request;"
        echo "            dynamo_rl_ledger off;"
        echo "            dynamo_rl_gate   off;" ;;
    id-header-off)
        echo "            dynamo_rl_plane                   request;"
        echo "            dynamo_rl_attempt_upstream_header off;" ;;
    floor)
        # the plane with every optional part off (lib.sh)
        floor_policy ;;
    *) die "no variant $1" ;;
    esac
    cat <<EOF
            proxy_pass  http://completions;
        }
    }
}
EOF
}

requests() {
    # requests file: the requests wrk completed
    awk '/requests in/ { print $1 }' "$1"
}

sim=${CG_OPTS:-}
[ -z "${CACHE_SIM:-}" ] || sim="$sim --cache-sim=yes"

for v in $variants; do
    gateway_conf "$v" > "$prefix/gw/nginx.conf"
    out=$prefix/callgrind.out.$v
    taskset -c "$gw_cpu" valgrind --tool=callgrind $sim \
        --callgrind-out-file="$out" \
        "$nginx" -p "$prefix/gw/" -c "$prefix/gw/nginx.conf" \
        > "$prefix/vg.$v.log" 2>&1 &
    vg_pid=$!
    wait_for "$gw_port"

    taskset -c "$load_cpu" wrk -t1 -c16 -d"${warmup}s" \
        -s "$top/bench/wrk-request.lua" "http://127.0.0.1:$gw_port/v1/" \
        -- nonce "cg-w-$v-$$" > "$prefix/wrk-w.$v"
    callgrind_control -z "$vg_pid" > /dev/null 2>&1
    taskset -c "$load_cpu" wrk -t1 -c16 -d"${duration}s" \
        -s "$top/bench/wrk-request.lua" "http://127.0.0.1:$gw_port/v1/" \
        -- nonce "cg-$v-$$" > "$prefix/wrk.$v"
    callgrind_control -d "$vg_pid" > /dev/null 2>&1
    stop_vg

    n=$(requests "$prefix/wrk.$v")
    grep -q "Non-2xx" "$prefix/wrk.$v" && die "$v: non-2xx responses"
    dump=$(ls -t "$out".* 2>/dev/null | head -1)
    [ -n "$dump" ] || die "$v: no callgrind dump"
    # the part in glibc's malloc.c: it moves by a few hundred per request
    # from run to run with the heap's state, so it is shown apart
    mal=$(callgrind_annotate --threshold=100 --auto=no "$dump" 2>/dev/null \
          | awk '/malloc\/malloc.c:/ { x = $1; gsub(/,/, "", x); s += x }
                 END { print s + 0 }')
    awk -v n="$n" -v v="$v" -v mal="$mal" '
        /^events:/ { for (i = 2; i <= NF; i++) ev[i - 1] = $i }
        /^summary:/ {
            line = sprintf("%-11s %8d requests  Ir/request %7.0f" \
                           "  malloc.c %5.0f  others %7.0f", v, n, $2 / n,
                           mal / n, ($2 - mal) / n)
            for (i = 3; i <= NF; i++)
                if (ev[i - 1] == "I1mr" || ev[i - 1] == "DLmr" \
                    || ev[i - 1] == "DLmw")
                    line = line sprintf("  %s %.2f", ev[i - 1], $i / n)
            print line
        }' "$dump"
done
