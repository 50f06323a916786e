#!/bin/bash
# bench/request.sh: the request plane end to end, with real nginx, on
# loopback (issue 7, and issue 4's "Performance").
#
# A fast upstream on the load generator's CPU: nginx "return 200" with a
# fixed ~600-byte OpenAI-shaped completion for POST /v1/completions, and a
# second nginx whose SSE route (bench/lua/sse.lua) writes N events at a
# fixed pace, each stamped with its send time.  Seven gateways, each
# "worker_processes 1" and pinned to the gateway CPU, identical but for the
# policy in their /v1/ locations (proxy_pass to an upstream block with
# keepalive, proxy_buffering off, proxy_request_buffering off):
#
#   plain               no policy, and no dynamo_rl module loaded;
#   module              dynamo_rl_plane request, ledger and gate on (the
#                       defaults), dynamo_rl_zone rl:8m, attempt ttl 10m;
#   module-ledger-off   the same with "dynamo_rl_ledger off;
#                       dynamo_rl_gate off;";
#   module-body-off     the module's defaults with "dynamo_rl_body_policy
#                       off;" (no body read before the ledger);
#   module-floor        every optional part of the plane off: "dynamo_rl_
#                       body_policy off; dynamo_rl_ledger off;
#                       dynamo_rl_gate off; dynamo_rl_attempt_upstream_
#                       header off;" (ids, the attempt and request-id
#                       headers, the response's id, metrics: the floor
#                       below which no tuning of the optional parts goes);
#   lua                 the attempt-id policy in lua-nginx-module
#                       (bench/lua/attempt.lua), no dynamo_rl module;
#   lua-ledger          the same plus a single-use ledger in a
#                       lua_shared_dict of ZONE bytes (bench/lua/ledger.lua);
#
# and with STORE=1 (make bench-store), a redis-server on the load
# generator's CPU (a free loopback port, no persistence) and two more:
#
#   store               the module's defaults with "dynamo_rl_store
#                       redis://..." (the claim and the record's moves in
#                       Redis; skipped, and said so, by a module without
#                       the directive);
#   lua-redis           the same design in Lua with lua-resty-redis
#                       (bench/lua/store.lua): the claim script in the
#                       access phase, the moves batched by a timer;
#   store-tls           store over TLS: "rediss://" to a second
#                       redis-server (--port 0 --tls-port, certificates
#                       made by openssl in the scratch directory), the
#                       certificate verified, one session per worker
#                       process (left out, and said so, by a redis-server
#                       built without TLS);
#   store-repl          store against a third redis-server that has a
#                       replica (a fourth, --replicaof): what a replica
#                       alone costs;
#   store-wait1         the same primary and replica with "wait=1": every
#                       claim followed by WAIT 1 on the same connection;
#   store-base, store-tls-base
#                       with BASE_MODULE=/path/old.so, store and store-tls
#                       with that build, each run right after its own: a
#                       change measured before and after in one run.
#
# All the redis-servers are on the load generator's CPU, stopped by PID.
#
# A label ending in "-c1" (module-c1, store-c1, ...) is that variant with
# one connection: its p50 is the latency a request sees, the store's round
# trip included; with STORE=1, redis-benchmark measures that round trip
# (PING, one connection, from the gateway's CPU) after the rounds, and the
# store's CPU per request (its process's jiffies) is a column of the runs.
#
# One interleaved series: each round runs, in this order, wrk (-t1 -c16
# --latency, POST /v1/completions, bench/wrk-request.lua) against plain,
# module (minted ids), module-client-id (a unique client id per request),
# module-ledger-off, module-body-off, module-floor, lua, lua-client-id,
# lua-ledger,
# lua-ledger-client-id
# and direct (the upstream itself);
# h2load (h2c, -c16 -m1) against plain and module; then SSE streams
# (bench/sse_client.py) straight to the upstream and through each gateway.
# After the rounds: a fresh 8 MB zone is filled with 128-byte client ids,
# the worker RSS is read, and with PROFILE=1 perf samples each gateway.
#
#     bench/request.sh                 8 rounds of 3 s runs, about 7.5 min
#     ROUNDS=3 bench/request.sh        about 3 minutes
#     PROFILE=1 bench/request.sh       + perf record of each gateway worker
#     SMOKE=1 bench/request.sh         1 round of 1 s runs: a smoke test
#     HTTP=0 bench/request.sh          the SSE series only
#     QUIET_WAIT=300 bench/request.sh  first wait up to 5 min for a quiet
#                                      machine (others' processes < 20%)
#     VARIANTS="plain module" SSE_VARIANTS="" PROFILE_VARIANTS="module" ...
#                                      a subset (labels as in the tables)
#     STORE=1 CONNECTIONS=32 bench/request.sh
#                                      + redis, store, lua-redis, store-tls,
#                                      store-repl, store-wait1 (and their
#                                      -c1 runs): make bench-store
#
# Prints a markdown report (OUT=file writes it there too).

set -eu
set -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)

. "$top/bench/lib.sh"

modules_dir=${NGX_MODULES:-/usr/lib/nginx/modules}
python=${PYTHON:-/usr/bin/python3}

if [ -n "${SMOKE:-}" ]; then
    : "${ROUNDS:=1}" "${DURATION:=1}" "${WARMUP:=1}" "${SSE_EVENTS:=20}"
    : "${FILL_SECONDS:=1}" "${FILL_TRIES:=1}" "${WARMUP_TRIES:=1}"
fi

bench_knobs 8 3 16 2
warmup_tries=${WARMUP_TRIES:-6}
h2=${H2:-1}
sse_streams=${SSE_STREAMS:-4}
sse_events=${SSE_EVENTS:-250}
sse_ms=${SSE_MS:-4}
sse_rt=${SSE_RT:-1}
zone_size=${ZONE:-8m}
fill_seconds=${FILL_SECONDS:-3}
fill_tries=${FILL_TRIES:-5}
profile=${PROFILE:-0}
out_file=${OUT:-}
store=${STORE:-0}
redis_server=${REDIS_SERVER:-redis-server}
redis_tls_server=${REDIS_TLS_SERVER:-$redis_server}
base_module=${BASE_MODULE:-}
store_timeout=${STORE_TIMEOUT:-2s}

prefix=$(mktemp -d /tmp/dynamo-rl-bench-req.XXXXXX)
chmod 755 "$prefix"
bench_name=request.sh
instances="up sse plain module ledgeroff bodyoff floor lua lualedger fill"
[ "$store" != 1 ] || instances="$instances store luaredis"

bench_traps

for t in wrk taskset curl /usr/bin/time "$python" "$nginx"; do
    command -v "$t" > /dev/null || die "$t is missing"
done

if [ "$h2" = 1 ] && ! command -v h2load > /dev/null; then
    die "h2load is missing (apt-get install -y nghttp2-client, or H2=0)"
fi

[ -f "$module" ] || die "$module is missing: run make"

for m in ndk_http_module.so ngx_http_lua_module.so; do
    [ -f "$modules_dir/$m" ] || die "$modules_dir/$m is missing:" \
        "apt-get install -y libnginx-mod-http-lua libnginx-mod-http-ndk"
done

if [ "$(nproc)" -lt 2 ] && [ "$gw_cpu" != "$load_cpu" ]; then
    die "needs 2 CPUs (or GATEWAY_CPU=LOAD_CPU)"
fi

# thirty-seven free loopback ports

free_ports 37

