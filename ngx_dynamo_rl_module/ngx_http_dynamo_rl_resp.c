
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_resp.h"


static ngx_int_t ngx_http_dynamo_rl_resp_u64(redisReply *r, uint64_t *n);
static ngx_int_t ngx_http_dynamo_rl_resp_digits(u_char *p, size_t len,
    uint64_t *n);
static ngx_int_t ngx_http_dynamo_rl_resp_str(redisReply *r, ngx_str_t *s);
static ngx_int_t ngx_http_dynamo_rl_resp_is(redisReply *r, const char *s);
static ngx_uint_t ngx_http_dynamo_rl_resp_state(u_char c);
static ngx_int_t ngx_http_dynamo_rl_resp_reason(u_char *code, size_t len);
static ngx_int_t ngx_http_dynamo_rl_resp_fleet(redisReply *r, redisReply *q,
    uint64_t heartbeat, ngx_http_dynamo_rl_gate_reply_t *gr);
static ngx_int_t ngx_http_dynamo_rl_resp_member(ngx_str_t *value,
    uint64_t *seen, uint64_t *in_flight, uint64_t *ts);
static void *ngx_http_dynamo_rl_resp_string(const redisReadTask *task,
    char *str, size_t len);
static void *ngx_http_dynamo_rl_resp_array(const redisReadTask *task,
    int elements);
static void *ngx_http_dynamo_rl_resp_integer(const redisReadTask *task,
    long long value);
static void *ngx_http_dynamo_rl_resp_nil(const redisReadTask *task);


/* a fleet report older than this is left out: the beat script drops it */
#define NGX_HTTP_DYNAMO_RL_FLEET_FORGET  60000

/* the largest HTTP status we accept */
#define NGX_HTTP_DYNAMO_RL_RESP_STATUS   999

/*
 * hiredis 0.14 allocates an array's elements as soon as it reads its
 * count: a bad count ("*999999999") from a broken store would take
 * gigabytes; no reply of ours comes near this many
 */
#define NGX_HTTP_DYNAMO_RL_RESP_ELEMENTS  65536


/* hiredis's own functions, through the reader's privdata, but for arrays */

static redisReplyObjectFunctions  ngx_http_dynamo_rl_resp_functions = {
    ngx_http_dynamo_rl_resp_string,
    ngx_http_dynamo_rl_resp_array,
    ngx_http_dynamo_rl_resp_integer,
    ngx_http_dynamo_rl_resp_nil,
    freeReplyObject
};


/*
 * The scripts, run with EVALSHA (EVAL after NOSCRIPT).  Lua tables stop
 * at the first nil, so every value that may be missing has a default;
 * numbers written to the store go through string.format('%d'), because
 * Redis turns a Lua number argument into text with a precision that
 * differs between versions.  "now" is always the store's TIME, in ms.
 */

#define NGX_HTTP_DYNAMO_RL_LUA_NOW                                           \
    "local t = redis.call('TIME')\n"                                         \
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"


/*
 * claim: the claims of a turn, one script for them all; KEYS the gate,
 * the worker processes' liveness ("{P}:live"), this worker process's own
 * records ("{P}:p:<identity>", record -> its ttl), then a record for each
 * claim; ARGV, 9 for each: owner ("<identity>/<connection>.<request>"),
 * t0, lease, replica, request id ("" when it is the attempt id), whether
 * the gate applies ("0": a location with dynamo_rl_gate off), the ttl of
 * the record once it ends, the tenant the gateway assigned ("" for none),
 * the process's silence (ms): a claim that finds the process unknown
 * declares it ("{P}:live:q", see "live"), as its beats do;
 * the reply has one element for each claim, in
 * order (ngx_http_dynamo_rl_resp_claim()).  The gate is read once for
 * all; its expiry and reason only when it is closed.  A record "r" is a
 * release's mark: the claim of its owner came after its release (sent on
 * another connection) and records nothing; another owner's claim takes
 * the id.  A process that
 * claims is alive from its first claim on: the "live" script of another
 * ends its records if it falls silent (see there).
 */

static u_char  ngx_http_dynamo_rl_lua_claim[] =
    "local res = {}\n"
    "local g = redis.call('HMGET', KEYS[1], 'state', 'epoch')\n"
    "local shut\n"
    "if g[1] ~= 'open' then\n"
    "  shut = {'nogate'}\n"
    "  if g[1] then\n"
    "    local c = redis.call('HMGET', KEYS[1], 'expires', 'reason')\n"
    NGX_HTTP_DYNAMO_RL_LUA_NOW
    "    shut = {'closed', g[2] or '0', c[1] or '0', c[2] or '', now}\n"
    "  end\n"
    "end\n"
    "local e = g[2] or '0'\n"
    "local live\n"
    "for i = 4, #KEYS do\n"
    "  local k = KEYS[i]\n"
    "  local a = i * 9 - 36\n"
    "  local o = ARGV[a + 1]\n"
    "  local x\n"
    "  local r = {}\n"
    "  if shut and ARGV[a + 6] ~= '0' then\n"
    "    x = shut\n"
    "  else\n"
    "    r = redis.call('HMGET', k, 'st', 'ow', 'rs')\n"
    "  end\n"
    "  if r[1] == 'r' then\n"
    "    if r[2] == o then\n"
    "      x = {'dup', e, 'a'}\n"
    "    else\n"
    "      redis.call('DEL', k)\n"
    "    end\n"
    "  elseif r[1] then\n"
    "    if r[2] == o then\n"
    "      x = {'ok', e}\n"
    "    elseif not ((r[1] == 'u' or r[1] == 'f' or r[1] == 'c')"
    " and r[3] == 'nf') then\n"
    "      x = {'dup', e, r[1]}\n"
    "    else\n"
    "      redis.call('DEL', k)\n"
    "    end\n"
    "  end\n"
    "  if not x then\n"
    "    local f = {'st', 'a', 'ow', o, 't0', ARGV[a + 2], 'rp', ARGV[a + 4]}\n"
    "    if ARGV[a + 5] ~= '' then\n"
    "      f[#f + 1] = 'rq'\n"
    "      f[#f + 1] = ARGV[a + 5]\n"
    "    end\n"
    "    if ARGV[a + 8] ~= '' then\n"
    "      f[#f + 1] = 'tn'\n"
    "      f[#f + 1] = ARGV[a + 8]\n"
    "    end\n"
    "    redis.call('HSET', k, unpack(f))\n"
    "    redis.call('PEXPIRE', k, ARGV[a + 3])\n"
    "    redis.call('HSET', KEYS[3], k, ARGV[a + 7])\n"
    "    redis.call('PEXPIRE', KEYS[3], ARGV[a + 3])\n"
    "    if not live then\n"
    "      live = string.match(o, '^(.*)/[^/]*$') or o\n"
    "      if redis.call('HEXISTS', KEYS[2], live) == 0 then\n"
    "        local t = redis.call('TIME')\n"
    "        redis.call('HSET', KEYS[2], live, string.format('%d',"
    " t[1] * 1000 + math.floor(t[2] / 1000)))\n"
    "        redis.call('HSET', KEYS[2] .. ':q', live, ARGV[a + 9])\n"
    "      end\n"
    "    end\n"
    "    x = {'ok', e}\n"
    "  end\n"
    "  res[i - 3] = x\n"
    "end\n"
    "return res\n";


