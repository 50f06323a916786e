
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_store.h"
#include "ngx_http_dynamo_rl_store_tls.h"
#include <ngx_sha1.h>

#include <openssl/rand.h>


/*
 * One connection per worker process.  A command is formatted once by
 * hiredis and kept until its reply is read: its bytes are copied to the
 * output buffer, which goes out in one send per event-loop turn (a posted
 * write event), and they stay with the command so that a NOSCRIPT reply
 * can be answered with EVAL, and a write without a handler can be sent
 * again on the next connection.  Replies are matched to the FIFO in
 * order.  One timer per connection serves every deadline: it fires at the
 * earliest one and walks the FIFO, which is bounded by queue_max.
 */


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

#define NGX_HTTP_DYNAMO_RL_STORE_NOSCRIPT    ((ngx_uint_t) -1)

#define NGX_HTTP_DYNAMO_RL_STORE_BACKOFF     100
#define NGX_HTTP_DYNAMO_RL_STORE_BACKOFF_MAX 2000
#define NGX_HTTP_DYNAMO_RL_STORE_STALL_MIN   1000
#define NGX_HTTP_DYNAMO_RL_STORE_READ        16384
#define NGX_HTTP_DYNAMO_RL_STORE_OUT         16384
#define NGX_HTTP_DYNAMO_RL_STORE_PASSWORD    4096
#define NGX_HTTP_DYNAMO_RL_STORE_QUEUE       4096
#define NGX_HTTP_DYNAMO_RL_STORE_SMALL       512
#define NGX_HTTP_DYNAMO_RL_STORE_BATCH       64
#define NGX_HTTP_DYNAMO_RL_STORE_MAXARGS     16
#define NGX_HTTP_DYNAMO_RL_STORE_NAME        63

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


typedef struct {
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

    /* the start of the batch being formed, for the round trips */
    uint64_t                        batch_start;

    /* by script, the commands joined in this turn: _store_batch() */
    ngx_http_dynamo_rl_store_batch_t  batch[NGX_HTTP_DYNAMO_RL_SCRIPTS];
    ngx_uint_t                      nbatched;

    ngx_event_t                     timer;
    ngx_event_t                     retry;
    ngx_msec_t                      backoff;
    ngx_msec_t                      stall;
    ngx_msec_t                      progress;
    ngx_uint_t                      state;
    ngx_uint_t                      handshake;
    ngx_uint_t                      next_addr;
    ngx_uint_t                      connects;

    /* wait=: a claim's reply, held until the WAIT after it is answered */
    ngx_http_dynamo_rl_store_cmd_t *held;
    redisReply                     *held_reply;

    /* sentinel://: the primary a sentinel named, for the next connect */
    ngx_addr_t                      primary;
    ngx_sockaddr_t                  primary_sa;
    u_char                          primary_text[NGX_SOCKADDR_STRLEN];

    u_char                          cause[256];

    unsigned                        up:1;
    unsigned                        reported:1;
    unsigned                        dropping:1;
    unsigned                        loading:1;
    unsigned                        exiting:1;
    unsigned                        flushing:1;
    unsigned                        asking:1;   /* a sentinel */
    unsigned                        primary_known:1;
} ngx_http_dynamo_rl_store_conn_t;


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
    unsigned                            wait:1;    /* a WAIT follows it */

    /* a batch's command: its waited members, answered by position */
    ngx_queue_t                         members;
    ngx_uint_t                          nmembers;
    ngx_http_dynamo_rl_store_conn_t    *conn;

    /* a user's command, formatted here when it fits: no allocation */
    u_char                              small[NGX_HTTP_DYNAMO_RL_STORE_SMALL];
};


static char *ngx_http_dynamo_rl_store_url(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *url);
static char *ngx_http_dynamo_rl_store_password(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *path);
static char *ngx_http_dynamo_rl_store_time(ngx_conf_t *cf, ngx_str_t *value,
    size_t skip, ngx_msec_t *ms);
static ngx_int_t ngx_http_dynamo_rl_store_name_valid(ngx_str_t *name);
static ngx_int_t ngx_http_dynamo_rl_store_key(ngx_conf_t *cf,
    ngx_str_t *key, ngx_str_t *prefix, char *suffix);
static void ngx_http_dynamo_rl_store_sha(void);

static void ngx_http_dynamo_rl_store_connect(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_tls_handshaked(ngx_connection_t *c);
static void ngx_http_dynamo_rl_store_connected(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_ready_now(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_fail(
    ngx_http_dynamo_rl_store_conn_t *conn, const char *cause, ngx_err_t err);
static void ngx_http_dynamo_rl_store_fail_reply(
    ngx_http_dynamo_rl_store_conn_t *conn, const char *what,
    redisReply *reply);
static void ngx_http_dynamo_rl_store_close(
    ngx_http_dynamo_rl_store_conn_t *conn);

static void ngx_http_dynamo_rl_store_write_handler(ngx_event_t *wev);
static void ngx_http_dynamo_rl_store_read_handler(ngx_event_t *rev);
static void ngx_http_dynamo_rl_store_timer_handler(ngx_event_t *ev);
static void ngx_http_dynamo_rl_store_retry_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_dynamo_rl_store_test_connect(ngx_connection_t *c);
static void ngx_http_dynamo_rl_store_send(
    ngx_http_dynamo_rl_store_conn_t *conn);

static ngx_int_t ngx_http_dynamo_rl_store_grow(u_char **data, size_t *size,
    size_t used, size_t n, ngx_log_t *log);
static ngx_int_t ngx_http_dynamo_rl_store_room(
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t op, ngx_uint_t queued,
    ngx_http_dynamo_rl_store_pt handler);
static ngx_int_t ngx_http_dynamo_rl_store_push(
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t op, ngx_uint_t script,
    ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp);
static ngx_int_t ngx_http_dynamo_rl_store_flush(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t script);
static ngx_int_t ngx_http_dynamo_rl_store_flush_all(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_batch_reset(
    ngx_http_dynamo_rl_store_batch_t *b);
static ngx_int_t ngx_http_dynamo_rl_store_bulk(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_buf_t *b, ngx_str_t *s);
static ngx_int_t ngx_http_dynamo_rl_store_internal(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t kind,
    ngx_uint_t script, int argc, const char **argv, size_t *argvlen);
static ngx_int_t ngx_http_dynamo_rl_store_enqueue(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static ngx_int_t ngx_http_dynamo_rl_store_append(
    ngx_http_dynamo_rl_store_conn_t *conn, char *buf, size_t len);
static ngx_int_t ngx_http_dynamo_rl_store_dispatch(
    ngx_http_dynamo_rl_store_conn_t *conn, redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_store_handshake(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_store_noscript(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static ngx_uint_t ngx_http_dynamo_rl_store_waited(
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static ngx_int_t ngx_http_dynamo_rl_store_load(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t kind);
static ngx_int_t ngx_http_dynamo_rl_store_reload(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_finish(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, ngx_uint_t result, ngx_int_t rc,
    redisReply *reply);
static void ngx_http_dynamo_rl_store_arm(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_msec_t at);
static ngx_http_dynamo_rl_store_cmd_t *ngx_http_dynamo_rl_store_cmd_alloc(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_cmd_free(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static void ngx_http_dynamo_rl_store_cmd_release(
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static u_char *ngx_http_dynamo_rl_store_format(u_char *p, u_char type,
    size_t n);
static uint64_t ngx_http_dynamo_rl_store_us(void);
static ngx_int_t ngx_http_dynamo_rl_store_wait(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_http_dynamo_rl_store_cmd_t *cmd);
static ngx_int_t ngx_http_dynamo_rl_store_waited_reply(
    ngx_http_dynamo_rl_store_conn_t *conn, redisReply *reply);
static void ngx_http_dynamo_rl_store_wait_drop(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t call);
static char *ngx_http_dynamo_rl_store_sentinel_url(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *url);
static ngx_addr_t *ngx_http_dynamo_rl_store_peer(
    ngx_http_dynamo_rl_store_conn_t *conn);
static ngx_int_t ngx_http_dynamo_rl_store_auth(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t op);
static ngx_int_t ngx_http_dynamo_rl_store_sentinel_ask(
    ngx_http_dynamo_rl_store_conn_t *conn);
static ngx_int_t ngx_http_dynamo_rl_store_sentinel_reply(
    ngx_http_dynamo_rl_store_conn_t *conn, redisReply *reply);


/* the upper bounds of the round-trip buckets, in microseconds */

static const uint64_t  ngx_http_dynamo_rl_store_buckets[] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
    250000, 500000, 1000000
};


static ngx_str_t  ngx_http_dynamo_rl_store_command_name =
    ngx_string("command");


static ngx_uint_t  ngx_http_dynamo_rl_store_script_op[] = {
    NGX_HTTP_DYNAMO_RL_STORE_OP_CLAIM,
    NGX_HTTP_DYNAMO_RL_STORE_OP_MOVE,
    NGX_HTTP_DYNAMO_RL_STORE_OP_GATE,
    NGX_HTTP_DYNAMO_RL_STORE_OP_BEAT,
    NGX_HTTP_DYNAMO_RL_STORE_OP_MOVE,
    NGX_HTTP_DYNAMO_RL_STORE_OP_BEAT,
    NGX_HTTP_DYNAMO_RL_STORE_OP_CLAIM
};


/*
 * dynamo_rl_store redis://host[:port][/db] | unix:/path[?db=N]
 *     [prefix=P] [timeout=time] [on_error=fail|local] [replica=name]
 *     [password_file=path] [user=name] [lease=time] [gate_poll=time]
 *     [gate_stale=time] [heartbeat=time]
 */

char *
ngx_http_dynamo_rl_store(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                        *p = conf;

    char                        *rv;
    ngx_str_t                   *value, *password_file, s;
    ngx_uint_t                   i, j, seen;
    ngx_http_dynamo_rl_store_t  *store, **field;

    static const char  *names[] = {
        "prefix=", "on_error=", "replica=", "password_file=", "user=",
        "timeout=", "lease=", "gate_poll=", "gate_stale=", "heartbeat=",
        "wait="
    };

    /* the times, from names[5] on */

    static size_t  times[] = {
        offsetof(ngx_http_dynamo_rl_store_t, timeout),
        offsetof(ngx_http_dynamo_rl_store_t, lease),
        offsetof(ngx_http_dynamo_rl_store_t, gate_poll),
        offsetof(ngx_http_dynamo_rl_store_t, gate_stale),
        offsetof(ngx_http_dynamo_rl_store_t, heartbeat)
    };

    field = (ngx_http_dynamo_rl_store_t **) (p + cmd->offset);

    if (*field != NULL) {
        return "is duplicate";
    }

    store = ngx_pcalloc(cf->pool, sizeof(ngx_http_dynamo_rl_store_t));
    if (store == NULL) {
        return NGX_CONF_ERROR;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     store->db = 0;
     *     store->user = { 0, NULL };
     *     store->password = { 0, NULL };
     *     store->on_error = NGX_HTTP_DYNAMO_RL_STORE_FAIL;
     *     store->stats = NULL;
     *     store->changed = NULL;
     *     store->conn = NULL;
     */

    ngx_str_set(&store->prefix, "dynamo-rl");
    store->replica = cf->cycle->hostname;
    store->timeout = 250;
    store->lease = 3600000;
    store->gate_poll = 250;
    store->gate_stale = 2000;
    store->heartbeat = 500;
    store->queue_max = NGX_HTTP_DYNAMO_RL_STORE_QUEUE;

    value = cf->args->elts;

    store->url = value[1];

    rv = ngx_http_dynamo_rl_store_url(cf, store, &value[1]);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    password_file = NULL;
    seen = 0;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "tls_", 4) == 0) {
            rv = ngx_http_dynamo_rl_store_tls_param(cf, store->tls,
                                                    &value[i]);
            if (rv != NGX_CONF_OK) {
                return rv;
            }

            continue;
        }

        for (j = 0; j < sizeof(names) / sizeof(names[0]); j++) {
            if (ngx_strncmp(value[i].data, names[j], ngx_strlen(names[j]))
                == 0)
            {
                break;
            }
        }

        if (j == sizeof(names) / sizeof(names[0])) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        if (seen & (1 << j)) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate parameter \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        seen |= 1 << j;

        s.data = value[i].data + ngx_strlen(names[j]);
        s.len = value[i].len - ngx_strlen(names[j]);

        switch (j) {

        case 0: /* prefix */
            if (s.len == 0 || s.len > 64
                || ngx_strlchr(s.data, s.data + s.len, '{') != NULL
                || ngx_strlchr(s.data, s.data + s.len, '}') != NULL
                || ngx_http_dynamo_rl_store_name_valid(&s) == NGX_ERROR)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid prefix \"%V\": 1 to 64 bytes,"
                                   " without \"{\", \"}\" or spaces",
                                   &s);
                return NGX_CONF_ERROR;
            }

            store->prefix = s;
            break;

        case 1: /* on_error */
            if (s.len == 4 && ngx_strncmp(s.data, "fail", 4) == 0) {
                store->on_error = NGX_HTTP_DYNAMO_RL_STORE_FAIL;

            } else if (s.len == 5 && ngx_strncmp(s.data, "local", 5) == 0) {
                store->on_error = NGX_HTTP_DYNAMO_RL_STORE_LOCAL;

            } else {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid on_error \"%V\","
                                   " it must be \"fail\" or \"local\"", &s);
                return NGX_CONF_ERROR;
            }

            break;

        case 2: /* replica */
            store->replica = s;
            break;

        case 3: /* password_file */
            password_file = &value[i];
            break;

        case 4: /* user */
            if (s.len == 0 || s.len > 128
                || ngx_http_dynamo_rl_store_name_valid(&s) == NGX_ERROR)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid user \"%V\"", &s);
                return NGX_CONF_ERROR;
            }

            store->user = s;
            break;

        case 10: /* wait */
            rv = NGX_CONF_OK;
            store->wait = ngx_atoi(s.data, s.len);

            if (store->wait == (ngx_uint_t) NGX_ERROR || store->wait == 0
                || store->wait > 64)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid wait \"%V\", it must be"
                                   " a number of replicas, 1 to 64", &s);
                return NGX_CONF_ERROR;
            }

            break;

        default: /* timeout, lease, gate_poll, gate_stale, heartbeat */
            rv = ngx_http_dynamo_rl_store_time(cf, &value[i],
                                               ngx_strlen(names[j]),
                                               (ngx_msec_t *) ((char *) store
                                                               + times[j - 5]));
            break;
        }

        if (rv != NGX_CONF_OK) {
            return rv;
        }
    }

    if (store->replica.len > NGX_HTTP_DYNAMO_RL_STORE_NAME
        || ngx_http_dynamo_rl_store_name_valid(&store->replica) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           (seen & (1 << 2))
                           ? "invalid replica name \"%V\":"
                             " 1 to 63 of [A-Za-z0-9._-]"
                           : "the host name \"%V\" is not a valid replica"
                             " name: set \"replica=\"",
                           &store->replica);
        return NGX_CONF_ERROR;
    }

    if (store->gate_stale <= store->gate_poll) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "gate_stale must be longer than gate_poll");
        return NGX_CONF_ERROR;
    }

    if (store->user.len && password_file == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"user\" requires \"password_file\"");
        return NGX_CONF_ERROR;
    }

    if (password_file != NULL) {
        s.data = password_file->data + sizeof("password_file=") - 1;
        s.len = password_file->len - (sizeof("password_file=") - 1);

        rv = ngx_http_dynamo_rl_store_password(cf, store, &s);
        if (rv != NGX_CONF_OK) {
            return rv;
        }
    }

    if (ngx_http_dynamo_rl_store_key(cf, &store->gate_key, &store->prefix,
                                     "gate")
           != NGX_OK
        || ngx_http_dynamo_rl_store_key(cf, &store->fleet_key,
                                        &store->prefix, "fleet")
           != NGX_OK
        || ngx_http_dynamo_rl_store_key(cf, &store->attempt_key,
                                        &store->prefix, "a:")
           != NGX_OK
        || ngx_http_dynamo_rl_store_key(cf, &store->live_key,
                                        &store->prefix, "live")
           != NGX_OK
        || ngx_http_dynamo_rl_store_key(cf, &store->proc_key,
                                        &store->prefix, "p:")
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (store->tls != NULL) {
        rv = ngx_http_dynamo_rl_store_tls_init(cf, store->tls);
        if (rv != NGX_CONF_OK) {
            return rv;
        }
    }

    ngx_http_dynamo_rl_store_sha();

    *field = store;

    return NGX_CONF_OK;
}


