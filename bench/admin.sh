#!/bin/bash
# bench/admin.sh: the admin plane end to end, with real nginx, on loopback.
#
# Two gateway instances of the module (worker_processes 1, both pinned to
# CPU 0), identical but for their discovery snapshot: one worker, or
# 10,000 workers x 20 routes.  Every worker's system_url is a stub nginx
# ("return 200").  wrk and the stub (which also serves the discovery
# documents as static files, the RL listener) are pinned to CPU 1.  Each
# round runs, in this order, "wrk -t1 -c16 -d${DURATION}s -s post.lua" with
# POST /v1/rl/workers/<id>/engine/liveness_probe against
#
#   1             the 1-worker gateway (its only worker);
#   10000         the 10,000-worker gateway, the same worker every call;
#   10000-random  the 10,000-worker gateway, a worker at random per call.
#
#     bench/admin.sh                   5 rounds x 3 variants x 5 s: ~85 s
#     ROUNDS=3 DURATION=5 bench/admin.sh
#     PROFILE=1 bench/admin.sh         + perf record of the big gateway
#
# system_url is an IP literal, so each call opens a new upstream
# connection, as in production: the module refuses a system_url that
# names an upstream group of the gateway (a listener could name the
# frontend's), which is what keepalive to the stub once needed.
#
# Prints markdown tables: per round requests/s, latency p50/p99, gateway
# CPU per request, CPU 0 and CPU 1 busy, other processes' CPU and steal
# time; then the medians of the per-round ratios 10k/1.

set -eu
set -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)

. "$top/bench/lib.sh"

bench_knobs 5 5 16 2
snapbench=${SNAPSHOT_BENCH:-$top/build/snapshot-bench}
big=${WORKERS:-10000}
route=liveness_probe

prefix=$(mktemp -d /tmp/dynamo-rl-bench.XXXXXX)
chmod 755 "$prefix"
bench_name=admin.sh
instances="gw1 gwbig stub"

bench_traps

for t in wrk taskset curl "$nginx"; do
    command -v "$t" > /dev/null || die "$t is missing (apt-get install -y wrk)"
done

[ -f "$module" ] || die "$module is missing: run make"

if [ "$(nproc)" -lt 2 ] && [ "$gw_cpu" != "$load_cpu" ]; then
    die "needs 2 CPUs (or GATEWAY_CPU=LOAD_CPU)"
fi

# the snapshot generator; the Makefile target if there is one

if [ ! -x "$snapbench" ] || [ "$top/bench/snapshot_bench.c" -nt "$snapbench" ]
then
    if grep -q '^$(BUILD)/snapshot-bench:' "$top/Makefile"; then
        make -C "$top" -s "$snapbench"
    else
        b=$top/build/nginx
        cc -g -O2 -Wall -Werror -Wextra -Wno-unused-parameter \
            -I"$b"/src/core -I"$b"/src/event -I"$b"/src/event/modules \
            -I"$b"/src/os/unix -I"$b"/src/http -I"$b"/src/http/modules \
            -I"$b"/src/http/v2 -I"$b"/objs -I"$top"/ngx_dynamo_rl_module \
            -o "$snapbench" "$top/bench/snapshot_bench.c" \
            "$top"/ngx_dynamo_rl_module/ngx_http_dynamo_rl_parse.c \
            "$top"/ngx_dynamo_rl_module/ngx_http_dynamo_rl_json.c -ljansson
    fi
fi

# four free loopback ports

free_ports 4
stub_port=$base
listener_port=$((base + 1))
gw1_port=$((base + 2))
gwbig_port=$((base + 3))

# a private copy of the module: others may rebuild build/ meanwhile

cp "$module" "$prefix/module.so"
module_time=$(date -u -r "$module" '+%H:%M:%S')
mkdir -p "$prefix/docs" "$prefix/gw1" "$prefix/gwbig" "$prefix/stub"

system_url=http://127.0.0.1:$stub_port

id=$("$snapbench" emit 1 "$system_url" "$prefix/docs/n1.json")
id_big=$("$snapbench" emit "$big" "$system_url" "$prefix/docs/nbig.json" all)
[ "$id" = "$id_big" ] || die "the documents target different ids"

