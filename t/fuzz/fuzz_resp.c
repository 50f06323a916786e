
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


/*
 * The store's replies: the input is fed to hiredis's reader as if it came
 * from the connection, and every reply it yields goes through every
 * decoder.  An accepted reply keeps the decoders' promises (results in
 * range, a drained fleet is a closed, acknowledged and idle one), and
 * every string they return is read whole, so that AddressSanitizer sees a
 * pointer outside the reply.
 */


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void fuzz_resp_touch(ngx_str_t *s);
static void fuzz_resp_reply(redisReply *reply, uint64_t heartbeat);


static volatile u_char  fuzz_resp_sink;


static void
fuzz_resp_touch(ngx_str_t *s)
{
    size_t  i;

    if (s->len && s->data == NULL) {
        __builtin_trap();
    }

    for (i = 0; i < s->len; i++) {
        fuzz_resp_sink ^= s->data[i];
    }
}


static void
fuzz_resp_reply(redisReply *reply, uint64_t heartbeat)
{
    ngx_int_t                         moved;
    ngx_uint_t                        i;
    ngx_http_dynamo_rl_fleet_t       *fl;
    ngx_http_dynamo_rl_record_t       rec;
    ngx_http_dynamo_rl_claim_reply_t  cr;
    ngx_http_dynamo_rl_gate_reply_t   gr;

    if (ngx_http_dynamo_rl_resp_claim(reply, &cr) == NGX_OK) {
        if (cr.result > NGX_HTTP_DYNAMO_RL_CLAIM_NOGATE
            || (cr.result == NGX_HTTP_DYNAMO_RL_CLAIM_DUP
                && cr.state.len != 1))
        {
            __builtin_trap();
        }

        fuzz_resp_touch(&cr.state);
        fuzz_resp_touch(&cr.reason);
    }

    if (ngx_http_dynamo_rl_resp_move(reply, &moved) == NGX_OK
        && (moved < -2 || moved > 1))
    {
        __builtin_trap();
    }

    if (ngx_http_dynamo_rl_resp_gate(reply, heartbeat, &gr) == NGX_OK) {
        fl = &gr.fleet;

        if (gr.result > NGX_HTTP_DYNAMO_RL_GATE_R_LOST
            || !gr.has_fleet
            || fl->acked > fl->replicas
            || fl->nlost > NGX_HTTP_DYNAMO_RL_FLEET_LOST
            || fl->nlost > fl->lost_total
            || (fl->lost_total > fl->nlost
                && fl->nlost != NGX_HTTP_DYNAMO_RL_FLEET_LOST)
            || (fl->drained
                && (!gr.closed || fl->replicas == 0 || fl->in_flight
                    || fl->acked != fl->replicas || fl->lost_total)))
        {
            __builtin_trap();
        }

        fuzz_resp_touch(&gr.reason);

        for (i = 0; i < fl->nlost; i++) {
            if (fl->lost[i].len == 0) {
                __builtin_trap();
            }

            fuzz_resp_touch(&fl->lost[i]);
        }
    }

    if (ngx_http_dynamo_rl_resp_record(reply, &rec) == NGX_OK) {
        if (!rec.found) {
            if (rec.state || rec.status || rec.bytes || rec.replica.len) {
                __builtin_trap();
            }

        } else if (rec.state < NGX_HTTP_DYNAMO_RL_ACCEPTED
                   || rec.state > NGX_HTTP_DYNAMO_RL_CANCELED
                   || rec.status > 999 || rec.stream > 1
                   || rec.reason > NGX_HTTP_DYNAMO_RL_NOT_FORWARDED)
        {
            __builtin_trap();
        }

        fuzz_resp_touch(&rec.request_id);
        fuzz_resp_touch(&rec.replica);
    }

    if (ngx_http_dynamo_rl_resp_noscript(reply) == NGX_OK
        && (reply->type != REDIS_REPLY_ERROR || reply->len < 8))
    {
        __builtin_trap();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void         *reply;
    uint64_t      heartbeat;
    ngx_uint_t    n;
    redisReader  *rd;

    /* the heartbeat comes from the size: the fleet's bands move with it */

    heartbeat = 1 + size * 97;

    rd = ngx_http_dynamo_rl_resp_reader();
    if (rd == NULL) {
        return 0;
    }

    if (redisReaderFeed(rd, (const char *) data, size) != REDIS_OK) {
        redisReaderFree(rd);
        return 0;
    }

    for (n = 0; n < 64; n++) {
        reply = NULL;

        if (redisReaderGetReply(rd, &reply) != REDIS_OK || reply == NULL) {
            break;
        }

        fuzz_resp_reply(reply, heartbeat);

        freeReplyObject(reply);
    }

    redisReaderFree(rd);

    return 0;
}
