# bench/lib.sh: what the benchmark scripts share, sourced by them once
# they have set $top:
#
#     . "$top/bench/lib.sh"
#
# It sets $nginx (NGX_BIN, /usr/sbin/nginx) and $module (MODULE, the
# build's), and bench_knobs sets the knobs of a load benchmark.
#
# Processes: the scratch directory, the nginx instances started there and
# the pinned load client, and their cleanup; free ports.  Measurement: CPU
# jiffies from /proc, wrk's latencies, perf samples.  A script sets, before
# it calls these:
#
#     bench_name   its name, for messages ("admin.sh")
#     prefix       its scratch directory
#     instances    the nginx instances, one directory each under $prefix
#     load_cpu     the CPU the load client is pinned to
#
# and calls bench_traps once $prefix exists.

# the nginx and the module under test ($top is the top of the tree)
nginx=${NGX_BIN:-/usr/sbin/nginx}
module=${MODULE:-$top/build/ngx_http_dynamo_rl_module.so}

client_pid=

# other daemons a script started (redis-server): stopped by their PIDs
daemon_pids=

# ---------------------------------------------------------------------
# knobs

bench_knobs() {
    # bench_knobs ROUNDS DURATION CONNECTIONS [WARMUP]: the knobs of every
    # load benchmark, from the environment or these defaults, and the CPUs
    # of the gateways (GATEWAY_CPU, 0) and of the load client (LOAD_CPU, 1)
    rounds=${ROUNDS:-$1}
    duration=${DURATION:-$2}
    conns=${CONNECTIONS:-$3}
    warmup=${WARMUP:-${4:-0}}
    gw_cpu=${GATEWAY_CPU:-0}
    load_cpu=${LOAD_CPU:-1}
}

# ---------------------------------------------------------------------
# processes

die() {
    echo "$bench_name: $*" >&2
    exit 1
}

keep_or_remove() {
    # keep_or_remove: the scratch directory stays with KEEP=1
    if [ -n "${KEEP:-}" ]; then
        echo "$bench_name: logs kept in $prefix" >&2
    else
        rm -rf "$prefix"
    fi
}

cleanup() {
    trap - INT TERM EXIT
    if [ -n "$client_pid" ]; then
        # /usr/bin/time and the client it runs
        for c in $(ps -o pid= --ppid "$client_pid" 2>/dev/null); do
            kill -TERM "$c" 2>/dev/null || true
        done
        kill -TERM "$client_pid" 2>/dev/null || true
        wait "$client_pid" 2>/dev/null || true
    fi
    for d in $instances; do
        if [ -f "$prefix/$d/nginx.pid" ]; then
            kill -TERM "$(cat "$prefix/$d/nginx.pid")" 2>/dev/null || true
        fi
    done
    for p in $daemon_pids; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    for d in $instances; do
        i=0
        while [ -f "$prefix/$d/nginx.pid" ] && [ $i -lt 50 ]; do
            sleep 0.1; i=$((i + 1))
        done
    done
    keep_or_remove
}

bench_traps() {
    trap cleanup EXIT
    trap 'cleanup; exit 130' INT TERM
    trap 'echo "$bench_name: failed at line $LINENO" >&2' ERR
}

port_free() {
    ! ss -Hltn "sport = :$1" | grep -q .
}

free_ports() {
    # free_ports n: sets base, the first of n free loopback ports in a row
    for try in $(seq 1 20); do
        base=$((20000 + (RANDOM % 400) * 20))
        ok=1
        for p in $(seq "$base" $((base + $1 - 1))); do
            port_free "$p" || { ok=0; break; }
        done
        [ $ok = 0 ] || break
        [ "$try" -lt 20 ] || die "no free ports"
    done
}

conf_head() {
    # conf_head dir [single]: the main context every instance shares;
    # "single" keeps the one process in the foreground (under valgrind)
    echo "worker_processes  1;"
    [ "${2:-}" != single ] || cat <<EOF
daemon            off;
master_process    off;
EOF
    cat <<EOF
pid               $prefix/$1/nginx.pid;
error_log         $prefix/$1/error.log warn;

events {
    worker_connections  4096;
}
EOF
}

temp_paths() {
    for t in client_body proxy fastcgi uwsgi scgi; do
        echo "    ${t}_temp_path $1/${t}_temp;"
    done
}

# ~600 bytes, the shape of an OpenAI /v1/completions response

bench_completion='{"id":"cmpl-8c1f6b0e2d4a4e0f9a7b3c5d1e2f3a4b","object":"text_completion","created":1732890000,"model":"Qwen/Qwen3-0.6B-Instruct","choices":[{"index":0,"text":" Hello! It is nice to meet you. I am a small language model served by Dynamo behind an nginx gateway, and this fixed completion stands in for generated text so that the benchmark measures the gateway rather than the model. Each response carries the same bytes, whatever the prompt said.","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":64,"total_tokens":72},"system_fingerprint":"fp_bench_0001"}'

