-- bench/lua/attempt.lua: the request plane's attempt-id policy written with
-- lua-nginx-module, the alternative a platform team would write instead of
-- ngx_http_dynamo_rl_module ("lua" in bench/request.sh).
--
-- What it does, per request, as the module does:
--   * X-Dynamo-Attempt-Id from the client: exactly one, 1 to 128 bytes of
--     [A-Za-z0-9._:-], else 400 in Dynamo's flat error shape (with a minted
--     id on the response);
--   * none: a UUIDv7 is minted (48 bits of ms time, random bits from a
--     4096-byte buffer of RAND_bytes, 10 bytes per id, as the module does);
--   * the id goes upstream as X-Dynamo-Attempt-Id and X-Request-Id
--     (proxy_set_header, replacing the client's) and on the response
--     (proxy_hide_header + add_header ... always): set in $attempt_id here;
--   * in-flight requests are counted in a shared dict: +1 in the access
--     phase, -1 in the log phase.
--
-- What it leaves out, and the module does (so module/lua is conservative):
-- the attempt ledger (single use, terminal states, SSE [DONE] scanning),
-- the gate, stripping the client's routing headers, the method and
-- canonical-target checks, flat bodies for nginx's own error pages,
-- outcome counters.
--
-- Competent, not naive: nginx directives do the header work, the regex is
-- compiled once and cached ("jo"), the full header table is built only when
-- the client sent an id (to refuse duplicates), randomness is buffered.

local ngx = ngx
local var = ngx.var
local byte = string.byte
local format = string.format
local floor = math.floor
local re_find = ngx.re.find
local get_headers = ngx.req.get_headers
local ffi = require "ffi"
local ffi_str = ffi.string

-- what lua-resty-string's resty.random does (not packaged here)
pcall(ffi.cdef, "int RAND_bytes(unsigned char *buf, int num);")

local rand_buf = ffi.new("unsigned char[4096]")

local function rand_bytes(n)
    if ffi.C.RAND_bytes(rand_buf, n) ~= 1 then
        return nil
    end

    return ffi_str(rand_buf, n)
end

local dict = ngx.shared.dynamo_rl

local pool = ""
local pos = 4097

local _M = {}


local function mint()
    if pos + 9 > #pool then
        pool = rand_bytes(4096)
        if pool == nil then
            return nil
        end

        pos = 1
    end

    local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10 = byte(pool, pos, pos + 9)
    pos = pos + 10

    local ms = floor(ngx.now() * 1000)

    return format("%08x-%04x-%04x-%04x-%04x%08x",
                  floor(ms / 65536), ms % 65536,
                  0x7000 + (b1 % 16) * 256 + b2,
                  0x8000 + (b3 % 64) * 256 + b4,
                  b5 * 256 + b6,
                  ((b7 * 256 + b8) * 256 + b9) * 256 + b10)
end

_M.mint = mint


local function reject(message)
    var.attempt_id = mint() or ""
    ngx.status = 400
    ngx.header["Content-Type"] = "application/json"
    ngx.header["X-Dynamo-RL-Reason"] = "bad_attempt_id"
    ngx.print('{"message":"', message, '","type":"Bad Request","code":400}')
    return ngx.exit(ngx.HTTP_OK)
end


-- the client's valid id, or a minted one (then "minted" is true); an
-- invalid or repeated header ends the request with 400 here, and so does
-- a failure of RAND_bytes() with 500

local function attempt_id()
    local id = var.http_x_dynamo_attempt_id

    if id ~= nil then
        if type(get_headers()["x-dynamo-attempt-id"]) == "table" then
            return reject("more than one attempt id")
        end

        if not re_find(id, "^[A-Za-z0-9._:-]{1,128}$", "jo") then
            return reject("invalid attempt id: 1 to 128 bytes of "
                          .. "[A-Za-z0-9._:-]")
        end

        return id, false
    end

    id = mint()

    if id == nil then
        return ngx.exit(500)
    end

    return id, true
end

_M.id = attempt_id


-- the module's flat answer to a refused request, as the planes give it

function _M.deny(id, status, typ, reason, message, retry_after)
    var.attempt_id = id
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.header["X-Dynamo-RL-Reason"] = reason

    if retry_after then
        ngx.header["Retry-After"] = retry_after
    end

    ngx.print('{"message":"', message, '","type":"', typ, '","code":',
              status, '}')
    return ngx.exit(ngx.HTTP_OK)
end


-- an attempt id used before: 409, and as the module, a header that keeps
-- the OpenAI SDKs from retrying it

function _M.duplicate(id)
    ngx.header["X-Should-Retry"] = "false"
    return _M.deny(id, 409, "Conflict", "duplicate_attempt",
                   "attempt id already used: generation is not idempotent")
end


function _M.access()
    var.attempt_id = attempt_id()

    dict:incr("in_flight", 1, 0)
    ngx.ctx.counted = true
end


function _M.log()
    if ngx.ctx.counted then
        dict:incr("in_flight", -1, 0)
    end
end


return _M
