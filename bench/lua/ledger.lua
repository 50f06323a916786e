-- bench/lua/ledger.lua: lua/attempt.lua's attempt-id policy plus a
-- single-use attempt ledger in a lua_shared_dict, written with
-- lua-nginx-module: the alternative to ngx_http_dynamo_rl_module with its
-- ledger on ("lua-ledger" in bench/request.sh).
--
-- What it does, per request, as the module does:
--   * everything lua/attempt.lua does: validate the client's
--     X-Dynamo-Attempt-Id (exactly one, 1 to 128 bytes of [A-Za-z0-9._:-],
--     else 400 in Dynamo's flat shape with a minted id on the response) or
--     mint a UUIDv7 (attempt.lua's id(), the same code); the id
--     goes upstream as X-Dynamo-Attempt-Id and X-Request-Id and on the
--     response (proxy_set_header, proxy_hide_header + add_header ...
--     always, from $attempt_id); in-flight requests are counted in the
--     dynamo_rl dict;
--   * single use, in the access phase: a client's id is inserted with
--     dict:add(id, ACCEPTED, 0) into the dynamo_rl_ledger dict (sized
--     like the module's zone, ZONE); if it is there already (add returns
--     false, "exists": in flight, or finished less than the ttl ago) the
--     answer is 409 {"message":...,"type":"Conflict","code":409} with
--     X-Dynamo-RL-Reason: duplicate_attempt and the id echoed, and nothing
--     is forwarded.  A minted id is inserted with dict:set: a UUIDv7 with
--     74 random bits is new, and the module skips its lookup too (a minted
--     id later sent back by a client is then refused, as by the module).
--     Nothing refused is recorded, as in the module.  An accepted entry
--     never expires (exptime 0), like the module's in-flight record;
--   * in the log phase: the terminal state, SUCCEEDED for a 2xx status
--     (ngx.status) and FAILED otherwise, with the module's attempt ttl
--     (dynamo_rl_attempt_ttl 10m: dict:set(id, state, 600)); after the ttl
--     the id is free again (an expired entry does not block dict:add), as
--     the module frees an expired record; in-flight -1.
--
-- When the dict is full, dict:add and dict:set evict least-recently-used
-- entries themselves (up to 30 per insert; "forcible"), as the module
-- evicts its oldest finished records: acceptable here.  The difference: LRU
-- does not know an entry's state, so under a flood an accepted entry (an
-- attempt still in flight) can be evicted, and its id accepted again,
-- where the module never evicts an attempt in flight and answers 503
-- ledger_full instead.  Only if the dict cannot make room at all ("no
-- memory") does this answer 503 ledger_full.  lua_shared_dict's own
-- per-entry overhead (rbtree node, LRU queue, expiry, value header: 68
-- bytes, then slab rounding to a power of two) makes a 36-byte id with its
-- one-byte state 105 bytes, a 128-byte slab chunk, and a 128-byte id a
-- 256-byte one.
--
-- The states are one byte each (the module's record has a one-byte state
-- too): lua_shared_dict rewrites a value in place only when the new one has
-- the old one's length, and otherwise frees the entry and allocates it
-- again, so "accepted" -> "succeeded" would cost the log phase a slab free
-- and alloc (and, in a full dict, evictions).  /lua/attempts/ in
-- bench/request.sh spells them out.
--
-- What it leaves out, and the module does (so module/lua-ledger is still
-- conservative): the record's details (status, bytes sent, start and end
-- times, stream flag) and the attempts API over them, the "canceled" state
-- (a client that went away is "failed" here), SSE [DONE] scanning (a
-- stream is "succeeded" on a 2xx status whether or not [DONE] came), the
-- gate, stripping the client's routing headers, the method and
-- canonical-target checks, flat bodies for nginx's own error pages,
-- outcome and ledger counters (duplicates, evictions, expired).
--
-- Competent, not naive: as attempt.lua (nginx directives do the header
-- work, the regex is compiled once and cached with "jo", the full header
-- table is built only when the client sent an id, randomness is buffered);
-- the ledger costs one shared-dict operation in the access phase and one
-- in the log phase, besides the in-flight counter's two.

local ngx = ngx
local var = ngx.var

local attempt = require("attempt")

local attempt_id = attempt.id
local deny = attempt.deny

local dict = ngx.shared.dynamo_rl
local ledger = ngx.shared.dynamo_rl_ledger

-- dynamo_rl_attempt_ttl 10m
local TTL = 600

-- the states, all of the same length: see above
local ACCEPTED = "a"
local SUCCEEDED = "s"
local FAILED = "f"

local _M = {}


function _M.access()
    local id, minted = attempt_id()
    local ok, err

    if minted then
        ok, err = ledger:set(id, ACCEPTED, 0)

    else
        ok, err = ledger:add(id, ACCEPTED, 0)
    end

    if not ok then
        if err == "exists" then
            return attempt.duplicate(id)
        end

        ngx.log(ngx.CRIT, "attempt ledger: \"", id, "\": ", err)

        return deny(id, 503, "Service Unavailable", "ledger_full",
                    "attempt ledger is full")
    end

    var.attempt_id = id

    dict:incr("in_flight", 1, 0)
    ngx.ctx.attempt = id
end


function _M.log()
    local id = ngx.ctx.attempt

    if id == nil then
        return
    end

    local status = ngx.status

    -- in place; if LRU evicted the accepted entry meanwhile, inserted again
    ledger:set(id, (status >= 200 and status < 300) and SUCCEEDED or FAILED,
               TTL)

    dict:incr("in_flight", -1, 0)
end


return _M