static char *
ngx_http_dynamo_rl_store_url(ngx_conf_t *cf, ngx_http_dynamo_rl_store_t *store,
    ngx_str_t *url)
{
    u_char     *p, *last, *q;
    char       *hint;
    ngx_url_t   u;
    ngx_int_t   db;
    ngx_uint_t  tls;

    p = url->data;
    last = p + url->len;

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.default_port = 6379;
    u.no_resolve = 0;

    /* "rediss://": TLS, ngx_http_dynamo_rl_store_tls.c */

    if (url->len >= 11
        && ngx_strncasecmp(p, (u_char *) "sentinel://", 11) == 0)
    {
        return ngx_http_dynamo_rl_store_sentinel_url(cf, store, url);
    }

    tls = (url->len >= 9
           && ngx_strncasecmp(p, (u_char *) "rediss://", 9) == 0);

    if (tls
        || (url->len >= 8
            && ngx_strncasecmp(p, (u_char *) "redis://", 8) == 0))
    {
        p += tls ? 9 : 8;

        if (ngx_strlchr(p, last, '@') != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "credentials in the store URL \"%V\" are not"
                               " supported: use \"user=\" and"
                               " \"password_file=\"", url);
            return NGX_CONF_ERROR;
        }

        q = ngx_strlchr(p, last, '/');
        db = (q == NULL || q + 1 == last) ? 0 : ngx_atoi(q + 1, last - q - 1);
        hint = "";

    } else if (url->len >= 5
               && ngx_strncasecmp(p, (u_char *) "unix:", 5) == 0)
    {
        q = ngx_strlchr(p, last, '?');
        db = NGX_ERROR;

        if (q != NULL && last - q > 4 && ngx_strncmp(q, "?db=", 4) == 0) {
            db = ngx_atoi(q + 4, last - q - 4);
        }

        hint = ", it must be \"?db=N\"";

    } else {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid store URL \"%V\", it must begin with"
                           " \"redis://\", \"rediss://\" or \"unix:\"",
                           url);
        return NGX_CONF_ERROR;
    }

    /* the database: "/N" after redis://host[:port], "?db=N" after unix: */

    if (q != NULL) {
        if (db == NGX_ERROR || db > 9999) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid database in the store URL \"%V\"%s",
                               url, hint);
            return NGX_CONF_ERROR;
        }

        store->db = db;
        last = q;
    }

    /* p is past "redis://"; a unix: URL keeps "unix:" for ngx_parse_url() */

    if (p == last) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "no host in the store URL \"%V\"", url);
        return NGX_CONF_ERROR;
    }

    u.url.data = p;
    u.url.len = last - p;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%s in the store URL \"%V\"", u.err, url);
        }

        return NGX_CONF_ERROR;
    }

    if (u.uri.len || u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid store URL \"%V\"", url);
        return NGX_CONF_ERROR;
    }

    store->addrs = u.addrs;
    store->naddrs = u.naddrs;

    if (tls) {
        store->tls = ngx_http_dynamo_rl_store_tls_create(cf, &u.host);
        if (store->tls == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/* the password: the file's first bytes, without the final line break */

static char *
ngx_http_dynamo_rl_store_password(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *path)
{
    u_char           *buf;
    size_t            len;
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_str_t         name;
    ngx_err_t         err;
    ngx_file_info_t   fi;

    name = *path;

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "empty password_file");
        return NGX_CONF_ERROR;
    }

    if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* not blocking: a FIFO would hang nginx -t and a reload; see below */

    fd = ngx_open_file(name.data, NGX_FILE_RDONLY|NGX_FILE_NONBLOCK,
                       NGX_FILE_OPEN, 0);

    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "cannot read password_file \"%s\"", name.data);
        return NGX_CONF_ERROR;
    }

    buf = NULL;
    n = NGX_ERROR;
    err = 0;

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        err = ngx_errno;

    } else if (!ngx_is_file(&fi)
               || ngx_file_size(&fi) > NGX_HTTP_DYNAMO_RL_STORE_PASSWORD)
    {
        ngx_close_file(fd);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "password_file \"%s\" is not a file of at most"
                           " %d bytes", name.data,
                           NGX_HTTP_DYNAMO_RL_STORE_PASSWORD);
        return NGX_CONF_ERROR;

    } else {
        len = (size_t) ngx_file_size(&fi);

        buf = ngx_pnalloc(cf->pool, len + 1);

        if (buf != NULL) {
            n = ngx_read_fd(fd, buf, len);

            if (n == -1) {
                err = ngx_errno;

            } else if ((size_t) n != len) {
                n = NGX_ERROR;
            }
        }
    }

    ngx_close_file(fd);

    if (buf == NULL) {
        return NGX_CONF_ERROR;
    }

    if (n == NGX_ERROR || n == -1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, err,
                           "cannot read password_file \"%s\"", name.data);
        return NGX_CONF_ERROR;
    }

    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
        n--;
    }

    if (n == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "password_file \"%s\" is empty", name.data);
        return NGX_CONF_ERROR;
    }

    store->password.data = buf;
    store->password.len = n;

    return NGX_CONF_OK;
}


static char *
ngx_http_dynamo_rl_store_time(ngx_conf_t *cf, ngx_str_t *value, size_t skip,
    ngx_msec_t *ms)
{
    ngx_int_t  n;
    ngx_str_t  s, name;

    s.data = value->data + skip;
    s.len = value->len - skip;

    n = ngx_parse_time(&s, 0);

    if (n == NGX_ERROR || n <= 0 || n > 7 * 86400000) {
        name.data = value->data;
        name.len = skip - 1;

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid %V \"%V\"",
                           &name, &s);
        return NGX_CONF_ERROR;
    }

    *ms = (ngx_msec_t) n;

    return NGX_CONF_OK;
}


/* a replica, a user or a prefix: printable ASCII, no spaces or braces */

static ngx_int_t
ngx_http_dynamo_rl_store_name_valid(ngx_str_t *name)
{
    u_char      c;
    ngx_uint_t  i;

    if (name->len == 0) {
        return NGX_ERROR;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')
        {
            continue;
        }

        /* a prefix and a user may also use other visible characters */

        if (c > ' ' && c < 0x7f) {
            return NGX_DECLINED;
        }

        return NGX_ERROR;
    }

    return NGX_OK;
}


/* "{P}:suffix": the hash tag puts every key of the prefix on one slot */

