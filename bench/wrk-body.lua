-- bench/wrk-body.lua: POST /v1/completions with the body of a file, for
-- bench/body.sh; no attempt header, so the gateway mints every id.
--
--   wrk ... -s wrk-body.lua URL -- BODY_FILE

local body

function init(args)
    local f = assert(io.open(args[1], "rb"))
    body = f:read("*a")
    f:close()
end

function request()
    return wrk.format("POST", "/v1/completions",
                      { ["Content-Type"] = "application/json" }, body)
end
