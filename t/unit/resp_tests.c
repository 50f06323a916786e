
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"
#include "tap.h"

#include <stdio.h>
#include <string.h>


/*
 * The decoders of the store's replies: RESP bytes go through hiredis's
 * reader, as on the connection, then into each decoder; good replies,
 * every wrong shape, and the fleet's judgement (alive, lost, forgotten,
 * acked, drained).
 */


static redisReply *parse(const char *s, size_t len);
static void bulk(char *buf, const char *s);
static void gate_reply(char *buf, const char *result, const char *state,
    const char *epoch, const char *fleet, size_t nfleet);
static void gate_tail(char *buf);
static void gate_since(char *buf, const char *since);
static void gate_token(char *buf, const char *token);
static void gate_windows(char *buf, const char *windows, size_t n);
static ngx_int_t gate(char *buf, uint64_t heartbeat,
    ngx_http_dynamo_rl_gate_reply_t *gr);
static ngx_int_t claim(const char *s, ngx_http_dynamo_rl_claim_reply_t *cr);
static ngx_int_t move(const char *s, ngx_int_t *moved);
static ngx_int_t record(const char *s, ngx_http_dynamo_rl_record_t *rec);
static ngx_int_t noscript(const char *s);
static ngx_int_t role(const char *s);
static ngx_int_t primary(const char *s, ngx_str_t *host, in_port_t *port);
static ngx_uint_t decoded(const char *s);
static ngx_uint_t is(ngx_str_t *s, const char *want);


#define NIL  "$-1\r\n"

/* 1e9 ms is "now" of the gate replies below */
#define NOW  "1000000000"


/* the decoders' strings point into the reply: it lives until the next */

static redisReply  *last;


static redisReply *
parse(const char *s, size_t len)
{
    void         *reply;
    redisReader  *rd;

    if (last != NULL) {
        freeReplyObject(last);
        last = NULL;
    }

    rd = ngx_http_dynamo_rl_resp_reader();

    if (rd == NULL || redisReaderFeed(rd, s, len) != REDIS_OK) {
        return NULL;
    }

    reply = NULL;

    if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
        reply = NULL;
    }

    redisReaderFree(rd);

    last = reply;

    return reply;
}


/*
 * the wrappers below parse RESP bytes into "last" and pass it to one
 * decoder; -100 stands for bytes that are no reply
 */

static ngx_uint_t
decoded(const char *s)
{
    return parse(s, strlen(s)) != NULL;
}


static void
bulk(char *buf, const char *s)
{
    sprintf(buf + strlen(buf), "$%zu\r\n%s\r\n", strlen(s), s);
}


/*
 * {result, state, epoch, expires 0, reason, changed, now, lease, fleet,
 * since, windows, token}; the last three from gate_tail (since "0", no
 * windows, token ""), which gate_since(), gate_windows() and gate_token()
 * change and write again
 */

static size_t       tail_at;
static const char  *tail_since;
static const char  *tail_windows;
static size_t       tail_nwindows;
static const char  *tail_token;


static void
gate_reply(char *buf, const char *result, const char *state,
    const char *epoch, const char *fleet, size_t nfleet)
{
    strcpy(buf, "*12\r\n");
    bulk(buf, result);
    bulk(buf, state);
    bulk(buf, epoch);
    bulk(buf, "0");
    bulk(buf, "refresh");
    strcat(buf, ":999999000\r\n");
    strcat(buf, ":" NOW "\r\n");
    bulk(buf, "60000");
    sprintf(buf + strlen(buf), "*%zu\r\n%s", nfleet, fleet);

    tail_at = strlen(buf);
    tail_since = "0";
    tail_windows = "";
    tail_nwindows = 0;
    tail_token = "";

    gate_tail(buf);
}


static void
gate_tail(char *buf)
{
    buf[tail_at] = '\0';
    bulk(buf, tail_since);
    sprintf(buf + strlen(buf), "*%zu\r\n%s", tail_nwindows, tail_windows);
    bulk(buf, tail_token);
}


static void
gate_since(char *buf, const char *since)
{
    tail_since = since;
    gate_tail(buf);
}


static void
gate_windows(char *buf, const char *windows, size_t n)
{
    tail_windows = windows;
    tail_nwindows = n;
    gate_tail(buf);
}


static void
gate_token(char *buf, const char *token)
{
    tail_token = token;
    gate_tail(buf);
}


static ngx_int_t
gate(char *buf, uint64_t heartbeat, ngx_http_dynamo_rl_gate_reply_t *gr)
{
    return decoded(buf) ? ngx_http_dynamo_rl_resp_gate(last, heartbeat, gr)
                        : -100;
}


static ngx_int_t
claim(const char *s, ngx_http_dynamo_rl_claim_reply_t *cr)
{
    return decoded(s) ? ngx_http_dynamo_rl_resp_claim(last, cr) : -100;
}


static ngx_int_t
move(const char *s, ngx_int_t *moved)
{
    return decoded(s) ? ngx_http_dynamo_rl_resp_move(last, moved) : -100;
}


static ngx_int_t
record(const char *s, ngx_http_dynamo_rl_record_t *rec)
{
    return decoded(s) ? ngx_http_dynamo_rl_resp_record(last, rec) : -100;
}


static ngx_int_t
noscript(const char *s)
{
    return decoded(s) ? ngx_http_dynamo_rl_resp_noscript(last) : -100;
}


static ngx_int_t
role(const char *s)
{
    return decoded(s) ? ngx_http_dynamo_rl_resp_role(last) : -100;
}


static ngx_int_t
primary(const char *s, ngx_str_t *host, in_port_t *port)
{
    return decoded(s) ? ngx_http_dynamo_rl_resp_primary(last, host, port)
                      : -100;
}


static ngx_uint_t
is(ngx_str_t *s, const char *want)
{
    return s->len == strlen(want) && memcmp(s->data, want, s->len) == 0;
}