up_port=$base
sse_port=$((base + 1))
plain_port=$((base + 2))
plain_h2_port=$((base + 3))
module_port=$((base + 4))
module_h2_port=$((base + 5))
module_api=$((base + 6))
ledgeroff_port=$((base + 7))
ledgeroff_api=$((base + 8))
lua_port=$((base + 9))
lua_api=$((base + 10))
fill_port=$((base + 11))
fill_api=$((base + 12))
lualedger_port=$((base + 13))
lualedger_api=$((base + 14))
bodyoff_port=$((base + 15))
bodyoff_api=$((base + 16))
floor_port=$((base + 17))
floor_api=$((base + 18))
redis_port=$((base + 19))
store_port=$((base + 20))
store_api=$((base + 21))
luaredis_port=$((base + 22))
luaredis_api=$((base + 23))
redis_tls_port=$((base + 24))
storetls_port=$((base + 25))
storetls_api=$((base + 26))
redis_p_port=$((base + 27))
redis_r_port=$((base + 28))
storerepl_port=$((base + 29))
storerepl_api=$((base + 30))
storewait1_port=$((base + 31))
storewait1_api=$((base + 32))
storebase_port=$((base + 33))
storebase_api=$((base + 34))
storetlsbase_port=$((base + 35))
storetlsbase_api=$((base + 36))

# private copies: others may rebuild build/ or edit bench/ meanwhile, and
# the workers (nobody) read the Lua files

cp "$module" "$prefix/module.so"
[ -z "$base_module" ] || cp "$base_module" "$prefix/module-base.so"
module_time=$(date -u -r "$module" '+%H:%M:%S')
mkdir -p "$prefix/lua" "$prefix/out"
cp "$top/bench/lua/attempt.lua" "$top/bench/lua/ledger.lua" \
    "$top/bench/lua/sse.lua" "$top/bench/lua/store.lua" "$prefix/lua/"
cp "$top/bench/wrk-request.lua" "$top/bench/sse_client.py" "$prefix/"
chmod -R a+rX "$prefix"

for d in $instances; do
    mkdir -p "$prefix/$d"
done

cat > "$prefix/up/nginx.conf" <<EOF
$(upstream_head "$up_port")

        # what the upstream received: the sanity checks read it
        location = /v1/echo {
            default_type  text/plain;
            return 200 "\$http_x_dynamo_attempt_id|\$http_x_request_id|\$http_x_bench_nonce";
        }

        # an upstream's error: the ledgers record the attempt as failed
        location = /v1/missing {
            return 404;
        }
    }
}
EOF

cat > "$prefix/sse/nginx.conf" <<EOF
load_module  $modules_dir/ndk_http_module.so;
load_module  $modules_dir/ngx_http_lua_module.so;

$(conf_head sse)

http {
$(temp_paths "$prefix/sse")
    access_log  off;
    keepalive_requests  1000000;
    lua_package_path  "$prefix/lua/?.lua;;";

    server {
        listen  127.0.0.1:$sse_port reuseport backlog=4096;

        location = /v1/chat/completions {
            content_by_lua_file  $prefix/lua/sse.lua;
        }
    }
}
EOF

lua_headers() {
    # lua_headers: the attempt id of the Lua ledgers to the upstream and
    # back to the client, as the module sends them
    cat <<'EOF'

            proxy_set_header   Connection "";
            proxy_set_header   X-Dynamo-Attempt-Id $attempt_id;
            proxy_set_header   X-Request-Id $attempt_id;
            proxy_hide_header  X-Dynamo-Attempt-Id;
            add_header         X-Dynamo-Attempt-Id $attempt_id always;
EOF
}

policy() {
    # policy kind: the lines of a /v1/ location
    case $1 in
    plain)
        ;;
    module|fill)
        echo "            dynamo_rl_plane  request;" ;;
    ledgeroff)
        echo "            dynamo_rl_plane  request;"
        echo "            dynamo_rl_ledger off;"
        echo "            dynamo_rl_gate   off;" ;;
    bodyoff)
        echo "            dynamo_rl_plane        request;"
        echo "            dynamo_rl_body_policy  off;" ;;
    floor)
        # the plane with every optional part off (lib.sh)
        floor_policy ;;
    store*)
        # the store is the http level's dynamo_rl_store
        echo "            dynamo_rl_plane  request;" ;;
    luaredis)
        cat <<'EOF'
            set  $attempt_id  "";
            access_by_lua_block         { require("store").access() }
            header_filter_by_lua_block  { require("store").header() }
            log_by_lua_block            { require("store").log() }
EOF
        lua_headers ;;
    lua|lualedger)
        # the same directives; the Lua module is attempt.lua or ledger.lua
        if [ "$1" = lua ]; then lua_mod=attempt; else lua_mod=ledger; fi
        sed "s/@MOD@/$lua_mod/" <<'EOF'
            set  $attempt_id  "";
            access_by_lua_block  { require("@MOD@").access() }
            log_by_lua_block     { require("@MOD@").log() }
EOF
        lua_headers ;;
    esac
}

gateway_conf() {
    # gateway_conf kind port h2port apiport
    kind=$1
    case $kind in
    storebase|storetlsbase)
        echo "load_module  $prefix/module-base.so;" ;;
    module|ledgeroff|bodyoff|floor|fill|store*)
        echo "load_module  $prefix/module.so;" ;;
    lua|lualedger|luaredis)
        echo "load_module  $modules_dir/ndk_http_module.so;"
        echo "load_module  $modules_dir/ngx_http_lua_module.so;" ;;
    esac
    echo
    conf_head "$kind"
    cat <<EOF

http {
$(temp_paths "$prefix/$kind")
    # the policy's cost, not the log's
    access_log  off;
    keepalive_requests  1000000;

EOF
    case $kind in
    module|ledgeroff|bodyoff|floor|fill)
        cat <<EOF
    dynamo_rl_zone         zone=rl:$zone_size;
    dynamo_rl_attempt_ttl  10m;

EOF
        ;;
    store|storebase)
        # timeout=$store_timeout: a claim stalled by a busy machine is
        # slow, not refused (a 503 would stop the bench)
        cat <<EOF
    dynamo_rl_zone         zone=rl:$zone_size;
    dynamo_rl_attempt_ttl  10m;
    dynamo_rl_store        redis://127.0.0.1:$redis_port prefix=bench-$kind
                           replica=bench timeout=$store_timeout;

EOF
        ;;
    storetls|storetlsbase)
        # verified (tls_verify is on by default) against the bench's CA
        cat <<EOF
    dynamo_rl_zone         zone=rl:$zone_size;
    dynamo_rl_attempt_ttl  10m;
    dynamo_rl_store        rediss://127.0.0.1:$redis_tls_port
                           prefix=bench-$kind replica=bench
                           timeout=$store_timeout
                           tls_trusted_certificate=$prefix/redis-tls/ca.crt;

EOF
        ;;
    storerepl|storewait1)
        w1=
        [ "$kind" != storewait1 ] || w1=" wait=1"
        cat <<EOF
    dynamo_rl_zone         zone=rl:$zone_size;
    dynamo_rl_attempt_ttl  10m;
    dynamo_rl_store        redis://127.0.0.1:$redis_p_port
                           prefix=bench-$kind replica=bench$w1
                           timeout=$store_timeout;

EOF
        ;;
    luaredis)
        cat <<EOF
    lua_package_path  "$prefix/lua/?.lua;;";
    lua_shared_dict   dynamo_rl 1m;
    init_by_lua_block {
        require("attempt")
        require("store").init("127.0.0.1", $redis_port, "bench-lua", "lua")
    }

EOF
        ;;
    lua)
        cat <<EOF
    lua_package_path  "$prefix/lua/?.lua;;";
    lua_shared_dict   dynamo_rl 1m;
    init_by_lua_block { require("attempt") }

EOF
        ;;
    lualedger)
        # the ledger's dict has the module zone's size; lua_shared_dict's
        # per-entry overhead is its own (see lua/ledger.lua)
        cat <<EOF
    lua_package_path  "$prefix/lua/?.lua;;";
    lua_shared_dict   dynamo_rl 1m;
    lua_shared_dict   dynamo_rl_ledger $zone_size;
    init_by_lua_block { require("ledger") }

