-- bench/lua/store.lua: the shared store's design (issue 13, the design in
-- /work/shared/reference/distributed-state.md, sections 4 and 5) written
-- with lua-nginx-module and lua-resty-redis (Debian lua-nginx-redis): the
-- alternative to ngx_http_dynamo_rl_module with "dynamo_rl_store"
-- ("lua-redis" in bench/request.sh).
--
-- What it does, per request, as the module with a store does:
--   * everything lua/attempt.lua does: the client's X-Dynamo-Attempt-Id
--     validated (400 otherwise) or a UUIDv7 minted; the id upstream as
--     X-Dynamo-Attempt-Id and X-Request-Id and on the response;
--   * the access phase waits for one store round trip, the "claim" script:
--     it reads the gate and claims the id atomically.  "ok": forwarded, the
--     record {P}:a:<id> is accepted (st a, ow owner, t0, rp replica, rq
--     request id) for the lease; "dup": 409 as the module's, X-Should-Retry
--     false; "closed": 503 gate_closed with Retry-After; "nogate": the gate
--     is created open (a fresh store) and the claim sent again; the store
--     unreachable or silent past the timeout: 503 store_unavailable,
--     Retry-After: 1, nothing forwarded;
--   * the response header queues a "move" to streaming (st s, code, sse),
--     the log phase a "move" to the terminal state (u succeeded for a 2xx,
--     f failed otherwise) with the attempt ttl, t1 and the bytes sent; the
--     queue is written by a timer (ngx.timer.at 0), pipelined, one batch per
--     turn of the event loop, and a terminal move replaces its attempt's
--     streaming move when both wait in the same batch;
--   * in-flight requests counted in the dynamo_rl dict, as ledger.lua does.
--
-- What it leaves out, and the module does: the gate poll and the fleet
-- heartbeat (timers, not per request), the release of a timed-out claim,
-- the "canceled" state, SSE [DONE] scanning, on_error=local, the metrics.
--
-- Competent, not naive: the scripts run by EVALSHA (EVAL once on
-- NOSCRIPT), the connections come from lua-resty-redis's keepalive pool,
-- the terminal writes are batched and pipelined.

local ngx = ngx
local var = ngx.var
local byte = string.byte
local format = string.format
local unpack = unpack
local redis = require "nginx.redis"

local attempt = require("attempt")

local attempt_id = attempt.id
local deny = attempt.deny

local dict = ngx.shared.dynamo_rl

-- set by init(): the store's address, the key prefix, the replica
local HOST, PORT = "127.0.0.1", 6379
local PREFIX = "{dynamo-rl}"
local REPLICA = "lua"

-- timeout=250ms lease=1h, dynamo_rl_attempt_ttl 10m
local TIMEOUT = 250
local LEASE = 3600000
local TTL = 600000

-- the keepalive pool: as many idle connections as the module has waiters
local POOL_IDLE = 60000
local POOL_SIZE = 64

-- bounded memory: moves beyond this are dropped (the module counts them)
local QUEUE_MAX = 4096

local CLAIM = [[
local g = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'expires', 'reason')
if not g[1] then return {'nogate'} end
if g[1] ~= 'open' then
  return {'closed', g[2], g[3] or '0', g[4] or '', redis.call('TIME')[1]}
end
local r = redis.call('HMGET', KEYS[2], 'st', 'ow')
if r[1] then
  if r[2] == ARGV[1] then return {'ok', g[2]} end
  return {'dup', g[2], r[1]}
end
redis.call('HSET', KEYS[2], 'st', 'a', 'ow', ARGV[1], 't0', ARGV[2],
           'rp', ARGV[4], 'rq', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {'ok', g[2]}
]]

