-- bench/wrk-request.lua: the request of every wrk variant of
-- bench/request.sh, so that wrk's own cost is the same in all of them.
--
--   wrk ... -s wrk-request.lua URL -- MODE TAG [IDLEN]
--
-- Each request is POST /v1/completions with a small JSON body and a unique
-- 36-byte (or IDLEN-byte) id: MODE "client" sends it as X-Dynamo-Attempt-Id
-- (a client-supplied attempt id, single use); any other MODE sends the same
-- bytes as X-Bench-Nonce, which nothing interprets. TAG makes the ids
-- unique across rounds and runs: the ledger refuses an id seen before.
-- With SDK=1 in the environment, each request also carries the twelve
-- further headers an OpenAI Python SDK request sends (User-Agent,
-- Authorization, X-Stainless-*): what a trainer's client looks like,
-- rather than the bare minimum.

local header, prefix, counter
local body = '{"model":"bench","prompt":"Say hello","max_tokens":64}'

function init(args)
    local mode = args[1] or "nonce"
    local tag = (args[2] or tostring(os.time())):gsub("[^A-Za-z0-9._:-]", "-")
    local len = tonumber(args[3]) or 36

    header = (mode == "client") and "X-Dynamo-Attempt-Id" or "X-Bench-Nonce"

    -- the prefix fills the id up to len bytes before a 12-digit counter
    prefix = (tag .. "-" .. string.rep("x", len)):sub(1, len - 12)
    counter = 0
end

-- the OpenAI Python SDK's own headers, with SDK=1
local sdk = {
    ["Accept"] = "application/json",
    ["Accept-Encoding"] = "gzip, deflate",
    ["User-Agent"] = "OpenAI/Python 1.82.0",
    ["X-Stainless-Lang"] = "python",
    ["X-Stainless-Package-Version"] = "1.82.0",
    ["X-Stainless-OS"] = "Linux",
    ["X-Stainless-Arch"] = "x64",
    ["X-Stainless-Runtime"] = "CPython",
    ["X-Stainless-Runtime-Version"] = "3.11.7",
    ["Authorization"] = "Bearer sk-bench-0000000000000000000000000000",
    ["X-Stainless-Retry-Count"] = "0",
    ["X-Stainless-Read-Timeout"] = "600",
}

function request()
    counter = counter + 1
    local h = { ["Content-Type"] = "application/json",
                [header] = prefix .. string.format("%012d", counter) }
    if os.getenv("SDK") then
        for k, v in pairs(sdk) do h[k] = v end
    end
    return wrk.format("POST", "/v1/completions", h, body)
end