EOF
        ;;
    esac
    cat <<EOF
    upstream completions {
        server              127.0.0.1:$up_port;
        keepalive           32;
        keepalive_requests  1000000;
    }

    upstream sse {
        server              127.0.0.1:$sse_port;
        keepalive           32;
        keepalive_requests  1000000;
    }

    server {
        listen  127.0.0.1:$2 backlog=4096;
EOF
    [ -z "$3" ] || echo "        listen  127.0.0.1:$3 http2 backlog=4096;"
    cat <<EOF

        proxy_http_version       1.1;
        proxy_set_header         Connection "";
        proxy_buffering          off;
        proxy_request_buffering  off;

        location /v1/ {
$(policy "$kind")
            proxy_pass  http://completions;
        }

        location /v1/chat/ {
$(policy "$kind")
            proxy_pass  http://sse;
        }
    }
EOF
    if [ -n "$4" ]; then
        echo
        echo "    server {"
        echo "        listen  127.0.0.1:$4;"
        # the Lua ledgers' count of requests in flight
        case $kind in
        lua|luaredis|lualedger)
            cat <<'EOF'

        location = /lua/in_flight {
            default_type  text/plain;
            content_by_lua_block {
                ngx.print(ngx.shared.dynamo_rl:get("in_flight") or 0)
            }
        }
EOF
            ;;
        esac
        case $kind in
        lua)
            ;;
        luaredis)
            cat <<'EOF'

        # an attempt's state in the store: accepted ... or none
        location /lua/attempts/ {
            default_type  text/plain;
            content_by_lua_block {
                ngx.print(require("store").state(
                    ngx.var.uri:sub(#"/lua/attempts/" + 1)))
            }
        }
EOF
            ;;
        lualedger)
            cat <<'EOF'

        # the ledger dict: entries (a walk of all of them: not during a
        # run), capacity and whole free pages, in bytes
        location = /lua/ledger {
            default_type  application/json;
            content_by_lua_block {
                local l = ngx.shared.dynamo_rl_ledger
                ngx.print('{"records":', #l:get_keys(0),
                          ',"capacity":', l:capacity(),
                          ',"free_space":', l:free_space(),
                          ',"in_flight":',
                          ngx.shared.dynamo_rl:get("in_flight") or 0, '}')
            }
        }

        # an attempt's state: accepted, succeeded, failed, or none
        location /lua/attempts/ {
            default_type  text/plain;
            content_by_lua_block {
                local s = ngx.shared.dynamo_rl_ledger:get(
                    ngx.var.uri:sub(#"/lua/attempts/" + 1))
                ngx.print(({ a = "accepted", s = "succeeded",
                             f = "failed" })[s] or s or "none")
            }
        }
EOF
            ;;
        *)
            cat <<'EOF'

        location = /rl/status {
            dynamo_rl_status;
        }

        location /rl/attempts/ {
            dynamo_rl_attempts_api;
        }
EOF
            ;;
        esac
        echo "    }"
    fi
    echo "}"
}

if [ "$h2" = 1 ]; then
    gateway_conf plain "$plain_port" "$plain_h2_port" "" \
        > "$prefix/plain/nginx.conf"
    gateway_conf module "$module_port" "$module_h2_port" "$module_api" \
        > "$prefix/module/nginx.conf"
else
    gateway_conf plain "$plain_port" "" "" > "$prefix/plain/nginx.conf"
    gateway_conf module "$module_port" "" "$module_api" \
        > "$prefix/module/nginx.conf"
fi
gateway_conf ledgeroff "$ledgeroff_port" "" "$ledgeroff_api" \
    > "$prefix/ledgeroff/nginx.conf"
gateway_conf bodyoff "$bodyoff_port" "" "$bodyoff_api" \
    > "$prefix/bodyoff/nginx.conf"
gateway_conf floor "$floor_port" "" "$floor_api" > "$prefix/floor/nginx.conf"
gateway_conf lua "$lua_port" "" "$lua_api" > "$prefix/lua/nginx.conf"
gateway_conf lualedger "$lualedger_port" "" "$lualedger_api" \
    > "$prefix/lualedger/nginx.conf"
gateway_conf fill "$fill_port" "" "$fill_api" > "$prefix/fill/nginx.conf"

gateways="plain module ledgeroff bodyoff floor lua lualedger fill"
store_skipped=
# the store variants left out ("label: why" lines), their labels, and the
# redis-servers started
store_left_out=
store_out_labels=
redis_pids=

redis_start() {
    # redis_start dir binary args...: a redis-server on the load
    # generator's CPU, like the upstream: nothing persisted, nothing
    # evicted (an evicted record would be a duplicate); its PID in $rpid
    d=$1; b=$2; shift 2
    mkdir -p "$prefix/$d"
    taskset -c "$load_cpu" "$b" --bind 127.0.0.1 --save "" \
        --appendonly no --maxmemory-policy noeviction --dir "$prefix/$d" \
        --logfile "$prefix/$d/redis.log" --daemonize no "$@" \
        > "$prefix/$d/stderr" 2>&1 &
    rpid=$!
    daemon_pids="$daemon_pids $rpid"
}

redis_up() {
    # redis_up pid port: 0 once it listens, 1 if the process ended first
    # (or nothing listened within 10 s)
    i=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; do
        kill -0 "$1" 2>/dev/null || return 1
        i=$((i + 1))
        [ $i -le 100 ] || return 1
        sleep 0.1
    done
}

redis_why() {
    # redis_why dir: the last line a redis-server that did not start wrote
    why=$(cat "$prefix/$1/stderr" "$prefix/$1/redis.log" 2>/dev/null \
          | grep -v '^[[:space:]]*$' | grep -v -e '^\*\*\*' -e '^>>>' \
          | tail -1 | sed 's/^[0-9]*:[A-Z] [^*#]*[*#] //')
    echo "${why:-it did not start}"
}

leave_out() {
    # leave_out kind label why: the variant and its -c1 run are left out
    echo "request.sh: the $2 variant left out: $3" >&2
    store_left_out="$store_left_out$2: $3
"
    store_out_labels="$store_out_labels $2"
}

store_gateway() {
    # store_gateway kind label port api: its configuration; started when
    # nginx -t takes it (a module without the directive or one of its
    # parameters: left out, the reason in $why)
    mkdir -p "$prefix/$1"
    gateway_conf "$1" "$3" "" "$4" > "$prefix/$1/nginx.conf"
    if "$nginx" -t -q -p "$prefix/$1/" -c "$prefix/$1/nginx.conf" \
           -e "$prefix/$1/t-error.log" 2> "$prefix/$1/t.log"
    then
        gateways="$gateways $1"
        instances="$instances $1"
        return 0
    fi
    why=$(grep -o -e 'unknown directive[^;]*' -e 'invalid [^;]*' \
          "$prefix/$1/t.log" | head -1)
    leave_out "$1" "$2" "${why:-$(head -1 "$prefix/$1/t.log")}"
    return 1
}

if [ "$store" = 1 ]; then
    for t in "$redis_server" redis-benchmark redis-cli openssl; do
        command -v "$t" > /dev/null \
            || die "$t is missing: make bench-deps (redis-server redis-tools)"
    done

    [ -f /usr/share/lua/5.1/nginx/redis.lua ] \
        || die "lua-resty-redis is missing: make bench-deps (lua-nginx-redis)"

    redis_start redis "$redis_server" --port "$redis_port"
    redis_pid=$rpid
    redis_pids=$rpid

    gateway_conf luaredis "$luaredis_port" "" "$luaredis_api" \
        > "$prefix/luaredis/nginx.conf"
    gateways="$gateways luaredis"

    # until the module has dynamo_rl_store, its variant is left out
    instances=${instances% store luaredis}" luaredis"
    store_gateway store store "$store_port" "$store_api" \
        || store_skipped=$why
    if [ -n "$base_module" ] && [ -z "$store_skipped" ]; then
        store_gateway storebase store-base "$storebase_port" \
            "$storebase_api" || true
    fi

    # TLS: a CA and the store's certificate for 127.0.0.1 (the gateway
    # verifies both), a redis-server with only a TLS port; one built
    # without TLS refuses the options and its variant is left out

    if [ -z "$store_skipped" ]; then
        mkdir -p "$prefix/redis-tls"
        (
            cd "$prefix/redis-tls"
            openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key \
                -out ca.crt -days 2 -subj /CN=dynamo-rl-bench-ca
            openssl req -newkey rsa:2048 -nodes -keyout server.key \
                -out server.csr -subj /CN=dynamo-rl-bench-store
            echo 'subjectAltName=IP:127.0.0.1' > server.ext
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key \
                -CAcreateserial -days 2 -out server.crt -extfile server.ext
        ) > "$prefix/redis-tls/openssl.log" 2>&1 \
            || die "openssl failed: $(tail -1 "$prefix/redis-tls/openssl.log")"

        redis_start redis-tls "$redis_tls_server" --port 0 \
            --tls-port "$redis_tls_port" \
            --tls-cert-file "$prefix/redis-tls/server.crt" \
            --tls-key-file "$prefix/redis-tls/server.key" \
            --tls-ca-cert-file "$prefix/redis-tls/ca.crt" \
            --tls-auth-clients no
        redis_tls_pid=$rpid
        if redis_up "$redis_tls_pid" "$redis_tls_port"; then
            redis_pids="$redis_pids $redis_tls_pid"
            store_gateway storetls store-tls "$storetls_port" "$storetls_api" \
                || true
            if [ -n "$base_module" ]; then
                store_gateway storetlsbase store-tls-base \
                    "$storetlsbase_port" "$storetlsbase_api" || true
            fi
        else
            why=$("$redis_tls_server" --version | awk '{ print $1, $2, $3 }')
            why="$why with --tls-port did not start: $(redis_why redis-tls)"
            leave_out storetls store-tls "$why"
            [ -z "$base_module" ] || leave_out "" store-tls-base "$why"
        fi

        # a primary and its replica: store-repl and store-wait1

        redis_start redis-p "$redis_server" --port "$redis_p_port"
        redis_p_pid=$rpid
        redis_start redis-r "$redis_server" --port "$redis_r_port" \
            --replicaof 127.0.0.1 "$redis_p_port"
        redis_r_pid=$rpid
        redis_up "$redis_p_pid" "$redis_p_port" \
            || die "the primary redis-server did not start:" \
                   "$(redis_why redis-p)"
        redis_up "$redis_r_pid" "$redis_r_port" \
            || die "the replica redis-server did not start:" \
                   "$(redis_why redis-r)"
        redis_pids="$redis_pids $redis_p_pid $redis_r_pid"
        store_gateway storerepl store-repl "$storerepl_port" \
            "$storerepl_api" || true
        store_gateway storewait1 store-wait1 "$storewait1_port" \
            "$storewait1_api" || true

        # the replica in sync before any claim (wait=1 refuses without it)
        i=0
        until redis-cli -p "$redis_r_port" info replication \
              | grep -q '^master_link_status:up'; do
            i=$((i + 1))
            [ $i -le 100 ] || die "the replica did not sync with its primary"
            sleep 0.1
        done
    else
        for l in store-tls store-repl store-wait1 store-base store-tls-base
        do
            leave_out "" "$l" "as the store variant"
        done
    fi
fi

start up "$load_cpu"
start sse "$load_cpu"
for g in $gateways; do
    start "$g" "$gw_cpu"
done

for p in $(seq "$base" $((base + 18))); do
    if [ "$h2" != 1 ] && { [ "$p" = "$plain_h2_port" ] \
                          || [ "$p" = "$module_h2_port" ]; }; then
        continue
    fi
    wait_for "$p"
done

if [ "$store" = 1 ]; then
    wait_for "$redis_port"
    wait_for "$luaredis_port"
    wait_for "$luaredis_api"
    luaredis_w=$(worker_of luaredis)

    store_w= storetls_w= storerepl_w= storewait1_w= storebase_w=
    storetlsbase_w=
    for g in $gateways; do
        case $g in
        store)      wait_for "$store_port"; wait_for "$store_api"
                    store_w=$(worker_of store) ;;
        storetls)   wait_for "$storetls_port"; wait_for "$storetls_api"
                    storetls_w=$(worker_of storetls) ;;
        storerepl)  wait_for "$storerepl_port"; wait_for "$storerepl_api"
                    storerepl_w=$(worker_of storerepl) ;;
        storewait1) wait_for "$storewait1_port"; wait_for "$storewait1_api"
                    storewait1_w=$(worker_of storewait1) ;;
        storebase)  wait_for "$storebase_port"; wait_for "$storebase_api"
                    storebase_w=$(worker_of storebase) ;;
        storetlsbase)
                    wait_for "$storetlsbase_port"
                    wait_for "$storetlsbase_api"
                    storetlsbase_w=$(worker_of storetlsbase) ;;
        esac
    done
