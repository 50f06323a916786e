-- bench/lua/sse.lua: the upstream's SSE route (content_by_lua_file), never
-- the gateway's code.
--
-- POST /v1/chat/completions?n=N&ms=M: N OpenAI-shaped chunks, one every M
-- milliseconds (ngx.sleep, nginx's timer resolution is 1 ms), each flushed
-- on its own and stamped with CLOCK_MONOTONIC in nanoseconds just before it
-- is written ("t"), then "data: [DONE]".  bench/sse_client.py, on the same
-- machine, subtracts "t" from the time the event reached it: the path's
-- delay per event, whatever stands between (nothing, or a gateway).
--
-- Why Lua here and "return 200" for the completion route: this route is
-- paced, not throughput-bound (a few hundred events per second), and it
-- must write each event at a known instant with its send time inside it;
-- a static file with limit_rate can do neither (limit_rate paces bytes per
-- timer tick, not events, and a file cannot carry send times).

local ffi = require "ffi"

pcall(ffi.cdef, [[
    typedef struct { long tv_sec; long tv_nsec; } drl_bench_ts_t;
    int clock_gettime(int clk, drl_bench_ts_t *ts);
]])

local C = ffi.C
local ts = ffi.new("drl_bench_ts_t")
local CLOCK_MONOTONIC = 1

local n = tonumber(ngx.var.arg_n) or 200
local every = (tonumber(ngx.var.arg_ms) or 4) / 1000

ngx.header["Content-Type"] = "text/event-stream"
ngx.header["Cache-Control"] = "no-cache"
ngx.send_headers()
ngx.flush(true)

for i = 1, n do
    ngx.sleep(every)

    C.clock_gettime(CLOCK_MONOTONIC, ts)

    local ok = ngx.print('data: {"id":"cmpl-bench","object":"text_completion",',
                         '"created":1732890000,"model":"bench",',
                         '"choices":[{"index":0,"text":" token","logprobs":null,',
                         '"finish_reason":null}],"i":', i, ',"t":',
                         string.format("%d%09d", tonumber(ts.tv_sec),
                                       tonumber(ts.tv_nsec)),
                         '}\n\n')
    if not ok then
        return
    end

    ngx.flush(true)
end

ngx.print('data: {"id":"cmpl-bench","object":"text_completion",',
          '"created":1732890000,"model":"bench","choices":[{"index":0,',
          '"text":"","logprobs":null,"finish_reason":"length"}]}\n\n',
          'data: [DONE]\n\n')
