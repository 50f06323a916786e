
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


/*
 * The store's replies: the input is a byte stream as it comes from the
 * connection, cut into reads of a length the input chooses (its last
 * byte), fed to the connection's reader (ngx_http_dynamo_rl_resp_feed()
 * and _read(), with the bound on a reply's size); every reply it yields
 * goes through every decoder, and through the batch check for batches of
 * 1 to 3.  An accepted reply keeps the decoders' promises (results in
 * range, a drained fleet is a closed, acknowledged and idle one), and
 * every string they return is read whole, so that AddressSanitizer sees a
 * pointer outside the reply (a sentinel's host too).  The reader's
 * count of the bytes of the reply being read never exceeds what was fed,
 * and a reply is refused only once that count is over the bound.
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
    ngx_str_t                         st, rp;
    ngx_uint_t                        i, conflict;
    ngx_http_dynamo_rl_fleet_t       *fl;
    ngx_http_dynamo_rl_record_t       rec;
    ngx_http_dynamo_rl_claim_reply_t  cr;
    ngx_http_dynamo_rl_gate_reply_t   gr;
    in_port_t                         port;

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

        if (gr.result > NGX_HTTP_DYNAMO_RL_GATE_R_LATE
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
        fuzz_resp_touch(&gr.token);

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
                   || rec.reason > NGX_HTTP_DYNAMO_RL_REPLICA_LOST)
        {
            __builtin_trap();
        }

        fuzz_resp_touch(&rec.request_id);
        fuzz_resp_touch(&rec.replica);
    }

    if (ngx_http_dynamo_rl_resp_replay(reply, &conflict, &st, &rp) == NGX_OK) {
        if (conflict > 1 || (conflict && st.len != 1)
            || (!conflict && (st.len || rp.len)))
        {
            __builtin_trap();
        }

        fuzz_resp_touch(&st);
        fuzz_resp_touch(&rp);
    }

    if (ngx_http_dynamo_rl_resp_noscript(reply) == NGX_OK
        && (reply->type != REDIS_REPLY_ERROR || reply->len < 8))
    {
        __builtin_trap();
    }

    /* ROLE: a primary is an array whose first word is "master" */

    if (ngx_http_dynamo_rl_resp_role(reply) == NGX_OK
        && (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0
            || reply->element[0]->len != 6))
    {
        __builtin_trap();
    }

    /* SENTINEL get-master-addr-by-name: a host to connect to, a port */

    port = 0;

    if (ngx_http_dynamo_rl_resp_primary(reply, &st, &port) == NGX_OK) {
        if (st.len == 0 || st.len > 255 || port == 0) {
            __builtin_trap();
        }

        fuzz_resp_touch(&st);
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t        pos, len, fed, count;
    uint64_t      heartbeat;
    ngx_int_t     rc;
    ngx_uint_t    n, cut;
    redisReply   *reply;
    redisReader  *rd;

    /* the heartbeat comes from the size: the fleet's bands move with it */

    heartbeat = 1 + size * 97;

    if (size == 0) {
        return 0;
    }

    /*
     * the last byte, still part of the stream, says how it is cut into
     * reads (1 .. 256 bytes): the seeds stay whole replies
     */

    cut = (ngx_uint_t) data[size - 1] + 1;

    rd = ngx_http_dynamo_rl_resp_reader();
    if (rd == NULL) {
        return 0;
    }

    count = 0;
    fed = 0;
    n = 0;

    for (pos = 0; pos < size && n < 256; pos += len) {
        len = ngx_min(cut, size - pos);

        if (ngx_http_dynamo_rl_resp_feed(rd, &count, (u_char *) data + pos,
                                         len)
            != NGX_OK)
        {
            break;
        }

        fed += len;

        for ( ;; ) {
            rc = ngx_http_dynamo_rl_resp_read(rd, &count, &reply);

            if (count > fed) {
                __builtin_trap();
            }

            if (rc == NGX_DECLINED && count <= NGX_HTTP_DYNAMO_RL_RESP_MAX) {
                __builtin_trap();
            }

            if (rc != NGX_OK) {
                goto done;
            }

            if (reply == NULL) {
                break;
            }

            fuzz_resp_reply(reply, heartbeat);

            if (ngx_http_dynamo_rl_resp_batch(reply, 1 + n % 3) == NGX_OK
                && (reply->type != REDIS_REPLY_ARRAY
                    || reply->elements != 1 + n % 3))
            {
                __builtin_trap();
            }

            freeReplyObject(reply);

            n++;
        }
    }

done:

    redisReaderFree(rd);

    return 0;
}