fi

up_w=$(worker_of up)
sse_w=$(worker_of sse)
plain_w=$(worker_of plain)
module_w=$(worker_of module)
ledgeroff_w=$(worker_of ledgeroff)
bodyoff_w=$(worker_of bodyoff)
floor_w=$(worker_of floor)
lua_w=$(worker_of lua)
lualedger_w=$(worker_of lualedger)
fill_w=$(worker_of fill)
ours=""
for d in $instances; do
    ours="$ours $(pids_of "$d")"
done
[ "$store" != 1 ] || ours="$ours $redis_pids"

# ---------------------------------------------------------------------
# sanity: every gateway forwards; the policy gateways mint or keep the id,
# give it to the upstream under both names and to the client; invalid ids
# get 400; the ledgers (module, lua-ledger) refuse a duplicate, client or
# minted, with the same 409, record a 2xx as succeeded and an upstream 404
# as failed, and an SSE attempt as succeeded

uuid7='^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
tag=$(date +%s)-$$

post() {
    # post port path [header]: "status|X-Dynamo-Attempt-Id|body"
    curl -s -D "$prefix/h" -o "$prefix/b" -w '%{http_code}' -X POST \
        -H 'Content-Type: application/json' ${3:+-H "$3"} \
        -d '{"model":"bench","prompt":"hi"}' \
        "http://127.0.0.1:$1$2" > "$prefix/s" || true
    id=$(awk 'tolower($1) == "x-dynamo-attempt-id:" { print $2 }' \
         "$prefix/h" | tr -d '\r')
    echo "$(cat "$prefix/s")|$id|$(cat "$prefix/b")"
}

reason() {
    # reason [header]: the X-Dynamo-RL-Reason (or that header) of the last
    # post
    awk -v h="$(echo "${1:-x-dynamo-rl-reason}" | tr 'A-Z' 'a-z'):" \
        'tolower($1) == h { print $2 }' "$prefix/h" | tr -d '\r'
}

state_now() {
    # state_now label id: the ledger's state of an attempt
    case $1 in
    module|module-body-off|store*)
        case $1 in
        module) api=$module_api ;;
        store) api=$store_api ;;
        store-tls) api=$storetls_api ;;
        store-repl) api=$storerepl_api ;;
        store-wait1) api=$storewait1_api ;;
        store-base) api=$storebase_api ;;
        store-tls-base) api=$storetlsbase_api ;;
        *) api=$bodyoff_api ;;
        esac
        curl -s "http://127.0.0.1:$api/rl/attempts/$2" \
            | grep -o '"state":"[a-z]*"' | cut -d'"' -f4 ;;
    lua-ledger)
        curl -s "http://127.0.0.1:$lualedger_api/lua/attempts/$2" ;;
    lua-redis)
        curl -s "http://127.0.0.1:$luaredis_api/lua/attempts/$2" ;;
    esac
}

