
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The store's server-side scripts and the pure reading of their replies:
 * no nginx runtime, only hiredis's reply type, so that a unit test and a
 * libFuzzer harness drive them (bytes -> redisReader -> these functions)
 */


#ifndef _NGX_HTTP_DYNAMO_RL_RESP_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_RESP_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"


#include <hiredis/hiredis.h>


#define NGX_HTTP_DYNAMO_RL_SCRIPT_CLAIM    0
#define NGX_HTTP_DYNAMO_RL_SCRIPT_MOVE     1
#define NGX_HTTP_DYNAMO_RL_SCRIPT_GATE     2
#define NGX_HTTP_DYNAMO_RL_SCRIPT_BEAT     3
#define NGX_HTTP_DYNAMO_RL_SCRIPT_END      4
#define NGX_HTTP_DYNAMO_RL_SCRIPT_LIVE     5
#define NGX_HTTP_DYNAMO_RL_SCRIPT_REPLAY   6
#define NGX_HTTP_DYNAMO_RL_SCRIPTS         7

/* the replay script's arguments per record */
#define NGX_HTTP_DYNAMO_RL_REPLAY_ARGS     11

/* the claim script's keys given once (gate, live, the process's list) */
#define NGX_HTTP_DYNAMO_RL_CLAIM_SHARED    3

/* the claim script's arguments per record */
#define NGX_HTTP_DYNAMO_RL_CLAIM_ARGS      9

/* the end script's arguments per record */
#define NGX_HTTP_DYNAMO_RL_END_ARGS        8

/* claim results */
#define NGX_HTTP_DYNAMO_RL_CLAIM_OK        0
#define NGX_HTTP_DYNAMO_RL_CLAIM_DUP       1
#define NGX_HTTP_DYNAMO_RL_CLAIM_CLOSED    2
#define NGX_HTTP_DYNAMO_RL_CLAIM_NOGATE    3

/* gate script results */
#define NGX_HTTP_DYNAMO_RL_GATE_R_OK        0
#define NGX_HTTP_DYNAMO_RL_GATE_R_MISMATCH  1   /* epoch_mismatch */
#define NGX_HTTP_DYNAMO_RL_GATE_R_NOT_CLOSED 2  /* renew of an open gate */
#define NGX_HTTP_DYNAMO_RL_GATE_R_NO_LEASE  3   /* renew, no lease to renew */
#define NGX_HTTP_DYNAMO_RL_GATE_R_NOGATE    4   /* no gate record (get) */
#define NGX_HTTP_DYNAMO_RL_GATE_R_CREATED   5   /* init created it open */
#define NGX_HTTP_DYNAMO_RL_GATE_R_LOST      6   /* init re-created it closed */
#define NGX_HTTP_DYNAMO_RL_GATE_R_LATE      7   /* past its deadline: refused */

#define NGX_HTTP_DYNAMO_RL_FLEET_LOST      8    /* names listed at most */

/*
 * the largest reply taken from the store, far above any of the scripts'
 * (a gate read with a fleet of thousands of replicas is some 100 KB)
 */
#define NGX_HTTP_DYNAMO_RL_RESP_MAX        (1024 * 1024)


typedef struct {
    ngx_str_t                       name;   /* "claim" ... */
    ngx_str_t                       body;   /* the Lua source */
    u_char                          sha[41];  /* hex SHA1, NUL-ended */
} ngx_http_dynamo_rl_script_t;


typedef struct {
    ngx_uint_t                      result;    /* CLAIM_* */
    uint64_t                        epoch;
    uint64_t                        expires;   /* store ms, 0: no lease */
    uint64_t                        now;       /* store ms */
    ngx_str_t                       reason;    /* into the reply */
    ngx_str_t                       state;     /* dup: the record's "st" */
} ngx_http_dynamo_rl_claim_reply_t;