/*
 * move: KEYS record, the prefix of the processes' record lists
 * ("{P}:p:"); ARGV owner, from, to, ttl [, code, sse]: to streaming, or
 * "x", a release (the record is deleted and leaves its process's list;
 * without a record, the release leaves its mark "r" for "ttl": a claim
 * whose connection was lost may reach the store after it);
 * an owner ending in "*" names every owner it begins (as in "end")
 */

static u_char  ngx_http_dynamo_rl_lua_move[] =
    "local r = redis.call('HMGET', KEYS[1], 'st', 'ow')\n"
    "if not r[1] then\n"
    "  if ARGV[3] == 'x' then\n"
    "    redis.call('HSET', KEYS[1], 'st', 'r', 'ow', ARGV[1])\n"
    "    redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local o = ARGV[1]\n"
    "if string.sub(o, -1) == '*' then\n"
    "  if string.sub(r[2] or '', 1, #o - 1) ~= string.sub(o, 1, -2) then"
    " return -1 end\n"
    "elseif r[2] ~= o then return -1 end\n"
    "if not string.find(ARGV[2], r[1], 1, true) then return -2 end\n"
    "if ARGV[3] == 'x' then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('HDEL', KEYS[2] .. (string.match(o, '^(.*)/[^/]*$') or o),"
    " KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "if ARGV[5] then\n"
    "  redis.call('HSET', KEYS[1], 'st', ARGV[3], 'code', ARGV[5],"
    " 'sse', ARGV[6])\n"
    "else\n"
    "  redis.call('HSET', KEYS[1], 'st', ARGV[3])\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"
    "return 1\n";


/*
 * end: the terminal moves of a turn, one script for them all; KEYS the
 * prefix of the processes' record lists ("{P}:p:"), then the records;
 * ARGV, 8 for each: owner, to, ttl, code, sse, b, t1, rs ("" or a
 * reason's code, "nf" for not_forwarded); a record that is gone, not ours
 * or already ended is left as it is; the reply is the number of records
 * moved; an owner ending in "*"
 * names every owner it begins: a worker process that settles the records
 * of one that died knows its identity, not its requests
 */

static u_char  ngx_http_dynamo_rl_lua_end[] =
    "local n = 0\n"
    "for i = 2, #KEYS do\n"
    "  local k = KEYS[i]\n"
    "  local a = i * 8 - 16\n"
    "  local r = redis.call('HMGET', k, 'st', 'ow')\n"
    "  local o = ARGV[a + 1]\n"
    "  local mine = r[2] == o\n"
    "  if not mine and r[2] and string.sub(o, -1) == '*' then\n"
    "    mine = string.sub(r[2], 1, #o - 1) == string.sub(o, 1, -2)\n"
    "  end\n"
    "  if (r[1] == 'a' or r[1] == 's') and mine then\n"
    "    if ARGV[a + 8] == '' then\n"
    "      redis.call('HSET', k, 'st', ARGV[a + 2], 'code', ARGV[a + 4],"
    " 'sse', ARGV[a + 5], 'b', ARGV[a + 6], 't1', ARGV[a + 7])\n"
    "    else\n"
    "      redis.call('HSET', k, 'st', ARGV[a + 2], 'code', ARGV[a + 4],"
    " 'sse', ARGV[a + 5], 'b', ARGV[a + 6], 't1', ARGV[a + 7],"
    " 'rs', ARGV[a + 8])\n"
    "    end\n"
    "    redis.call('PEXPIRE', k, ARGV[a + 3])\n"
    "    n = n + 1\n"
    "  end\n"
    "  if mine then\n"
    "    redis.call('HDEL', KEYS[1] .. (string.match(o, '^(.*)/[^/]*$')"
    " or o), k)\n"
    "  end\n"
    "end\n"
    "return n\n";


/*
 * gate: KEYS the gate, the fleet; ARGV action ("init": a read, which
 * creates a missing record), the epoch expected or "", the lease, the
 * reason, whether the caller last saw the gate closed, the highest epoch
 * it saw, the change's deadline on the store's clock ("" none) and its
 * token ("" none).  A change that runs at or after its deadline is
 * refused ("late") and changes nothing: its caller has answered that it
 * did not happen.  A change writes its token ("tok"), so that a caller
 * that had no answer can read whether it was made; a close of an open
 * gate writes its time ("since", the fleet is judged from it).
 */