state_of() {
    # state_of label id: the state once it is terminal (a store's moves
    # are written after the response, by a timer), polled for 2 s at most
    for i in $(seq 1 20); do
        st=$(state_now "$1" "$2")
        case $st in
        succeeded|failed|canceled) break ;;
        esac
        sleep 0.1
    done
    echo "$st"
}

# the policy gateways, and those of them with a ledger

policy_gateways="module $module_port|module-ledger-off $ledgeroff_port"
policy_gateways="$policy_gateways|module-body-off $bodyoff_port"
policy_gateways="$policy_gateways|module-floor $floor_port|lua $lua_port"
policy_gateways="$policy_gateways|lua-ledger $lualedger_port"

if [ "$store" = 1 ]; then
    policy_gateways="$policy_gateways|lua-redis $luaredis_port"
    for g in $gateways; do
        case $g in
        store)      policy_gateways="$policy_gateways|store $store_port" ;;
        storetls)   policy_gateways="$policy_gateways|store-tls $storetls_port" ;;
        storerepl)  policy_gateways="$policy_gateways|store-repl $storerepl_port" ;;
        storewait1) policy_gateways="$policy_gateways|store-wait1 $storewait1_port" ;;
        storebase)  policy_gateways="$policy_gateways|store-base $storebase_port" ;;
        storetlsbase)
                    policy_gateways="$policy_gateways|store-tls-base $storetlsbase_port" ;;
        esac
    done
fi

conflict='{"message":"attempt id already used: generation is not idempotent","type":"Conflict","code":409}'

IFS='|' read -r -a pgs <<< "$policy_gateways"

# a store gateway refuses (503) until its connection is up and the gate
# record is in the store: polled, 10 s at most

for g in "${pgs[@]}"; do
    set -- $g
    case $1 in
    store*)
        for i in $(seq 1 100); do
            r=$(post "$2" /v1/completions)
            [ "${r%%|*}" != 503 ] && break
            sleep 0.1
        done ;;
    esac
done

for g in "direct $up_port" "plain $plain_port" "${pgs[@]}"; do
    set -- $g
    r=$(post "$2" /v1/completions)
    [ "${r%%|*}" = 200 ] && [ "${#r}" -gt 550 ] \
        || die "$1: /v1/completions gave: $r"
done

for g in "${pgs[@]}"; do
    set -- $g
    # module-floor sends no second header (X-Request-Id) upstream
    xr=1
    [ "$1" != module-floor ] || xr=
    r=$(post "$2" /v1/echo)
    IFS='|' read -r st id e1 e2 _ <<< "$r"
    [ "$st" = 200 ] && [[ $id =~ $uuid7 ]] && [ "$e1" = "$id" ] \
        && [ "$e2" = "${xr:+$id}" ] || die "$1: a minted id gave: $r"
    mid=$id
    cid=sanity-$tag-$1
    r=$(post "$2" /v1/echo "X-Dynamo-Attempt-Id: $cid")
    IFS='|' read -r st id e1 e2 _ <<< "$r"
    [ "$st" = 200 ] && [ "$id" = "$cid" ] && [ "$e1" = "$cid" ] \
        && [ "$e2" = "${xr:+$cid}" ] || die "$1: a client id gave: $r"
    r=$(post "$2" /v1/completions "X-Dynamo-Attempt-Id: bad/id")
    [ "${r%%|*}" = 400 ] || die "$1: an invalid id gave: $r"
    r=$(post "$2" /v1/completions "X-Dynamo-Attempt-Id: $cid")
    case $1 in
    module|module-body-off|lua-ledger|store*|lua-redis)
        # the same refusal from all, not forwarded (the body is ours)
        [ "$r" = "409|$cid|$conflict" ] \
            && [ "$(reason)" = duplicate_attempt ] \
            && [ "$(reason X-Should-Retry)" = false ] \
            || die "$1: a duplicate gave: $r, reason $(reason)," \
                   "X-Should-Retry $(reason X-Should-Retry)"
        [ "$(state_of "$1" "$cid")" = succeeded ] \
            || die "$1: the state of $cid: $(state_of "$1" "$cid")"
        # an id minted here, sent back by a client
        r=$(post "$2" /v1/completions "X-Dynamo-Attempt-Id: $mid")
        [ "$r" = "409|$mid|$conflict" ] \
            || die "$1: a minted id sent back gave: $r"
        # an upstream error: failed
        fid=$cid-404
        r=$(post "$2" /v1/missing "X-Dynamo-Attempt-Id: $fid")
        [ "${r%%|*}" = 404 ] || die "$1: /v1/missing gave: $r"
        [ "$(state_of "$1" "$fid")" = failed ] \
            || die "$1: the state of $fid: $(state_of "$1" "$fid")"
        ;;
    *) [ "${r%%|*}" = 200 ] || die "$1: a repeated id gave: $r" ;;
    esac
done

r=$(post "$plain_port" /v1/echo "X-Dynamo-Attempt-Id: plain-$tag")
[ "$r" = "200||plain-$tag||" ] || die "plain: the echo gave: $r"

sse_through() {
    # sse_through NAME PORT: a stream of 5 events under attempt id $sid,
    # which must end with [DONE]
    curl -s -N -X POST -H 'Content-Type: application/json' \
        -H "X-Dynamo-Attempt-Id: $sid" -d '{"stream":true}' \
        "http://127.0.0.1:$2/v1/chat/completions?n=5&ms=2" \
        > "$prefix/sse.out"
    grep -q '^data: \[DONE\]' "$prefix/sse.out" \
        && [ "$(grep -c '"t":' "$prefix/sse.out")" = 5 ] \
        || die "the SSE route through $1 gave: $(cat "$prefix/sse.out")"
}

sid=sse-$tag
sse_through module "$module_port"
r=$(curl -s "http://127.0.0.1:$module_api/rl/attempts/$sid")
case $r in
*'"state":"succeeded"'*'"stream":true'*) ;;
*) die "the ledger's record of an SSE attempt: $r" ;;
esac

sse_through lua-ledger "$lualedger_port"
r=$(state_of lua-ledger "$sid")
[ "$r" = succeeded ] || die "lua-ledger's state of an SSE attempt: $r"

# ---------------------------------------------------------------------
# the load clients (bench/lib.sh has run_client and the jiffies helpers)

wrk_run() {
    # wrk_run port seconds out mode tag [idlen]
    run_client "$3" wrk -t1 -c"${run_conns:-$conns}" -d"$2"s --latency \
        -s "$prefix/wrk-request.lua" "http://127.0.0.1:$1/" \
        -- "$4" "$5" ${6:-}
}

h2_run() {
    # h2_run port seconds out
    run_client "$3" h2load -t1 -c"$conns" -m1 -D "$2" \
        -d "$prefix/body.json" -H 'content-type: application/json' \
        "http://127.0.0.1:$1/v1/completions"
}

echo '{"model":"bench","prompt":"Say hello","max_tokens":64}' \
    > "$prefix/body.json"

wrk_ok() {
    ! grep -q -e Non-2xx -e 'Socket errors' "$1" \
        && grep -q '^Requests/sec:' "$1"
}

h2_ok() {
    grep -q ' 0 failed, 0 errored, 0 timeout' "$1" \
        && grep -q '^finished in' "$1"
}

zone_json() {
    # zone_json port: the ledger object of /rl/status
    curl -s "http://127.0.0.1:$1/rl/status" \
        | grep -o '"ledger":{[^}]*}'
}

zone_field() {
    # zone_field json name
    echo "$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2
}

# QUIET_WAIT=seconds: first wait, that long at most, for 3 s in which the
# other processes use under 20% of one CPU (the machine may be shared)

quiet_window=3
[ -z "${SMOKE:-}" ] || quiet_window=1

other_now() {
    # other_now: other processes' CPU over a few seconds, in % of one CPU
    a0=$(cpu_field 2 4); o0=$(proc_jiffies $ours)
    sleep "$quiet_window"
    a1=$(cpu_field 2 4); o1=$(proc_jiffies $ours)
    echo $(( ((a1 - a0) - (o1 - o0)) * 100 / (quiet_window * hz) ))
}