typedef struct {
    ngx_uint_t                      replicas;  /* alive */
    ngx_uint_t                      acked;     /* alive, seen >= epoch */
    uint64_t                        in_flight; /* sum over alive */
    ngx_uint_t                      nlost;     /* names in lost[] */
    ngx_str_t                       lost[NGX_HTTP_DYNAMO_RL_FLEET_LOST];
    ngx_uint_t                      lost_total;  /* nlost or more */
    ngx_uint_t                      drained;
} ngx_http_dynamo_rl_fleet_t;


typedef struct {
    ngx_uint_t                      result;    /* GATE_R_* */
    ngx_uint_t                      closed;
    uint64_t                        epoch;
    uint64_t                        expires;   /* store ms, 0: no lease */
    uint64_t                        lease;     /* ms, 0: none */
    uint64_t                        changed;   /* store ms, 0: never */
    uint64_t                        since;     /* store ms of the close */
    uint64_t                        now;       /* store ms */
    ngx_str_t                       reason;    /* into the reply */
    ngx_str_t                       token;     /* of the last change */
    ngx_uint_t                      has_fleet;
    ngx_http_dynamo_rl_fleet_t      fleet;
} ngx_http_dynamo_rl_gate_reply_t;


/* an attempt record, HMGET of the fields in NGX_HTTP_DYNAMO_RL_RECORD_FIELDS */

#define NGX_HTTP_DYNAMO_RL_RECORD_FIELDS  "st", "code", "sse", "b", "t0", \
                                          "t1", "rq", "rp", "rs", "tn"
#define NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS  10

typedef struct {
    ngx_uint_t                      found;
    ngx_uint_t                      state;     /* ACCEPTED .. CANCELED */
    ngx_uint_t                      status;    /* 0: none yet */
    ngx_uint_t                      stream;
    uint64_t                        bytes;
    uint64_t                        started;   /* wall ms */
    uint64_t                        ended;     /* wall ms, 0: in flight */
    ngx_str_t                       request_id;  /* "" when the id is it */
    ngx_str_t                       replica;
    ngx_str_t                       tenant;      /* "" when none */
    /* 0 or an index of ngx_http_dynamo_rl_attempt_reasons[] */
    ngx_uint_t                      reason;
} ngx_http_dynamo_rl_record_t;


extern ngx_http_dynamo_rl_script_t  ngx_http_dynamo_rl_scripts[];


redisReader *ngx_http_dynamo_rl_resp_reader(void);
ngx_int_t ngx_http_dynamo_rl_resp_feed(redisReader *rd, size_t *size,
    u_char *buf, size_t n);
ngx_int_t ngx_http_dynamo_rl_resp_read(redisReader *rd, size_t *size,
    redisReply **reply);
ngx_int_t ngx_http_dynamo_rl_resp_batch(redisReply *reply, size_t n);
ngx_int_t ngx_http_dynamo_rl_resp_replay(redisReply *reply,
    ngx_uint_t *conflict, ngx_str_t *state, ngx_str_t *replica);
ngx_int_t ngx_http_dynamo_rl_resp_claim(redisReply *reply,
    ngx_http_dynamo_rl_claim_reply_t *cr);
ngx_int_t ngx_http_dynamo_rl_resp_move(redisReply *reply, ngx_int_t *moved);
ngx_int_t ngx_http_dynamo_rl_resp_gate(redisReply *reply,
    uint64_t heartbeat, ngx_http_dynamo_rl_gate_reply_t *gr);
ngx_int_t ngx_http_dynamo_rl_resp_record(redisReply *reply,
    ngx_http_dynamo_rl_record_t *rec);
ngx_int_t ngx_http_dynamo_rl_resp_noscript(redisReply *reply);
ngx_int_t ngx_http_dynamo_rl_resp_role(redisReply *reply);
ngx_int_t ngx_http_dynamo_rl_resp_primary(redisReply *reply, ngx_str_t *host,
    in_port_t *port);


#endif /* _NGX_HTTP_DYNAMO_RL_RESP_H_INCLUDED_ */