static ngx_int_t
ngx_http_dynamo_rl_store_key(ngx_conf_t *cf, ngx_str_t *key,
    ngx_str_t *prefix, char *suffix)
{
    u_char  *p;

    key->len = prefix->len + 3 + ngx_strlen(suffix);

    key->data = ngx_pnalloc(cf->pool, key->len);
    if (key->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(key->data, "{%V}:%s", prefix, suffix);

    key->len = p - key->data;

    return NGX_OK;
}


/* the scripts' SHA1, a constant of their bodies, computed once */

static void
ngx_http_dynamo_rl_store_sha(void)
{
    u_char       md[20];
    ngx_uint_t   i;
    ngx_sha1_t   sha1;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {

        if (ngx_http_dynamo_rl_scripts[i].sha[0] != '\0') {
            continue;
        }

        ngx_sha1_init(&sha1);
        ngx_sha1_update(&sha1, ngx_http_dynamo_rl_scripts[i].body.data,
                        ngx_http_dynamo_rl_scripts[i].body.len);
        ngx_sha1_final(md, &sha1);

        *ngx_hex_dump(ngx_http_dynamo_rl_scripts[i].sha, md, 20) = '\0';
    }
}


ngx_int_t
ngx_http_dynamo_rl_store_init_process(ngx_http_dynamo_rl_store_t *store,
    ngx_cycle_t *cycle)
{
    ngx_uint_t                        i;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = ngx_pcalloc(cycle->pool, sizeof(ngx_http_dynamo_rl_store_conn_t));
    if (conn == NULL) {
        return NGX_ERROR;
    }

    /*
     * this process's identity: 64 random bits drawn after fork(), so that
     * no owner of this process matches a record an earlier one left
     */

    if (RAND_bytes((u_char *) &store->boot, sizeof(store->boot)) != 1) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "dynamo rl store: RAND_bytes() failed");
        return NGX_ERROR;
    }

    store->identity.data = ngx_pnalloc(cycle->pool, store->replica.len
                                                    + 2 * NGX_INT64_LEN + 2);
    if (store->identity.data == NULL) {
        return NGX_ERROR;
    }

    store->identity.len = ngx_sprintf(store->identity.data, "%V/%P.%016xL",
                                      &store->replica, ngx_pid, store->boot)
                          - store->identity.data;

    store->records.len = store->proc_key.len + store->identity.len;
    store->records.data = ngx_pnalloc(cycle->pool, store->records.len);
    if (store->records.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(ngx_cpymem(store->records.data, store->proc_key.data,
                          store->proc_key.len),
               store->identity.data, store->identity.len);

    conn->store = store;
    conn->log = cycle->log;

    conn->quiet = *cycle->log;
    conn->quiet.log_level = NGX_LOG_ALERT;

    conn->in = ngx_palloc(cycle->pool, NGX_HTTP_DYNAMO_RL_STORE_READ);
    if (conn->in == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_init(&conn->fifo);
    ngx_queue_init(&conn->pending);
    ngx_queue_init(&conn->free);

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        ngx_queue_init(&conn->batch[i].members);
    }

    conn->timer.handler = ngx_http_dynamo_rl_store_timer_handler;
    conn->timer.data = conn;
    conn->timer.log = cycle->log;

    /* waiters keep a worker that shuts down until they are answered */
    conn->timer.cancelable = 0;

    conn->retry.handler = ngx_http_dynamo_rl_store_retry_handler;
    conn->retry.data = conn;
    conn->retry.log = cycle->log;
    conn->retry.cancelable = 1;

    conn->backoff = NGX_HTTP_DYNAMO_RL_STORE_BACKOFF;
    conn->stall = ngx_max(4 * store->timeout,
                          NGX_HTTP_DYNAMO_RL_STORE_STALL_MIN);

    store->conn = conn;

    /* the time cached at fork() would shorten the first deadlines */

    ngx_time_update();

    ngx_http_dynamo_rl_store_connect(conn);

    return NGX_OK;
}


/*
 * at exit, one send of what is buffered (the writes without a handler
 * that wait are added first), never blocking; then everything is freed
 * and no handler is called
 */

void
ngx_http_dynamo_rl_store_exit_process(ngx_http_dynamo_rl_store_t *store)
{
    ngx_uint_t                         i;
    ngx_queue_t                       *q;
    ngx_connection_t                  *c;
    ngx_http_dynamo_rl_store_cmd_t    *cmd;
    ngx_http_dynamo_rl_store_conn_t   *conn;
    ngx_http_dynamo_rl_store_batch_t  *b;

    conn = store->conn;

    if (conn == NULL) {
        return;
    }

    conn->exiting = 1;
    c = conn->peer.connection;

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY && c != NULL) {

        conn->flushing = 1;
        (void) ngx_http_dynamo_rl_store_flush_all(conn);

        for (q = ngx_queue_head(&conn->pending);
             q != ngx_queue_sentinel(&conn->pending);
             q = ngx_queue_next(q))
        {
            cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

            if (ngx_http_dynamo_rl_store_append(conn, cmd->buf, cmd->len)
                != NGX_OK)
            {
                break;
            }
        }

        if (conn->out_last > conn->out_pos) {
            (void) c->send(c, conn->out + conn->out_pos,
                           conn->out_last - conn->out_pos);
        }
    }

    if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {

        /*
         * writes kept for a store that does not answer are lost with the
         * process: each one counted and logged; the records they would
         * have moved are ended by the other processes' beats, as those of
         * a process that fell silent ("replica_lost")
         */

        for (q = ngx_queue_head(&conn->pending);
             q != ngx_queue_sentinel(&conn->pending);
             q = ngx_queue_next(q))
        {
            cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

            if (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER) {
                continue;
            }

            NGX_HTTP_DYNAMO_RL_STORE_STAT(store, dropped, 1);

            ngx_log_error(NGX_LOG_WARN, conn->log, 0,
                          "dynamo rl store: a queued write (%V) is dropped "
                          "as the worker process exits, \"%V\" does not "
                          "answer",
                          cmd->script < NGX_HTTP_DYNAMO_RL_SCRIPTS
                          ? &ngx_http_dynamo_rl_scripts[cmd->script].name
                          : &ngx_http_dynamo_rl_store_command_name,
                          &store->url);
        }
    }

    if (c != NULL) {
        ngx_http_dynamo_rl_store_tls_close(c);
        ngx_close_connection(c);
        conn->peer.connection = NULL;
    }

    if (conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    if (conn->retry.timer_set) {
        ngx_del_timer(&conn->retry);
    }

    ngx_http_dynamo_rl_store_wait_drop(conn, 0);

    while (!ngx_queue_empty(&conn->fifo)) {
        q = ngx_queue_head(&conn->fifo);
        ngx_queue_remove(q);
        ngx_http_dynamo_rl_store_cmd_free(conn,
            ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    while (!ngx_queue_empty(&conn->pending)) {
        q = ngx_queue_head(&conn->pending);
        ngx_queue_remove(q);
        ngx_http_dynamo_rl_store_cmd_free(conn,
            ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    while (!ngx_queue_empty(&conn->free)) {
        q = ngx_queue_head(&conn->free);
        ngx_queue_remove(q);
        ngx_free(ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    conn->nfifo = 0;
    conn->npending = 0;

    if (conn->reader != NULL) {
        redisReaderFree(conn->reader);
        conn->reader = NULL;
    }

    if (conn->out != NULL) {
        ngx_free(conn->out);
        conn->out = NULL;
    }

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        b = &conn->batch[i];

        while (!ngx_queue_empty(&b->members)) {
            q = ngx_queue_head(&b->members);
            ngx_queue_remove(q);
            ngx_http_dynamo_rl_store_cmd_free(conn,
                ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
        }

        if (b->keys.data != NULL) {
            ngx_free(b->keys.data);
        }

        if (b->args.data != NULL) {
            ngx_free(b->args.data);
        }

        ngx_memzero(b, sizeof(ngx_http_dynamo_rl_store_batch_t));
        ngx_queue_init(&b->members);
    }

    conn->nbatched = 0;

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_DOWN;
    store->conn = NULL;
}


ngx_uint_t
ngx_http_dynamo_rl_store_ready(ngx_http_dynamo_rl_store_t *store)
{
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = store->conn;

    return conn != NULL && conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY;
}


ngx_int_t
ngx_http_dynamo_rl_store_eval(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t script, ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp)
{
    if (script >= NGX_HTTP_DYNAMO_RL_SCRIPTS || nkeys > argc) {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_store_push(store,
                                         ngx_http_dynamo_rl_store_script_op[
                                             script],
                                         script, nkeys, argc, argv,
                                         handler, data, cmdp);
}


ngx_int_t
ngx_http_dynamo_rl_store_command(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t op, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp)
{
    if (op >= NGX_HTTP_DYNAMO_RL_STORE_OPS || argc == 0) {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_store_push(store, op,
                                         NGX_HTTP_DYNAMO_RL_STORE_NOSCRIPT,
                                         0, argc, argv, handler, data, cmdp);
}


/*
 * a command joined to the others of the same script in this turn of the
 * event loop: one EVALSHA with "nshared" keys (the same for all, given
 * once), then each command's key, then each command's "argc" arguments;
 * the script loops over its keys.  A waited command's handler gets its
 * own element of the script's reply (an array, one element for each, in
 * order).  While the store is not ready, a write is a command of its own,
 * kept for the connection, and a waited command is refused.
 */

ngx_int_t
ngx_http_dynamo_rl_store_batch(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t script, ngx_uint_t nshared, ngx_str_t *keys, ngx_uint_t argc,
    ngx_str_t *argv, ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp)
{
    ngx_str_t                          args[NGX_HTTP_DYNAMO_RL_STORE_MAXARGS];
    ngx_uint_t                         i, op;
    ngx_connection_t                  *c;
    ngx_http_dynamo_rl_store_cmd_t    *cmd;
    ngx_http_dynamo_rl_store_conn_t   *conn;
    ngx_http_dynamo_rl_store_batch_t  *b;

    conn = store->conn;

    if (script >= NGX_HTTP_DYNAMO_RL_SCRIPTS
        || nshared + 1 + argc > NGX_HTTP_DYNAMO_RL_STORE_MAXARGS)
    {
        return NGX_ERROR;
    }

    op = ngx_http_dynamo_rl_store_script_op[script];

    if (conn == NULL || conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {

        if (handler != NULL) {
            NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                          NGX_HTTP_DYNAMO_RL_STORE_R_DOWN], 1);
            return NGX_ERROR;
        }

        for (i = 0; i <= nshared; i++) {
            args[i] = keys[i];
        }

        for (i = 0; i < argc; i++) {
            args[nshared + 1 + i] = argv[i];
        }

        return ngx_http_dynamo_rl_store_eval(store, script, nshared + 1,
                                             nshared + 1 + argc, args,
                                             NULL, NULL, NULL);
    }

    if (ngx_http_dynamo_rl_store_room(store, op,
                                      conn->nfifo + conn->npending
                                      + conn->nbatched, handler)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    b = &conn->batch[script];

    if (b->n == NGX_HTTP_DYNAMO_RL_STORE_BATCH
        && ngx_http_dynamo_rl_store_flush(conn, script) != NGX_OK)
    {
        return NGX_ERROR;
    }

    cmd = NULL;

    if (handler != NULL) {
        cmd = ngx_http_dynamo_rl_store_cmd_alloc(conn);
        if (cmd == NULL) {
            return NGX_ERROR;
        }
    }

    i = (b->n == 0) ? 0 : nshared;

    if (b->n == 0) {
        b->nshared = nshared;
    }

    for ( /* void */ ; i <= nshared; i++) {
        if (ngx_http_dynamo_rl_store_bulk(conn, &b->keys, &keys[i])
            != NGX_OK)
        {
            goto failed;
        }
    }

    for (i = 0; i < argc; i++) {
        if (ngx_http_dynamo_rl_store_bulk(conn, &b->args, &argv[i])
            != NGX_OK)
        {
            goto failed;
        }
    }

    b->argc += argc;
    b->n++;
    conn->nbatched++;

    c = conn->peer.connection;

    if (!c->write->posted) {
        conn->batch_start = ngx_http_dynamo_rl_store_us();

        /* the posted write joins the batches before it sends */
        ngx_post_event(c->write, &ngx_posted_events);
    }

    if (cmd != NULL) {
        cmd->handler = handler;
        cmd->data = data;
        cmd->op = op;
        cmd->script = script;
        cmd->kind = NGX_HTTP_DYNAMO_RL_STORE_USER;
        cmd->waited = 1;
        cmd->open = 1;
        cmd->conn = conn;
        cmd->deadline = ngx_current_msec + store->timeout;
        cmd->start = conn->batch_start;

        ngx_queue_insert_tail(&b->members, &cmd->queue);

        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, queue, 1);
    }

    conn->dropping = 0;

    if (cmdp != NULL) {
        *cmdp = cmd;
    }

    return NGX_OK;

failed:

    /* the batch's bytes may be torn: what it holds goes now, or is lost */

    if (cmd != NULL) {
        /* not a user's command yet: not in the queue's count */
        cmd->kind = NGX_HTTP_DYNAMO_RL_STORE_LOAD;
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
    }

    ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);

    return NGX_ERROR;
}


/*
 * the handler will not be called; the reply is read and dropped; a
 * command still in a batch goes out now, before what its caller sends
 * next (a release of the same record, say)
 */

/* a pool cleanup: the command a request waits for, if any, is cancelled */

void
ngx_http_dynamo_rl_store_cleanup(void *data)
{
    ngx_http_dynamo_rl_store_cmd_t **cmdp = data;

    if (*cmdp != NULL) {
        ngx_http_dynamo_rl_store_cancel(*cmdp);
        *cmdp = NULL;
    }
}


void
ngx_http_dynamo_rl_store_cancel(ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    if (cmd == NULL || !cmd->live) {
        return;
    }

    cmd->handler = NULL;
    cmd->data = NULL;

    if (cmd->open
        && ngx_http_dynamo_rl_store_flush(cmd->conn, cmd->script) != NGX_OK)
    {
        ngx_http_dynamo_rl_store_fail(cmd->conn, "out of memory", 0);
    }
}


/*
 * the batches of this turn go out now, before what is sent next: a
 * process's last words after its records' ends
 */

void
ngx_http_dynamo_rl_store_flush_batches(ngx_http_dynamo_rl_store_t *store)
{
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = store->conn;

    if (conn != NULL && conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY
        && ngx_http_dynamo_rl_store_flush_all(conn) != NGX_OK)
    {
        ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
    }
}


static ngx_int_t
ngx_http_dynamo_rl_store_flush_all(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    rc = NGX_OK;

    for (i = 0; conn->nbatched && i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        if (ngx_http_dynamo_rl_store_flush(conn, i) != NGX_OK) {
            rc = NGX_ERROR;
        }
    }

    return rc;
}


/*
 * a batch becomes one command that carries its waited members; a batch
 * of writes goes to the pending writes while the store is down, a batch
 * with members is answered NGX_ERROR then
 */

static ngx_int_t
ngx_http_dynamo_rl_store_flush(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t script)
{
    u_char                            *buf, *p;
    size_t                             len, n;
    ngx_queue_t                       *q;
    ngx_http_dynamo_rl_store_t        *store;
    ngx_http_dynamo_rl_store_cmd_t    *cmd, *m;
    ngx_http_dynamo_rl_store_batch_t  *b;
    u_char                             nk[NGX_INT_T_LEN + 2];

    b = &conn->batch[script];

    if (b->n == 0) {
        return NGX_OK;
    }

    store = conn->store;

    len = sizeof("*\r\n$7\r\nEVALSHA\r\n$40\r\n\r\n$\r\n\r\n") - 1 + 40
          + 3 * NGX_INT_T_LEN + b->keys.len + b->args.len;

    buf = NULL;

    if (len > NGX_HTTP_DYNAMO_RL_STORE_SMALL) {
        buf = ngx_alloc(len, conn->log);
        if (buf == NULL) {
            goto failed;
        }
    }

    cmd = ngx_http_dynamo_rl_store_cmd_alloc(conn);
    if (cmd == NULL) {
        if (buf != NULL) {
            ngx_free(buf);
        }

        goto failed;
    }

    if (buf == NULL) {
        buf = cmd->small;

    } else {
        cmd->own = 1;
    }

    p = ngx_http_dynamo_rl_store_format(buf, '*',
                                        3 + b->nshared + b->n + b->argc);
    p = ngx_cpymem(p, "$7\r\nEVALSHA\r\n$40\r\n",
                   sizeof("$7\r\nEVALSHA\r\n$40\r\n") - 1);
    p = ngx_cpymem(p, ngx_http_dynamo_rl_scripts[script].sha, 40);
    *p++ = '\r';
    *p++ = '\n';
    n = ngx_http_dynamo_rl_store_format(nk, '\0', b->nshared + b->n) - nk - 2;
    p = ngx_http_dynamo_rl_store_format(p, '$', n);
    p = ngx_cpymem(p, nk, n + 2);
    p = ngx_cpymem(p, b->keys.data, b->keys.len);
    p = ngx_cpymem(p, b->args.data, b->args.len);

    cmd->buf = (char *) buf;
    cmd->len = p - buf;
    cmd->op = ngx_http_dynamo_rl_store_script_op[script];
    cmd->script = script;
    cmd->kind = NGX_HTTP_DYNAMO_RL_STORE_USER;
    cmd->deadline = ngx_current_msec + store->timeout;
    cmd->start = conn->batch_start;

    if (!ngx_queue_empty(&b->members)) {
        /* the members are counted, each in the operations and the queue */

        ngx_queue_add(&cmd->members, &b->members);
        ngx_queue_init(&b->members);

        for (q = ngx_queue_head(&cmd->members);
             q != ngx_queue_sentinel(&cmd->members);
             q = ngx_queue_next(q))
        {
            m = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);
            m->open = 0;
        }

        cmd->nmembers = b->n;
        cmd->waited = 1;
        cmd->done = 1;

    } else {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, queue, 1);
    }

    conn->nbatched -= b->n;
    ngx_http_dynamo_rl_store_batch_reset(b);

    if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {

        if (cmd->nmembers) {
            ngx_http_dynamo_rl_store_finish(conn, cmd,
                                            NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                            NGX_ERROR, NULL);
            ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
            return NGX_OK;
        }

        ngx_queue_insert_tail(&conn->pending, &cmd->queue);
        conn->npending++;
        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_store_enqueue(conn, cmd) != NGX_OK) {
        ngx_http_dynamo_rl_store_finish(conn, cmd,
                                        NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                        NGX_ERROR, NULL);
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
        return NGX_ERROR;
    }

    return NGX_OK;

failed:

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[
                                  ngx_http_dynamo_rl_store_script_op[script]][
                                  NGX_HTTP_DYNAMO_RL_STORE_R_DOWN],
                                  ngx_queue_empty(&b->members) ? 1 : 0);

    if (ngx_queue_empty(&b->members)) {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, dropped, b->n);
    }

    /* the members are answered NGX_ERROR, as by a lost connection */

    while (!ngx_queue_empty(&b->members)) {
        q = ngx_queue_head(&b->members);
        ngx_queue_remove(q);

        m = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);
        m->open = 0;

        ngx_http_dynamo_rl_store_finish(conn, m,
                                        NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                        NGX_ERROR, NULL);
        ngx_http_dynamo_rl_store_cmd_free(conn, m);
    }

    conn->nbatched -= b->n;
    ngx_http_dynamo_rl_store_batch_reset(b);

    return NGX_ERROR;
}


static void
ngx_http_dynamo_rl_store_batch_reset(ngx_http_dynamo_rl_store_batch_t *b)
{
    b->keys.len = 0;
    b->args.len = 0;
    b->nshared = 0;
    b->n = 0;
    b->argc = 0;
}


/* one bulk string at the end of a batch's bytes */

static ngx_int_t
ngx_http_dynamo_rl_store_bulk(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_buf_t *b, ngx_str_t *s)
{
    u_char  *p;
    size_t   size;

    size = sizeof("$\r\n\r\n") - 1 + NGX_SIZE_T_LEN + s->len;

    if (b->size - b->len < size) {
        size = ngx_max(2 * b->size, ngx_max(b->len + size, 4096));

        if (ngx_http_dynamo_rl_store_grow(&b->data, &b->size, b->len, size,
                                          conn->log)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    p = ngx_http_dynamo_rl_store_format(b->data + b->len, '$', s->len);
    p = ngx_cpymem(p, s->data, s->len);
    *p++ = '\r';
    *p++ = '\n';

    b->len = p - b->data;

    return NGX_OK;
}


/* a buffer of ngx_alloc() moved to "size" bytes, its "used" bytes kept */

static ngx_int_t
ngx_http_dynamo_rl_store_grow(u_char **data, size_t *size, size_t used,
    size_t n, ngx_log_t *log)
{
    u_char  *p;

    p = ngx_alloc(n, log);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (*data != NULL) {
        ngx_memcpy(p, *data, used);
        ngx_free(*data);
    }

    *data = p;
    *size = n;

    return NGX_OK;
}


/*
 * NGX_OK while fewer than queue_max commands wait; otherwise the command
 * is refused as with the store down, and a write without a waiter is
 * counted as dropped and logged once until the queue drains
 */

static ngx_int_t
ngx_http_dynamo_rl_store_room(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t op, ngx_uint_t queued, ngx_http_dynamo_rl_store_pt handler)
{
    ngx_http_dynamo_rl_store_conn_t  *conn;

    if (queued < store->queue_max) {
        return NGX_OK;
    }

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                  NGX_HTTP_DYNAMO_RL_STORE_R_DOWN], 1);

    if (handler != NULL) {
        return NGX_ERROR;
    }

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, dropped, 1);

    conn = store->conn;

    if (!conn->dropping) {
        conn->dropping = 1;
        ngx_log_error(NGX_LOG_WARN, conn->log, 0,
                      "dynamo rl store: %ui commands wait for \"%V\","
                      " writes are dropped", queued, &store->url);
    }

    return NGX_ERROR;
}