waited=0
other_before=$(other_now)
while [ "$other_before" -ge 20 ] && [ "$waited" -lt "${QUIET_WAIT:-0}" ]; do
    echo "request.sh: other processes use ${other_before}% of a CPU," \
         "waiting" >&2
    sleep 7
    waited=$((waited + 10))
    other_before=$(other_now)
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t_start=$(date +%s)

# ---------------------------------------------------------------------
# warm-up: every gateway, the module's zone until it is full (records
# evicted) and lua-ledger's dict until it is full (no free page left: the
# next inserts evict), so that every round sees the ledgers' steady state

warm() {
    # warm label port: wrk for WARMUP seconds, three tries
    for try in 1 2 3; do
        wrk_run "$2" "$warmup" "$prefix/out/warmup-$1" nonce \
            "w$tag-$1-$try-$RANDOM" || die "wrk failed"
        ! grep -q Non-2xx "$prefix/out/warmup-$1" \
            || { cat "$prefix/out/warmup-$1" >&2;
                 die "the warm-up of $1 had non-2xx responses"; }
        wrk_ok "$prefix/out/warmup-$1" && return 0
        echo "request.sh: the warm-up of $1 had errors, again" >&2
    done
    cat "$prefix/out/warmup-$1" >&2
    die "the warm-up of $1 had errors three times"
}

for g in "plain $plain_port" "module-ledger-off $ledgeroff_port" \
         "module-floor $floor_port" "lua $lua_port" "direct $up_port"
do
    set -- $g
    warm "$1" "$2"
done

for i in $(seq 1 "$warmup_tries"); do
    warm module "$module_port"
    z=$(zone_json "$module_api")
    [ "$(zone_field "$z" evictions)" = 0 ] || break
done

zone_warm=$(zone_json "$module_api")

for i in $(seq 1 "$warmup_tries"); do
    warm module-body-off "$bodyoff_port"
    z=$(zone_json "$bodyoff_api")
    [ "$(zone_field "$z" evictions)" = 0 ] || break
done

lua_ledger_json() {
    curl -s "http://127.0.0.1:$lualedger_api/lua/ledger"
}

for i in $(seq 1 "$warmup_tries"); do
    warm lua-ledger "$lualedger_port"
    [ "$(zone_field "$(lua_ledger_json)" free_space)" != 0 ] || break
done

lua_ledger_warm=$(lua_ledger_json)

if [ "$store" = 1 ]; then
    warm lua-redis "$luaredis_port"
    for g in $gateways; do
        case $g in
        store)      warm store "$store_port" ;;
        storetls)   warm store-tls "$storetls_port" ;;
        storerepl)  warm store-repl "$storerepl_port" ;;
        storewait1) warm store-wait1 "$storewait1_port" ;;
        storebase)  warm store-base "$storebase_port" ;;
        storetlsbase)
                    warm store-tls-base "$storetlsbase_port" ;;
        esac
    done
fi

if [ "$h2" = 1 ]; then
    for p in $plain_h2_port $module_h2_port; do
        h2_run "$p" 1 "$prefix/out/warmup-h2" || die "h2load failed"
        h2_ok "$prefix/out/warmup-h2" || { cat "$prefix/out/warmup-h2" >&2;
                                           die "the h2 warm-up had errors"; }
    done
fi

for port in $sse_port $plain_port $module_port $ledgeroff_port $floor_port \
            $lua_port $lualedger_port
do
    run_client "$prefix/out/warmup-sse" "$python" "$prefix/sse_client.py" \
        run 127.0.0.1 "$port" "$sse_streams" 10 2 "$prefix/out/warmup-sse.d" \
        || { cat "$prefix/out/warmup-sse" >&2; die "the SSE warm-up failed"; }
done

# ---------------------------------------------------------------------
# the series

results=$prefix/results
sse_results=$prefix/sse-results
: > "$results"
: > "$sse_results"

variants="plain module module-client-id module-ledger-off module-body-off"
variants="$variants module-floor lua lua-client-id"
variants="$variants lua-ledger lua-ledger-client-id direct"
[ "$h2" != 1 ] || variants="$variants plain-h2 module-h2"
if [ "$store" = 1 ]; then
    variants="$variants store store-tls store-repl store-wait1 lua-redis"
    variants="$variants plain-c1 module-c1 store-c1 store-tls-c1"
    variants="$variants store-repl-c1 store-wait1-c1 lua-redis-c1"
fi
[ "${HTTP:-1}" = 1 ] || variants=""
variants=${VARIANTS-$variants}

# BASE_MODULE: store and store-tls with the other build, each right
# after its own

if [ -n "$base_module" ] && [ "$store" = 1 ]; then
    vs=
    for v in $variants; do
        vs="$vs $v"
        case $v in
        store|store-tls)       vs="$vs $v-base" ;;
        store-c1|store-tls-c1) vs="$vs ${v%-c1}-base-c1" ;;
        esac
    done
    variants=$vs
fi

# the store variants left out, and a store variant without STORE=1
for l in $store_out_labels; do
    variants=$(echo " $variants " | sed "s/ $l\(-c1\)\{0,1\} / /g")
done
if [ "$store" != 1 ]; then
    for v in $variants; do
        case $v in
        store*|lua-redis*) die "$v needs STORE=1" ;;
        esac
    done
fi
sse_variants="direct plain module module-ledger-off module-floor lua lua-ledger"
sse_variants=${SSE_VARIANTS-$sse_variants}

sse_chrt=
[ "$sse_rt" != 1 ] || sse_chrt="chrt -f 1"

rt_workers() {
    # rt_workers fifo|other: the SSE path's workers
    for w in $sse_w $plain_w $module_w $ledgeroff_w $floor_w $lua_w \
             $lualedger_w
    do
        if [ "$1" = fifo ]; then
            chrt -f -p 1 "$w" > /dev/null
        else
            chrt -o -p 0 "$w" > /dev/null
        fi
    done
}

variant() {
    # variant label: its port, gateway worker, wrk mode and tool, in globals
    mode=nonce; tool=wrk; run_conns=$conns; rd=
    case $1 in
    *-c1)
        run_conns=1
        set -- "${1%-c1}" ;;
    esac
    case $1 in
    store)             port=$store_port; w=$store_w; rd=$redis_pid ;;
    store-tls)         port=$storetls_port; w=$storetls_w; rd=$redis_tls_pid ;;
    # the primary and its replica: both work for each claim
    store-repl)        port=$storerepl_port; w=$storerepl_w
                       rd="$redis_p_pid $redis_r_pid" ;;
    store-wait1)       port=$storewait1_port; w=$storewait1_w
                       rd="$redis_p_pid $redis_r_pid" ;;
    store-base)        port=$storebase_port; w=$storebase_w; rd=$redis_pid ;;
    store-tls-base)    port=$storetlsbase_port; w=$storetlsbase_w
                       rd=$redis_tls_pid ;;
    lua-redis)         port=$luaredis_port; w=$luaredis_w; rd=$redis_pid ;;
    plain)             port=$plain_port; w=$plain_w ;;
    module)            port=$module_port; w=$module_w ;;
    module-client-id)  port=$module_port; w=$module_w; mode=client ;;
    module-ledger-off) port=$ledgeroff_port; w=$ledgeroff_w ;;
    module-body-off)   port=$bodyoff_port; w=$bodyoff_w ;;
    module-floor)      port=$floor_port; w=$floor_w ;;
    lua)               port=$lua_port; w=$lua_w ;;
    lua-client-id)     port=$lua_port; w=$lua_w; mode=client ;;
    lua-ledger)        port=$lualedger_port; w=$lualedger_w ;;
    lua-ledger-client-id)
                       port=$lualedger_port; w=$lualedger_w; mode=client ;;
    direct)            port=$up_port; w= ;;
    plain-h2)          port=$plain_h2_port; w=$plain_w; tool=h2 ;;
    module-h2)         port=$module_h2_port; w=$module_w; tool=h2 ;;
    *)                 die "no variant $1" ;;
    esac
}