upstream_head() {
    # upstream_head port: the upstream's configuration up to its fixed
    # completion; the caller adds its own locations and closes the blocks
    cat <<EOF
$(conf_head up)

http {
$(temp_paths "$prefix/up")
    access_log  off;
    keepalive_requests  1000000;

    server {
        listen  127.0.0.1:$1 reuseport backlog=4096;

        location = /v1/completions {
            default_type  application/json;
            return 200 '$bench_completion';
        }
EOF
}

floor_policy() {
    # floor_policy: a gateway's /v1/ location lines for the request plane
    # with every optional part off, what callgrind.sh's "floor" and
    # request.sh's "module-floor" measure: ids, the attempt and request-id
    # headers, the response's id header, metrics
    cat <<'EOF'
            dynamo_rl_plane                   request;
            dynamo_rl_body_policy             off;
            dynamo_rl_ledger                  off;
            dynamo_rl_gate                    off;
            dynamo_rl_attempt_upstream_header off;
EOF
}

start() {
    # start dir cpu
    taskset -c "$2" "$nginx" -p "$prefix/$1/" -c "$prefix/$1/nginx.conf" \
        -e "$prefix/$1/error.log" \
        || { cat "$prefix/$1/error.log" >&2; die "$1 did not start"; }
}

wait_for() {
    i=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
        i=$((i + 1))
        [ $i -le 100 ] || die "nothing listens on 127.0.0.1:$1"
        sleep 0.1
    done
}

wait_pid() {
    # wait_pid dir: until the instance's master has written its PID
    i=0
    until [ -s "$prefix/$1/nginx.pid" ]; do
        i=$((i + 1))
        [ $i -le 50 ] || die "$1 wrote no nginx.pid"
        sleep 0.1
    done
}

worker_of() {
    ps -o pid= --ppid "$(cat "$prefix/$1/nginx.pid")" | tr -d ' '
}

pids_of() {
    m=$(cat "$prefix/$1/nginx.pid")
    echo "$m $(ps -o pid= --ppid "$m" | tr '\n' ' ')"
}

run_client() {
    # run_client out command...: pinned, its CPU time in out.time
    o=$1; shift
    taskset -c "$load_cpu" /usr/bin/time -f '%U %S' -o "$o.time" "$@" \
        > "$o" 2>&1 &
    client_pid=$!
    wait "$client_pid" || { client_pid=; return 1; }
    client_pid=
}

# ---------------------------------------------------------------------
# measurement: jiffies of all CPUs busy and steal, per CPU busy, of our
# processes

cpu_busy() {
    # cpu_busy name: busy jiffies (user nice system irq softirq steal)
    awk -v c="$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
}

cpu_field() {
    # cpu_field first last: the sum of those columns of the "cpu" line,
    # 2-4 user nice system (what processes are charged), 7-8 irq softirq
    # (loopback's packets, ours included), 9 steal
    awk -v a="$1" -v b="$2" '$1 == "cpu" {
        s = 0; for (i = a; i <= b; i++) s += $i; print s }' /proc/stat
}

proc_jiffies() {
    # proc_jiffies pid...: utime + stime of those alive
    s=0
    for p in "$@"; do
        v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null \
            | awk '{ print $12 + $13 }') || v=0
        s=$((s + ${v:-0}))
    done
    echo $s
}

hz=$(getconf CLK_TCK)

to_us() {
    # wrk's "123.45us", "1.23ms", "1.00s" to microseconds
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000;
        else if (v ~ /s$/) print n * 1000000; else print n }'
}

size_bytes() {
    # an nginx size ("8m", "512k", "4096") in bytes
    awk -v size="$1" 'BEGIN {
        m = size + 0
        if (size ~ /[kK]$/) print m * 1024
        else if (size ~ /[mM]$/) print m * 1048576
        else print m }'
}

check_alerts() {
    # check_alerts: dies when an error.log of the instances has an alert,
    # a crit or an emerg line, and shows them
    if grep -E '\[(alert|crit|emerg)\]' "$prefix"/*/error.log > /dev/null
    then
        grep -E '\[(alert|crit|emerg)\]' "$prefix"/*/error.log >&2
        die "the error logs have alerts"
    fi
}

# ---------------------------------------------------------------------
# perf (cpu-clock: this KVM guest has no hardware counters)

perf_sample() {
    # perf_sample pid seconds data: samples of a process
    perf record -q -e cpu-clock -F 4999 -p "$1" -o "$3" -- sleep "$2" \
        > /dev/null 2>&1 || true
}

perf_top() {
    # perf_top data sort lines [regex]: the top of the report, without
    # the lines the regex matches
    perf report -i "$1" --no-children --sort "$2" --stdio 2> /dev/null \
        | grep -v -e '^#' -e '^$' ${4:+-e "$4"} | head -"$3" || true
}