static ngx_int_t
ngx_http_dynamo_rl_store_push(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t op, ngx_uint_t script, ngx_uint_t nkeys, ngx_uint_t argc,
    ngx_str_t *argv, ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp)
{
    u_char                           *buf, *p;
    size_t                            len, n;
    ngx_uint_t                        i, extra;
    u_char                            nk[NGX_INT_T_LEN + 2];
    ngx_http_dynamo_rl_store_cmd_t   *cmd;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = store->conn;

    if (conn == NULL
        || (handler != NULL && conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY))
    {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                      NGX_HTTP_DYNAMO_RL_STORE_R_DOWN], 1);
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_store_room(store, op,
                                      conn->nfifo + conn->npending, handler)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * RESP, formatted here in one pass: "EVALSHA sha nkeys" and the
     * arguments as bulk strings
     */

    extra = (script == NGX_HTTP_DYNAMO_RL_STORE_NOSCRIPT) ? 0 : 3;

    len = sizeof("*\r\n") - 1 + NGX_INT_T_LEN;

    if (extra) {
        len += sizeof("$7\r\nEVALSHA\r\n$40\r\n\r\n$\r\n\r\n") - 1 + 40
               + 2 * NGX_INT_T_LEN;
    }

    for (i = 0; i < argc; i++) {
        len += sizeof("$\r\n\r\n") - 1 + NGX_SIZE_T_LEN + argv[i].len;
    }

    buf = NULL;

    if (len > NGX_HTTP_DYNAMO_RL_STORE_SMALL) {
        buf = ngx_alloc(len, conn->log);
        if (buf == NULL) {
            NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                          NGX_HTTP_DYNAMO_RL_STORE_R_DOWN],
                                          1);
            return NGX_ERROR;
        }
    }

    cmd = ngx_http_dynamo_rl_store_cmd_alloc(conn);
    if (cmd == NULL) {
        if (buf != NULL) {
            ngx_free(buf);
        }

        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                      NGX_HTTP_DYNAMO_RL_STORE_R_DOWN], 1);
        return NGX_ERROR;
    }

    if (buf == NULL) {
        buf = cmd->small;

    } else {
        cmd->own = 1;
    }

    p = ngx_http_dynamo_rl_store_format(buf, '*', argc + extra);

    if (extra) {
        p = ngx_cpymem(p, "$7\r\nEVALSHA\r\n$40\r\n",
                       sizeof("$7\r\nEVALSHA\r\n$40\r\n") - 1);
        p = ngx_cpymem(p, ngx_http_dynamo_rl_scripts[script].sha, 40);
        *p++ = '\r';
        *p++ = '\n';
        n = ngx_http_dynamo_rl_store_format(nk, '\0', nkeys) - nk - 2;
        p = ngx_http_dynamo_rl_store_format(p, '$', n);
        p = ngx_cpymem(p, nk, n + 2);
    }

    for (i = 0; i < argc; i++) {
        p = ngx_http_dynamo_rl_store_format(p, '$', argv[i].len);
        p = ngx_cpymem(p, argv[i].data, argv[i].len);
        *p++ = '\r';
        *p++ = '\n';
    }

    cmd->buf = (char *) buf;
    cmd->len = p - buf;
    cmd->handler = handler;
    cmd->data = data;
    cmd->op = op;
    cmd->script = script;
    cmd->kind = NGX_HTTP_DYNAMO_RL_STORE_USER;
    cmd->waited = (handler != NULL);
    cmd->deadline = ngx_current_msec + store->timeout;

    /* one clock read per batch: the commands of a turn go out together */

    if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY
        || !conn->peer.connection->write->posted)
    {
        conn->batch_start = ngx_http_dynamo_rl_store_us();
    }

    cmd->start = conn->batch_start;

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, queue, 1);

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY) {

        if (ngx_http_dynamo_rl_store_enqueue(conn, cmd) != NGX_OK) {
            ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
            NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                          NGX_HTTP_DYNAMO_RL_STORE_R_DOWN],
                                          1);
            return NGX_ERROR;
        }

    } else {
        ngx_queue_insert_tail(&conn->pending, &cmd->queue);
        conn->npending++;
    }

    conn->dropping = 0;

    if (cmdp != NULL) {
        *cmdp = cmd;
    }

    return NGX_OK;
}


