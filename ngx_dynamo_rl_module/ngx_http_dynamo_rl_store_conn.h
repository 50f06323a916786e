
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The store's connection: one pipelined RESP2 connection per worker
 * process to Redis or Valkey, owned by nginx's event loop
 * (ngx_event_connect_peer), with its address (a sentinel's primary), TLS
 * (ngx_http_dynamo_rl_store_tls.c), handshake, the FIFO of commands and
 * their deadlines, the bounds of a reply, and the reconnect with backoff.
 * It knows nothing of attempts or gates: the replies to the commands of
 * its owner (ngx_http_dynamo_rl_store.c) go to the owner's hooks, and so
 * do the batches of a turn before a send and the claims the WAITs hold
 * when the connection is lost.
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STORE_CONN_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STORE_CONN_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_resp.h"


/* operations and results, the fixed labels of the metrics */
#define NGX_HTTP_DYNAMO_RL_STORE_OP_CLAIM  0
#define NGX_HTTP_DYNAMO_RL_STORE_OP_MOVE   1
#define NGX_HTTP_DYNAMO_RL_STORE_OP_GATE   2
#define NGX_HTTP_DYNAMO_RL_STORE_OP_BEAT   3
#define NGX_HTTP_DYNAMO_RL_STORE_OP_GET    4
#define NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT 5  /* AUTH, SELECT, SCRIPT LOAD */
#define NGX_HTTP_DYNAMO_RL_STORE_OPS       6

#define NGX_HTTP_DYNAMO_RL_STORE_R_OK      0
#define NGX_HTTP_DYNAMO_RL_STORE_R_ERROR   1   /* an error reply */
#define NGX_HTTP_DYNAMO_RL_STORE_R_DOWN    2   /* not sent, or lost */
#define NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT 3
#define NGX_HTTP_DYNAMO_RL_STORE_RESULTS   4

/*
 * a worker process whose claims the store refused is not up until one is
 * admitted, or for this long (seconds) after the last refusal
 */
#define NGX_HTTP_DYNAMO_RL_STORE_REFUSED   30

/* round trips, in microseconds: 100us .. 1s, +Inf */
#define NGX_HTTP_DYNAMO_RL_STORE_BUCKETS   14


#define NGX_HTTP_DYNAMO_RL_STORE_SLOTS  NGX_MAX_PROCESSES


/* in the zone, shared by the worker processes */

typedef struct {
    /* 1: every worker process up, set as reported: store_conn_up() */
    ngx_atomic_t                    up;
    ngx_atomic_t                    transitions;
    ngx_atomic_t                    ops[NGX_HTTP_DYNAMO_RL_STORE_OPS]
                                       [NGX_HTTP_DYNAMO_RL_STORE_RESULTS];
    ngx_atomic_t                    rtt[NGX_HTTP_DYNAMO_RL_STORE_BUCKETS];
    ngx_atomic_t                    rtt_sum_us;
    ngx_atomic_t                    rtt_count;
    ngx_atomic_t                    queue;       /* waiting, all processes */
    ngx_atomic_t                    fallbacks;   /* on_error=local */
    ngx_atomic_t                    reconnects;
    ngx_atomic_t                    dropped;     /* writes given up */
    ngx_atomic_t                    conflicts;   /* on_error=local's ids
                                                    claimed meanwhile */
    /*
     * NGX_HTTP_DYNAMO_RL_STORE_SLOTS words from the zone's pool, taken by
     * the first worker process with a store (NULL: none yet, or no room),
     * one for each process slot of nginx (ngx_process_slot), written by
     * the worker process there alone: "refused << 32 | pid << 1 | ready"
     * (0: none with the store); ready: its connection; refused: the low
     * 32 bits of ngx_time() when the store last refused one of its claims
     * with an error reply or too few replicas for wait= (0: a claim was
     * admitted since)
     */
    ngx_atomic_t                   *slot;
} ngx_http_dynamo_rl_store_stats_t;


typedef struct ngx_http_dynamo_rl_store_s      ngx_http_dynamo_rl_store_t;
typedef struct ngx_http_dynamo_rl_store_cmd_s  ngx_http_dynamo_rl_store_cmd_t;
typedef struct ngx_http_dynamo_rl_store_conn_s ngx_http_dynamo_rl_store_conn_t;

/*
 * rc NGX_OK: "reply" is the reply (it may be an error reply, never
 * NOSCRIPT, which the client handles); NGX_ERROR: the store is
 * unavailable (not connected, the queue is full, the connection was lost
 * or sent garbage before the reply); NGX_AGAIN: no reply within the
 * timeout, the outcome is unknown.  The reply is freed after the call.
 */

typedef void (*ngx_http_dynamo_rl_store_pt)(void *data, ngx_int_t rc,
    redisReply *reply);


struct ngx_http_dynamo_rl_store_s {
    /* configuration: dynamo_rl_store */
    ngx_str_t                       url;        /* as written, for logs */
    /* the hosts: ngx_http_dynamo_rl_store_resolve.c */
    struct ngx_http_dynamo_rl_store_resolve_s  *resolve;
    ngx_uint_t                      db;
    ngx_str_t                       sentinel;   /* sentinel://.../name */
    ngx_str_t                       prefix;     /* default "dynamo-rl" */
    ngx_str_t                       replica;    /* default: hostname */
    ngx_str_t                       user;
    ngx_str_t                       password;   /* from password_file */
    ngx_msec_t                      timeout;    /* default 250ms */
    ngx_msec_t                      lease;      /* default 1h */
    ngx_msec_t                      gate_poll;  /* default 250ms */
    ngx_msec_t                      gate_stale; /* default 2s */
    ngx_msec_t                      heartbeat;  /* default 500ms */
    ngx_uint_t                      on_error;   /* STORE_FAIL | STORE_LOCAL */
    ngx_uint_t                      queue_max;  /* default 4096 */
    ngx_uint_t                      wait;       /* WAIT N after claims */

    /* rediss://: ngx_http_dynamo_rl_store_tls.c, NULL without TLS */
    struct ngx_http_dynamo_rl_store_tls_s  *tls;

    /* key names, built at configuration time */
    ngx_str_t                       gate_key;   /* "{P}:gate" */
    ngx_str_t                       fleet_key;  /* "{P}:fleet" */
    ngx_str_t                       attempt_key;  /* "{P}:a:" */
    ngx_str_t                       live_key;   /* "{P}:live" */
    ngx_str_t                       proc_key;   /* "{P}:p:" */

    /* set by the zone's owner before init_process, may stay NULL */
    ngx_http_dynamo_rl_store_stats_t  *stats;

    /* called when the connection becomes ready or is lost */
    void                          (*changed)(void *data, ngx_uint_t up);
    void                           *changed_data;

    /*
     * while the worker process shuts down gracefully: it has requests of
     * its own in flight, and its lost connection is made again (NULL:
     * only for the writes kept for the store)
     */
    ngx_uint_t                    (*busy)(void *data);
    void                           *busy_data;

    /*
     * per worker process: an identity drawn afresh as it starts, never
     * that of an earlier process, whatever its pid (a container's pid
     * namespace gives a restarted replica's worker the same pid), nor of
     * another replica of the same name: "replica/pid.boot"; a record's
     * owner is "identity/connection.request"; the process's list of its
     * records in flight is "{P}:p:identity"
     */
    uint64_t                        boot;
    ngx_str_t                       identity;
    ngx_str_t                       records;

    /* per worker process: the client's own state */
    void                           *conn;

    /*
     * per worker process: when it last had an answer to a read of the
     * gate (the module's monotonic ms), 0 before the first
     */
    uint64_t                        gate_read;
};



#define NGX_HTTP_DYNAMO_RL_STORE_DOWN        0
#define NGX_HTTP_DYNAMO_RL_STORE_CONNECTING  1
#define NGX_HTTP_DYNAMO_RL_STORE_HANDSHAKE   2
#define NGX_HTTP_DYNAMO_RL_STORE_READY       3

/* internal commands, by kind: the connection's handshake, then reloads */
#define NGX_HTTP_DYNAMO_RL_STORE_USER        0
#define NGX_HTTP_DYNAMO_RL_STORE_AUTH        1
#define NGX_HTTP_DYNAMO_RL_STORE_SELECT      2
#define NGX_HTTP_DYNAMO_RL_STORE_CONFIG      3
#define NGX_HTTP_DYNAMO_RL_STORE_LOAD        4
#define NGX_HTTP_DYNAMO_RL_STORE_RELOAD      5
#define NGX_HTTP_DYNAMO_RL_STORE_WAIT        6
#define NGX_HTTP_DYNAMO_RL_STORE_ROLE        7
#define NGX_HTTP_DYNAMO_RL_STORE_SAUTH       8   /* AUTH to a sentinel */
#define NGX_HTTP_DYNAMO_RL_STORE_SENTINEL    9

#define NGX_HTTP_DYNAMO_RL_STORE_SMALL       512

/* the refusals of an outage logged at error, remembered: see _report() */
#define NGX_HTTP_DYNAMO_RL_STORE_CAUSES      4

#define NGX_HTTP_DYNAMO_RL_STORE_STAT(store, field, n)                       \
    if ((store)->stats != NULL) {                                            \
        (void) ngx_atomic_fetch_add(&(store)->stats->field,                  \
                                    (ngx_atomic_int_t) (n));                 \
    }


/* bytes that grow, for a batch's keys and arguments */

typedef struct {
    u_char                         *data;
    size_t                          len;
    size_t                          size;
} ngx_http_dynamo_rl_store_buf_t;


/*
 * the commands of one script joined in a turn: shared keys first, then
 * one key and "argc" arguments for each; the waited ones are members of
 * the command that carries them
 */

typedef struct {
    ngx_http_dynamo_rl_store_buf_t  keys;
    ngx_http_dynamo_rl_store_buf_t  args;
    ngx_queue_t                     members;
    ngx_uint_t                      nshared;
    ngx_uint_t                      n;
    ngx_uint_t                      argc;
} ngx_http_dynamo_rl_store_batch_t;


struct ngx_http_dynamo_rl_store_conn_s {
    ngx_http_dynamo_rl_store_t     *store;
    ngx_peer_connection_t           peer;

    /* connect() logs each refusal at error: the quiet log drops those */
    ngx_log_t                       quiet;
    ngx_log_t                      *log;

    redisReader                    *reader;
    size_t                          in_size;  /* of the reply being read */
    u_char                         *in;

    u_char                         *out;
    size_t                          out_pos;
    size_t                          out_last;
    size_t                          out_size;

    /* sent or in the output buffer, in order; kept while disconnected */
    ngx_queue_t                     fifo;
    ngx_queue_t                     pending;
    ngx_queue_t                     free;
    ngx_uint_t                      nfifo;
    ngx_uint_t                      npending;

    /*
     * sent commands that requests wait for (claims), not yet answered;
     * over TLS the next batch waits for them
     */
    ngx_uint_t                      unanswered;

    ngx_event_t                     timer;
    ngx_event_t                     retry;
    ngx_msec_t                      backoff;
    ngx_msec_t                      stall;
    ngx_msec_t                      progress;
    ngx_uint_t                      state;
    ngx_uint_t                      handshake;
    ngx_uint_t                      next_addr;
    ngx_uint_t                      connects;

    /* sentinel://: the primary a sentinel named, for the next connect */
    ngx_addr_t                      primary;
    ngx_sockaddr_t                  primary_sa;
    u_char                          primary_text[NGX_SOCKADDR_STRLEN];

    u_char                          cause[256];

    /* the last failures logged at error: a new refusal is logged too */
    uint32_t                        reported_cause[
                                        NGX_HTTP_DYNAMO_RL_STORE_CAUSES];
    ngx_uint_t                      nreported;

    /*
     * the owner's (ngx_http_dynamo_rl_store.c), set before the first
     * connect: the reply to a user's command or to a WAIT, taken from the
     * FIFO (NGX_ERROR: the connection was closed); the batches of the
     * turn, before a send and when the connection is lost; the claims
     * the WAITs hold, answered as by an unavailable store ("call") or not
     */
    ngx_int_t                     (*reply)(
                                      ngx_http_dynamo_rl_store_conn_t *conn,
                                      ngx_http_dynamo_rl_store_cmd_t *cmd,
                                      redisReply *reply);
    ngx_int_t                     (*flush)(
                                      ngx_http_dynamo_rl_store_conn_t *conn);
    void                          (*drop)(
                                      ngx_http_dynamo_rl_store_conn_t *conn,
                                      ngx_uint_t call);

    /* the owner's: the start of the batch being formed, for round trips */
    uint64_t                        batch_start;

    /* by script, the commands joined in this turn: _store_batch() */
    ngx_http_dynamo_rl_store_batch_t  batch[NGX_HTTP_DYNAMO_RL_SCRIPTS];
    ngx_uint_t                      nbatched;

    /*
     * wait=: one WAIT at a time, so that what follows it in the FIFO waits
     * for one WAIT at most ("waiting"); the claims sent meanwhile are
     * covered by the next one, sent once it is answered ("owing", within
     * what is left of the first one's timeout, "owed"); the claims'
     * replies are held until a WAIT after them is answered
     */
    ngx_queue_t                     held;
    ngx_msec_t                      owed;
    unsigned                        waiting:1;
    unsigned                        owing:1;

    unsigned                        up:1;
    unsigned                        reported:1;
    unsigned                        dropping:1;
    unsigned                        loading:1;
    unsigned                        exiting:1;
    unsigned                        flushing:1;
    unsigned                        holding:1;
    unsigned                        slow:1;     /* a timeout: no hold */
    unsigned                        asking:1;   /* a sentinel */
    unsigned                        primary_known:1;
    unsigned                        refused:1;  /* ROLE, the certificate */
};


struct ngx_http_dynamo_rl_store_cmd_s {
    ngx_queue_t                         queue;
    ngx_http_dynamo_rl_store_pt         handler;
    void                               *data;
    char                               *buf;
    size_t                              len;
    uint64_t                            start;     /* us, monotonic */
    ngx_msec_t                          deadline;
    ngx_uint_t                          op;
    ngx_uint_t                          script;
    ngx_uint_t                          kind;

    unsigned                            waited:1;  /* had a handler */
    unsigned                            done:1;    /* counted in ops */
    unsigned                            retried:1; /* sent again as EVAL */
    unsigned                            own:1;     /* buf is ngx_alloc()'s */
    unsigned                            live:1;
    unsigned                            open:1;    /* in a batch, unsent */
    unsigned                            wait:1;    /* a WAIT covers it */

    /* a batch's command: its waited members, answered by position */
    ngx_queue_t                         members;
    ngx_uint_t                          nmembers;
    ngx_http_dynamo_rl_store_conn_t    *conn;

    /* wait=: a claim's reply, held until a WAIT after it is answered */
    redisReply                         *reply;

    /* a user's command, formatted here when it fits: no allocation */
    u_char                              small[NGX_HTTP_DYNAMO_RL_STORE_SMALL];
};


ngx_http_dynamo_rl_store_conn_t *ngx_http_dynamo_rl_store_conn_create(
    ngx_http_dynamo_rl_store_t *store, ngx_cycle_t *cycle);
void ngx_http_dynamo_rl_store_conn_connect(
    ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_last(ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_destroy(
    ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_fail(ngx_http_dynamo_rl_store_conn_t *conn,
    const char *cause, ngx_err_t err);

ngx_int_t ngx_http_dynamo_rl_store_conn_internal(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t kind,
    ngx_uint_t script, int argc, const char **argv, size_t *argvlen);
ngx_int_t ngx_http_dynamo_rl_store_conn_enqueue(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
ngx_uint_t ngx_http_dynamo_rl_store_conn_posted(
    ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_post(ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_idle(ngx_http_dynamo_rl_store_conn_t *conn);
ngx_int_t ngx_http_dynamo_rl_store_conn_reload(
    ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_finish(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, ngx_uint_t result, ngx_int_t rc,
    redisReply *reply);

ngx_http_dynamo_rl_store_cmd_t *ngx_http_dynamo_rl_store_conn_cmd_alloc(
    ngx_http_dynamo_rl_store_conn_t *conn);
void ngx_http_dynamo_rl_store_conn_cmd_free(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
void ngx_http_dynamo_rl_store_conn_cmd_release(
    ngx_http_dynamo_rl_store_cmd_t *cmd);

ngx_int_t ngx_http_dynamo_rl_store_conn_grow(u_char **data, size_t *size,
    size_t used, size_t n, ngx_log_t *log);
uint64_t ngx_http_dynamo_rl_store_conn_us(void);
ngx_uint_t ngx_http_dynamo_rl_store_conn_up(
    ngx_http_dynamo_rl_store_stats_t *stats);
ngx_uint_t ngx_http_dynamo_rl_store_conn_refusing(
    ngx_http_dynamo_rl_store_stats_t *stats);
void ngx_http_dynamo_rl_store_conn_leave(ngx_http_dynamo_rl_store_t *store);


#endif /* _NGX_HTTP_DYNAMO_RL_STORE_CONN_H_INCLUDED_ */