snap() {
    # snap: the counters before or after a run, in globals
    s_t=$(date +%s.%N)
    s_all=$(cpu_field 2 4); s_c0=$(cpu_busy "cpu$gw_cpu")
    s_c1=$(cpu_busy "cpu$load_cpu"); s_st=$(cpu_field 9 9)
    s_si=$(cpu_field 7 8)
    s_ours=$(proc_jiffies $ours)
}

for round in $(seq 1 "$rounds"); do
    for v in $variants; do
        variant "$v"

        out=$prefix/out/$round-$v

        # a run with socket errors (timeouts: the machine stalled us) is
        # run again, at most twice, and the table says so; a non-2xx
        # response ends the bench
        for try in 1 2 3; do

        snap
        t0=$s_t; all0=$s_all; c00=$s_c0; c10=$s_c1; st0=$s_st; si0=$s_si
        ours0=$s_ours
        gw0=$(proc_jiffies $w); up0=$(proc_jiffies "$up_w")
        rd0=$(proc_jiffies $rd)

        if [ $tool = wrk ]; then
            wrk_run "$port" "$duration" "$out" "$mode" "$tag-r$round-$v" \
                || { cat "$out" >&2; die "wrk failed"; }
        else
            h2_run "$port" "$duration" "$out" \
                || { cat "$out" >&2; die "h2load failed"; }
        fi

        snap
        gw1=$(proc_jiffies $w); up1=$(proc_jiffies "$up_w")
        rd1=$(proc_jiffies $rd)

        read -r cu cs < "$out.time"

        if grep -q Non-2xx "$out"; then
            cat "$out" >&2
            die "round $round/$v: non-2xx responses"
        fi

        if { [ $tool = wrk ] && wrk_ok "$out"; } \
           || { [ $tool = h2 ] && h2_ok "$out"; }
        then
            break
        fi

        cat "$out" >&2
        [ "$try" -lt 3 ] || die "round $round/$v: errors, three times"
        echo "request.sh: round $round/$v: errors, run again" >&2

        done

        if [ $tool = wrk ]; then
            rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
            reqs=$(awk '/requests in/ { print $1 }' "$out")
            p50=$(to_us "$(awk '$1 == "50%" { print $2 }' "$out")")
            p99=$(to_us "$(awk '$1 == "99%" { print $2 }' "$out")")
        else
            rps=$(awk '/^finished in/ { print $4 }' "$out")
            reqs=$(awk '/^requests:/ { print $2 }' "$out")
            # h2load has no percentiles: its mean, and no p99
            p50=$(to_us "$(awk '/^time for request:/ { print $6 }' "$out")")
            p99=-
        fi

        awk -v round="$round" -v label="$v" -v rps="$rps" \
            -v reqs="$reqs" -v p50="$p50" -v p99="$p99" -v hz="$hz" \
            -v t="$(awk -v a="$t0" -v b="$s_t" 'BEGIN { print b - a }')" \
            -v all="$((s_all - all0))" -v c0="$((s_c0 - c00))" \
            -v c1="$((s_c1 - c10))" -v steal="$((s_st - st0))" \
            -v softirq="$((s_si - si0))" -v ours="$((s_ours - ours0))" \
            -v gw="$((gw1 - gw0))" -v up="$((up1 - up0))" -v w="$w" \
            -v client="$(awk -v u="$cu" -v s="$cs" 'BEGIN { print u + s }')" \
            -v try="$try" -v rd="$rd" -v store="$((rd1 - rd0))" \
            'BEGIN {
                # other processes: user + nice + system of all the CPUs
                # minus ours and the load generator
                other = all - ours - client * hz
                if (other < 0) other = 0
                printf "%s %s %.0f %d %.0f %s %s %.2f %.0f %.0f %.0f %.0f" \
                       " %.0f %.2f %d %s\n",
                    round, label, rps, reqs, p50, p99,
                    w == "" ? "-" : sprintf("%.2f", gw / hz * 1e6 / reqs),
                    up / hz * 1e6 / reqs,
                    c0 / hz / t * 100, c1 / hz / t * 100,
                    other / hz / t * 100, softirq / hz / t * 100,
                    steal / hz / t * 100, client * 1e6 / reqs, try,
                    rd == "" ? "-" : sprintf("%.2f", store / hz * 1e6 / reqs)
            }' >> "$results"
    done

    # SSE_RT=1: during the SSE runs only (a few % of CPU), the workers in
    # the path and the client run SCHED_FIFO, so that another session's
    # CPU-bound process on the same core cannot hold a wake-up for a time
    # slice; the request series above always runs SCHED_OTHER
    [ "$sse_rt" != 1 ] || rt_workers fifo

    for v in $sse_variants; do
        case $v in
        direct)            port=$sse_port ;;
        plain)             port=$plain_port ;;
        module)            port=$module_port ;;
        module-ledger-off) port=$ledgeroff_port ;;
        module-floor)      port=$floor_port ;;
        lua)               port=$lua_port ;;
        lua-ledger)        port=$lualedger_port ;;
        *)                 die "no SSE variant $v" ;;
        esac

        out=$prefix/out/$round-sse-$v

        snap
        t0=$s_t; all0=$s_all; ours0=$s_ours

        run_client "$out" $sse_chrt "$python" "$prefix/sse_client.py" run \
            127.0.0.1 "$port" "$sse_streams" "$sse_events" "$sse_ms" \
            "$out.delays" \
            || { cat "$out" >&2; die "round $round/sse $v: failed"; }

        snap
        read -r cu cs < "$out.time"
        read -r n p50 p90 p99 max < "$out"

        awk -v round="$round" -v label="$v" -v n="$n" -v p50="$p50" \
            -v p90="$p90" -v p99="$p99" -v max="$max" -v hz="$hz" \
            -v t="$(awk -v a="$t0" -v b="$s_t" 'BEGIN { print b - a }')" \
            -v all="$((s_all - all0))" -v ours="$((s_ours - ours0))" \
            -v client="$(awk -v u="$cu" -v s="$cs" 'BEGIN { print u + s }')" \
            'BEGIN {
                other = all - ours - client * hz
                if (other < 0) other = 0
                printf "%s %s %s %s %s %s %s %.0f\n", round, label, n, p50,
                       p90, p99, max, other / hz / t * 100
            }' >> "$sse_results"
    done

    [ "$sse_rt" != 1 ] || rt_workers other
done

zone_end=$(zone_json "$module_api")

# the store's round trip: PING on one connection from the gateway's CPU,
# three times (the median is the report's)

if [ "$store" = 1 ]; then
    for i in 1 2 3; do
        taskset -c "$gw_cpu" redis-benchmark -h 127.0.0.1 -p "$redis_port" \
            -c 1 -n 20000 -t ping --csv 2> /dev/null \
            | awk -F'"' '$2 == "PING_MBULK" { print $10 * 1000 }'
    done > "$prefix/out/store-rtt"

    redis_mem=$(redis-cli -p "$redis_port" info memory \
                | awk -F: '/^used_memory:/ { print $2 }' | tr -d '\r')
    redis_keys=$(redis-cli -p "$redis_port" dbsize | tr -d '\r')
fi

# ---------------------------------------------------------------------
# a fresh 8 MB zone filled with the longest ids (128 bytes, client-sent)

for i in $(seq 1 "$fill_tries"); do
    wrk_run "$fill_port" "$fill_seconds" "$prefix/out/fill" client \
        "$tag-fill-$i" 128 || die "wrk failed"
    wrk_ok "$prefix/out/fill" || { cat "$prefix/out/fill" >&2;
                                   die "the fill had errors"; }
    z=$(zone_json "$fill_api")
    [ "$(zone_field "$z" evictions)" = 0 ] || break