static u_char  ngx_http_dynamo_rl_lua_gate[] =
    NGX_HTTP_DYNAMO_RL_LUA_NOW
    "local function d(x) return string.format('%d', x) end\n"
    "local act = ARGV[1]\n"
    "local lease = tonumber(ARGV[3]) or 0\n"
    "local res = 'ok'\n"
    "local g = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'lease')\n"
    "if act ~= 'init' and ARGV[7] ~= '' and now >= tonumber(ARGV[7]) then\n"
    "  res = 'late'\n"
    "elseif not g[1] then\n"
    "  local min = tonumber(ARGV[6]) or 0\n"
    "  if act ~= 'init' then\n"
    "    res = 'nogate'\n"
    "  elseif ARGV[5] == '1' then\n"
    "    redis.call('HSET', KEYS[1], 'state', 'closed', 'epoch', d(min + 1),"
    " 'expires', '0', 'lease', '0', 'reason', 'gate record lost',"
    " 'changed', d(now), 'since', d(now))\n"
    "    redis.call('PUBLISH', KEYS[1], d(min + 1))\n"
    "    res = 'lost'\n"
    "  else\n"
    "    redis.call('HSET', KEYS[1], 'state', 'open', 'epoch', d(min),"
    " 'expires', '0', 'lease', '0', 'reason', '', 'changed', '0')\n"
    "    res = 'created'\n"
    "  end\n"
    "elseif act == 'close' or act == 'renew' or act == 'open' then\n"
    "  local epoch = tonumber(g[2]) or 0\n"
    "  local old = tonumber(g[3]) or 0\n"
    "  if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= epoch then\n"
    "    res = 'epoch_mismatch'\n"
    "  elseif act == 'renew' and g[1] ~= 'closed' then\n"
    "    res = 'not_closed'\n"
    "  elseif act == 'renew' and lease == 0 and old == 0 then\n"
    "    res = 'no_lease'\n"
    "  else\n"
    "    if act == 'close' then\n"
    "      local exp = 0\n"
    "      if lease > 0 then exp = now + lease end\n"
    "      if g[1] ~= 'closed' then\n"
    "        redis.call('HSET', KEYS[1], 'since', d(now))\n"
    "      end\n"
    "      redis.call('HSET', KEYS[1], 'state', 'closed', 'lease', d(lease),"
    " 'expires', d(exp), 'reason', ARGV[4])\n"
    "    elseif act == 'renew' then\n"
    "      if lease == 0 then lease = old end\n"
    "      redis.call('HSET', KEYS[1], 'lease', d(lease),"
    " 'expires', d(now + lease))\n"
    "    else\n"
    "      redis.call('HSET', KEYS[1], 'state', 'open', 'lease', '0',"
    " 'expires', '0', 'reason', '')\n"
    "      redis.call('HDEL', KEYS[1], 'since')\n"
    "    end\n"
    "    redis.call('HSET', KEYS[1], 'epoch', d(epoch + 1),"
    " 'changed', d(now), 'tok', ARGV[8])\n"
    "    redis.call('PUBLISH', KEYS[1], d(epoch + 1))\n"
    "  end\n"
    "end\n"
    "local s = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'expires',"
    " 'reason', 'changed', 'lease', 'since', 'tok')\n"
    "return {res, s[1] or '', s[2] or '0', s[3] or '0', s[4] or '',"
    " s[5] or '0', now, s[6] or '0', redis.call('HGETALL', KEYS[2]),"
    " s[7] or '0', redis.call('HGETALL', KEYS[2] .. ':q'), s[8] or ''}\n";


/*
 * beat: KEYS the fleet, the gate; ARGV the instance's field, seen, in
 * flight, and how long its report counts as alive (3 heartbeats, its
 * own: "{P}:fleet:q", field -> ms; the readers judge it by that, see
 * ngx_http_dynamo_rl_resp_fleet()).
 * A report older than 10 minutes, or than its window and a minute
 * (while it is lost) if that is longer, is dropped, but, while the gate
 * is closed, not that of an instance alive or lost (silent for less than
 * its window and a minute) when it closed: it may still admit with the
 * gate it last read
 * (see ngx_http_dynamo_rl_resp_fleet()).  Fields that are not
 * "seen:in_flight:ts" are dropped too, they heal.
 */

static u_char  ngx_http_dynamo_rl_lua_beat[] =
    NGX_HTTP_DYNAMO_RL_LUA_NOW
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':'"
    " .. string.format('%d', now))\n"
    "local g = redis.call('HMGET', KEYS[2], 'state', 'since', 'changed')\n"
    "local close\n"
    "if g[1] == 'closed' then\n"
    "  close = tonumber(g[2]) or tonumber(g[3]) or 0\n"
    "end\n"
    "local wk = KEYS[1] .. ':q'\n"
    "redis.call('HSET', wk, ARGV[1], ARGV[4])\n"
    "local q = {}\n"
    "local wq = redis.call('HGETALL', wk)\n"
    "for i = 1, #wq, 2 do q[wq[i]] = tonumber(wq[i + 1]) end\n"
    "local keep = {}\n"
    "local f = redis.call('HGETALL', KEYS[1])\n"
    "for i = 1, #f, 2 do\n"
    "  local ts = tonumber(string.match(f[i + 1], '^%d+:%d+:(%d+)$'))\n"
    "  local win = q[f[i]] or tonumber(ARGV[4]) or 0\n"
    "  if ts == nil or (now - ts > math.max(600000, win + 60000)\n"
    "     and not (close and ts > close - (win + 60000)))\n"
    "  then\n"
    "    redis.call('HDEL', KEYS[1], f[i])\n"
    "  else\n"
    "    keep[f[i]] = true\n"
    "  end\n"
    "end\n"
    "local w = redis.call('HKEYS', wk)\n"
    "for i = 1, #w do\n"
    "  if not keep[w[i]] then redis.call('HDEL', wk, w[i]) end\n"
    "end\n"
    "return 1\n";


/*
 * live: every worker process's own heartbeat; KEYS the liveness of the
 * worker processes ("{P}:live": identity -> store ms of its last beat),
 * the prefix of their record lists ("{P}:p:"); ARGV identity, lease,
 * silence (ms), "beat" or "bye", whether to look for silent processes
 * ("1": one worker process of each instance does).
 *
 * A beat declares the process's own silence ("{P}:live:q": identity ->
 * ms), renews the lease of every record of the process still in
 * flight (a stream longer than the lease keeps its record while its
 * process lives), forgets those that ended, and ends as failed
 * ("replica_lost") the records in flight of every process silent for
 * longer than the silence it declared (its heartbeat= may differ from
 * this one's; one that declared none, of an earlier version, by this
 * one's "silence"): killed, or its replica gone; but only when its
 * own previous beat is recent: after a pause of the store, or of its own
 * connection, every process is late, and none is judged by one that is.
 * The records keep their ids refused for the longer of their ttl and the
 * lease: a replica cut off from the store may still stream them, and
 * their lease is what the store promised them without news of it.  The reply:
 * identity, count, for each process it settled.  "bye", a process's
 * last words as it exits, ends its own records ("worker_exited") and its
 * entries.
 */