# another worker of the big snapshot: known there, unknown in the small one
other=$(awk 'match($0, /"instance_id":[0-9]+/) {
                 print substr($0, RSTART + 14, RLENGTH - 14); exit }' \
        "$prefix/docs/nbig.json")

chmod 644 "$prefix"/docs/*

cat > "$prefix/stub/nginx.conf" <<EOF
$(conf_head stub)

http {
$(temp_paths "$prefix/stub")
    access_log  off;
    keepalive_requests  1000000;

    # the workers' system servers
    server {
        listen  127.0.0.1:$stub_port reuseport backlog=4096;

        location /engine/ {
            default_type  application/json;
            return 200 '{"status":"ok"}';
        }
    }

    # the RL listener: the generated discovery documents
    server {
        listen  127.0.0.1:$listener_port;
        root    $prefix/docs;
        default_type  application/json;
    }
}
EOF

gateway_conf() {
    # gateway_conf dir port document
    cat <<EOF
load_module  $prefix/module.so;

$(conf_head "$1")

http {
$(temp_paths "$prefix/$1")
    # the module's cost, not the log's
    access_log  off;
    keepalive_requests  1000000;

    # the 10,000-worker document is about 8 MB
    dynamo_rl_zone  zone=rl:32m;

    upstream rl_listener {
        server     127.0.0.1:$listener_port;
        keepalive  4;
    }

    server {
        listen  127.0.0.1:$2 backlog=4096;

        proxy_connect_timeout  5s;
        proxy_read_timeout     45s;
        proxy_http_version     1.1;
        proxy_set_header       Connection "";

        location /v1/rl/workers/ {
            dynamo_rl_plane      admin;
            dynamo_rl_namespace  prefix=dynamo;
            dynamo_rl_discovery  /_rl_discovery valid=1h max_size=16m;

            proxy_pass  \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream  off;
        }

        location = /_rl_discovery {
            internal;

            proxy_pass  http://rl_listener/$3;
            subrequest_output_buffer_size  16m;
        }
    }
}
EOF
}

gateway_conf gw1 "$gw1_port" n1.json > "$prefix/gw1/nginx.conf"
gateway_conf gwbig "$gwbig_port" nbig.json > "$prefix/gwbig/nginx.conf"

start stub "$load_cpu"
start gw1 "$gw_cpu"
start gwbig "$gw_cpu"

for p in $stub_port $listener_port $gw1_port $gwbig_port; do
    wait_for "$p"
done

# our processes: the masters and their workers

gw1_worker=$(worker_of gw1)
gwbig_worker=$(worker_of gwbig)
ours="$(pids_of stub) $(pids_of gw1) $(pids_of gwbig)"

# each gateway: a first call fetches the snapshot and builds the index,
# then the decision is checked both ways

call() {
    # call port id route: "status body"
    curl -s -o /dev/stdout -w ' %{http_code}' -X POST \
        -H 'Content-Type: application/json' -d '{}' \
        "http://127.0.0.1:$1/v1/rl/workers/$2/engine/$3"
}

for g in "gw1 $gw1_port" "gwbig $gwbig_port"; do
    set -- $g  # two words
    r=$(call "$2" "$id" "$route")
    [ "$r" = '{"status":"ok"} 200' ] || die "$1: the call gave: $r"
    r=$(call "$2" "$id" not_advertised)
    [ "${r##* }" = 403 ] || die "$1: an unadvertised route gave: $r"
done

r=$(call "$gwbig_port" "$other" not_advertised)
[ "${r##* }" = 403 ] || die "the big snapshot lacks worker $other: $r"
r=$(call "$gw1_port" "$other" "$route")
[ "${r##* }" = 404 ] || die "the small snapshot knows worker $other: $r"

# every variant runs the same script: a path at random from its file,
# which holds one path, or one per worker of the big snapshot

cat > "$prefix/post.lua" <<'EOF'
local paths = {}

function init(args)
    for line in io.lines(args[1]) do
        paths[#paths + 1] = line
    end
end

function request()
    return wrk.format("POST", paths[math.random(#paths)],
                      { ["Content-Type"] = "application/json" }, "{}")
end
EOF

url_path=/v1/rl/workers/$id/engine/$route
echo "$url_path" > "$prefix/paths-one"
sed "s|.*|/v1/rl/workers/&/engine/$route|" "$prefix/docs/nbig.json.ids" \
    > "$prefix/paths-random"

# the load: wrk pinned (bench/lib.sh has the jiffies and perf helpers)

run_wrk() {
    # run_wrk port seconds out paths: wrk pinned, its CPU time in out.time
    run_client "$3" wrk -t1 -c"$conns" -d"$2"s --latency \
        -s "$prefix/post.lua" "http://127.0.0.1:$1/" -- "$4"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)

for g in "$gw1_port one" "$gwbig_port random"; do
    set -- $g  # two words
    run_wrk "$1" "$warmup" "$prefix/warmup.out" "$prefix/paths-$2"
    if grep -q -e Non-2xx -e 'Socket errors' "$prefix/warmup.out"; then
        cat "$prefix/warmup.out" >&2
        die "the warm-up had errors"
    fi
done

results=$prefix/results
: > "$results"

for round in $(seq 1 "$rounds"); do
    for variant in 1 big random; do
        case $variant in
        1)
            port=$gw1_port; worker=$gw1_worker; label=1
            paths=$prefix/paths-one ;;
        big)
            port=$gwbig_port; worker=$gwbig_worker; label=$big
            paths=$prefix/paths-one ;;
        random)
            port=$gwbig_port; worker=$gwbig_worker; label=$big-random
            paths=$prefix/paths-random ;;
        esac

        out=$prefix/wrk-$round-$variant.out

        t0=$(date +%s.%N)
        all0=$(cpu_field 2 4); c00=$(cpu_busy cpu$gw_cpu)
        c10=$(cpu_busy cpu$load_cpu); st0=$(cpu_field 9 9)
        si0=$(cpu_field 7 8)
        ours0=$(proc_jiffies $ours); gw0=$(proc_jiffies "$worker")

        run_wrk "$port" "$duration" "$out" "$paths"

        t1=$(date +%s.%N)
        all1=$(cpu_field 2 4); c01=$(cpu_busy cpu$gw_cpu)
        c11=$(cpu_busy cpu$load_cpu); st1=$(cpu_field 9 9)
        si1=$(cpu_field 7 8)
        ours1=$(proc_jiffies $ours); gw1=$(proc_jiffies "$worker")

        read -r wu ws < "$out.time"

        rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
        reqs=$(awk '/requests in/ { print $1 }' "$out")
        p50=$(to_us "$(awk '$1 == "50%" { print $2 }' "$out")")
        p99=$(to_us "$(awk '$1 == "99%" { print $2 }' "$out")")
        bad=$(awk '/Non-2xx/ { print $NF }' "$out")
        errs=$(awk '/Socket errors/ { print }' "$out")

        [ -n "$rps" ] || { cat "$out" >&2; die "wrk failed"; }
        [ -z "$bad" ] || die "round $round/$label: $bad non-2xx responses"
        [ -z "$errs" ] || die "round $round/$label: $errs"

        awk -v round="$round" -v label="$label" -v rps="$rps" \
            -v reqs="$reqs" -v p50="$p50" -v p99="$p99" -v hz="$hz" \
            -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
            -v all="$((all1 - all0))" -v c0="$((c01 - c00))" \
            -v c1="$((c11 - c10))" -v steal="$((st1 - st0))" \
            -v softirq="$((si1 - si0))" \
            -v ours="$((ours1 - ours0))" -v gw="$((gw1 - gw0))" \
            -v wrk="$(awk -v u="$wu" -v s="$ws" 'BEGIN { print u + s }')" \
            'BEGIN {
                # other processes: user + nice + system of all the CPUs
                # minus ours and wrk
                other = all - ours - wrk * hz
                if (other < 0) other = 0
                printf "%s %s %.0f %.0f %.0f %.2f %.0f %.0f %.0f %.0f %.0f\n",
                    round, label, rps, p50, p99,
                    gw / hz * 1e6 / reqs,
                    c0 / hz / t * 100, c1 / hz / t * 100,
                    other / hz / t * 100, softirq / hz / t * 100,
                    steal / hz / t * 100
            }' >> "$results"
    done
done

# PROFILE=1: where the big gateway's worker spends its time, a worker at
# random and the same worker, outside the measured series (cpu-clock: no
# hardware counters in this KVM guest)

profiles=
if [ "${PROFILE:-0}" = 1 ] && command -v perf > /dev/null; then
    w=$(worker_of gwbig)
    for paths in random one; do
        run_wrk "$gwbig_port" $((duration + 2)) "$prefix/perf-$paths.load" \
            "$prefix/paths-$paths" &
        load=$!
        sleep 1
        perf_sample "$w" "$duration" "$prefix/perf-$paths.data"
        wait "$load" || true
        perf_top "$prefix/perf-$paths.data" dso,sym 25 '\[k\]' \
            > "$prefix/perf-$paths.sym"
        profiles="$profiles $paths"
    done
fi

check_alerts

echo "## admin call, end to end: 1 vs $big workers x 20 routes"
echo
echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'), $("$nginx" -v 2>&1 | sed 's/.*: //')," \
     "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
     "x $(nproc), kernel $(uname -r), module $(sha256sum "$prefix/module.so" \
     | cut -c1-12) (built $module_time)," \
     "load average before: $load_before"
echo
echo "POST $url_path, wrk -t1 -c$conns -d${duration}s --latency," \
     "gateways on CPU $gw_cpu, wrk and stub on CPU $load_cpu," \
     "a connection per call, $rounds rounds A B C A B C:" \
     "1 = the 1-worker snapshot; $big = the $big-worker one, the same" \
     "worker every call; $big-random = a worker at random per call"
echo
echo "| round | snapshot | req/s | p50 us | p99 us | gateway CPU us/req |" \
     "CPU$gw_cpu busy % | CPU$load_cpu busy % | other procs CPU % |" \
     "irq+softirq % | steal % |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
       $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$results"
echo

awk -v big="$big" '
    $2 == "1" { r1[$1] = $3; c1[$1] = $6; l1[$1] = $5; n++ }
    $2 == big { rb[$1] = $3; cb[$1] = $6; lb[$1] = $5 }
    $2 == big "-random" { rr[$1] = $3; cr[$1] = $6; lr[$1] = $5 }
    function median(a, k,    i, j, t, s) {
        for (i = 1; i <= k; i++) s[i] = a[i]
        for (i = 1; i <= k; i++)
            for (j = i + 1; j <= k; j++)
                if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
        return k % 2 ? s[(k + 1) / 2] : (s[k / 2] + s[k / 2 + 1]) / 2
    }
    function ratios(name, r, c, l,    i, x, y, z, line, cline) {
        for (i = 1; i <= n; i++) {
            x[i] = r[i] / r1[i]; z[i] = l[i] / l1[i]
            y[i] = c1[i] > 0 ? c[i] / c1[i] : 0
            line = line sprintf(" %.3f", x[i])
            cline = cline sprintf(" %.3f", y[i])
        }
        printf "| %s | %.3f | %.3f | %.3f |%s |%s |\n", name,
            median(x, n), median(y, n), median(z, n), line, cline
        summary = summary sprintf("SUMMARY admin e2e %s: rps ratio %.3f," \
            " gateway cpu/req ratio %.3f\n", name, median(x, n), median(y, n))
    }
    END {
        print "| ratio against the 1-worker snapshot | requests/s" \
              " | gateway CPU/request | p99 latency | per-round req/s" \
              " | per-round CPU/request |"
        print "|---|---|---|---|---|---|"
        ratios(big "/1, same worker", rb, cb, lb)
        ratios(big "/1, random workers", rr, cr, lr)
        print ""
        printf "%s", summary
    }' "$results"

for paths in $profiles; do
    echo
    echo "perf of the $big-worker gateway, $paths worker(s), user space:"
    echo
    echo '```'
    cat "$prefix/perf-$paths.sym"
    echo '```'
done

echo
for g in gw1 gwbig; do
    w=$(ps -o pid= --ppid "$(cat "$prefix/$g/nginx.pid")" | tr -d ' ')
    echo "$g worker RSS after the run: $(awk '/^VmRSS/ { print $2, $3 }' \
         "/proc/$w/status")"
done