int
main(void)
{
    char                              buf[8192], fleet[4096], name[64];
    char                              windows[256];
    ngx_int_t                         moved;
    ngx_uint_t                        i;
    ngx_http_dynamo_rl_record_t       rec;
    ngx_http_dynamo_rl_claim_reply_t  cr;
    ngx_http_dynamo_rl_gate_reply_t   gr;

    /* the results of the gate script; closed -1: not checked */

    static const struct {
        const char  *result;
        const char  *state;
        const char  *epoch;
        ngx_uint_t   want;
        ngx_int_t    closed;
        const char  *name;
    } gate_results[] = {
        { "epoch_mismatch", "open", "6", NGX_HTTP_DYNAMO_RL_GATE_R_MISMATCH,
          -1, "gate: epoch_mismatch" },
        { "not_closed", "open", "6", NGX_HTTP_DYNAMO_RL_GATE_R_NOT_CLOSED,
          -1, "gate: not_closed" },
        { "no_lease", "closed", "6", NGX_HTTP_DYNAMO_RL_GATE_R_NO_LEASE,
          -1, "gate: no_lease" },
        { "nogate", "", "0", NGX_HTTP_DYNAMO_RL_GATE_R_NOGATE,
          0, "gate: nogate, no state" },
        { "created", "open", "0", NGX_HTTP_DYNAMO_RL_GATE_R_CREATED,
          -1, "gate: created" },
        { "lost", "closed", "8", NGX_HTTP_DYNAMO_RL_GATE_R_LOST,
          1, "gate: lost" },
        { NULL, NULL, NULL, 0, 0, NULL }
    };

    static const struct {
        const char  *result;
        const char  *state;
        const char  *epoch;
        const char  *fleet;
        size_t       nfleet;
        const char  *name;
    } bad_gates[] = {
        { "ok", "", "6", "", 0, "gate: no state with ok" },
        { "ok", "half", "6", "", 0, "gate: unknown state" },
        { "maybe", "open", "6", "", 0, "gate: unknown result" },
        { "ok", "open", "6x", "", 0, "gate: junk in the epoch" },
        { "ok", "open", "-6", "", 0, "gate: negative epoch" },
        { "ok", "open", "6", ":1\r\n", 1, "gate: odd fleet" },
        { NULL, NULL, NULL, NULL, 0, NULL }
    };

    static const char  *bad_claims[] = {
        "-ERR unknown command\r\n",
        ":1\r\n",
        "*0\r\n",
        "$2\r\nok\r\n",
        "*1\r\n$2\r\nok\r\n",
        "*3\r\n$2\r\nok\r\n:1\r\n:2\r\n",
        "*2\r\n$2\r\nok\r\n:-1\r\n",
        "*2\r\n$2\r\nok\r\n$2\r\n1x\r\n",
        "*2\r\n$2\r\nok\r\n$2\r\n 1\r\n",
        "*2\r\n$2\r\nok\r\n$0\r\n\r\n",
        "*2\r\n$2\r\nok\r\n" NIL,
        "*2\r\n$2\r\nok\r\n$21\r\n123456789012345678901\r\n",
        "*2\r\n$2\r\nok\r\n$20\r\n18446744073709551616\r\n",
        "*2\r\n+ok\r\n:1\r\n",
        "*2\r\n$2\r\nOK\r\n:1\r\n",
        "*2\r\n$3\r\nok \r\n:1\r\n",
        "*2\r\n*1\r\n:1\r\n:1\r\n",
        "*2\r\n$2\r\nok\r\n*1\r\n:1\r\n",
        "*3\r\n$3\r\ndup\r\n:3\r\n$1\r\nx\r\n",
        "*3\r\n$3\r\ndup\r\n:3\r\n$1\r\n?\r\n",
        "*3\r\n$3\r\ndup\r\n:3\r\n$2\r\nss\r\n",
        "*3\r\n$3\r\ndup\r\n:3\r\n$0\r\n\r\n",
        "*3\r\n$3\r\ndup\r\n:3\r\n:1\r\n",
        "*2\r\n$3\r\ndup\r\n:3\r\n",
        "*4\r\n$6\r\nclosed\r\n:1\r\n:0\r\n$0\r\n\r\n",
        "*5\r\n$6\r\nclosed\r\n:1\r\n:0\r\n:7\r\n:5\r\n",
        "*5\r\n$6\r\nclosed\r\n:1\r\n:0\r\n$0\r\n\r\n:-5\r\n",
        "*6\r\n$6\r\nclosed\r\n:1\r\n:0\r\n$0\r\n\r\n:5\r\n:5\r\n",
        "*2\r\n$6\r\nnogate\r\n:1\r\n",
        "*1\r\n$7\r\nnogates\r\n",
        "*1\r\n" NIL,
        NULL
    };

    static const char  *bad_moves[] = {
        ":2\r\n", ":-3\r\n", "$1\r\n1\r\n", "-ERR wrong\r\n", "+OK\r\n",
        "*1\r\n:1\r\n", NIL, NULL
    };

    setvbuf(stdout, NULL, _IOLBF, 0);

    /* the scripts' table */

    ok(ngx_http_dynamo_rl_scripts[NGX_HTTP_DYNAMO_RL_SCRIPT_CLAIM].name.len
       == 5, "scripts: claim first");
    ok(is(&ngx_http_dynamo_rl_scripts[NGX_HTTP_DYNAMO_RL_SCRIPT_BEAT].name,
          "beat"), "scripts: beat last");

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        snprintf(name, sizeof(name), "scripts: %s has a body",
                 ngx_http_dynamo_rl_scripts[i].name.data);
        ok(ngx_http_dynamo_rl_scripts[i].body.len > 40
           && ngx_http_dynamo_rl_scripts[i].body.data[
                  ngx_http_dynamo_rl_scripts[i].body.len - 1] == '\n', name);
    }

    /* claim */

    ok(claim("*2\r\n$2\r\nok\r\n:7\r\n", &cr) == NGX_OK
       && cr.result == NGX_HTTP_DYNAMO_RL_CLAIM_OK && cr.epoch == 7,
       "claim: ok, epoch as an integer");
    ok(claim("*2\r\n$2\r\nok\r\n$2\r\n12\r\n", &cr) == NGX_OK
       && cr.result == NGX_HTTP_DYNAMO_RL_CLAIM_OK && cr.epoch == 12,
       "claim: ok, epoch as a string");
    ok(claim("*2\r\n$2\r\nok\r\n$20\r\n18446744073709551615\r\n", &cr)
       == NGX_OK && cr.epoch == UINT64_MAX, "claim: the largest epoch");
    ok(claim("*3\r\n$3\r\ndup\r\n:3\r\n$1\r\ns\r\n", &cr) == NGX_OK
       && cr.result == NGX_HTTP_DYNAMO_RL_CLAIM_DUP && cr.epoch == 3
       && is(&cr.state, "s"), "claim: dup, streaming");
    ok(claim("*5\r\n$6\r\nclosed\r\n$1\r\n4\r\n$13\r\n1733100060000\r\n"
             "$7\r\nrefresh\r\n:1733100000000\r\n", &cr) == NGX_OK
       && cr.result == NGX_HTTP_DYNAMO_RL_CLAIM_CLOSED && cr.epoch == 4
       && cr.expires == 1733100060000ULL && is(&cr.reason, "refresh")
       && cr.now == 1733100000000ULL, "claim: closed with a lease");
    ok(claim("*5\r\n$6\r\nclosed\r\n:4\r\n$1\r\n0\r\n$0\r\n\r\n:1\r\n", &cr)
       == NGX_OK && cr.expires == 0 && cr.reason.len == 0,
       "claim: closed without a lease or a reason");
    ok(claim("*1\r\n$6\r\nnogate\r\n", &cr) == NGX_OK
       && cr.result == NGX_HTTP_DYNAMO_RL_CLAIM_NOGATE, "claim: nogate");

    for (i = 0; bad_claims[i]; i++) {
        snprintf(name, sizeof(name), "claim: wrong shape %u", (unsigned) i);
        ok(claim(bad_claims[i], &cr) == NGX_ERROR, name);
    }

    ok(ngx_http_dynamo_rl_resp_claim(NULL, &cr) == NGX_ERROR,
       "claim: no reply");

    /* move */

    ok(move(":1\r\n", &moved) == NGX_OK && moved == 1, "move: moved");
    ok(move(":0\r\n", &moved) == NGX_OK && moved == 0, "move: no record");
    ok(move(":-1\r\n", &moved) == NGX_OK && moved == -1, "move: not ours");
    ok(move(":-2\r\n", &moved) == NGX_OK && moved == -2,
       "move: not in the states");

    for (i = 0; bad_moves[i]; i++) {
        snprintf(name, sizeof(name), "move: wrong shape %u", (unsigned) i);
        ok(move(bad_moves[i], &moved) == NGX_ERROR, name);
    }

    /* gate: the fields */

    gate_reply(buf, "ok", "closed", "5", "", 0);
    ok(gate(buf, 500, &gr) == NGX_OK
       && gr.result == NGX_HTTP_DYNAMO_RL_GATE_R_OK && gr.closed
       && gr.epoch == 5 && gr.expires == 0 && is(&gr.reason, "refresh")
       && gr.changed == 999999000 && gr.now == 1000000000
       && gr.lease == 60000 && gr.has_fleet && gr.fleet.replicas == 0
       && !gr.fleet.drained, "gate: closed, no fleet, not drained");

    gate_reply(buf, "ok", "open", "6", "", 0);
    ok(gate(buf, 500, &gr) == NGX_OK && !gr.closed && gr.epoch == 6
       && gr.token.len == 0, "gate: open");

    gate_token(buf, "0123456789abcdef.7");
    ok(gate(buf, 500, &gr) == NGX_OK && is(&gr.token, "0123456789abcdef.7"),
       "gate: the last change's token");

    gate_reply(buf, "late", "closed", "6", "", 0);
    ok(gate(buf, 500, &gr) == NGX_OK
       && gr.result == NGX_HTTP_DYNAMO_RL_GATE_R_LATE && gr.closed,
       "gate: late");

    for (i = 0; gate_results[i].name != NULL; i++) {
        gate_reply(buf, gate_results[i].result, gate_results[i].state,
                   gate_results[i].epoch, "", 0);
        ok(gate(buf, 500, &gr) == NGX_OK
           && gr.result == gate_results[i].want
           && (gate_results[i].closed == -1
               || (gr.closed != 0) == gate_results[i].closed),
           gate_results[i].name);
    }

    /* gate: wrong shapes */

    for (i = 0; bad_gates[i].name != NULL; i++) {
        gate_reply(buf, bad_gates[i].result, bad_gates[i].state,
                   bad_gates[i].epoch, bad_gates[i].fleet,
                   bad_gates[i].nfleet);
        ok(gate(buf, 500, &gr) == NGX_ERROR, bad_gates[i].name);
    }

    buf[2] = '3';
    strcat(buf, ":0\r\n");
    ok(gate(buf, 500, &gr) == NGX_ERROR, "gate: 13 elements");
    ok(gate("*10\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n*0\r\n:0\r\n", 500, &gr) == NGX_ERROR,
       "gate: 10 elements");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n*0\r\n:0\r\n*0\r\n:7\r\n", 500, &gr)
       == NGX_ERROR,
       "gate: token as an integer");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n:5\r\n:0\r\n:1\r\n"
            ":0\r\n*0\r\n:0\r\n*0\r\n$0\r\n\r\n", 500, &gr)
       == NGX_ERROR,
       "gate: reason as an integer");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n:7\r\n:0\r\n*0\r\n$0\r\n\r\n", 500, &gr)
       == NGX_ERROR,
       "gate: fleet not an array");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n*0\r\n$2\r\n1x\r\n*0\r\n$0\r\n\r\n", 500, &gr)
       == NGX_ERROR,
       "gate: junk in since");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n*0\r\n:0\r\n:7\r\n$0\r\n\r\n", 500, &gr)
       == NGX_ERROR,
       "gate: windows not an array");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n*0\r\n:0\r\n*2\r\n$1\r\nA\r\n$2\r\n1x\r\n"
            "$0\r\n\r\n", 500, &gr) == NGX_ERROR,
       "gate: junk in a window");
    ok(gate("*12\r\n$2\r\nok\r\n$4\r\nopen\r\n:1\r\n:0\r\n$0\r\n\r\n:0\r\n"
            ":1\r\n:0\r\n*0\r\n:0\r\n*1\r\n$1\r\nA\r\n$0\r\n\r\n",
            500, &gr) == NGX_ERROR,
       "gate: odd windows");
    ok(gate("-ERR x\r\n", 500, &gr) == NGX_ERROR, "gate: an error reply");

    /*
     * the fleet: heartbeat 500 ms, alive < 1500 ms, lost for a minute
     * more, < 61.5 s
     */

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");        /* 100 ms: alive, acked */
    bulk(fleet, "B");
    bulk(fleet, "4:2:999998501");        /* 1499 ms: alive, behind */
    bulk(fleet, "C");
    bulk(fleet, "5:0:999998500");        /* 1500 ms: lost */
    bulk(fleet, "D");
    bulk(fleet, "5:9:999938501");        /* 61499 ms: lost */
    bulk(fleet, "E");
    bulk(fleet, "5:9:999938500");        /* 61.5 s: forgotten */
    bulk(fleet, "F");
    bulk(fleet, "6:0:1000000005");       /* from the future: alive */

    /* open: the window and a minute apply to every report */

    gate_reply(buf, "ok", "open", "5", fleet, 12);
    ok(gate(buf, 500, &gr) == NGX_OK, "fleet: parsed");
    ok(gr.fleet.replicas == 3, "fleet: A, B and F alive");
    ok(gr.fleet.acked == 2, "fleet: A and F acked");
    ok(gr.fleet.in_flight == 2, "fleet: in flight of the alive only");
    ok(gr.fleet.nlost == 2 && gr.fleet.lost_total == 2
       && is(&gr.fleet.lost[0], "C") && is(&gr.fleet.lost[1], "D"),
       "fleet: C and D lost");
    ok(!gr.fleet.drained, "fleet: not drained");

    ok(gate(buf, 30000, &gr) == NGX_OK && gr.fleet.replicas == 6
       && gr.fleet.nlost == 0 && gr.fleet.in_flight == 20,
       "fleet: with a 30 s heartbeat, every report is alive");

    /*
     * each judged by the window it declared (3 of its own heartbeats):
     * C (heartbeat 5 s) alive, B (heartbeat 100 ms) lost; the others,
     * without one, by this reader's
     */

    windows[0] = '\0';
    bulk(windows, "C");
    bulk(windows, "15000");
    bulk(windows, "B");
    bulk(windows, "300");
    gate_windows(buf, windows, 4);

    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 3
       && gr.fleet.nlost == 2 && is(&gr.fleet.lost[0], "B")
       && is(&gr.fleet.lost[1], "D") && gr.fleet.acked == 3,
       "fleet: each judged by its own window");

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");
    bulk(fleet, "B");
    bulk(fleet, "7:0:999999000");
    bulk(fleet, "E");
    bulk(fleet, "1:4:900000000");

    gate_reply(buf, "ok", "closed", "5", fleet, 6);
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 2
       && gr.fleet.acked == 2 && gr.fleet.drained,
       "fleet: drained while closed, the forgotten one ignored");

    gate_reply(buf, "ok", "open", "5", fleet, 6);
    ok(gate(buf, 500, &gr) == NGX_OK && !gr.fleet.drained,
       "fleet: never drained while open");

    /*
     * closed 100 s ago: a replica alive then and silent since (cut off,
     * its gate still open) stays lost; one gone before is forgotten
     */

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");
    bulk(fleet, "G");
    bulk(fleet, "4:0:999905000");        /* 95 s: alive at the close */
    bulk(fleet, "H");
    bulk(fleet, "4:0:999800000");        /* 200 s: gone before it */

    gate_reply(buf, "ok", "closed", "5", fleet, 6);
    memcpy(strstr(buf, ":999999000\r\n"), ":999900000", 10);

    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 1
       && gr.fleet.lost_total == 1 && is(&gr.fleet.lost[0], "G")
       && !gr.fleet.drained,
       "fleet: alive at the close, silent since: lost, not drained");

    /*
     * lost when it closed (silent for 5 s then, 105 s now) holds the
     * drain too, judged from "since" (a renew moved "changed" since);
     * without "since", from "changed"
     */

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");
    bulk(fleet, "I");
    bulk(fleet, "4:0:999895000");        /* 105 s: lost at the close */

    gate_reply(buf, "ok", "closed", "5", fleet, 4);
    gate_since(buf, "999900000");

    ok(gate(buf, 500, &gr) == NGX_OK && gr.since == 999900000
       && gr.fleet.replicas == 1 && gr.fleet.lost_total == 1
       && is(&gr.fleet.lost[0], "I") && !gr.fleet.drained,
       "fleet: lost at the close, silent since: lost, not drained");

    gate_since(buf, "999960000");
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.lost_total == 0
       && gr.fleet.drained,
       "fleet: silent for over a minute at the close: forgotten");

    gate_since(buf, "0");
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.lost_total == 0,
       "fleet: no since: judged from the last change");

    gate_reply(buf, "ok", "open", "5", fleet, 4);
    gate_since(buf, "999900000");
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.lost_total == 0
       && !gr.fleet.drained, "fleet: open: forgotten after a minute");

    /*
     * alive at the close by its own window, longer than a minute: C
     * (heartbeat 30 s, window 90 s) silent for 65 s at the close, 165 s
     * now, stays lost; D, as silent but without a window (this reader's,
     * 1500 ms), and E, silent for 155 s at the close (past its window
     * and a minute), are forgotten
     */

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");
    bulk(fleet, "C");
    bulk(fleet, "4:0:999835000");
    bulk(fleet, "D");
    bulk(fleet, "4:0:999835000");
    bulk(fleet, "E");
    bulk(fleet, "4:0:999745000");

    gate_reply(buf, "ok", "closed", "5", fleet, 8);
    gate_since(buf, "999900000");

    windows[0] = '\0';
    bulk(windows, "C");
    bulk(windows, "90000");
    bulk(windows, "E");
    bulk(windows, "90000");
    gate_windows(buf, windows, 4);

    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 1
       && gr.fleet.lost_total == 1 && is(&gr.fleet.lost[0], "C")
       && !gr.fleet.drained,
       "fleet: alive at the close by its own window: lost, not drained");

    gate_reply(buf, "ok", "open", "5", fleet, 8);
    gate_windows(buf, windows, 4);
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 1
       && gr.fleet.lost_total == 0,
       "fleet: open: past its own window and a minute, forgotten");

    /*
     * open: a window longer than a minute (heartbeat 30 s, window 90 s):
     * lost for a minute past it, C 100 s and D 149999 ms silent; E, 150 s
     * silent, forgotten
     */

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");
    bulk(fleet, "C");
    bulk(fleet, "4:0:999900000");
    bulk(fleet, "D");
    bulk(fleet, "4:0:999850001");
    bulk(fleet, "E");
    bulk(fleet, "4:0:999850000");

    gate_reply(buf, "ok", "open", "5", fleet, 8);

    windows[0] = '\0';
    bulk(windows, "C");
    bulk(windows, "90000");
    bulk(windows, "D");
    bulk(windows, "90000");
    bulk(windows, "E");
    bulk(windows, "90000");
    gate_windows(buf, windows, 6);

    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 1
       && gr.fleet.lost_total == 2 && is(&gr.fleet.lost[0], "C")
       && is(&gr.fleet.lost[1], "D"),
       "fleet: open: a window over a minute, lost a minute past it");

    /* closed 5 s ago: E, silent for 145 s then, was lost, and is held */

    gate_reply(buf, "ok", "closed", "5", fleet, 8);
    gate_since(buf, "999995000");
    gate_windows(buf, windows, 6);

    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 1
       && gr.fleet.lost_total == 3 && is(&gr.fleet.lost[2], "E")
       && !gr.fleet.drained,
       "fleet: closed: a window over a minute, lost at the close, held");

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");
    bulk(fleet, "G");
    bulk(fleet, "4:0:999905000");
    bulk(fleet, "H");
    bulk(fleet, "4:0:999800000");

    gate_reply(buf, "ok", "closed", "8", fleet, 6);
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.acked == 0
       && !gr.fleet.drained, "fleet: not drained before the acks");

    fleet[0] = '\0';
    bulk(fleet, "A");
    bulk(fleet, "5:1:999999900");
    gate_reply(buf, "ok", "closed", "5", fleet, 2);
    ok(gate(buf, 500, &gr) == NGX_OK && !gr.fleet.drained,
       "fleet: not drained with one in flight");

    fleet[0] = '\0';

    for (i = 0; i < 10; i++) {
        sprintf(name, "L%u", (unsigned) i);
        bulk(fleet, name);
        bulk(fleet, "5:0:999990000");
    }

    bulk(fleet, "A");
    bulk(fleet, "5:0:999999900");

    gate_reply(buf, "ok", "closed", "5", fleet, 22);
    ok(gate(buf, 500, &gr) == NGX_OK && gr.fleet.replicas == 1
       && gr.fleet.nlost == NGX_HTTP_DYNAMO_RL_FLEET_LOST
       && gr.fleet.lost_total == 10 && !gr.fleet.drained,
       "fleet: ten lost, eight named");

    /* an instance's field without its replica's name, alive or lost */

    fleet[0] = '\0';
    bulk(fleet, "/123");
    bulk(fleet, "5:2:999941672");
    gate_reply(buf, "ok", "closed", "5", fleet, 2);
    ok(gate(buf, 500, &gr) == NGX_ERROR, "fleet: a lost field \"/pid\"");

    fleet[0] = '\0';
    bulk(fleet, "/");
    bulk(fleet, "5:0:999999900");
    gate_reply(buf, "ok", "closed", "5", fleet, 2);
    ok(gate(buf, 500, &gr) == NGX_ERROR, "fleet: an alive field \"/\"");

    {
        static const char  *bad[] = {
            "5:0", "5:0:x", "a:0:1", "5::1", "5:0:1:", ":0:1", "5:0:-1",
            "5:0:123456789012345678901", NULL
        };

        for (i = 0; bad[i]; i++) {
            fleet[0] = '\0';
            bulk(fleet, "A");
            bulk(fleet, bad[i]);
            gate_reply(buf, "ok", "closed", "5", fleet, 2);
            snprintf(name, sizeof(name), "fleet: bad report \"%s\"", bad[i]);
            ok(gate(buf, 500, &gr) == NGX_ERROR, name);
        }
    }

    fleet[0] = '\0';
    bulk(fleet, "");
    bulk(fleet, "5:0:1");
    gate_reply(buf, "ok", "closed", "5", fleet, 2);
    ok(gate(buf, 500, &gr) == NGX_ERROR, "fleet: empty replica name");

    gate_reply(buf, "ok", "closed", "5", ":1\r\n:2\r\n", 2);
    ok(gate(buf, 500, &gr) == NGX_ERROR, "fleet: integers");

    /* record */

    ok(record("*10\r\n" NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL, &rec) == NGX_OK
       && !rec.found, "record: all nil is none");

    ok(record("*10\r\n$1\r\nu\r\n$3\r\n200\r\n$1\r\n1\r\n$4\r\n1234\r\n"
              "$13\r\n1733100000000\r\n$13\r\n1733100000500\r\n$3\r\nr-1\r\n"
              "$1\r\nA\r\n" NIL "$8\r\ntenant-a\r\n", &rec) == NGX_OK
       && rec.found && rec.state == NGX_HTTP_DYNAMO_RL_SUCCEEDED
       && rec.status == 200 && rec.stream == 1 && rec.bytes == 1234
       && rec.started == 1733100000000ULL && rec.ended == 1733100000500ULL
       && is(&rec.request_id, "r-1") && is(&rec.replica, "A")
       && is(&rec.tenant, "tenant-a")
       && rec.reason == 0, "record: succeeded, every field");

    ok(record("*10\r\n$1\r\na\r\n" NIL NIL NIL "$1\r\n5\r\n" NIL NIL
              "$1\r\nB\r\n" NIL NIL, &rec) == NGX_OK
       && rec.state == NGX_HTTP_DYNAMO_RL_ACCEPTED && rec.status == 0
       && rec.ended == 0 && rec.request_id.len == 0 && rec.tenant.len == 0,
       "record: accepted, only what the claim wrote");

    ok(record("*10\r\n$1\r\nc\r\n" NIL NIL NIL NIL NIL NIL NIL
              "$2\r\nnf\r\n" NIL, &rec) == NGX_OK
       && rec.state == NGX_HTTP_DYNAMO_RL_CANCELED
       && rec.reason == NGX_HTTP_DYNAMO_RL_NOT_FORWARDED,
       "record: never forwarded");
    ok(record("*10\r\n$1\r\nf\r\n" NIL NIL NIL NIL NIL NIL NIL
              "$2\r\nwe\r\n" NIL, &rec) == NGX_OK
       && rec.state == NGX_HTTP_DYNAMO_RL_FAILED
       && rec.reason == NGX_HTTP_DYNAMO_RL_WORKER_EXITED,
       "record: worker exited");
    ok(record("*10\r\n$1\r\nf\r\n" NIL NIL NIL NIL NIL NIL NIL
              "$2\r\nst\r\n" NIL, &rec) == NGX_OK
       && rec.reason == NGX_HTTP_DYNAMO_RL_SEND_TIMEOUT,
       "record: send_timeout");
    ok(record("*10\r\n$1\r\nf\r\n" NIL NIL NIL NIL NIL NIL NIL
              "$2\r\ngs\r\n" NIL, &rec) == NGX_OK
       && rec.reason == NGX_HTTP_DYNAMO_RL_GATEWAY_SHUTDOWN,
       "record: gateway_shutdown");

    for (i = 1; i < NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS; i++) {
        snprintf(buf, sizeof(buf), "*10\r\n$1\r\nf\r\n" NIL NIL NIL NIL NIL NIL
                 NIL "$2\r\n%s\r\n" NIL,
                 ngx_http_dynamo_rl_attempt_reasons[i].code);
        snprintf(name, sizeof(name), "record: reason %u round trip",
                 (unsigned) i);
        ok(record(buf, &rec) == NGX_OK && rec.reason == i, name);
    }

    ok(record("*10\r\n$1\r\nf\r\n" NIL NIL NIL NIL NIL NIL NIL
              "$2\r\nrl\r\n" NIL, &rec) == NGX_OK
       && rec.state == NGX_HTTP_DYNAMO_RL_FAILED
       && rec.reason == NGX_HTTP_DYNAMO_RL_REPLICA_LOST,
       "record: replica lost");
    ok(record("*10\r\n$1\r\nr\r\n" NIL NIL NIL NIL NIL NIL "$1\r\nF\r\n"
              NIL NIL, &rec) == NGX_OK
       && !rec.found && rec.state == 0 && rec.replica.len == 0,
       "record: a release's mark is no record");
    ok(record("*10\r\n$1\r\ns\r\n" NIL NIL NIL NIL NIL NIL NIL
              "$0\r\n\r\n" NIL, &rec) == NGX_OK
       && rec.state == NGX_HTTP_DYNAMO_RL_STREAMING && rec.reason == 0,
       "record: streaming, empty rs");

    {
        static const char  *bad[] = {
            "*10\r\n$1\r\nx\r\n" NIL NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\n?\r\n" NIL NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n$2\r\nab\r\n" NIL NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n" NIL "$3\r\n200\r\n" NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\nu\r\n$3\r\nabc\r\n" NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\nu\r\n$4\r\n1000\r\n" NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\nu\r\n" NIL "$1\r\n2\r\n" NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\nu\r\n" NIL NIL "$2\r\n-1\r\n" NIL NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\nu\r\n" NIL NIL NIL "$1\r\n \r\n" NIL NIL NIL NIL NIL,
            "*10\r\n$1\r\nu\r\n" NIL NIL NIL NIL NIL NIL NIL "$2\r\nzz\r\n" NIL,
            "*10\r\n$1\r\nu\r\n" NIL NIL NIL NIL NIL NIL NIL "$1\r\nn\r\n" NIL,
            "*10\r\n$1\r\nu\r\n:200\r\n" NIL NIL NIL NIL NIL NIL NIL NIL,
            "*9\r\n$1\r\nu\r\n" NIL NIL NIL NIL NIL NIL NIL NIL,
            "*11\r\n$1\r\nu\r\n" NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL,
            "*10\r\n*0\r\n" NIL NIL NIL NIL NIL NIL NIL NIL NIL,
            "-WRONGTYPE Operation against a key\r\n",
            NIL,
            NULL
        };

        for (i = 0; bad[i]; i++) {
            snprintf(name, sizeof(name), "record: wrong shape %u",
                     (unsigned) i);
            ok(record(bad[i], &rec) == NGX_ERROR, name);
        }
    }

    /* the reader's bound on an array's elements */

    ok(parse("*65536\r\n", 9) == NULL
       && parse("*65537\r\n:1\r\n", 13) == NULL,
       "reader: an array's count is read, a partial array waits");

    {
        redisReader  *rd;
        void         *reply;

        rd = ngx_http_dynamo_rl_resp_reader();
        reply = NULL;

        ok(rd != NULL && redisReaderFeed(rd, "*65537\r\n", 9) == REDIS_OK
           && redisReaderGetReply(rd, &reply) == REDIS_ERR && reply == NULL,
           "reader: more than 65536 elements is an error");

        redisReaderFree(rd);

        rd = ngx_http_dynamo_rl_resp_reader();
        reply = NULL;

        ok(rd != NULL && redisReaderFeed(rd, "*2\r\n*1\r\n:1\r\n$-1\r\n", 19)
           == REDIS_OK && redisReaderGetReply(rd, &reply) == REDIS_OK
           && reply != NULL && ((redisReply *) reply)->elements == 2
           && ((redisReply *) reply)->element[0]->element[0]->integer == 1
           && ((redisReply *) reply)->element[1]->type == REDIS_REPLY_NIL,
           "reader: nested arrays and nil through the wrappers");

        if (reply != NULL) {
            freeReplyObject(reply);
        }

        redisReaderFree(rd);
    }

    /*
     * the connection's bytes: replies cut anywhere, several in one read,
     * sizes counted per reply; one larger than NGX_HTTP_DYNAMO_RL_RESP_MAX
     * refused while it comes, whatever length it announced
     */

    {
        void         *reply;
        size_t        size, n, k;
        ngx_int_t     rc;
        ngx_uint_t    got, bad;
        redisReader  *rd;
        static char   stream[] = "*2\r\n$2\r\nok\r\n:7\r\n"
                                 "+OK\r\n"
                                 "*1\r\n*2\r\n$3\r\ndup\r\n$1\r\n0\r\n"
                                 ":1\r\n";
        static u_char chunk[65536];

        for (n = 1; n <= 7; n++) {
            rd = ngx_http_dynamo_rl_resp_reader();
            size = 0;
            got = 0;
            bad = 0;

            for (k = 0; k < sizeof(stream) - 1; k += n) {
                if (ngx_http_dynamo_rl_resp_feed(rd, &size,
                        (u_char *) stream + k,
                        ngx_min(n, sizeof(stream) - 1 - k))
                    != NGX_OK)
                {
                    bad++;
                }

                for ( ;; ) {
                    rc = ngx_http_dynamo_rl_resp_read(rd, &size,
                                                      (redisReply **) &reply);
                    if (rc != NGX_OK) {
                        bad++;
                        break;
                    }

                    if (reply == NULL) {
                        break;
                    }

                    got++;
                    freeReplyObject(reply);
                }
            }

            ok(got == 4 && bad == 0 && size == 0,
               "stream: four replies, cut every few bytes, none left");

            redisReaderFree(rd);
        }

        /* a bulk string of 2e9 bytes announced, sent 64 KB at a time */

        rd = ngx_http_dynamo_rl_resp_reader();
        size = 0;
        rc = NGX_OK;
        reply = NULL;

        ngx_memset(chunk, 'x', sizeof(chunk));

        (void) ngx_http_dynamo_rl_resp_feed(rd, &size,
                                            (u_char *) "$2000000000\r\n", 13);

        for (k = 0; k < 64 && rc == NGX_OK; k++) {
            (void) ngx_http_dynamo_rl_resp_feed(rd, &size, chunk,
                                                sizeof(chunk));
            rc = ngx_http_dynamo_rl_resp_read(rd, &size,
                                              (redisReply **) &reply);
        }

        ok(rc == NGX_DECLINED && reply == NULL
           && k == NGX_HTTP_DYNAMO_RL_RESP_MAX / sizeof(chunk),
           "stream: a huge bulk string refused past 1 MB");

        redisReaderFree(rd);

        /*
         * a reply of exactly the bound (10 + 1048564 + 2 bytes), read
         * after every feed, passes; the next reply's bytes count anew
         */

        rd = ngx_http_dynamo_rl_resp_reader();
        size = 0;
        rc = NGX_OK;
        reply = NULL;

        (void) ngx_http_dynamo_rl_resp_feed(rd, &size, (u_char *) "$1048564"
                                            "\r\n", 10);

        for (k = 0; k < 16 && rc == NGX_OK && reply == NULL; k++) {
            (void) ngx_http_dynamo_rl_resp_feed(rd, &size, chunk,
                                                k < 15 ? sizeof(chunk)
                                                       : 1048564 - 15 * 65536);
            rc = ngx_http_dynamo_rl_resp_read(rd, &size,
                                              (redisReply **) &reply);
        }

        if (rc == NGX_OK && reply == NULL) {
            (void) ngx_http_dynamo_rl_resp_feed(rd, &size,
                                                (u_char *) "\r\n:5\r", 5);
            rc = ngx_http_dynamo_rl_resp_read(rd, &size,
                                              (redisReply **) &reply);
        }

        ok(rc == NGX_OK && reply != NULL
           && ((redisReply *) reply)->len == 1048564 && size == 3,
           "stream: a reply of 1 MB whole, the next one's bytes counted");

        if (reply != NULL) {
            freeReplyObject(reply);
        }

        redisReaderFree(rd);

        /* bytes that are not RESP */

        rd = ngx_http_dynamo_rl_resp_reader();
        size = 0;

        (void) ngx_http_dynamo_rl_resp_feed(rd, &size,
                                            (u_char *) "&garbage\r\n", 10);

        ok(ngx_http_dynamo_rl_resp_read(rd, &size, (redisReply **) &reply)
           == NGX_ERROR, "stream: not RESP");

        redisReaderFree(rd);
    }

    /* replay: one member's element */

    {
        ngx_str_t   st, rp;
        ngx_uint_t  conflict;

        ok(decoded("*1\r\n$2\r\nok\r\n")
           && ngx_http_dynamo_rl_resp_replay(last, &conflict, &st, &rp)
              == NGX_OK && !conflict && st.len == 0,
           "replay: ok");
        ok(decoded("*3\r\n$8\r\nconflict\r\n$1\r\nu\r\n$1\r\nB\r\n")
           && ngx_http_dynamo_rl_resp_replay(last, &conflict, &st, &rp)
              == NGX_OK && conflict && is(&st, "u") && is(&rp, "B"),
           "replay: a conflict, its state and replica");
        ok(decoded("*2\r\n$2\r\nok\r\n:1\r\n")
           && ngx_http_dynamo_rl_resp_replay(last, &conflict, &st, &rp)
              == NGX_ERROR, "replay: ok with more");
        ok(decoded("*3\r\n$8\r\nconflict\r\n$2\r\nuu\r\n$1\r\nB\r\n")
           && ngx_http_dynamo_rl_resp_replay(last, &conflict, &st, &rp)
              == NGX_ERROR, "replay: a state of two letters");
        ok(decoded("*2\r\n$8\r\nconflict\r\n$1\r\nu\r\n")
           && ngx_http_dynamo_rl_resp_replay(last, &conflict, &st, &rp)
              == NGX_ERROR, "replay: a conflict without its replica");
        ok(decoded(":1\r\n")
           && ngx_http_dynamo_rl_resp_replay(last, &conflict, &st, &rp)
              == NGX_ERROR, "replay: an integer");
        ok(ngx_http_dynamo_rl_resp_replay(NULL, &conflict, &st, &rp)
           == NGX_ERROR, "replay: no reply");
    }

    /* a batch's reply: one element per member, else an answer to none */

    ok(decoded("*2\r\n*2\r\n$2\r\nok\r\n:0\r\n*1\r\n$6\r\nnogate\r\n")
       && ngx_http_dynamo_rl_resp_batch(last, 2) == NGX_OK,
       "batch: two members, two elements");
    ok(decoded("*2\r\n$2\r\nok\r\n:0\r\n")
       && ngx_http_dynamo_rl_resp_batch(last, 1) == NGX_ERROR,
       "batch: one member answered [ok, 0], not [[ok, 0]]");
    ok(decoded("*1\r\n*2\r\n$2\r\nok\r\n:0\r\n")
       && ngx_http_dynamo_rl_resp_batch(last, 2) == NGX_ERROR,
       "batch: two members, one element");
    ok(decoded("*3\r\n:1\r\n:1\r\n:1\r\n")
       && ngx_http_dynamo_rl_resp_batch(last, 2) == NGX_ERROR,
       "batch: two members, three elements");
    ok(decoded("$2\r\nok\r\n")
       && ngx_http_dynamo_rl_resp_batch(last, 1) == NGX_ERROR,
       "batch: a string");
    ok(decoded("-OOM command not allowed\r\n")
       && ngx_http_dynamo_rl_resp_batch(last, 3) == NGX_DECLINED,
       "batch: an error reply goes to each member");
    ok(ngx_http_dynamo_rl_resp_batch(NULL, 1) == NGX_ERROR,
       "batch: no reply");

    /* NOSCRIPT */

    ok(noscript("-NOSCRIPT No matching script. Please use EVAL.\r\n")
       == NGX_OK, "noscript: NOSCRIPT");
    ok(noscript("-NOSCRIP\r\n") == NGX_DECLINED, "noscript: shorter");
    ok(noscript("-ERR NOSCRIPT\r\n") == NGX_DECLINED, "noscript: ERR");
    ok(noscript("$8\r\nNOSCRIPT\r\n") == NGX_DECLINED, "noscript: a string");
    ok(noscript("+OK\r\n") == NGX_DECLINED, "noscript: a status");
    ok(ngx_http_dynamo_rl_resp_noscript(NULL) == NGX_DECLINED,
       "noscript: no reply");

    /* ROLE and SENTINEL get-master-addr-by-name */

    {
        ngx_str_t  host;
        in_port_t  port;

        ok(role("*3\r\n$6\r\nmaster\r\n:42\r\n*0\r\n") == NGX_OK,
           "role: master");
        ok(role("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n"
                "$9\r\nconnected\r\n:10\r\n") == NGX_DECLINED,
           "role: slave");
        ok(role("*2\r\n$8\r\nsentinel\r\n*0\r\n") == NGX_DECLINED,
           "role: sentinel");
        ok(role("*1\r\n$7\r\nmasterx\r\n") == NGX_DECLINED,
           "role: another word");
        ok(role("*0\r\n") == NGX_ERROR, "role: empty array");
        ok(role("+master\r\n") == NGX_ERROR, "role: a status");
        ok(role("*1\r\n:1\r\n") == NGX_ERROR, "role: an integer");
        ok(role("*1\r\n$0\r\n\r\n") == NGX_ERROR, "role: empty word");
        ok(role("-ERR unknown command 'ROLE'\r\n") == NGX_ERROR,
           "role: an error");
        ok(ngx_http_dynamo_rl_resp_role(NULL) == NGX_ERROR, "role: none");

        port = 0;
        ok(primary("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", &host,
                   &port) == NGX_OK
           && is(&host, "127.0.0.1") && port == 6380, "primary: v4");
        ok(primary("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", &host,
                   &port) == NGX_OK
           && is(&host, "::1") && port == 65535, "primary: v6");
        ok(primary("*-1\r\n", &host, &port) == NGX_DECLINED,
           "primary: nil array, an unknown name");
        ok(primary(NIL, &host, &port) == NGX_DECLINED,
           "primary: nil bulk");
        ok(primary("*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n", &host,
                   &port) == NGX_ERROR, "primary: port 0");
        ok(primary("*2\r\n$9\r\n127.0.0.1\r\n$5\r\n65536\r\n", &host,
                   &port) == NGX_ERROR, "primary: port 65536");
        ok(primary("*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n", &host,
                   &port) == NGX_ERROR, "primary: port an integer");
        ok(primary("*2\r\n$0\r\n\r\n$4\r\n6379\r\n", &host,
                   &port) == NGX_ERROR, "primary: no host");
        ok(primary("*2\r\n$3\r\na b\r\n$4\r\n6379\r\n", &host,
                   &port) == NGX_ERROR, "primary: host with spaces");
        ok(primary("*3\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\n1\r\n", &host,
                   &port) == NGX_ERROR, "primary: three elements");
        ok(primary("-IDONTKNOW\r\n", &host, &port) == NGX_ERROR,
           "primary: an error");
        ok(ngx_http_dynamo_rl_resp_primary(NULL, &host, &port) == NGX_ERROR,
           "primary: none");
    }

    if (last != NULL) {
        freeReplyObject(last);
    }

    return done_testing();
}