/* a command of the client itself: not counted, never kept while down */

static ngx_int_t
ngx_http_dynamo_rl_store_internal(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t kind, ngx_uint_t script, int argc, const char **argv,
    size_t *argvlen)
{
    int                              len;
    char                            *buf;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    buf = NULL;

    len = redisFormatCommandArgv(&buf, argc, argv, argvlen);

    if (len < 0 || buf == NULL) {
        return NGX_ERROR;
    }

    cmd = ngx_http_dynamo_rl_store_cmd_alloc(conn);
    if (cmd == NULL) {
        redisFreeCommand(buf);
        return NGX_ERROR;
    }

    cmd->buf = buf;
    cmd->len = len;
    cmd->kind = kind;
    cmd->script = script;
    cmd->op = NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT;
    cmd->deadline = ngx_current_msec + conn->store->timeout;
    cmd->start = 0;

    if (ngx_http_dynamo_rl_store_enqueue(conn, cmd) != NGX_OK) {
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
        return NGX_ERROR;
    }

    if (kind != NGX_HTTP_DYNAMO_RL_STORE_RELOAD
        && kind != NGX_HTTP_DYNAMO_RL_STORE_WAIT)
    {
        /* one more reply that the handshake waits for */
        conn->handshake++;
    }

    return NGX_OK;
}


/* into the output buffer and the FIFO; the posted write sends the batch */

static ngx_int_t
ngx_http_dynamo_rl_store_enqueue(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    ngx_connection_t  *c;

    if (ngx_http_dynamo_rl_store_append(conn, cmd->buf, cmd->len) != NGX_OK) {
        return NGX_ERROR;
    }

    if (conn->nfifo == 0) {
        conn->progress = ngx_current_msec;
    }

    ngx_queue_insert_tail(&conn->fifo, &cmd->queue);
    conn->nfifo++;

    ngx_http_dynamo_rl_store_arm(conn,
                                 (cmd->waited
                                  || (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER
                                      && cmd->kind
                                         != NGX_HTTP_DYNAMO_RL_STORE_RELOAD
                                      && cmd->kind
                                         != NGX_HTTP_DYNAMO_RL_STORE_WAIT))
                                 ? cmd->deadline
                                 : conn->progress + conn->stall);

    if (conn->store->wait && cmd->script == NGX_HTTP_DYNAMO_RL_SCRIPT_CLAIM
        && cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && cmd->waited
        && ngx_http_dynamo_rl_store_wait(conn, cmd) != NGX_OK)
    {
        return NGX_ERROR;
    }

    c = conn->peer.connection;

    if (!c->write->posted && !conn->flushing) {
        ngx_post_event(c->write, &ngx_posted_events);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_store_append(ngx_http_dynamo_rl_store_conn_t *conn,
    char *buf, size_t len)
{
    size_t  size;

    if (conn->out_size - conn->out_last < len && conn->out_pos > 0) {
        ngx_memmove(conn->out, conn->out + conn->out_pos,
                    conn->out_last - conn->out_pos);
        conn->out_last -= conn->out_pos;
        conn->out_pos = 0;
    }

    if (conn->out_size - conn->out_last < len) {
        size = ngx_max(conn->out_size * 2, NGX_HTTP_DYNAMO_RL_STORE_OUT);

        while (size - conn->out_last < len) {
            size *= 2;
        }

        if (ngx_http_dynamo_rl_store_grow(&conn->out, &conn->out_size,
                                          conn->out_last, size, conn->log)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    conn->out_last = ngx_cpymem(conn->out + conn->out_last, buf, len)
                     - conn->out;

    return NGX_OK;
}


/* the timer fires at "at" or earlier, exactly: ngx_add_timer() is lazy */

static void
ngx_http_dynamo_rl_store_arm(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_msec_t at)
{
    ngx_msec_int_t  left;

    if (conn->timer.timer_set) {
        if ((ngx_msec_int_t) (conn->timer.timer.key - at) <= 0) {
            return;
        }

        ngx_del_timer(&conn->timer);
    }

    left = (ngx_msec_int_t) (at - ngx_current_msec);

    ngx_add_timer(&conn->timer, left > 0 ? (ngx_msec_t) left : 1);
}


static void
ngx_http_dynamo_rl_store_connect(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_int_t                    rc;
    ngx_err_t                    err;
    ngx_addr_t                  *addr;
    ngx_connection_t            *c;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    addr = ngx_http_dynamo_rl_store_peer(conn);

    ngx_memzero(&conn->peer, sizeof(ngx_peer_connection_t));

    conn->peer.sockaddr = addr->sockaddr;
    conn->peer.socklen = addr->socklen;
    conn->peer.name = &addr->name;
    conn->peer.get = ngx_event_get_peer;
    conn->peer.log = &conn->quiet;
    conn->peer.log_error = NGX_ERROR_ERR;

    if (conn->connects++) {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, reconnects, 1);
    }

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_CONNECTING;

    ngx_set_socket_errno(0);

    rc = ngx_event_connect_peer(&conn->peer);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        err = ngx_socket_errno;

        if (conn->peer.connection != NULL) {
            ngx_close_connection(conn->peer.connection);
            conn->peer.connection = NULL;
        }

        ngx_http_dynamo_rl_store_fail(conn, "connect() failed", err);
        return;
    }

    c = conn->peer.connection;

    c->data = conn;
    c->log = conn->log;
    c->read->log = conn->log;
    c->write->log = conn->log;
    c->log_error = NGX_ERROR_INFO;

    c->read->handler = ngx_http_dynamo_rl_store_read_handler;
    c->write->handler = ngx_http_dynamo_rl_store_write_handler;

    if (rc == NGX_AGAIN) {
        ngx_add_timer(c->write, store->timeout);
        return;
    }

    ngx_http_dynamo_rl_store_connected(conn);
}


/* rediss://: the TLS handshake ended, or timed out */

static void
ngx_http_dynamo_rl_store_tls_handshaked(ngx_connection_t *c)
{
    const char                       *cause;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = c->data;

    cause = ngx_http_dynamo_rl_store_tls_check(conn->store->tls, c);

    if (cause != NULL) {
        ngx_http_dynamo_rl_store_fail(conn, cause, 0);
        return;
    }

    c->read->handler = ngx_http_dynamo_rl_store_read_handler;
    c->write->handler = ngx_http_dynamo_rl_store_write_handler;

    ngx_http_dynamo_rl_store_connected(conn);
}


/* AUTH, SELECT, CONFIG GET, SCRIPT LOAD: pipelined, one round trip */

static void
ngx_http_dynamo_rl_store_connected(ngx_http_dynamo_rl_store_conn_t *conn)
{
    size_t                       len[3];
    u_char                       db[NGX_INT_T_LEN];
    const char                  *argv[3];
    ngx_connection_t            *c;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;
    c = conn->peer.connection;

    if (conn->peer.sockaddr->sa_family != AF_UNIX) {
        (void) ngx_tcp_nodelay(c);
    }

    if (store->tls != NULL && c->ssl == NULL) {
        if (ngx_http_dynamo_rl_store_tls_connect(store->tls, c,
                                    store->timeout,
                                    ngx_http_dynamo_rl_store_tls_handshaked)
            != NGX_AGAIN)
        {
            ngx_http_dynamo_rl_store_tls_handshaked(c);
        }

        return;
    }

    conn->reader = ngx_http_dynamo_rl_resp_reader();
    if (conn->reader == NULL) {
        ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
        return;
    }

    conn->in_size = 0;

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_HANDSHAKE;
    conn->handshake = 0;

    if (conn->asking) {
        if (ngx_http_dynamo_rl_store_sentinel_ask(conn) == NGX_OK) {
            return;
        }

        goto failed;
    }

    if (ngx_http_dynamo_rl_store_auth(conn, NGX_HTTP_DYNAMO_RL_STORE_AUTH)
        != NGX_OK)
    {
        goto failed;
    }

    if (store->db) {
        argv[0] = "SELECT";
        len[0] = 6;
        argv[1] = (const char *) db;
        len[1] = ngx_sprintf(db, "%ui", store->db) - db;

        if (ngx_http_dynamo_rl_store_internal(conn,
                                              NGX_HTTP_DYNAMO_RL_STORE_SELECT,
                                              0, 2, argv, len)
            != NGX_OK)
        {
            goto failed;
        }
    }

    /* a replica would refuse every write: not a store to use */

    argv[0] = "ROLE";
    len[0] = 4;

    if (ngx_http_dynamo_rl_store_internal(conn, NGX_HTTP_DYNAMO_RL_STORE_ROLE,
                                          0, 1, argv, len)
        != NGX_OK)
    {
        goto failed;
    }

    argv[0] = "CONFIG";
    len[0] = 6;
    argv[1] = "GET";
    len[1] = 3;
    argv[2] = "maxmemory-policy";
    len[2] = 16;

    if (ngx_http_dynamo_rl_store_internal(conn,
                                          NGX_HTTP_DYNAMO_RL_STORE_CONFIG,
                                          0, 3, argv, len)
        != NGX_OK)
    {
        goto failed;
    }

    if (ngx_http_dynamo_rl_store_load(conn, NGX_HTTP_DYNAMO_RL_STORE_LOAD)
        == NGX_OK)
    {
        return;
    }

failed:

    ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
}


/* the last reply of the handshake: the writes kept while down go first */

static void
ngx_http_dynamo_rl_store_ready_now(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    store = conn->store;

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_READY;
    conn->backoff = NGX_HTTP_DYNAMO_RL_STORE_BACKOFF;
    conn->dropping = 0;

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[
                                  NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT][
                                  NGX_HTTP_DYNAMO_RL_STORE_R_OK], 1);

    while (!ngx_queue_empty(&conn->pending)) {
        q = ngx_queue_head(&conn->pending);
        ngx_queue_remove(q);
        conn->npending--;

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (ngx_http_dynamo_rl_store_enqueue(conn, cmd) != NGX_OK) {
            ngx_queue_insert_head(&conn->pending, q);
            conn->npending++;
            ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
            return;
        }
    }

    if (conn->up) {
        return;
    }

    conn->up = 1;
    conn->reported = 0;

    ngx_log_error(NGX_LOG_NOTICE, conn->log, 0,
                  "dynamo rl store: connected to \"%V\" (%V) as replica"
                  " \"%V\"", &store->url, conn->peer.name, &store->replica);

    if (store->stats != NULL) {
        store->stats->up = 1;
        (void) ngx_atomic_fetch_add(&store->stats->transitions, 1);
    }

    if (store->changed != NULL) {
        store->changed(store->changed_data, 1);
    }
}


static void
ngx_http_dynamo_rl_store_fail_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    const char *what, redisReply *reply)
{
    u_char  *p;
    size_t   len;

    len = 0;

    if (reply != NULL && reply->type == REDIS_REPLY_ERROR
        && reply->str != NULL)
    {
        len = ngx_min(reply->len, 160);
    }

    p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1, "%s: %*s", what,
                     len, len ? reply->str : "an unexpected reply");
    *p = '\0';

    ngx_http_dynamo_rl_store_fail(conn, (char *) conn->cause, 0);
}


/*
 * the connection is gone or unusable: the writes without a handler that
 * were not answered go back to the head of the pending queue, in order
 * (the scripts are safe to run twice: a move checks the owner and the
 * state); every waiter gets NGX_ERROR; a reconnect is scheduled; logged
 * once per transition
 */

