#!/bin/bash
# bench/body.sh: the body policy end to end (issue 14, "Speed"), with real
# nginx on loopback: gateway CPU per request, body policy on against off.
#
# A fast upstream ("return 200" with a ~600-byte completion) on the load
# generator's CPU; three gateways, "worker_processes 1", pinned to the
# gateway CPU, identical but for their /v1/ location:
#
#   plain   no dynamo_rl module loaded;
#   off     dynamo_rl_plane request, ledger and gate on, and
#           dynamo_rl_body_policy off;
#   on      the same with the body policy on (the default).
#
# Each round runs wrk (-t1 -c32, bench/wrk-body.lua) against plain, off
# and on, for the bench's small completion request and for a 200 KB
# token-array prompt, and reads the gateway worker's CPU time
# (/proc/PID/stat utime + stime) around each run.  Reported: CPU per
# request in microseconds (medians over rounds) and the medians of the
# per-round ratios on/off and on/plain.  Targets: on/off <= 1.03 (small),
# <= 1.3 (200 KB).
#
#     bench/body.sh              7 rounds of 3 s runs, about 2.5 min
#     ROUNDS=3 DURATION=2 bench/body.sh
#     BASE_MODULE=/tmp/old.so bench/body.sh
#                                two more gateways, off-base and on-base,
#                                with another build of the module: a
#                                change measured side by side in one run
#                                (and the per-round ratios of the two)
#     PROFILE=1 bench/body.sh    then perf of the off and on workers under
#                                each body (3 s each), in the output
#     KEEP=1 bench/body.sh       keep the scratch directory (perf data)
#     BODIES=small bench/body.sh only the small completion (or "big")
#
# Only the processes it started are stopped, by their PIDs.

set -eu
set -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)

. "$top/bench/lib.sh"

bench_knobs 7 3 32

base_module=${BASE_MODULE:-}
bodies=${BODIES:-small big}

gateways="plain off on"
[ -z "$base_module" ] || gateways="$gateways off-base on-base"

prefix=$(mktemp -d /tmp/dynamo-rl-bench-body.XXXXXX)
bench_name=body.sh
instances="up $gateways"

bench_traps

# the upstream, then the gateways plain, off and on (and the base ones)
free_ports 6
up_port=$base
declare -A port=([plain]=$((base + 1)) [off]=$((base + 2)) [on]=$((base + 3))
                 [off-base]=$((base + 4)) [on-base]=$((base + 5)))

completion='{"id":"cmpl-8c1f6b0e2d4a4e0f9a7b3c5d1e2f3a4b","object":"text_completion","created":1732890000,"model":"Qwen/Qwen3-0.6B-Instruct","choices":[{"index":0,"text":" Hello! It is nice to meet you. I am a small language model served by Dynamo behind an nginx gateway, and this fixed completion stands in for generated text so that the benchmark measures the gateway rather than the model.","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":64,"total_tokens":72}}'

mkdir -p "$prefix/up"
cat > "$prefix/up/nginx.conf" <<EOT
$(conf_head up)

http {
$(temp_paths "$prefix/up")
    access_log  off;
    keepalive_requests  1000000;
    client_max_body_size  4m;
    client_body_buffer_size  1m;

    server {
        listen  127.0.0.1:$up_port;

        location = /v1/completions {
            default_type  application/json;
            return 200 '$completion';
        }
    }
}
EOT

for g in $gateways; do
    mkdir -p "$prefix/$g"

    case $g in
    *-base) so=$base_module ;;
    *)      so=$module ;;
    esac

    {
        [ $g = plain ] || echo "load_module  $so;"
        conf_head $g
        echo "http {"
        temp_paths "$prefix/$g"
        echo "    access_log  off;"
        echo "    keepalive_requests  1000000;"
        echo "    client_max_body_size  4m;"
        echo "    client_body_buffer_size  1m;"
        [ $g = plain ] || echo "    dynamo_rl_zone  zone=rl:64m;"
        echo "    upstream up { server 127.0.0.1:$up_port; keepalive 32; }"
        echo "    server {"
        echo "        listen  127.0.0.1:${port[$g]};"
        echo "        location /v1/ {"
        [ $g = plain ] || echo "            dynamo_rl_plane  request;"
        [ "${g%-base}" != off ] \
            || echo "            dynamo_rl_body_policy  off;"
        echo "            proxy_pass  http://up;"
        echo "            proxy_http_version  1.1;"
        echo "            proxy_set_header  Connection \"\";"
        echo "            proxy_buffering  off;"
        echo "        }"
        echo "    }"
        echo "}"
    } > "$prefix/$g/nginx.conf"
done

start up "$load_cpu"
for g in $gateways; do start $g "$gw_cpu"; done