static u_char  ngx_http_dynamo_rl_lua_live[] =
    NGX_HTTP_DYNAMO_RL_LUA_NOW
    "local function d(x) return string.format('%d', x) end\n"
    "local function settle(id, rs)\n"
    "  local pk = KEYS[2] .. id\n"
    "  local m = redis.call('HGETALL', pk)\n"
    "  local n = 0\n"
    "  for i = 1, #m, 2 do\n"
    "    local r = redis.call('HMGET', m[i], 'st', 'ow', 'sse')\n"
    "    if (r[1] == 'a' or r[1] == 's')"
    " and string.sub(r[2] or '', 1, #id + 1) == id .. '/' then\n"
    "      redis.call('HSET', m[i], 'st', 'f', 'code', '0', 'sse',"
    " r[3] or '0', 'b', '0', 't1', d(now), 'rs', rs)\n"
    "      local ttl = tonumber(m[i + 1]) or 0\n"
    "      if rs == 'rl' then ttl = math.max(ttl, tonumber(ARGV[2]) or 0) end\n"
    "      redis.call('PEXPIRE', m[i], d(ttl))\n"
    "      n = n + 1\n"
    "    end\n"
    "  end\n"
    "  redis.call('DEL', pk)\n"
    "  redis.call('HDEL', KEYS[1], id)\n"
    "  redis.call('HDEL', KEYS[1] .. ':q', id)\n"
    "  return n\n"
    "end\n"
    "local me = ARGV[1]\n"
    "if ARGV[4] == 'bye' then\n"
    "  return {me, settle(me, 'we')}\n"
    "end\n"
    "local mine = tonumber(redis.call('HGET', KEYS[1], me) or '')\n"
    "redis.call('HSET', KEYS[1], me, d(now))\n"
    "redis.call('HSET', KEYS[1] .. ':q', me, ARGV[3])\n"
    "local pk = KEYS[2] .. me\n"
    "local m = redis.call('HGETALL', pk)\n"
    "for i = 1, #m, 2 do\n"
    "  local r = redis.call('HMGET', m[i], 'st', 'ow')\n"
    "  if (r[1] == 'a' or r[1] == 's')"
    " and string.sub(r[2] or '', 1, #me + 1) == me .. '/' then\n"
    "    redis.call('PEXPIRE', m[i], ARGV[2])\n"
    "  else\n"
    "    redis.call('HDEL', pk, m[i])\n"
    "  end\n"
    "end\n"
    "if #m > 0 then redis.call('PEXPIRE', pk, ARGV[2]) end\n"
    "local res = {}\n"
    "local quiet = tonumber(ARGV[3])\n"
    "if ARGV[5] ~= '1' or not mine or now - mine > quiet / 2 then\n"
    "  return res\n"
    "end\n"
    "local q = {}\n"
    "local w = redis.call('HGETALL', KEYS[1] .. ':q')\n"
    "for i = 1, #w, 2 do q[w[i]] = tonumber(w[i + 1]) end\n"
    "local l = redis.call('HGETALL', KEYS[1])\n"
    "for i = 1, #l, 2 do\n"
    "  local ts = tonumber(l[i + 1])\n"
    "  if l[i] ~= me and (ts == nil or now - ts > (q[l[i]] or quiet)) then\n"
    "    local n = settle(l[i], 'rl')\n"
    "    res[#res + 1] = l[i]\n"
    "    res[#res + 1] = n\n"
    "  end\n"
    "end\n"
    "return res\n";


/*
 * replay: the records a replica kept in its zone while the store was
 * unavailable (on_error=local), put in the store when it answers again;
 * KEYS this worker process's list of its records in flight, then the
 * records; ARGV, 11 for each: owner, st, ttl, code, sse, b, t0, t1, rs,
 * replica, the ttl once ended (for the list); a record of another owner
 * is a conflict: the id went through another replica meanwhile.  The
 * reply has one element for each: {'ok'} or {'conflict', st, replica}.
 */

static u_char  ngx_http_dynamo_rl_lua_replay[] =
    "local res = {}\n"
    "for i = 2, #KEYS do\n"
    "  local k = KEYS[i]\n"
    "  local a = i * 11 - 22\n"
    "  local o = ARGV[a + 1]\n"
    "  local st = ARGV[a + 2]\n"
    "  local r = redis.call('HMGET', k, 'st', 'ow', 'rs', 'rp')\n"
    "  if r[1] == 'r' or ((r[1] == 'u' or r[1] == 'f' or r[1] == 'c')"
    " and r[3] == 'nf') then\n"
    "    redis.call('DEL', k)\n"
    "    r = {}\n"
    "  end\n"
    "  if r[1] then\n"
    "    if r[2] == o then\n"
    "      res[i - 1] = {'ok'}\n"
    "    else\n"
    "      res[i - 1] = {'conflict', r[1], r[4] or ''}\n"
    "    end\n"
    "  else\n"
    "    redis.call('HSET', k, 'st', st, 'ow', o, 'code', ARGV[a + 4],"
    " 'sse', ARGV[a + 5], 't0', ARGV[a + 7], 'rp', ARGV[a + 10])\n"
    "    if st == 'a' or st == 's' then\n"
    "      redis.call('HSET', KEYS[1], k, ARGV[a + 11])\n"
    "      redis.call('PEXPIRE', KEYS[1], ARGV[a + 3])\n"
    "    else\n"
    "      redis.call('HSET', k, 'b', ARGV[a + 6], 't1', ARGV[a + 8])\n"
    "      if ARGV[a + 9] ~= '' then\n"
    "        redis.call('HSET', k, 'rs', ARGV[a + 9])\n"
    "      end\n"
    "    end\n"
    "    redis.call('PEXPIRE', k, ARGV[a + 3])\n"
    "    res[i - 1] = {'ok'}\n"
    "  end\n"
    "end\n"
    "return res\n";