static void
ngx_http_dynamo_rl_store_fail(ngx_http_dynamo_rl_store_conn_t *conn,
    const char *cause, ngx_err_t err)
{
    ngx_uint_t                       was, result, changed;
    ngx_queue_t                     *q, waiters;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    store = conn->store;
    was = conn->state;

    cause = ngx_http_dynamo_rl_store_tls_cause(store->tls, cause, &err);

    ngx_http_dynamo_rl_store_close(conn);

    if (was != NGX_HTTP_DYNAMO_RL_STORE_READY) {
        result = (err == NGX_ETIMEDOUT) ? NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT
                 : (cause == (char *) conn->cause)
                   ? NGX_HTTP_DYNAMO_RL_STORE_R_ERROR
                   : NGX_HTTP_DYNAMO_RL_STORE_R_DOWN;

        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[
                                      NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT][
                                      result], 1);
    }

    changed = 0;

    if (conn->up) {
        conn->up = 0;
        changed = 1;

        ngx_log_error(NGX_LOG_ERR, conn->log, err,
                      "dynamo rl store: lost \"%V\" (%V): %s",
                      &store->url, conn->peer.name, cause);

        if (store->stats != NULL) {
            store->stats->up = 0;
            (void) ngx_atomic_fetch_add(&store->stats->transitions, 1);
        }

    } else if (!conn->reported) {
        ngx_log_error(NGX_LOG_ERR, conn->log, err,
                      "dynamo rl store: \"%V\" (%V) is unavailable: %s",
                      &store->url, conn->peer.name, cause);

        if (store->stats != NULL) {
            store->stats->up = 0;
        }

    } else {
        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, conn->log, err,
                       "dynamo rl store: \"%V\" still unavailable: %s",
                       &store->url, cause);
    }

    conn->reported = 1;

    ngx_http_dynamo_rl_store_wait_drop(conn, !conn->exiting);

    ngx_queue_init(&waiters);

    while (!ngx_queue_empty(&conn->fifo)) {
        q = ngx_queue_last(&conn->fifo);
        ngx_queue_remove(q);
        conn->nfifo--;

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER) {
            ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
            continue;
        }

        if (!cmd->waited && !conn->exiting) {
            ngx_queue_insert_head(&conn->pending, q);
            conn->npending++;
            continue;
        }

        ngx_queue_insert_head(&waiters, q);
    }

    /*
     * the batches of the turn: writes after those that were sent before
     * them, waiters answered NGX_ERROR with the others
     */

    if (!conn->exiting) {
        (void) ngx_http_dynamo_rl_store_flush_all(conn);
    }

    if (!ngx_exiting && !ngx_terminate && !ngx_quit && !conn->exiting) {
        ngx_add_timer(&conn->retry, conn->backoff);
        conn->backoff = ngx_min(conn->backoff * 2,
                                NGX_HTTP_DYNAMO_RL_STORE_BACKOFF_MAX);
    }

    if (changed && store->changed != NULL) {
        store->changed(store->changed_data, 0);
    }

    while (!ngx_queue_empty(&waiters)) {
        q = ngx_queue_head(&waiters);
        ngx_queue_remove(q);

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        ngx_http_dynamo_rl_store_finish(conn, cmd,
                                        NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                        NGX_ERROR, NULL);
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
    }
}


static void
ngx_http_dynamo_rl_store_close(ngx_http_dynamo_rl_store_conn_t *conn)
{
    if (conn->peer.connection != NULL) {
        ngx_http_dynamo_rl_store_tls_close(conn->peer.connection);
        ngx_close_connection(conn->peer.connection);
        conn->peer.connection = NULL;
    }

    if (conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    if (conn->reader != NULL) {
        redisReaderFree(conn->reader);
        conn->reader = NULL;
    }

    conn->out_pos = 0;
    conn->out_last = 0;
    conn->loading = 0;
    conn->state = NGX_HTTP_DYNAMO_RL_STORE_DOWN;
}


static void
ngx_http_dynamo_rl_store_retry_handler(ngx_event_t *ev)
{
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = ev->data;

    if (ngx_exiting || ngx_terminate || ngx_quit || conn->exiting) {
        return;
    }

    ngx_http_dynamo_rl_store_connect(conn);
}


static ngx_int_t
ngx_http_dynamo_rl_store_test_connect(ngx_connection_t *c)
{
    int        err;
    socklen_t  len;

    err = 0;
    len = sizeof(int);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len) == -1) {
        err = ngx_socket_errno;
    }

    if (err) {
        ngx_set_socket_errno(err);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_dynamo_rl_store_write_handler(ngx_event_t *wev)
{
    ngx_connection_t                 *c;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    c = wev->data;
    conn = c->data;

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_CONNECTING) {

        if (wev->timedout) {
            ngx_http_dynamo_rl_store_fail(conn, "connect() timed out",
                                          NGX_ETIMEDOUT);
            return;
        }

        if (wev->timer_set) {
            ngx_del_timer(wev);
        }

        if (ngx_http_dynamo_rl_store_test_connect(c) != NGX_OK) {
            ngx_http_dynamo_rl_store_fail(conn, "connect() failed",
                                          ngx_socket_errno);
            return;
        }

        ngx_http_dynamo_rl_store_connected(conn);
        return;
    }

    ngx_http_dynamo_rl_store_send(conn);
}


static void
ngx_http_dynamo_rl_store_send(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ssize_t            n;
    ngx_int_t          rc;
    ngx_connection_t  *c;

    c = conn->peer.connection;

    if (conn->nbatched) {
        conn->flushing = 1;
        rc = ngx_http_dynamo_rl_store_flush_all(conn);
        conn->flushing = 0;

        if (rc != NGX_OK) {
            ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
            return;
        }
    }

    while (conn->out_pos < conn->out_last) {

        n = c->send(c, conn->out + conn->out_pos,
                    conn->out_last - conn->out_pos);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == NGX_ERROR || n <= 0) {
            ngx_http_dynamo_rl_store_fail(conn, "send() failed",
                                          ngx_socket_errno);
            return;
        }

        conn->out_pos += n;
    }

    if (conn->out_pos == conn->out_last) {
        conn->out_pos = 0;
        conn->out_last = 0;
    }

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_http_dynamo_rl_store_fail(conn, "write event failed", 0);
    }
}


static void
ngx_http_dynamo_rl_store_read_handler(ngx_event_t *rev)
{
    ssize_t                           n;
    ngx_int_t                         rc;
    redisReply                       *reply;
    ngx_connection_t                 *c;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    c = rev->data;
    conn = c->data;

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_CONNECTING) {
        ngx_http_dynamo_rl_store_write_handler(c->write);
        return;
    }

    while (rev->ready) {

        n = c->recv(c, conn->in, NGX_HTTP_DYNAMO_RL_STORE_READ);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == 0) {
            ngx_http_dynamo_rl_store_fail(conn,
                                          "the store closed the connection",
                                          0);
            return;
        }

        if (n == NGX_ERROR) {
            ngx_http_dynamo_rl_store_fail(conn, "recv() failed",
                                          ngx_socket_errno);
            return;
        }

        if (ngx_http_dynamo_rl_resp_feed(conn->reader, &conn->in_size,
                                         conn->in, n)
            != NGX_OK)
        {
            ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
            return;
        }

        for ( ;; ) {
            rc = ngx_http_dynamo_rl_resp_read(conn->reader, &conn->in_size,
                                              &reply);

            if (rc == NGX_ERROR) {
                ngx_http_dynamo_rl_store_fail(conn,
                                              "the store sent an invalid"
                                              " reply", 0);
                return;
            }

            if (rc == NGX_DECLINED) {
                ngx_http_dynamo_rl_store_fail(conn,
                                              "the store sent a reply"
                                              " larger than 1M", 0);
                return;
            }

            if (reply == NULL) {
                break;
            }

            /*
             * the stall timer counts whole replies, not bytes: a store
             * that trickles a reply is no store
             */

            conn->progress = ngx_current_msec;

            if (ngx_http_dynamo_rl_store_dispatch(conn, reply) != NGX_OK) {
                return;
            }
        }
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_http_dynamo_rl_store_fail(conn, "read event failed", 0);
    }
}


/* NGX_ERROR: the connection was closed, stop reading */