done

zone_fill=$(zone_json "$fill_api")
in_flight_lua=$(curl -s "http://127.0.0.1:$lua_api/lua/in_flight")
lua_ledger_end=$(lua_ledger_json)
in_flight_lua_ledger=$(zone_field "$lua_ledger_end" in_flight)

rss() {
    awk '/^VmRSS/ { print $2 }' "/proc/$1/status"
}

# ---------------------------------------------------------------------
# PROFILE=1: where each gateway's worker spends its time (cpu-clock: this
# KVM guest has no hardware counters), outside the measured series

profiles=
if [ "$profile" = 1 ] && command -v perf > /dev/null; then
    pvs="plain module module-ledger-off module-floor lua lua-ledger"
    for v in ${PROFILE_VARIANTS:-$pvs}; do
        variant "$v"
        [ -n "$w" ] || continue
        set -- "$v"
        if [ $tool = wrk ]; then
            wrk_run "$port" $((duration + 2)) "$prefix/out/perf-$1.load" \
                "$mode" "$tag-perf-$1" &
        else
            h2_run "$port" $((duration + 2)) "$prefix/out/perf-$1.load" &
        fi
        wpid=$!
        sleep 1
        perf_sample "$w" "$duration" "$prefix/out/perf-$1.data"
        wait "$wpid" || true
        perf_top "$prefix/out/perf-$1.data" dso,sym 40 \
            > "$prefix/out/perf-$1.sym"
        perf_top "$prefix/out/perf-$1.data" dso 12 \
            > "$prefix/out/perf-$1.dso"
        profiles="$profiles $1"
    done
fi

check_alerts

t_end=$(date +%s)

# ---------------------------------------------------------------------
# the report

{
echo "## request plane, end to end"
echo
echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'), $("$nginx" -v 2>&1 | sed 's/.*: //')," \
     "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
     "x $(nproc), kernel $(uname -r), module $(sha256sum "$prefix/module.so" \
     | cut -c1-12) (built $module_time),${base_module:+ base module \
$(sha256sum "$prefix/module-base.so" | cut -c1-12) (-base variants),}" \
     "lua-nginx-module" \
     "$(dpkg-query -W -f '${Version}' libnginx-mod-http-lua 2>/dev/null \
        || echo '?'), load average before: $load_before," \
     "other processes before: ${other_before}% of a CPU (waited ${waited} s),"\
     "series and fill: $((t_end - t_start)) s"
echo
echo "Command: \`ROUNDS=$rounds DURATION=$duration CONNECTIONS=$conns" \
     "H2=$h2 SSE_STREAMS=$sse_streams SSE_EVENTS=$sse_events" \
     "SSE_MS=$sse_ms SSE_RT=$sse_rt ZONE=$zone_size PROFILE=$profile" \
     "QUIET_WAIT=${QUIET_WAIT:-0} bench/request.sh\`;" \
     "gateways (worker_processes 1) on CPU $gw_cpu; upstreams, wrk," \
     "h2load and the SSE client on CPU $load_cpu;" \
     "\`wrk -t1 -c$conns -d${duration}s --latency -s bench/wrk-request.lua" \
     "URL -- {nonce|client} TAG\`," \
     "\`h2load -t1 -c$conns -m1 -D $duration -d body.json\`" \
     "(POST /v1/completions, ~600-byte response);" \
     "\`sse_client.py run HOST PORT $sse_streams $sse_events $sse_ms\`"
echo
"$python" "$top/bench/request_report.py" "$results" "$sse_results" \
    "$prefix/out"
if [ "$store" = 1 ]; then
    echo
    echo "Store: redis-server $(redis-server --version | awk '{ print $3 }' \
        | cut -d= -f2) on CPU $load_cpu (no persistence, noeviction);" \
        "after the run it held $redis_keys keys in $redis_mem bytes."
    [ -z "$store_skipped" ] \
        || echo "The module's store variant was left out: $store_skipped."
    if [ -n "$store_left_out" ]; then
        echo
        echo "Store variants left out:"
        echo
        printf '%s' "$store_left_out" | sed 's/^/- /'
    fi
fi
echo
echo "### Zone: bytes per ledger record"
echo
zone_bytes=$(size_bytes "$zone_size")
echo "| zone ($zone_size) | ids | records | in flight | capacity (status) |" \
     "evictions | zone bytes per record | records per 8 MiB |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for z in "module, after the warm-up|36 bytes, minted|$zone_warm" \
         "module, after the series|36 bytes, minted and client|$zone_end" \
         "fresh zone, filled|128 bytes, client|$zone_fill"
do
    IFS='|' read -r what ids json <<< "$z"
    rec=$(zone_field "$json" records)
    awk -v what="$what" -v ids="$ids" -v rec="$rec" \
        -v fl="$(zone_field "$json" in_flight)" \
        -v cap="$(zone_field "$json" capacity)" \
        -v ev="$(zone_field "$json" evictions)" -v bytes="$zone_bytes" \
        'BEGIN {
            printf "| %s | %s | %d | %d | %d | %d | %s | %s |\n",
                what, ids, rec, fl, cap, ev,
                (ev > 0 ? sprintf("%.1f", bytes / rec) : "(not full)"),
                (ev > 0 ? sprintf("%d", rec * 8388608 / bytes) : "-")
        }'
done
echo
echo "A zone is full when it evicts (evictions > 0): records is then what it"
echo "holds; bytes per record divide the whole zone (slab pages, headers and"
echo "the tree's shared context included) by the records."
echo
echo "lua-ledger's \`lua_shared_dict dynamo_rl_ledger $zone_size\`" \
     "(36-byte ids, minted and client):"
echo
echo "| dict ($zone_size) | records | in flight | capacity | free pages, bytes |" \
     "zone bytes per record | records per 8 MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for z in "after the warm-up|$lua_ledger_warm" \
         "after the series|$lua_ledger_end"
do
    IFS='|' read -r what json <<< "$z"
    awk -v what="$what" -v rec="$(zone_field "$json" records)" \
        -v fl="$(zone_field "$json" in_flight)" \
        -v cap="$(zone_field "$json" capacity)" \
        -v free="$(zone_field "$json" free_space)" -v bytes="$zone_bytes" \
        'BEGIN {
            full = (free == 0 && rec > 0)
            printf "| %s | %d | %d | %d | %d | %s | %s |\n",
                what, rec, fl, cap, free,
                (full ? sprintf("%.1f", bytes / rec) : "(not full)"),
                (full ? sprintf("%d", rec * 8388608 / bytes) : "-")
        }'
done
echo
echo "The dict is full when no free page is left (it then evicts by LRU;"
echo "lua_shared_dict counts no evictions); its entries are walked after the"
echo "rounds, never during one."
echo
echo "### Worker RSS after the run"
echo
echo "| gateway | RSS kB |"
echo "|---|---:|"
for g in "plain $plain_w" "module $module_w" "module-ledger-off $ledgeroff_w" \
         "module-body-off $bodyoff_w" "module-floor $floor_w" \
         "lua $lua_w" "lua-ledger $lualedger_w" "fill (128-byte ids) $fill_w" \
         "upstream $up_w"
do
    set -- $g
    w=${*: -1}
    echo "| ${*:1:$(($# - 1))} | $(rss "$w") |"
done
echo
echo "Lua in-flight counters after the run: lua $in_flight_lua," \
     "lua-ledger $in_flight_lua_ledger (0 expected)."
for p in $profiles; do
    echo
    echo "### perf: $p (cpu-clock, $duration s, \`perf report --no-children\`)"
    echo
    echo '```'
    cat "$prefix/out/perf-$p.dso"
    echo "..."
    cat "$prefix/out/perf-$p.sym"
    echo '```'
done
} | if [ -n "$out_file" ]; then tee "$out_file"; else cat; fi