local MOVE = [[
local r = redis.call('HMGET', KEYS[1], 'st', 'ow')
if not r[1] then return 0 end
if r[2] ~= ARGV[1] then return -1 end
if not string.find(ARGV[2], r[1], 1, true) then return -2 end
redis.call('HSET', KEYS[1], 'st', ARGV[3], unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
]]

local GATE_OPEN = [[
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('HSETNX', KEYS[1], 'state', 'open') == 1 then
  redis.call('HSET', KEYS[1], 'epoch', 1, 'expires', 0, 'lease', 0,
             'reason', '', 'changed', now)
end
return 1
]]


local function hex(s)
    return (s:gsub(".", function(c) return format("%02x", byte(c)) end))
end

local CLAIM_SHA = hex(ngx.sha1_bin(CLAIM))
local MOVE_SHA = hex(ngx.sha1_bin(MOVE))

local GATE_KEY
local ATTEMPT_KEY

-- per worker process: the queue of moves and whether a flush is pending
local queue = {}
local queued = {}
local flushing = false
local seq = 0

local _M = {}


function _M.init(host, port, prefix, replica)
    HOST, PORT = host, port
    PREFIX = "{" .. prefix .. "}"
    REPLICA = replica
    GATE_KEY = PREFIX .. ":gate"
    ATTEMPT_KEY = PREFIX .. ":a:"
end


local function connect()
    local red = redis:new()

    red:set_timeout(TIMEOUT)

    local ok, err = red:connect(HOST, PORT)
    if not ok then
        return nil, err
    end

    return red
end


-- EVALSHA, and EVAL once if the store does not know the script yet

local function script(red, sha, body, nkeys, ...)
    local res, err = red:evalsha(sha, nkeys, ...)

    -- an error reply is false and its message
    if not res and err and err:find("NOSCRIPT", 1, true) then
        res, err = red:eval(body, nkeys, ...)
    end

    return res, err
end


local function unavailable(id, red, err)
    if red then
        red:close()
    end

    ngx.log(ngx.ERR, "lua redis store: ", err)

    return deny(id, 503, "Service Unavailable", "store_unavailable",
                "the attempt store is unavailable", "1")
end


function _M.access()
    local id, minted = attempt_id()

    local red, err = connect()
    if red == nil then
        return unavailable(id, nil, err)
    end

    seq = seq + 1

    local owner = REPLICA .. "." .. ngx.worker.pid() .. "." .. seq
    local key = ATTEMPT_KEY .. id
    local t0 = format("%d", ngx.now() * 1000)
    local res

    for _ = 1, 2 do
        res, err = script(red, CLAIM_SHA, CLAIM, 2, GATE_KEY, key, owner, t0,
                          LEASE, REPLICA, id)

        if type(res) ~= "table" or res[1] ~= "nogate" then
            break
        end

        -- a fresh store: the gate is created open, the claim sent again
        res, err = red:eval(GATE_OPEN, 1, GATE_KEY)
        if not res then
            break
        end
    end

    if type(res) ~= "table" then
        return unavailable(id, red, err or "unexpected reply to the claim")
    end

    red:set_keepalive(POOL_IDLE, POOL_SIZE)

    local verdict = res[1]

    if verdict == "dup" then
        return attempt.duplicate(id)
    end

    if verdict == "closed" then
        local left = 5
        local expires = tonumber(res[3]) or 0

        if expires > 0 then
            left = math.max(1, math.ceil(expires / 1000 - tonumber(res[5])))
        end

        return deny(id, 503, "Service Unavailable", "gate_closed",
                    "the gate is closed", left)
    end

    if verdict ~= "ok" then
        return unavailable(id, nil, "unexpected reply to the claim")
    end

    var.attempt_id = id

    dict:incr("in_flight", 1, 0)

    local ctx = ngx.ctx
    ctx.attempt = id
    ctx.owner = owner
end


local function flush(premature)
    if premature then
        return
    end

    local batch = queue
    queue = {}
    queued = {}

    local red, err = connect()

    if red == nil then
        ngx.log(ngx.ERR, "lua redis store: ", err, ", ", #batch,
                " move(s) dropped")
        flushing = false
        return
    end

    red:init_pipeline(#batch)

    for i = 1, #batch do
        local m = batch[i]
        red:evalsha(MOVE_SHA, 1, ATTEMPT_KEY .. m[1], unpack(m, 2))
    end

    local res
    res, err = red:commit_pipeline()

    if not res then
        red:close()
        ngx.log(ngx.ERR, "lua redis store: ", err)
        flushing = false
        return
    end

    -- the first batch of a fresh store: the script is loaded, sent again
    local again = {}

    for i = 1, #res do
        local r = res[i]

        if type(r) == "table" and r[1] == false
           and tostring(r[2]):find("NOSCRIPT", 1, true)
        then
            again[#again + 1] = batch[i]
        end
    end

    for i = 1, #again do
        local m = again[i]
        script(red, MOVE_SHA, MOVE, 1, ATTEMPT_KEY .. m[1], unpack(m, 2))
    end

    red:set_keepalive(POOL_IDLE, POOL_SIZE)

    flushing = false

    if #queue > 0 then
        flushing = true
        ngx.timer.at(0, flush)
    end
end


-- a move: owner, from states, to state, ttl, then field value pairs

local function push(id, m)
    local i = queued[id]

    if i then
        -- the terminal move replaces the streaming one still waiting
        queue[i] = m
        return
    end

    if #queue >= QUEUE_MAX then
        return
    end

    queue[#queue + 1] = m
    queued[id] = #queue

    if not flushing then
        flushing = true
        ngx.timer.at(0, flush)
    end
end


-- the attempt of this request, nil for none, and the request's ctx

local function current()
    local ctx = ngx.ctx
    return ctx.attempt, ctx
end


function _M.header()
    local id, ctx = current()
    if id == nil then
        return
    end

    local ct = ngx.header["Content-Type"]
    local sse = (ct and ct:find("text/event-stream", 1, true)) and "1" or "0"

    push(id, { id, ctx.owner, "a", "s", LEASE, "code", ngx.status,
               "sse", sse })
end


function _M.log()
    local id, ctx = current()
    if id == nil then
        return
    end

    local status = ngx.status

    push(id, { id, ctx.owner, "as",
               (status >= 200 and status < 300) and "u" or "f", TTL,
               "code", status, "t1", format("%d", ngx.now() * 1000),
               "b", var.bytes_sent })

    dict:incr("in_flight", -1, 0)
end


-- the state of an attempt, for the sanity checks: accepted ... or none

function _M.state(id)
    local red, err = connect()
    if red == nil then
        return "error: " .. err
    end

    local st = red:hget(ATTEMPT_KEY .. id, "st")
    red:set_keepalive(POOL_IDLE, POOL_SIZE)

    return ({ a = "accepted", s = "streaming", u = "succeeded",
              f = "failed" })[st] or "none"
end


return _M