static ngx_int_t
ngx_http_dynamo_rl_store_dispatch(ngx_http_dynamo_rl_store_conn_t *conn,
    redisReply *reply)
{
    ngx_int_t                        rc;
    ngx_uint_t                       readonly;
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    if (ngx_queue_empty(&conn->fifo)) {
        freeReplyObject(reply);
        ngx_http_dynamo_rl_store_fail(conn, "a reply to no command", 0);
        return NGX_ERROR;
    }

    q = ngx_queue_head(&conn->fifo);
    ngx_queue_remove(q);
    conn->nfifo--;

    cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

    if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_WAIT) {
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
        return ngx_http_dynamo_rl_store_waited_reply(conn, reply);
    }

    if (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER) {
        rc = ngx_http_dynamo_rl_store_handshake(conn, cmd, reply);
        freeReplyObject(reply);
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);

        if (rc == NGX_OK && conn->nfifo == 0 && conn->timer.timer_set) {
            ngx_del_timer(&conn->timer);
        }

        return rc;
    }

    if (cmd->script != NGX_HTTP_DYNAMO_RL_STORE_NOSCRIPT && !cmd->retried
        && ngx_http_dynamo_rl_resp_noscript(reply) == NGX_OK)
    {
        freeReplyObject(reply);

        if (cmd->script == NGX_HTTP_DYNAMO_RL_SCRIPT_CLAIM
            && !ngx_http_dynamo_rl_store_waited(cmd))
        {
            /*
             * the claims did not run, and their requests, past their
             * deadline, were refused and sent their releases: sent again,
             * the claims would run after the releases and use up the ids
             */

            ngx_http_dynamo_rl_store_finish(conn, cmd,
                                            NGX_HTTP_DYNAMO_RL_STORE_R_ERROR,
                                            NGX_ERROR, NULL);
            ngx_http_dynamo_rl_store_cmd_free(conn, cmd);

            if (!conn->loading) {
                (void) ngx_http_dynamo_rl_store_reload(conn);
            }

            return NGX_OK;
        }

        if (ngx_http_dynamo_rl_store_noscript(conn, cmd) != NGX_OK) {
            ngx_queue_insert_head(&conn->fifo, q);
            conn->nfifo++;
            ngx_http_dynamo_rl_store_fail(conn, "out of memory", 0);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    /* a replica after a failover: the endpoint will point elsewhere */

    readonly = (reply->type == REDIS_REPLY_ERROR && reply->len >= 8
                && ngx_strncmp(reply->str, "READONLY", 8) == 0);

    /* wait=: the claims are answered once the replicas have them */

    if (cmd->wait && reply->type != REDIS_REPLY_ERROR) {
        ngx_http_dynamo_rl_store_wait_drop(conn, 1);

        conn->held = cmd;
        conn->held_reply = reply;

        return NGX_OK;
    }

    ngx_http_dynamo_rl_store_finish(conn, cmd,
                                    (reply->type == REDIS_REPLY_ERROR)
                                    ? NGX_HTTP_DYNAMO_RL_STORE_R_ERROR
                                    : NGX_HTTP_DYNAMO_RL_STORE_R_OK,
                                    NGX_OK, reply);

    freeReplyObject(reply);
    ngx_http_dynamo_rl_store_cmd_free(conn, cmd);

    if (readonly) {
        ngx_http_dynamo_rl_store_fail(conn, "the store is read-only", 0);
        return NGX_ERROR;
    }

    if (conn->nfifo == 0 && conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    return NGX_OK;
}


/* the client's own replies; NGX_ERROR: the connection was closed */

static ngx_int_t
ngx_http_dynamo_rl_store_handshake(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, redisReply *reply)
{
    ngx_str_t                     policy;
    ngx_http_dynamo_rl_script_t  *script;

    switch (cmd->kind) {

    case NGX_HTTP_DYNAMO_RL_STORE_AUTH:
    case NGX_HTTP_DYNAMO_RL_STORE_SELECT:

        if (reply->type != REDIS_REPLY_STATUS) {
            ngx_http_dynamo_rl_store_fail_reply(conn,
                (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_AUTH) ? "AUTH"
                                                             : "SELECT",
                reply);
            return NGX_ERROR;
        }

        break;

    case NGX_HTTP_DYNAMO_RL_STORE_ROLE:

        /* a service that refuses ROLE is taken at its word */

        if (ngx_http_dynamo_rl_resp_role(reply) == NGX_DECLINED) {
            ngx_http_dynamo_rl_store_fail(conn,
                                          "the store is not a primary"
                                          " (ROLE)", 0);
            return NGX_ERROR;
        }

        break;

    case NGX_HTTP_DYNAMO_RL_STORE_SAUTH:

        /* a sentinel without a password refuses AUTH: SENTINEL says more */
        break;

    case NGX_HTTP_DYNAMO_RL_STORE_SENTINEL:
        return ngx_http_dynamo_rl_store_sentinel_reply(conn, reply);

    case NGX_HTTP_DYNAMO_RL_STORE_CONFIG:

        /* managed services refuse CONFIG: an error reply is not a fault */

        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
            && reply->element[1]->type == REDIS_REPLY_STRING)
        {
            policy.data = (u_char *) reply->element[1]->str;
            policy.len = reply->element[1]->len;

            if (policy.len != 10
                || ngx_strncmp(policy.data, "noeviction", 10) != 0)
            {
                ngx_log_error(NGX_LOG_WARN, conn->log, 0,
                              "dynamo rl store: maxmemory-policy of \"%V\""
                              " is \"%V\", not \"noeviction\": the store"
                              " may evict attempts in flight",
                              &conn->store->url, &policy);
            }
        }

        break;

    default: /* LOAD, RELOAD */

        script = &ngx_http_dynamo_rl_scripts[cmd->script];

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_RELOAD) {

            /* whatever the reply, the EVAL fallback still serves */

            if (cmd->script == NGX_HTTP_DYNAMO_RL_SCRIPTS - 1) {
                conn->loading = 0;
            }

            return NGX_OK;
        }

        if (reply->type != REDIS_REPLY_STRING || reply->len != 40
            || ngx_strncasecmp((u_char *) reply->str, script->sha, 40) != 0)
        {
            ngx_http_dynamo_rl_store_fail_reply(conn, "SCRIPT LOAD", reply);
            return NGX_ERROR;
        }

        break;
    }

    if (--conn->handshake == 0) {
        ngx_http_dynamo_rl_store_ready_now(conn);

        if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* whether a command, or a member of a batch, still has a waiter */

static ngx_uint_t
ngx_http_dynamo_rl_store_waited(ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *m;

    if (!cmd->nmembers) {
        return cmd->handler != NULL && !cmd->done;
    }

    for (q = ngx_queue_head(&cmd->members);
         q != ngx_queue_sentinel(&cmd->members);
         q = ngx_queue_next(q))
    {
        m = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (m->handler != NULL && !m->done) {
            return 1;
        }
    }

    return 0;
}


/*
 * NOSCRIPT (the store lost its scripts: SCRIPT FLUSH, a restart, a
 * failover): the command goes again as "EVAL body", at the end of the
 * FIFO, with its deadline; the scripts are loaded again, once
 */

static ngx_int_t
ngx_http_dynamo_rl_store_noscript(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    u_char                       *p, *buf, *rest, *last;
    size_t                        len;
    ngx_http_dynamo_rl_script_t  *script;

    script = &ngx_http_dynamo_rl_scripts[cmd->script];

    /* "*N\r\n" "$7\r\nEVALSHA\r\n" "$40\r\n" sha "\r\n" rest */

    p = (u_char *) cmd->buf;
    last = p + cmd->len;

    rest = ngx_strlchr(p, last, '\n');

    if (rest == NULL || last - rest < 1 + 13 + 5 + 42) {
        return NGX_ERROR;
    }

    rest += 1 + 13 + 5 + 42;

    len = (rest - p) - 60 + sizeof("$4\r\nEVAL\r\n$\r\n\r\n") - 1
          + NGX_SIZE_T_LEN + script->body.len + (last - rest);

    buf = ngx_alloc(len, conn->log);
    if (buf == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(buf, cmd->buf, (rest - (u_char *) cmd->buf) - 60);
    p = ngx_sprintf(p, "$4\r\nEVAL\r\n$%uz\r\n", script->body.len);
    p = ngx_cpymem(p, script->body.data, script->body.len);
    *p++ = '\r';
    *p++ = '\n';
    p = ngx_cpymem(p, rest, last - rest);

    ngx_http_dynamo_rl_store_cmd_release(cmd);

    cmd->buf = (char *) buf;
    cmd->len = p - buf;
    cmd->own = 1;
    cmd->retried = 1;

    if (ngx_http_dynamo_rl_store_enqueue(conn, cmd) != NGX_OK) {
        return NGX_ERROR;
    }

    /* if the scripts cannot be loaded again, EVAL still serves */

    if (!conn->loading) {
        (void) ngx_http_dynamo_rl_store_reload(conn);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_store_reload(ngx_http_dynamo_rl_store_conn_t *conn)
{
    conn->loading = 1;

    if (ngx_http_dynamo_rl_store_load(conn, NGX_HTTP_DYNAMO_RL_STORE_RELOAD)
        != NGX_OK)
    {
        conn->loading = 0;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* SCRIPT LOAD of every script: in the handshake, or after a NOSCRIPT */

static ngx_int_t
ngx_http_dynamo_rl_store_load(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t kind)
{
    size_t       len[3];
    ngx_uint_t   i;
    const char  *argv[3];

    argv[0] = "SCRIPT";
    len[0] = 6;
    argv[1] = "LOAD";
    len[1] = 4;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        argv[2] = (const char *) ngx_http_dynamo_rl_scripts[i].body.data;
        len[2] = ngx_http_dynamo_rl_scripts[i].body.len;

        if (ngx_http_dynamo_rl_store_internal(conn, kind, i, 3, argv, len)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* counted once; the handler, if it is still there, is called once */

static void
ngx_http_dynamo_rl_store_finish(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, ngx_uint_t result, ngx_int_t rc,
    redisReply *reply)
{
    void                            *data;
    uint64_t                         us;
    ngx_int_t                        shape;
    ngx_uint_t                       i;
    redisReply                      *e;
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_pt      handler;
    ngx_http_dynamo_rl_store_cmd_t  *m;

    store = conn->store;

    if (cmd->nmembers) {
        /* a batch: each member its own element of an array reply */

        shape = (rc == NGX_OK)
                ? ngx_http_dynamo_rl_resp_batch(reply, cmd->nmembers)
                : NGX_DECLINED;

        if (shape == NGX_ERROR) {

            /*
             * a count or a shape other than what was sent: an answer to
             * none of them, each refused as by an unavailable store
             */

            ngx_log_error(NGX_LOG_ERR, conn->log, 0,
                          "dynamo rl store: \"%V\" answered a batch of %ui"
                          " %V with a reply of another shape, refused",
                          &store->url, cmd->nmembers,
                          &ngx_http_dynamo_rl_scripts[cmd->script].name);

            result = NGX_HTTP_DYNAMO_RL_STORE_R_ERROR;
            rc = NGX_ERROR;
            reply = NULL;
        }

        i = 0;

        for (q = ngx_queue_head(&cmd->members);
             q != ngx_queue_sentinel(&cmd->members);
             q = ngx_queue_next(q))
        {
            m = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

            if (rc == NGX_AGAIN && (m->done || m->handler == NULL)) {
                i++;
                continue;
            }

            e = (shape == NGX_OK) ? reply->element[i] : reply;

            ngx_http_dynamo_rl_store_finish(conn, m, result, rc, e);
            i++;
        }

        return;
    }

    if (reply != NULL && store->stats != NULL) {
        us = ngx_http_dynamo_rl_store_us() - cmd->start;

        for (i = 0; i < NGX_HTTP_DYNAMO_RL_STORE_BUCKETS - 1; i++) {
            if (us <= ngx_http_dynamo_rl_store_buckets[i]) {
                break;
            }
        }

        (void) ngx_atomic_fetch_add(&store->stats->rtt[i], 1);
        (void) ngx_atomic_fetch_add(&store->stats->rtt_sum_us,
                                    (ngx_atomic_int_t) us);
        (void) ngx_atomic_fetch_add(&store->stats->rtt_count, 1);
    }

    if (!cmd->done) {
        cmd->done = 1;
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[cmd->op][result], 1);
    }

    handler = cmd->handler;
    data = cmd->data;

    cmd->handler = NULL;
    cmd->data = NULL;

    if (handler != NULL) {
        handler(data, rc, reply);
    }
}


/*
 * the deadlines: a waiter past its own gets NGX_AGAIN and stays in the
 * FIFO as cancelled, so that its late reply is read and dropped; nothing
 * read for max(4 * timeout, 1s) while commands wait closes the connection
 */

static void
ngx_http_dynamo_rl_store_timer_handler(ngx_event_t *ev)
{
    ngx_msec_t                       now, next;
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;
    ngx_http_dynamo_rl_store_conn_t *conn;

    conn = ev->data;
    now = ngx_current_msec;

    if (conn->nfifo == 0) {
        return;
    }

    if ((ngx_msec_int_t) (now - conn->progress) >= (ngx_msec_int_t) conn->stall)
    {
        ngx_http_dynamo_rl_store_fail(conn, "no reply in time",
                                      NGX_ETIMEDOUT);
        return;
    }

    next = conn->progress + conn->stall;

    for (q = ngx_queue_head(&conn->fifo);
         q != ngx_queue_sentinel(&conn->fifo);
         q = ngx_queue_next(q))
    {
        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_RELOAD
            || cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_WAIT)
        {
            continue;
        }

        if (cmd->nmembers) {
            /* a batch's members share one deadline, and time out at once */

            if ((ngx_msec_int_t) (cmd->deadline - now) > 0) {
                if ((ngx_msec_int_t) (cmd->deadline - next) < 0) {
                    next = cmd->deadline;
                }

                continue;
            }

            ngx_http_dynamo_rl_store_finish(conn, cmd,
                                            NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT,
                                            NGX_AGAIN, NULL);
            continue;
        }

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && !cmd->waited) {
            continue;
        }

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && cmd->done) {
            continue;
        }

        if ((ngx_msec_int_t) (cmd->deadline - now) > 0) {
            if ((ngx_msec_int_t) (cmd->deadline - next) < 0) {
                next = cmd->deadline;
            }

            continue;
        }

        if (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER) {
            ngx_http_dynamo_rl_store_fail(conn,
                                          "no reply to the handshake in"
                                          " time", NGX_ETIMEDOUT);
            return;
        }

        /* a handler may queue more commands: they go after this one */

        ngx_http_dynamo_rl_store_finish(conn, cmd,
                                        NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT,
                                        NGX_AGAIN, NULL);
    }

    ngx_http_dynamo_rl_store_arm(conn, next);
}


static ngx_http_dynamo_rl_store_cmd_t *
ngx_http_dynamo_rl_store_cmd_alloc(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    if (!ngx_queue_empty(&conn->free)) {
        q = ngx_queue_head(&conn->free);
        ngx_queue_remove(q);

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

    } else {
        cmd = ngx_alloc(sizeof(ngx_http_dynamo_rl_store_cmd_t), conn->log);
        if (cmd == NULL) {
            return NULL;
        }
    }

    /* the local buffer is written before it is read */
    ngx_memzero(cmd, offsetof(ngx_http_dynamo_rl_store_cmd_t, small));

    ngx_queue_init(&cmd->members);
    cmd->live = 1;

    return cmd;
}


/* back to the free list; a user's command leaves the queue count */

static void
ngx_http_dynamo_rl_store_cmd_free(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    ngx_queue_t  *q;

    /* a batch's command is counted in its members */

    if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && cmd->nmembers == 0) {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(conn->store, queue, -1);
    }

    while (!ngx_queue_empty(&cmd->members)) {
        q = ngx_queue_head(&cmd->members);
        ngx_queue_remove(q);
        ngx_http_dynamo_rl_store_cmd_free(conn,
            ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    cmd->nmembers = 0;

    ngx_http_dynamo_rl_store_cmd_release(cmd);

    cmd->handler = NULL;
    cmd->data = NULL;
    cmd->live = 0;

    ngx_queue_insert_head(&conn->free, &cmd->queue);
}


static void
ngx_http_dynamo_rl_store_cmd_release(ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    if (cmd->buf == NULL) {
        return;
    }

    if (cmd->own) {
        ngx_free(cmd->buf);

    } else if (cmd->buf != (char *) cmd->small) {
        redisFreeCommand(cmd->buf);
    }

    cmd->buf = NULL;
    cmd->own = 0;
}


/* "*N\r\n", "$N\r\n", or "N\r\n" with type '\\0' */

static u_char *
ngx_http_dynamo_rl_store_format(u_char *p, u_char type, size_t n)
{
    u_char   *d;
    u_char    digits[NGX_SIZE_T_LEN];

    if (type) {
        *p++ = type;
    }

    d = digits + NGX_SIZE_T_LEN;

    do {
        *--d = (u_char) ('0' + n % 10);
        n /= 10;
    } while (n);

    p = ngx_cpymem(p, d, digits + NGX_SIZE_T_LEN - d);

    *p++ = '\r';
    *p++ = '\n';

    return p;
}


static uint64_t
ngx_http_dynamo_rl_store_us(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}


/*
 * wait=N: "WAIT N ms" right after a claim, on the same connection, within
 * what is left of the claim's timeout (WAIT 0 would block for ever)
 */

static ngx_int_t
ngx_http_dynamo_rl_store_wait(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    size_t           len[3];
    u_char          *p;
    const char      *argv[3];
    ngx_msec_int_t   left;
    u_char           n[NGX_INT_T_LEN], ms[NGX_INT_T_LEN];

    left = (ngx_msec_int_t) (cmd->deadline - ngx_current_msec);

    if (left < 1) {
        left = 1;
    }

    argv[0] = "WAIT";
    len[0] = 4;

    p = ngx_sprintf(n, "%ui", conn->store->wait);
    argv[1] = (const char *) n;
    len[1] = p - n;

    p = ngx_sprintf(ms, "%i", (ngx_int_t) left);
    argv[2] = (const char *) ms;
    len[2] = p - ms;

    if (ngx_http_dynamo_rl_store_internal(conn, NGX_HTTP_DYNAMO_RL_STORE_WAIT,
                                          0, 3, argv, len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    cmd->wait = 1;

    return NGX_OK;
}


/*
 * the reply to a WAIT: the claim held before it is answered with its own
 * reply if enough replicas have it, or as by an unavailable store (its
 * requests release their ids); a WAIT after a claim that went again as
 * EVAL (NOSCRIPT) has nothing held
 */

static ngx_int_t
ngx_http_dynamo_rl_store_waited_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    redisReply *reply)
{
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    cmd = conn->held;
    store = conn->store;

    if (cmd == NULL) {
        freeReplyObject(reply);
        return NGX_OK;
    }

    if (reply->type == REDIS_REPLY_INTEGER
        && reply->integer >= (long long) store->wait)
    {
        conn->held = NULL;

        ngx_http_dynamo_rl_store_finish(conn, cmd,
                                        NGX_HTTP_DYNAMO_RL_STORE_R_OK,
                                        NGX_OK, conn->held_reply);

        freeReplyObject(conn->held_reply);
        conn->held_reply = NULL;
        ngx_http_dynamo_rl_store_cmd_free(conn, cmd);

    } else {
        ngx_log_error(NGX_LOG_WARN, conn->log, 0,
                      "dynamo rl store: \"%V\" had the claims on %L of %ui"
                      " replicas within the timeout, refused",
                      &store->url,
                      reply->type == REDIS_REPLY_INTEGER
                      ? (int64_t) reply->integer : (int64_t) -1,
                      store->wait);

        ngx_http_dynamo_rl_store_wait_drop(conn, 1);

        if (store->sentinel.len) {
            /*
             * a primary without its replicas: after a failover, the
             * demoted one, until the sentinels reconfigure it; they are
             * asked again
             */

            freeReplyObject(reply);
            ngx_http_dynamo_rl_store_fail(conn, "too few replicas (wait=),"
                                          " the sentinels asked again", 0);
            return NGX_ERROR;
        }
    }

    freeReplyObject(reply);

    if (conn->nfifo == 0 && conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    return NGX_OK;
}


/* the held claim, if any, answered as by an unavailable store, or not */

static void
ngx_http_dynamo_rl_store_wait_drop(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t call)
{
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    cmd = conn->held;

    if (cmd == NULL) {
        return;
    }

    conn->held = NULL;

    if (call) {
        ngx_http_dynamo_rl_store_finish(conn, cmd,
                                        NGX_HTTP_DYNAMO_RL_STORE_R_ERROR,
                                        NGX_ERROR, NULL);
    }

    freeReplyObject(conn->held_reply);
    conn->held_reply = NULL;
    ngx_http_dynamo_rl_store_cmd_free(conn, cmd);
}


/*
 * sentinel://host[:port][,host[:port]...]/name: the sentinels, asked in
 * turn for the primary of "name" on every connect
 */

static char *
ngx_http_dynamo_rl_store_sentinel_url(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *url)
{
    u_char       *p, *last, *q, *comma;
    ngx_url_t     u;
    ngx_uint_t    i;
    ngx_addr_t   *addr;
    ngx_array_t  *addrs;

    p = url->data + 11;
    last = url->data + url->len;

    q = ngx_strlchr(p, last, '/');

    if (q == NULL || q + 1 == last || q == p) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid store URL \"%V\", it must be"
                           " \"sentinel://host[:port][,host[:port]...]/name\"",
                           url);
        return NGX_CONF_ERROR;
    }

    store->sentinel.data = q + 1;
    store->sentinel.len = last - q - 1;

    if (store->sentinel.len > 64
        || ngx_strlchr(q + 1, last, '/') != NULL
        || ngx_strlchr(q + 1, last, '@') != NULL
        || ngx_http_dynamo_rl_store_name_valid(&store->sentinel) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid primary name \"%V\" in the store URL"
                           " \"%V\"", &store->sentinel, url);
        return NGX_CONF_ERROR;
    }

    if (ngx_strlchr(p, q, '@') != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "credentials in the store URL \"%V\" are not"
                           " supported: use \"user=\" and"
                           " \"password_file=\"", url);
        return NGX_CONF_ERROR;
    }

    addrs = ngx_array_create(cf->pool, 3, sizeof(ngx_addr_t));
    if (addrs == NULL) {
        return NGX_CONF_ERROR;
    }

    while (p < q) {
        comma = ngx_strlchr(p, q, ',');

        if (comma == NULL) {
            comma = q;
        }

        ngx_memzero(&u, sizeof(ngx_url_t));

        u.url.data = p;
        u.url.len = comma - p;
        u.default_port = 26379;

        if (u.url.len == 0 || ngx_parse_url(cf->pool, &u) != NGX_OK
            || u.uri.len || u.naddrs == 0 || u.family == AF_UNIX)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%s in the store URL \"%V\"",
                               u.err ? u.err : "invalid sentinel", url);
            return NGX_CONF_ERROR;
        }

        for (i = 0; i < u.naddrs; i++) {
            addr = ngx_array_push(addrs);
            if (addr == NULL) {
                return NGX_CONF_ERROR;
            }

            *addr = u.addrs[i];
        }

        p = comma + 1;
    }

    store->addrs = addrs->elts;
    store->naddrs = addrs->nelts;

    return NGX_CONF_OK;
}


/*
 * the address of the next connect: with sentinel://, the primary a
 * sentinel has just named, else the next sentinel (every other connect
 * asks again: on a reconnect, on -READONLY, on a replica's ROLE)
 */

static ngx_addr_t *
ngx_http_dynamo_rl_store_peer(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    conn->asking = 0;

    if (store->sentinel.len) {
        if (conn->primary_known) {
            conn->primary_known = 0;
            return &conn->primary;
        }

        conn->asking = 1;
    }

    return &store->addrs[conn->next_addr++ % store->naddrs];
}


/*
 * AUTH [user] password, when a password is set: to the store ("op"
 * NGX_HTTP_DYNAMO_RL_STORE_AUTH) or to a sentinel (_SAUTH)
 */

static ngx_int_t
ngx_http_dynamo_rl_store_auth(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t op)
{
    size_t                       len[3];
    ngx_uint_t                   i;
    const char                  *argv[3];
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    if (store->password.len == 0) {
        return NGX_OK;
    }

    argv[0] = "AUTH";
    len[0] = 4;
    i = 1;

    if (store->user.len) {
        argv[i] = (const char *) store->user.data;
        len[i++] = store->user.len;
    }

    argv[i] = (const char *) store->password.data;
    len[i++] = store->password.len;

    return ngx_http_dynamo_rl_store_internal(conn, op, 0, (int) i, argv, len);
}


/* AUTH if a password is set, then SENTINEL get-master-addr-by-name */

static ngx_int_t
ngx_http_dynamo_rl_store_sentinel_ask(ngx_http_dynamo_rl_store_conn_t *conn)
{
    size_t                       len[3];
    const char                  *argv[3];
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    if (ngx_http_dynamo_rl_store_auth(conn, NGX_HTTP_DYNAMO_RL_STORE_SAUTH)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    argv[0] = "SENTINEL";
    len[0] = 8;
    argv[1] = "get-master-addr-by-name";
    len[1] = 23;
    argv[2] = (const char *) store->sentinel.data;
    len[2] = store->sentinel.len;

    return ngx_http_dynamo_rl_store_internal(conn,
                                             NGX_HTTP_DYNAMO_RL_STORE_SENTINEL,
                                             0, 3, argv, len);
}


/*
 * the sentinel's answer: the connection is closed and the primary it
 * names connected at once; NGX_ERROR: the connection was closed
 */

static ngx_int_t
ngx_http_dynamo_rl_store_sentinel_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    redisReply *reply)
{
    u_char                      *p;
    ngx_int_t                    rc;
    in_port_t                    port;
    ngx_str_t                    host;
    in_addr_t                    inaddr;
    struct sockaddr_in          *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6         *sin6;
#endif
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    rc = ngx_http_dynamo_rl_resp_primary(reply, &host, &port);

    if (rc == NGX_DECLINED) {
        p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1,
                         "the sentinel knows no primary \"%V\"",
                         &store->sentinel);
        *p = '\0';

        ngx_http_dynamo_rl_store_fail(conn, (char *) conn->cause, 0);
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        ngx_http_dynamo_rl_store_fail_reply(conn,
                                            "SENTINEL get-master-addr-by-name",
                                            reply);
        return NGX_ERROR;
    }

    ngx_memzero(&conn->primary_sa, sizeof(ngx_sockaddr_t));

    inaddr = ngx_inet_addr(host.data, host.len);

    conn->primary.socklen = 0;

    if (inaddr != INADDR_NONE) {
        sin = &conn->primary_sa.sockaddr_in;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        sin->sin_addr.s_addr = inaddr;
        conn->primary.socklen = sizeof(struct sockaddr_in);
    }

#if (NGX_HAVE_INET6)
    if (conn->primary.socklen == 0
        && ngx_inet6_addr(host.data, host.len,
                          conn->primary_sa.sockaddr_in6.sin6_addr.s6_addr)
           == NGX_OK)
    {
        sin6 = &conn->primary_sa.sockaddr_in6;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        conn->primary.socklen = sizeof(struct sockaddr_in6);
    }
#endif

    if (conn->primary.socklen == 0) {
        p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1,
                         "the sentinel names the primary by a host name,"
                         " \"%V\", not an address", &host);
        *p = '\0';

        ngx_http_dynamo_rl_store_fail(conn, (char *) conn->cause, 0);
        return NGX_ERROR;
    }

    conn->primary.sockaddr = &conn->primary_sa.sockaddr;
    conn->primary.name.data = conn->primary_text;
    conn->primary.name.len = ngx_sock_ntop(conn->primary.sockaddr,
                                           conn->primary.socklen,
                                           conn->primary_text,
                                           NGX_SOCKADDR_STRLEN, 1);
    conn->primary_known = 1;

    ngx_log_error(NGX_LOG_INFO, conn->log, 0,
                  "dynamo rl store: sentinel %V names %V the primary of"
                  " \"%V\"", conn->peer.name, &conn->primary.name,
                  &store->sentinel);

    ngx_http_dynamo_rl_store_close(conn);

    ngx_add_timer(&conn->retry, 1);

    return NGX_ERROR;
}