declare -A worker
for g in up $gateways; do
    wait_pid $g
    wait_for "${port[$g]:-$up_port}"
done
for g in $gateways; do
    worker[$g]=$(worker_of $g)
done

# the bodies: the small completion of bench/wrk-request.lua, a 200 KB
# token-array prompt

printf '%s' '{"model":"bench","prompt":"Say hello","max_tokens":64}' \
    > "$prefix/small.json"
python3 - "$prefix/big.json" <<'EOT'
import sys
toks = ",".join(str(i * 2654435761 % 151936) for i in range(29000))
open(sys.argv[1], "w").write('{"model":"bench","prompt":[%s],"max_tokens":64,'
    '"nvext":{"extra_fields":["completion_token_ids"]}}' % toks)
EOT

for g in $gateways; do
    for b in small big; do
        code=$(curl -s -o /dev/null -w '%{http_code}' \
            --data-binary @"$prefix/$b.json" -H 'content-type: application/json' \
            "http://127.0.0.1:${port[$g]}/v1/completions")
        [ "$code" = 200 ] || { echo "$g $b: HTTP $code" >&2; exit 1; }
    done
done

results="$prefix/results.txt"
: > "$results"

# the order of the gateways is reversed every other round: side by side
# with BASE_MODULE, a fixed order gave the same build 4% apart (an A/A run)
order_rev=$(echo "$gateways" | tr ' ' '\n' | tac | tr '\n' ' ')

for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 0 ]; then order=$order_rev; else order=$gateways; fi
    for b in $bodies; do
        for g in $order; do
            j0=$(proc_jiffies "${worker[$g]}")
            out=$(taskset -c "$load_cpu" wrk -t1 -c"$conns" -d"${duration}s" \
                -s "$top/bench/wrk-body.lua" \
                "http://127.0.0.1:${port[$g]}" -- "$prefix/$b.json")
            j1=$(proc_jiffies "${worker[$g]}")
            n=$(awk '/requests in/ { print $1 }' <<< "$out")
            non2xx=$(awk '/Non-2xx/ { print $NF }' <<< "$out")
            [ -z "$non2xx" ] || { echo "$g $b: $non2xx non-2xx" >&2; exit 1; }
            echo "$r $b $g $n $((j1 - j0))" >> "$results"
        done
    done
    echo "round $r of $rounds" >&2
done

python3 - "$results" "$hz" <<'EOT'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
hz = int(sys.argv[2])
us = {}
for r, b, g, n, j in rows:
    us.setdefault((b, g), {})[r] = int(j) * 1e6 / hz / int(n)
builds = [("", "this build")]
if any(g == "on-base" for b, g in us):
    builds.append(("-base", "BASE_MODULE"))
print("| body | module | plain µs/req | off µs/req | on µs/req | on/off "
      "| on/plain |")
print("|---|---|---|---|---|---|---|")
for b, name in (("small", "small completion"), ("big", "200 KB token array")):
    if (b, "on") not in us:
        continue
    for sfx, build in builds:
        on, off, plain = us[(b, "on" + sfx)], us[(b, "off" + sfx)], \
            us[(b, "plain")]
        rs = sorted(on)
        print("| %s | %s | %.1f | %.1f | %.1f | %.3f | %.3f |" % (name, build,
            st.median(plain.values()), st.median(off.values()),
            st.median(on.values()),
            st.median(on[r] / off[r] for r in rs),
            st.median(on[r] / plain[r] for r in rs)))
    if len(builds) > 1:
        for g in ("off", "on"):
            new, base = us[(b, g)], us[(b, g + "-base")]
            print("| %s | %s/%s-base, median of per-round ratios | %.3f "
                  "| | | | |" % (name, g, g,
                                 st.median(new[r] / base[r] for r in new)))
EOT

if [ "${PROFILE:-0}" = 1 ]; then
    for b in $bodies; do
        for g in off on; do
            taskset -c "$load_cpu" wrk -t1 -c"$conns" -d4s \
                -s "$top/bench/wrk-body.lua" \
                "http://127.0.0.1:${port[$g]}" -- "$prefix/$b.json" \
                > /dev/null &
            wrk_pid=$!
            sleep 0.5
            perf record -q -e cpu-clock -F 4999 -g -p "${worker[$g]}" \
                -o "$prefix/perf-$g-$b.data" -- sleep 3 2> /dev/null
            wait "$wrk_pid"
            echo
            echo "## perf: $g, $b body"
            echo
            perf report -i "$prefix/perf-$g-$b.data" --no-children \
                --sort dso,sym -g none --stdio 2> /dev/null \
                | grep -v '^#' | grep '%' | head -40 || true
        done
    done
fi