ngx_http_dynamo_rl_script_t  ngx_http_dynamo_rl_scripts[] = {

    { ngx_string("claim"), ngx_string(ngx_http_dynamo_rl_lua_claim), "" },
    { ngx_string("move"), ngx_string(ngx_http_dynamo_rl_lua_move), "" },
    { ngx_string("gate"), ngx_string(ngx_http_dynamo_rl_lua_gate), "" },
    { ngx_string("beat"), ngx_string(ngx_http_dynamo_rl_lua_beat), "" },
    { ngx_string("end"), ngx_string(ngx_http_dynamo_rl_lua_end), "" },
    { ngx_string("live"), ngx_string(ngx_http_dynamo_rl_lua_live), "" },
    { ngx_string("replay"), ngx_string(ngx_http_dynamo_rl_lua_replay), "" }
};


/*
 * a reader of replies: hiredis's, with a bound on the elements of an
 * array (a larger count is a protocol error, REDIS_ERR)
 */

redisReader *
ngx_http_dynamo_rl_resp_reader(void)
{
    redisReader  *rd;

    rd = redisReaderCreate();
    if (rd == NULL) {
        return NULL;
    }

    rd->privdata = rd->fn;
    rd->fn = &ngx_http_dynamo_rl_resp_functions;

    return rd;
}


static void *
ngx_http_dynamo_rl_resp_string(const redisReadTask *task, char *str,
    size_t len)
{
    redisReplyObjectFunctions  *fn = task->privdata;

    return fn->createString(task, str, len);
}


static void *
ngx_http_dynamo_rl_resp_array(const redisReadTask *task, int elements)
{
    redisReplyObjectFunctions  *fn = task->privdata;

    if (elements > NGX_HTTP_DYNAMO_RL_RESP_ELEMENTS) {
        return NULL;
    }

    return fn->createArray(task, elements);
}


static void *
ngx_http_dynamo_rl_resp_integer(const redisReadTask *task, long long value)
{
    redisReplyObjectFunctions  *fn = task->privdata;

    return fn->createInteger(task, value);
}


static void *
ngx_http_dynamo_rl_resp_nil(const redisReadTask *task)
{
    redisReplyObjectFunctions  *fn = task->privdata;

    return fn->createNil(task);
}


/*
 * the connection's bytes, as they come: "size" counts the bytes of the
 * reply being read (those since the last whole one), so that a reply
 * larger than any of the scripts' (NGX_HTTP_DYNAMO_RL_RESP_MAX) is
 * refused before it takes more memory; hiredis keeps a bulk string's
 * bytes until they are all there, whatever length it announced
 */

ngx_int_t
ngx_http_dynamo_rl_resp_feed(redisReader *rd, size_t *size, u_char *buf,
    size_t n)
{
    if (redisReaderFeed(rd, (const char *) buf, n) != REDIS_OK) {
        return NGX_ERROR;
    }

    *size += n;

    return NGX_OK;
}


/*
 * NGX_OK: "reply" is the next whole reply, or NULL while it is not all
 * there; NGX_ERROR: bytes that are not RESP; NGX_DECLINED: the reply is
 * larger than NGX_HTTP_DYNAMO_RL_RESP_MAX
 */

ngx_int_t
ngx_http_dynamo_rl_resp_read(redisReader *rd, size_t *size,
    redisReply **reply)
{
    void  *r;

    r = NULL;
    *reply = NULL;

    if (redisReaderGetReply(rd, &r) != REDIS_OK) {
        return NGX_ERROR;
    }

    if (r == NULL) {
        return (*size > NGX_HTTP_DYNAMO_RL_RESP_MAX) ? NGX_DECLINED : NGX_OK;
    }

    /* what is left in the buffer is the next reply's */

    *size = rd->len - rd->pos;
    *reply = r;

    return NGX_OK;
}


/*
 * a batch's reply: NGX_OK, an array of one element for each of the "n"
 * members; NGX_DECLINED, an error reply, each member's answer;
 * NGX_ERROR, any other shape, an answer to none of them
 */

ngx_int_t
ngx_http_dynamo_rl_resp_batch(redisReply *reply, size_t n)
{
    size_t  i;

    if (reply == NULL) {
        return NGX_ERROR;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        return NGX_DECLINED;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (reply->element[i] == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * claim: {'ok', epoch} | {'dup', epoch, st} | {'closed', epoch, expires,
 * reason, now} | {'nogate'}
 */

ngx_int_t
ngx_http_dynamo_rl_resp_claim(redisReply *reply,
    ngx_http_dynamo_rl_claim_reply_t *cr)
{
    redisReply  **e;

    ngx_memzero(cr, sizeof(ngx_http_dynamo_rl_claim_reply_t));

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0)
    {
        return NGX_ERROR;
    }

    e = reply->element;

    if (ngx_http_dynamo_rl_resp_is(e[0], "ok")) {
        cr->result = NGX_HTTP_DYNAMO_RL_CLAIM_OK;

        if (reply->elements != 2) {
            return NGX_ERROR;
        }

        return ngx_http_dynamo_rl_resp_u64(e[1], &cr->epoch);
    }

    if (ngx_http_dynamo_rl_resp_is(e[0], "dup")) {
        cr->result = NGX_HTTP_DYNAMO_RL_CLAIM_DUP;

        if (reply->elements != 3
            || ngx_http_dynamo_rl_resp_u64(e[1], &cr->epoch) != NGX_OK
            || ngx_http_dynamo_rl_resp_str(e[2], &cr->state) != NGX_OK
            || cr->state.len != 1
            || ngx_http_dynamo_rl_resp_state(cr->state.data[0]) == 0)
        {
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_resp_is(e[0], "closed")) {
        cr->result = NGX_HTTP_DYNAMO_RL_CLAIM_CLOSED;

        if (reply->elements != 5
            || ngx_http_dynamo_rl_resp_u64(e[1], &cr->epoch) != NGX_OK
            || ngx_http_dynamo_rl_resp_u64(e[2], &cr->expires) != NGX_OK
            || ngx_http_dynamo_rl_resp_str(e[3], &cr->reason) != NGX_OK
            || ngx_http_dynamo_rl_resp_u64(e[4], &cr->now) != NGX_OK)
        {
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_resp_is(e[0], "nogate")) {
        cr->result = NGX_HTTP_DYNAMO_RL_CLAIM_NOGATE;

        return (reply->elements == 1) ? NGX_OK : NGX_ERROR;
    }

    return NGX_ERROR;
}


/*
 * replay, one member's element: {'ok'} | {'conflict', st, replica}; the
 * state and the replica point into the reply
 */

ngx_int_t
ngx_http_dynamo_rl_resp_replay(redisReply *reply, ngx_uint_t *conflict,
    ngx_str_t *state, ngx_str_t *replica)
{
    *conflict = 0;
    ngx_str_null(state);
    ngx_str_null(replica);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0)
    {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_resp_is(reply->element[0], "ok")) {
        return (reply->elements == 1) ? NGX_OK : NGX_ERROR;
    }

    if (!ngx_http_dynamo_rl_resp_is(reply->element[0], "conflict")
        || reply->elements != 3
        || ngx_http_dynamo_rl_resp_str(reply->element[1], state) != NGX_OK
        || state->len != 1
        || ngx_http_dynamo_rl_resp_str(reply->element[2], replica) != NGX_OK)
    {
        return NGX_ERROR;
    }

    *conflict = 1;

    return NGX_OK;
}


/* move: 1 moved, 0 no record, -1 another owner's, -2 not in from_states */

ngx_int_t
ngx_http_dynamo_rl_resp_move(redisReply *reply, ngx_int_t *moved)
{
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER
        || reply->integer < -2 || reply->integer > 1)
    {
        return NGX_ERROR;
    }

    *moved = (ngx_int_t) reply->integer;

    return NGX_OK;
}


/*
 * gate: {result, state, epoch, expires, reason, changed, now, lease,
 * HGETALL(fleet), since, HGETALL(fleet:q), token}; the state is "" only
 * with "nogate"; "since" is the store ms of the close, "0" when it is not
 * known (open, or closed by a gateway that did not write it); the token
 * of the last change, "" when it had none
 */

ngx_int_t
ngx_http_dynamo_rl_resp_gate(redisReply *reply, uint64_t heartbeat,
    ngx_http_dynamo_rl_gate_reply_t *gr)
{
    ngx_str_t     state;
    ngx_uint_t    i;
    redisReply  **e;

    /* by NGX_HTTP_DYNAMO_RL_GATE_R_* */

    static const char  *results[] = {
        "ok", "epoch_mismatch", "not_closed", "no_lease", "nogate",
        "created", "lost", "late"
    };

    ngx_memzero(gr, sizeof(ngx_http_dynamo_rl_gate_reply_t));

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 12)
    {
        return NGX_ERROR;
    }

    e = reply->element;

    for (i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        if (ngx_http_dynamo_rl_resp_is(e[0], results[i])) {
            break;
        }
    }

    if (i == sizeof(results) / sizeof(results[0])) {
        return NGX_ERROR;
    }

    gr->result = i;

    if (ngx_http_dynamo_rl_resp_str(e[1], &state) != NGX_OK) {
        return NGX_ERROR;
    }

    if (state.len == 6 && ngx_strncmp(state.data, "closed", 6) == 0) {
        gr->closed = 1;

    } else if (state.len == 4 && ngx_strncmp(state.data, "open", 4) == 0) {
        gr->closed = 0;

    } else if (state.len != 0
               || gr->result != NGX_HTTP_DYNAMO_RL_GATE_R_NOGATE)
    {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_resp_u64(e[2], &gr->epoch) != NGX_OK
        || ngx_http_dynamo_rl_resp_u64(e[3], &gr->expires) != NGX_OK
        || ngx_http_dynamo_rl_resp_str(e[4], &gr->reason) != NGX_OK
        || ngx_http_dynamo_rl_resp_u64(e[5], &gr->changed) != NGX_OK
        || ngx_http_dynamo_rl_resp_u64(e[6], &gr->now) != NGX_OK
        || ngx_http_dynamo_rl_resp_u64(e[7], &gr->lease) != NGX_OK
        || ngx_http_dynamo_rl_resp_u64(e[9], &gr->since) != NGX_OK
        || ngx_http_dynamo_rl_resp_str(e[11], &gr->token) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_resp_fleet(e[8], e[10], heartbeat, gr);
}


/*
 * the fleet from HGETALL: replica -> "seen:in_flight:ts", and the windows
 * the instances declared (q: field -> ms, 3 of their own heartbeats);
 * alive when the report is younger than its window (3 of this reader's
 * heartbeats for one that declared none: an earlier version), lost from
 * then for 60 s more (its window and 60 s),
 * forgotten after, but for a replica that was alive (by its own window)
 * or lost when the gate closed ("since", or the last change for a close
 * that did not write it; its report younger then than its window and
 * 60 s): while it stays closed, that one stays lost, however
 * long it is silent (cut off from the store, it may still admit with the
 * gate it last read); a report from the future (one store clock, so only
 * a clock step) counts as fresh
 */

static ngx_int_t
ngx_http_dynamo_rl_resp_fleet(redisReply *r, redisReply *q, uint64_t heartbeat,
    ngx_http_dynamo_rl_gate_reply_t *gr)
{
    size_t                       i, j;
    uint64_t                     seen, in_flight, ts, age, alive, own, since,
                                 hold;
    ngx_str_t                    name, value, field;
    ngx_http_dynamo_rl_fleet_t  *fl;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements % 2
        || q == NULL || q->type != REDIS_REPLY_ARRAY || q->elements % 2)
    {
        return NGX_ERROR;
    }

    for (j = 0; j < q->elements; j += 2) {
        if (ngx_http_dynamo_rl_resp_str(q->element[j], &field) != NGX_OK
            || ngx_http_dynamo_rl_resp_u64(q->element[j + 1], &own)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    fl = &gr->fleet;
    gr->has_fleet = 1;

    own = (heartbeat > UINT64_MAX / 3) ? UINT64_MAX : 3 * heartbeat;
    since = gr->since ? gr->since : gr->changed;

    for (i = 0; i < r->elements; i += 2) {

        /* "replica" or "replica/pid of its master": never without a name */

        if (ngx_http_dynamo_rl_resp_str(r->element[i], &name) != NGX_OK
            || name.len == 0 || name.data[0] == '/'
            || ngx_http_dynamo_rl_resp_str(r->element[i + 1], &value)
               != NGX_OK
            || ngx_http_dynamo_rl_resp_member(&value, &seen, &in_flight, &ts)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        age = (gr->now > ts) ? gr->now - ts : 0;

        /* the window the instance declared, this reader's without one */

        alive = own;

        for (j = 0; j < q->elements; j += 2) {
            if (ngx_http_dynamo_rl_resp_str(q->element[j], &field) == NGX_OK
                && field.len == name.len
                && ngx_memcmp(field.data, name.data, name.len) == 0)
            {
                (void) ngx_http_dynamo_rl_resp_u64(q->element[j + 1], &alive);
                break;
            }
        }

        if (age < alive) {
            fl->replicas++;

            if (seen >= gr->epoch) {
                fl->acked++;
            }

            fl->in_flight = (fl->in_flight > UINT64_MAX - in_flight)
                            ? UINT64_MAX : fl->in_flight + in_flight;
            continue;
        }

        /*
         * lost for a minute past its own window (one longer than a
         * minute is lost too); held at the close if alive or lost then
         */

        hold = (alive > UINT64_MAX - NGX_HTTP_DYNAMO_RL_FLEET_FORGET)
               ? UINT64_MAX : alive + NGX_HTTP_DYNAMO_RL_FLEET_FORGET;

        if (age < hold
            || (gr->closed && ts > since - ngx_min(since, hold)))
        {

            /* an instance's field is "replica/pid of its master" */

            for (j = 0; j < name.len; j++) {
                if (name.data[j] == '/') {
                    name.len = j;
                    break;
                }
            }

            if (fl->nlost < NGX_HTTP_DYNAMO_RL_FLEET_LOST) {
                fl->lost[fl->nlost++] = name;
            }

            fl->lost_total++;
        }
    }

    fl->drained = (gr->closed
                   && fl->replicas > 0
                   && fl->acked == fl->replicas
                   && fl->in_flight == 0
                   && fl->lost_total == 0);

    return NGX_OK;
}


/* "seen:in_flight:ts", three decimal numbers */

static ngx_int_t
ngx_http_dynamo_rl_resp_member(ngx_str_t *value, uint64_t *seen,
    uint64_t *in_flight, uint64_t *ts)
{
    u_char  *p, *last, *c1, *c2;

    p = value->data;
    last = p + value->len;

    c1 = ngx_strlchr(p, last, ':');
    if (c1 == NULL) {
        return NGX_ERROR;
    }

    c2 = ngx_strlchr(c1 + 1, last, ':');
    if (c2 == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_resp_digits(p, c1 - p, seen) != NGX_OK
        || ngx_http_dynamo_rl_resp_digits(c1 + 1, c2 - c1 - 1, in_flight)
           != NGX_OK
        || ngx_http_dynamo_rl_resp_digits(c2 + 1, last - c2 - 1, ts)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * HMGET of NGX_HTTP_DYNAMO_RL_RECORD_FIELDS: st code sse b t0 t1 rq rp rs
 * tn;
 * all nil is no record, a record without "st" is not one of ours
 */

ngx_int_t
ngx_http_dynamo_rl_resp_record(redisReply *reply,
    ngx_http_dynamo_rl_record_t *rec)
{
    size_t        i;
    uint64_t      n;
    ngx_int_t     rs;
    ngx_str_t     s;
    redisReply  **e;

    ngx_memzero(rec, sizeof(ngx_http_dynamo_rl_record_t));

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS)
    {
        return NGX_ERROR;
    }

    e = reply->element;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS; i++) {
        if (e[i] == NULL
            || (e[i]->type != REDIS_REPLY_NIL
                && e[i]->type != REDIS_REPLY_STRING))
        {
            return NGX_ERROR;
        }
    }

    if (e[0]->type == REDIS_REPLY_NIL) {

        for (i = 1; i < NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS; i++) {
            if (e[i]->type != REDIS_REPLY_NIL) {
                return NGX_ERROR;
            }
        }

        return NGX_OK;
    }

    /* st */

    if (e[0]->len != 1) {
        return NGX_ERROR;
    }

    if (e[0]->str[0] == 'r') {
        /* a release's mark (see the move script): no attempt */
        return NGX_OK;
    }

    rec->found = 1;

    rec->state = ngx_http_dynamo_rl_resp_state((u_char) e[0]->str[0]);

    if (rec->state == 0) {
        return NGX_ERROR;
    }

    /* code, sse */

    if (e[1]->type == REDIS_REPLY_STRING) {
        if (ngx_http_dynamo_rl_resp_u64(e[1], &n) != NGX_OK
            || n > NGX_HTTP_DYNAMO_RL_RESP_STATUS)
        {
            return NGX_ERROR;
        }

        rec->status = (ngx_uint_t) n;
    }

    if (e[2]->type == REDIS_REPLY_STRING) {
        if (ngx_http_dynamo_rl_resp_u64(e[2], &n) != NGX_OK || n > 1) {
            return NGX_ERROR;
        }

        rec->stream = (ngx_uint_t) n;
    }

    /* b, t0, t1 */

    if ((e[3]->type == REDIS_REPLY_STRING
         && ngx_http_dynamo_rl_resp_u64(e[3], &rec->bytes) != NGX_OK)
        || (e[4]->type == REDIS_REPLY_STRING
            && ngx_http_dynamo_rl_resp_u64(e[4], &rec->started) != NGX_OK)
        || (e[5]->type == REDIS_REPLY_STRING
            && ngx_http_dynamo_rl_resp_u64(e[5], &rec->ended) != NGX_OK))
    {
        return NGX_ERROR;
    }

    /* rq, rp */

    if (e[6]->type == REDIS_REPLY_STRING) {
        (void) ngx_http_dynamo_rl_resp_str(e[6], &rec->request_id);
    }

    if (e[7]->type == REDIS_REPLY_STRING) {
        (void) ngx_http_dynamo_rl_resp_str(e[7], &rec->replica);
    }

    /* tn */

    if (e[9]->type == REDIS_REPLY_STRING) {
        (void) ngx_http_dynamo_rl_resp_str(e[9], &rec->tenant);
    }

    /* rs */

    if (e[8]->type == REDIS_REPLY_STRING && e[8]->len != 0) {
        if (ngx_http_dynamo_rl_resp_str(e[8], &s) != NGX_OK) {
            return NGX_ERROR;
        }

        rs = ngx_http_dynamo_rl_resp_reason(s.data, s.len);

        if (rs == NGX_ERROR) {
            return NGX_ERROR;
        }

        rec->reason = rs;
    }

    return NGX_OK;
}


/* a reason's code as the store keeps it: its index, NGX_ERROR if none */

static ngx_int_t
ngx_http_dynamo_rl_resp_reason(u_char *code, size_t len)
{
    ngx_uint_t  i;

    if (len != 2) {
        return NGX_ERROR;
    }

    for (i = 1; i < NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS; i++) {
        if (ngx_strncmp(code, ngx_http_dynamo_rl_attempt_reasons[i].code, 2)
            == 0)
        {
            return i;
        }
    }

    return NGX_ERROR;
}


/* NGX_OK: an error reply "NOSCRIPT ..."; NGX_DECLINED: anything else */

ngx_int_t
ngx_http_dynamo_rl_resp_noscript(redisReply *reply)
{
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR
        && reply->str != NULL && reply->len >= 8
        && ngx_strncmp(reply->str, "NOSCRIPT", 8) == 0)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * ROLE: NGX_OK for a primary ("master"), NGX_DECLINED for a replica or a
 * sentinel (another role word), NGX_ERROR for a reply of another shape
 */

ngx_int_t
ngx_http_dynamo_rl_resp_role(redisReply *reply)
{
    redisReply  *r;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0)
    {
        return NGX_ERROR;
    }

    r = reply->element[0];

    if (r == NULL || r->type != REDIS_REPLY_STRING || r->str == NULL
        || r->len == 0 || r->len > 32)
    {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_resp_is(r, "master") ? NGX_OK : NGX_DECLINED;
}


/*
 * SENTINEL get-master-addr-by-name: [host, port]; NGX_DECLINED: nil, the
 * sentinel does not know the name; NGX_ERROR: another shape, a host that
 * is not 1..255 of [0-9A-Za-z.:_-], a port not 1..65535
 */

ngx_int_t
ngx_http_dynamo_rl_resp_primary(redisReply *reply, ngx_str_t *host,
    in_port_t *port)
{
    u_char     c;
    size_t     i;
    uint64_t   n;
    ngx_str_t  h, p;

    if (reply != NULL && reply->type == REDIS_REPLY_NIL) {
        return NGX_DECLINED;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2
        || ngx_http_dynamo_rl_resp_str(reply->element[0], &h) != NGX_OK
        || ngx_http_dynamo_rl_resp_str(reply->element[1], &p) != NGX_OK
        || h.len == 0 || h.len > 255)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < h.len; i++) {
        c = h.data[i];

        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
            || (c >= 'A' && c <= 'Z') || c == '.' || c == ':' || c == '-'
            || c == '_')
        {
            continue;
        }

        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_resp_digits(p.data, p.len, &n) != NGX_OK
        || n == 0 || n > 65535)
    {
        return NGX_ERROR;
    }

    *host = h;
    *port = (in_port_t) n;

    return NGX_OK;
}


/* a number: an integer reply >= 0, or a bulk string of 1..20 digits */

static ngx_int_t
ngx_http_dynamo_rl_resp_u64(redisReply *r, uint64_t *n)
{
    if (r == NULL) {
        return NGX_ERROR;
    }

    if (r->type == REDIS_REPLY_INTEGER) {
        if (r->integer < 0) {
            return NGX_ERROR;
        }

        *n = (uint64_t) r->integer;
        return NGX_OK;
    }

    if (r->type != REDIS_REPLY_STRING || r->str == NULL) {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_resp_digits((u_char *) r->str, r->len, n);
}


static ngx_int_t
ngx_http_dynamo_rl_resp_digits(u_char *p, size_t len, uint64_t *n)
{
    size_t    i;
    uint64_t  v, d;

    if (len == 0 || len > 20) {
        return NGX_ERROR;
    }

    v = 0;

    for (i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return NGX_ERROR;
        }

        d = p[i] - '0';

        if (v > (UINT64_MAX - d) / 10) {
            return NGX_ERROR;
        }

        v = v * 10 + d;
    }

    *n = v;

    return NGX_OK;
}


/* a bulk string, pointed into */

static ngx_int_t
ngx_http_dynamo_rl_resp_str(redisReply *r, ngx_str_t *s)
{
    if (r == NULL || r->type != REDIS_REPLY_STRING
        || (r->str == NULL && r->len != 0))
    {
        return NGX_ERROR;
    }

    s->len = r->len;
    s->data = (u_char *) r->str;

    return NGX_OK;
}


/* an attempt's state from its letter in the store; 0: not a state */

static ngx_uint_t
ngx_http_dynamo_rl_resp_state(u_char c)
{
    u_char  *p;

    /* by NGX_HTTP_DYNAMO_RL_ACCEPTED .. NGX_HTTP_DYNAMO_RL_CANCELED */

    static u_char  states[] = "?asufc";

    p = ngx_strlchr(states + 1, states + sizeof(states) - 1, c);

    return (p == NULL) ? 0 : (ngx_uint_t) (p - states);
}


static ngx_int_t
ngx_http_dynamo_rl_resp_is(redisReply *r, const char *s)
{
    size_t  len;

    len = ngx_strlen(s);

    return r != NULL && r->type == REDIS_REPLY_STRING && r->len == len
           && r->str != NULL && ngx_strncmp(r->str, s, len) == 0;
}
