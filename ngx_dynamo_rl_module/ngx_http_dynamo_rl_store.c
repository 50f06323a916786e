
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_store.h"
#include "ngx_http_dynamo_rl_store_tls.h"
#include "ngx_http_dynamo_rl_store_resolve.h"
#include <ngx_sha1.h>

#include <openssl/rand.h>


#define NGX_HTTP_DYNAMO_RL_STORE_NOSCRIPT    ((ngx_uint_t) -1)

#define NGX_HTTP_DYNAMO_RL_STORE_PASSWORD    4096
#define NGX_HTTP_DYNAMO_RL_STORE_QUEUE       4096
#define NGX_HTTP_DYNAMO_RL_STORE_BATCH       64
#define NGX_HTTP_DYNAMO_RL_STORE_MAXARGS     16
#define NGX_HTTP_DYNAMO_RL_STORE_NAME        63


static char *ngx_http_dynamo_rl_store_url(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *url);
static char *ngx_http_dynamo_rl_store_password(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *path);
static char *ngx_http_dynamo_rl_store_time(ngx_conf_t *cf, ngx_str_t *value,
    size_t skip, ngx_msec_t *ms);
static ngx_int_t ngx_http_dynamo_rl_store_name_valid(ngx_str_t *name);
static char *ngx_http_dynamo_rl_store_param(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *value, ngx_uint_t *seen,
    ngx_str_t **password_file);
static char *ngx_http_dynamo_rl_store_check(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t seen,
    ngx_str_t *password_file);
static ngx_int_t ngx_http_dynamo_rl_store_keys(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store);
static ngx_int_t ngx_http_dynamo_rl_store_key(ngx_conf_t *cf,
    ngx_str_t *key, ngx_str_t *prefix, char *suffix);
static void ngx_http_dynamo_rl_store_sha(void);
static char *ngx_http_dynamo_rl_store_sentinel_url(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *url);

static void ngx_http_dynamo_rl_store_dropped(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_batches_free(
    ngx_http_dynamo_rl_store_conn_t *conn);

static ngx_int_t ngx_http_dynamo_rl_store_room(
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t op, ngx_uint_t queued,
    ngx_http_dynamo_rl_store_pt handler);
static ngx_int_t ngx_http_dynamo_rl_store_push(
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t op, ngx_uint_t script,
    ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp);
static ngx_http_dynamo_rl_store_cmd_t *ngx_http_dynamo_rl_store_command_new(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t script, ngx_uint_t nkeys,
    ngx_uint_t argc, ngx_str_t *argv);
static ngx_http_dynamo_rl_store_cmd_t *ngx_http_dynamo_rl_store_cmd_new(
    ngx_http_dynamo_rl_store_conn_t *conn, size_t len);
static u_char *ngx_http_dynamo_rl_store_evalsha(u_char *p, ngx_uint_t script,
    ngx_uint_t nkeys);
static ngx_int_t ngx_http_dynamo_rl_store_batch_down(
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t script, ngx_uint_t nshared,
    ngx_str_t *keys, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler);
static ngx_int_t ngx_http_dynamo_rl_store_batch_add(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_batch_t *b, ngx_uint_t nshared, ngx_str_t *keys,
    ngx_uint_t argc, ngx_str_t *argv);
static ngx_int_t ngx_http_dynamo_rl_store_queue(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static ngx_int_t ngx_http_dynamo_rl_store_flush(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t script);
static ngx_int_t ngx_http_dynamo_rl_store_flush_failed(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t script);
static ngx_int_t ngx_http_dynamo_rl_store_flush_all(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_batch_reset(
    ngx_http_dynamo_rl_store_batch_t *b);
static ngx_int_t ngx_http_dynamo_rl_store_bulk(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_buf_t *b, ngx_str_t *s);
static ngx_int_t ngx_http_dynamo_rl_store_reply(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_store_noscript(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static ngx_uint_t ngx_http_dynamo_rl_store_waited(
    ngx_http_dynamo_rl_store_cmd_t *cmd);
static u_char *ngx_http_dynamo_rl_store_format(u_char *p, u_char type,
    size_t n);
static ngx_int_t ngx_http_dynamo_rl_store_wait(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_msec_t deadline);
static ngx_int_t ngx_http_dynamo_rl_store_waited_reply(
    ngx_http_dynamo_rl_store_conn_t *conn, redisReply *reply);
static void ngx_http_dynamo_rl_store_held(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_queue_t *held,
    ngx_uint_t enough);
static void ngx_http_dynamo_rl_store_wait_drop(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t call);


/* the parameters of dynamo_rl_store after its URL, by name */

static const char  *ngx_http_dynamo_rl_store_names[] = {
    "prefix=", "on_error=", "replica=", "password_file=", "user=",
    "timeout=", "lease=", "gate_poll=", "gate_stale=", "heartbeat=",
    "wait="
};


/* the times, from ngx_http_dynamo_rl_store_names[5] on */

static const size_t  ngx_http_dynamo_rl_store_times[] = {
    offsetof(ngx_http_dynamo_rl_store_t, timeout),
    offsetof(ngx_http_dynamo_rl_store_t, lease),
    offsetof(ngx_http_dynamo_rl_store_t, gate_poll),
    offsetof(ngx_http_dynamo_rl_store_t, gate_stale),
    offsetof(ngx_http_dynamo_rl_store_t, heartbeat)
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
    ngx_str_t                   *value, *password_file;
    ngx_uint_t                   i, seen;
    ngx_http_dynamo_rl_store_t  *store, **field;

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

    store->resolve = ngx_http_dynamo_rl_store_resolve_create(cf, &value[1]);
    if (store->resolve == NULL) {
        return NGX_CONF_ERROR;
    }

    rv = ngx_http_dynamo_rl_store_url(cf, store, &value[1]);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    password_file = NULL;
    seen = 0;

    for (i = 2; i < cf->args->nelts; i++) {
        rv = ngx_http_dynamo_rl_store_param(cf, store, &value[i], &seen,
                                            &password_file);
        if (rv != NGX_CONF_OK) {
            return rv;
        }
    }

    rv = ngx_http_dynamo_rl_store_check(cf, store, seen, password_file);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (ngx_http_dynamo_rl_store_keys(cf, store) != NGX_OK) {
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


/*
 * one parameter after the URL: "seen" has a bit for each name met, and
 * "password_file" is the parameter of that name, read once all are known
 */

static char *
ngx_http_dynamo_rl_store_param(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *value, ngx_uint_t *seen,
    ngx_str_t **password_file)
{
    char        *rv, *p;
    size_t       len;
    ngx_str_t    s;
    ngx_uint_t   j, n;

    if (ngx_strncmp(value->data, "tls_", 4) == 0) {
        return ngx_http_dynamo_rl_store_tls_param(cf, store->tls, value);
    }

    n = sizeof(ngx_http_dynamo_rl_store_names)
        / sizeof(ngx_http_dynamo_rl_store_names[0]);
    len = 0;

    for (j = 0; j < n; j++) {
        len = ngx_strlen(ngx_http_dynamo_rl_store_names[j]);

        if (ngx_strncmp(value->data, ngx_http_dynamo_rl_store_names[j], len)
            == 0)
        {
            break;
        }
    }

    if (j == n) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    if (*seen & (1 << j)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate parameter \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    *seen |= 1 << j;

    s.data = value->data + len;
    s.len = value->len - len;

    rv = NGX_CONF_OK;

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
        *password_file = value;
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
        p = (char *) store + ngx_http_dynamo_rl_store_times[j - 5];
        rv = ngx_http_dynamo_rl_store_time(cf, value, len, (ngx_msec_t *) p);
        break;
    }

    return rv;
}


/* what the parameters say together; the password is read last */

static char *
ngx_http_dynamo_rl_store_check(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t seen,
    ngx_str_t *password_file)
{
    ngx_str_t  s;

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

    /*
     * wait=: two beats of a live worker process may be 2 * timeout +
     * heartbeat apart (each waits for one WAIT at most); its records end
     * after twice that, at most half the lease (the ledger's silence)
     */

    if (store->wait
        && (uint64_t) store->lease
           < 8 * (uint64_t) store->timeout + 4 * (uint64_t) store->heartbeat)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "with \"wait\", lease must be at least"
                           " 8 * timeout + 4 * heartbeat");
        return NGX_CONF_ERROR;
    }

    if (store->user.len && password_file == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"user\" requires \"password_file\"");
        return NGX_CONF_ERROR;
    }

    if (password_file == NULL) {
        return NGX_CONF_OK;
    }

    s.data = password_file->data + sizeof("password_file=") - 1;
    s.len = password_file->len - (sizeof("password_file=") - 1);

    return ngx_http_dynamo_rl_store_password(cf, store, &s);
}


/* the fleet's keys, "{P}:..." */

static ngx_int_t
ngx_http_dynamo_rl_store_keys(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store)
{
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
        return NGX_ERROR;
    }

    return NGX_OK;
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
    u.no_resolve = 1;  /* a host name: ngx_http_dynamo_rl_store_resolve.c */

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

    if (u.uri.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid store URL \"%V\"", url);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_dynamo_rl_store_resolve_add(cf, store->resolve, &u)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

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

    conn = ngx_http_dynamo_rl_store_conn_create(store, cycle);
    if (conn == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        ngx_queue_init(&conn->batch[i].members);
    }

    ngx_queue_init(&conn->held);

    conn->reply = ngx_http_dynamo_rl_store_reply;
    conn->flush = ngx_http_dynamo_rl_store_flush_all;
    conn->drop = ngx_http_dynamo_rl_store_wait_drop;

    store->conn = conn;

    /* the time cached at fork() would shorten the first deadlines */

    ngx_time_update();

    ngx_http_dynamo_rl_store_conn_connect(conn);

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
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = store->conn;

    if (conn == NULL) {
        return;
    }

    conn->exiting = 1;

    ngx_http_dynamo_rl_store_conn_last(conn);

    if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {
        ngx_http_dynamo_rl_store_dropped(conn);
    }

    ngx_http_dynamo_rl_store_wait_drop(conn, 0);

    ngx_http_dynamo_rl_store_conn_destroy(conn);

    ngx_http_dynamo_rl_store_batches_free(conn);

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_DOWN;
    store->conn = NULL;
}


/*
 * writes kept for a store that does not answer are lost with the process:
 * each one counted and logged; the records they would have moved are
 * ended by the other processes' beats, as those of a process that fell
 * silent ("replica_lost")
 */

static void
ngx_http_dynamo_rl_store_dropped(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    store = conn->store;

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


/* at exit: the batches' members and bytes */

static void
ngx_http_dynamo_rl_store_batches_free(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_uint_t                         i;
    ngx_queue_t                       *q;
    ngx_http_dynamo_rl_store_batch_t  *b;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        b = &conn->batch[i];

        while (!ngx_queue_empty(&b->members)) {
            q = ngx_queue_head(&b->members);
            ngx_queue_remove(q);
            ngx_http_dynamo_rl_store_conn_cmd_free(conn,
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
    ngx_uint_t                         op;
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
        return ngx_http_dynamo_rl_store_batch_down(store, script, nshared,
                                                   keys, argc, argv,
                                                   handler);
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
        cmd = ngx_http_dynamo_rl_store_conn_cmd_alloc(conn);
        if (cmd == NULL) {
            return NGX_ERROR;
        }
    }

    if (ngx_http_dynamo_rl_store_batch_add(conn, b, nshared, keys, argc,
                                           argv)
        != NGX_OK)
    {
        goto failed;
    }

    if (!ngx_http_dynamo_rl_store_conn_posted(conn)) {
        conn->batch_start = ngx_http_dynamo_rl_store_conn_us();

        /* the posted write joins the batches before it sends */
        ngx_http_dynamo_rl_store_conn_post(conn);
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
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
    }

    ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);

    return NGX_ERROR;
}


/*
 * while the store is not ready: a write is a command of its own, kept for
 * the connection, and a waited command is refused
 */

static ngx_int_t
ngx_http_dynamo_rl_store_batch_down(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t script, ngx_uint_t nshared, ngx_str_t *keys, ngx_uint_t argc,
    ngx_str_t *argv, ngx_http_dynamo_rl_store_pt handler)
{
    ngx_str_t   args[NGX_HTTP_DYNAMO_RL_STORE_MAXARGS];
    ngx_uint_t  i, op;

    op = ngx_http_dynamo_rl_store_script_op[script];

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


/*
 * a command's keys and arguments at the end of its script's batch: the
 * shared keys with the first command only
 */

static ngx_int_t
ngx_http_dynamo_rl_store_batch_add(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_batch_t *b, ngx_uint_t nshared, ngx_str_t *keys,
    ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_uint_t  i;

    i = (b->n == 0) ? 0 : nshared;

    if (b->n == 0) {
        b->nshared = nshared;
    }

    for ( /* void */ ; i <= nshared; i++) {
        if (ngx_http_dynamo_rl_store_bulk(conn, &b->keys, &keys[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    for (i = 0; i < argc; i++) {
        if (ngx_http_dynamo_rl_store_bulk(conn, &b->args, &argv[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    b->argc += argc;
    b->n++;
    conn->nbatched++;

    return NGX_OK;
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
        ngx_http_dynamo_rl_store_conn_fail(cmd->conn, "out of memory", 0);
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
        ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
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
    u_char                            *p;
    size_t                             len;
    ngx_queue_t                       *q;
    ngx_http_dynamo_rl_store_t        *store;
    ngx_http_dynamo_rl_store_cmd_t    *cmd, *m;
    ngx_http_dynamo_rl_store_batch_t  *b;

    b = &conn->batch[script];

    if (b->n == 0) {
        return NGX_OK;
    }

    store = conn->store;

    len = sizeof("*\r\n$7\r\nEVALSHA\r\n$40\r\n\r\n$\r\n\r\n") - 1 + 40
          + 3 * NGX_INT_T_LEN + b->keys.len + b->args.len;

    cmd = ngx_http_dynamo_rl_store_cmd_new(conn, len);
    if (cmd == NULL) {
        return ngx_http_dynamo_rl_store_flush_failed(conn, script);
    }

    p = ngx_http_dynamo_rl_store_format((u_char *) cmd->buf, '*',
                                        3 + b->nshared + b->n + b->argc);
    p = ngx_http_dynamo_rl_store_evalsha(p, script, b->nshared + b->n);
    p = ngx_cpymem(p, b->keys.data, b->keys.len);
    p = ngx_cpymem(p, b->args.data, b->args.len);

    cmd->len = p - (u_char *) cmd->buf;
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
            ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                                NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                                NGX_ERROR, NULL);
            ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
            return NGX_OK;
        }

        ngx_queue_insert_tail(&conn->pending, &cmd->queue);
        conn->npending++;
        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_store_queue(conn, cmd) != NGX_OK) {
        ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                             NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                             NGX_ERROR, NULL);
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* no memory for a batch's command: its writes are lost, its members refused */

static ngx_int_t
ngx_http_dynamo_rl_store_flush_failed(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t script)
{
    ngx_queue_t                       *q;
    ngx_http_dynamo_rl_store_t        *store;
    ngx_http_dynamo_rl_store_cmd_t    *m;
    ngx_http_dynamo_rl_store_batch_t  *b;

    b = &conn->batch[script];
    store = conn->store;

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

        ngx_http_dynamo_rl_store_conn_finish(conn, m,
                                             NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                             NGX_ERROR, NULL);
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, m);
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

        if (ngx_http_dynamo_rl_store_conn_grow(&b->data, &b->size, b->len, size,
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

    cmd = ngx_http_dynamo_rl_store_command_new(conn, script, nkeys, argc,
                                               argv);
    if (cmd == NULL) {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[op][
                                      NGX_HTTP_DYNAMO_RL_STORE_R_DOWN], 1);
        return NGX_ERROR;
    }

    cmd->handler = handler;
    cmd->data = data;
    cmd->op = op;
    cmd->script = script;
    cmd->kind = NGX_HTTP_DYNAMO_RL_STORE_USER;
    cmd->waited = (handler != NULL);
    cmd->deadline = ngx_current_msec + store->timeout;

    /* one clock read per batch: the commands of a turn go out together */

    if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY
        || !ngx_http_dynamo_rl_store_conn_posted(conn))
    {
        conn->batch_start = ngx_http_dynamo_rl_store_conn_us();
    }

    cmd->start = conn->batch_start;

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, queue, 1);

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY) {

        if (ngx_http_dynamo_rl_store_queue(conn, cmd) != NGX_OK) {
            ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
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


/*
 * RESP, formatted here in one pass: "EVALSHA sha nkeys" (unless the
 * command is not a script's) and the arguments as bulk strings; NULL: no
 * memory
 */

static ngx_http_dynamo_rl_store_cmd_t *
ngx_http_dynamo_rl_store_command_new(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t script, ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv)
{
    u_char                          *p;
    size_t                           len;
    ngx_uint_t                       i, extra;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    extra = (script == NGX_HTTP_DYNAMO_RL_STORE_NOSCRIPT) ? 0 : 3;

    len = sizeof("*\r\n") - 1 + NGX_INT_T_LEN;

    if (extra) {
        len += sizeof("$7\r\nEVALSHA\r\n$40\r\n\r\n$\r\n\r\n") - 1 + 40
               + 2 * NGX_INT_T_LEN;
    }

    for (i = 0; i < argc; i++) {
        len += sizeof("$\r\n\r\n") - 1 + NGX_SIZE_T_LEN + argv[i].len;
    }

    cmd = ngx_http_dynamo_rl_store_cmd_new(conn, len);
    if (cmd == NULL) {
        return NULL;
    }

    p = ngx_http_dynamo_rl_store_format((u_char *) cmd->buf, '*',
                                        argc + extra);

    if (extra) {
        p = ngx_http_dynamo_rl_store_evalsha(p, script, nkeys);
    }

    for (i = 0; i < argc; i++) {
        p = ngx_http_dynamo_rl_store_format(p, '$', argv[i].len);
        p = ngx_cpymem(p, argv[i].data, argv[i].len);
        *p++ = '\r';
        *p++ = '\n';
    }

    cmd->len = p - (u_char *) cmd->buf;

    return cmd;
}


/* a command and "len" bytes for it: its own if they fit; NULL: no memory */

static ngx_http_dynamo_rl_store_cmd_t *
ngx_http_dynamo_rl_store_cmd_new(ngx_http_dynamo_rl_store_conn_t *conn,
    size_t len)
{
    u_char                          *buf;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    buf = NULL;

    if (len > NGX_HTTP_DYNAMO_RL_STORE_SMALL) {
        buf = ngx_alloc(len, conn->log);
        if (buf == NULL) {
            return NULL;
        }
    }

    cmd = ngx_http_dynamo_rl_store_conn_cmd_alloc(conn);
    if (cmd == NULL) {
        if (buf != NULL) {
            ngx_free(buf);
        }

        return NULL;
    }

    if (buf == NULL) {
        buf = cmd->small;

    } else {
        cmd->own = 1;
    }

    cmd->buf = (char *) buf;

    return cmd;
}


/* "$7 EVALSHA $40 sha $N nkeys", in RESP */

static u_char *
ngx_http_dynamo_rl_store_evalsha(u_char *p, ngx_uint_t script,
    ngx_uint_t nkeys)
{
    size_t  n;
    u_char  nk[NGX_INT_T_LEN + 2];

    p = ngx_cpymem(p, "$7\r\nEVALSHA\r\n$40\r\n",
                   sizeof("$7\r\nEVALSHA\r\n$40\r\n") - 1);
    p = ngx_cpymem(p, ngx_http_dynamo_rl_scripts[script].sha, 40);
    *p++ = '\r';
    *p++ = '\n';
    n = ngx_http_dynamo_rl_store_format(nk, '\0', nkeys) - nk - 2;
    p = ngx_http_dynamo_rl_store_format(p, '$', n);
    p = ngx_cpymem(p, nk, n + 2);

    return p;
}


/*
 * into the connection's output and FIFO; wait=: a WAIT after a claim, or,
 * while one is out, the claim is covered by the next (a WAIT blocks the
 * connection in the store: with one at a time, a heartbeat or a gate read
 * waits for one WAIT at most, never for a convoy of them)
 */

static ngx_int_t
ngx_http_dynamo_rl_store_queue(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    if (ngx_http_dynamo_rl_store_conn_enqueue(conn, cmd) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!conn->store->wait || cmd->script != NGX_HTTP_DYNAMO_RL_SCRIPT_CLAIM
        || cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER || !cmd->waited)
    {
        return NGX_OK;
    }

    cmd->wait = 1;

    if (conn->waiting) {
        if (!conn->owing) {
            conn->owing = 1;
            conn->owed = cmd->deadline;
        }

        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_store_wait(conn, cmd->deadline) != NGX_OK) {

        /*
         * the claim is in the FIFO, its reply will come: its waiters are
         * answered now as by an unavailable store (they release the ids)
         */

        cmd->wait = 0;
        ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                             NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                             NGX_ERROR, NULL);
    }

    return NGX_OK;
}


/*
 * the reply to a user's command or to a WAIT, taken from the FIFO by the
 * connection; NGX_ERROR: the connection was closed, stop reading
 */

static ngx_int_t
ngx_http_dynamo_rl_store_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, redisReply *reply)
{
    ngx_uint_t  readonly;

    if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_WAIT) {
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
        return ngx_http_dynamo_rl_store_waited_reply(conn, reply);
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

            ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                               NGX_HTTP_DYNAMO_RL_STORE_R_ERROR,
                                               NGX_ERROR, NULL);
            ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);

            if (!conn->loading) {
                (void) ngx_http_dynamo_rl_store_conn_reload(conn);
            }

            return NGX_OK;
        }

        if (ngx_http_dynamo_rl_store_noscript(conn, cmd) != NGX_OK) {
            ngx_queue_insert_head(&conn->fifo, &cmd->queue);
            conn->nfifo++;
            ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    /* a replica after a failover: the endpoint will point elsewhere */

    readonly = (reply->type == REDIS_REPLY_ERROR && reply->len >= 8
                && ngx_strncmp(reply->str, "READONLY", 8) == 0);

    if (readonly && !cmd->waited) {
        /*
         * a write of its own (a record's end, a release) that the demoted
         * primary did not run: back to the head of the FIFO, whence the
         * lost connection puts it first of the pending writes, for the
         * primary found next; thrown away, the record would stay in
         * flight, renewed by the heartbeat, or the id used up
         */

        freeReplyObject(reply);

        ngx_queue_insert_head(&conn->fifo, &cmd->queue);
        conn->nfifo++;

        ngx_http_dynamo_rl_store_conn_fail(conn, "the store is read-only", 0);
        return NGX_ERROR;
    }

    /* wait=: the claims are answered once the replicas have them */

    if (cmd->wait && reply->type != REDIS_REPLY_ERROR) {
        cmd->reply = reply;
        ngx_queue_insert_tail(&conn->held, &cmd->queue);

        return NGX_OK;
    }

    ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                         (reply->type == REDIS_REPLY_ERROR)
                                         ? NGX_HTTP_DYNAMO_RL_STORE_R_ERROR
                                         : NGX_HTTP_DYNAMO_RL_STORE_R_OK,
                                         NGX_OK, reply);

    freeReplyObject(reply);
    ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);

    if (readonly) {
        ngx_http_dynamo_rl_store_conn_fail(conn, "the store is read-only", 0);
        return NGX_ERROR;
    }

    ngx_http_dynamo_rl_store_conn_idle(conn);

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

    ngx_http_dynamo_rl_store_conn_cmd_release(cmd);

    cmd->buf = (char *) buf;
    cmd->len = p - buf;
    cmd->own = 1;
    cmd->retried = 1;

    if (ngx_http_dynamo_rl_store_queue(conn, cmd) != NGX_OK) {
        return NGX_ERROR;
    }

    /* if the scripts cannot be loaded again, EVAL still serves */

    if (!conn->loading) {
        (void) ngx_http_dynamo_rl_store_conn_reload(conn);
    }

    return NGX_OK;
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


/*
 * wait=N: "WAIT N ms" right after a claim, or after the claims sent while
 * the last one was out, on the same connection (WAIT waits for the
 * connection's own writes), within what is left of the first claim's
 * timeout (WAIT 0 would block for ever)
 */

static ngx_int_t
ngx_http_dynamo_rl_store_wait(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_msec_t deadline)
{
    size_t           len[3];
    u_char          *p;
    const char      *argv[3];
    ngx_msec_int_t   left;
    u_char           n[NGX_INT_T_LEN], ms[NGX_INT_T_LEN];

    left = (ngx_msec_int_t) (deadline - ngx_current_msec);

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

    if (ngx_http_dynamo_rl_store_conn_internal(conn,
                                               NGX_HTTP_DYNAMO_RL_STORE_WAIT,
                                               0, 3, argv, len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    conn->waiting = 1;

    return NGX_OK;
}


/*
 * the reply to a WAIT: the claims held before it are answered with their
 * own replies if enough replicas have them, or as by an unavailable store
 * (their requests release their ids); the claims sent since get the next
 * WAIT, at the end of the FIFO.  A WAIT after claims that went again as
 * EVAL (NOSCRIPT) may have nothing held.
 */

static ngx_int_t
ngx_http_dynamo_rl_store_waited_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    redisReply *reply)
{
    ngx_int_t                    rc;
    ngx_uint_t                   enough, refused;
    ngx_queue_t                  held;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    enough = (reply->type == REDIS_REPLY_INTEGER
              && reply->integer >= (long long) store->wait);
    refused = 0;

    ngx_queue_init(&held);

    if (!ngx_queue_empty(&conn->held)) {
        ngx_queue_add(&held, &conn->held);
        ngx_queue_init(&conn->held);

        if (!enough) {
            refused = 1;

            ngx_log_error(NGX_LOG_WARN, conn->log, 0,
                          "dynamo rl store: \"%V\" had the claims on %L of"
                          " %ui replicas within the timeout, refused",
                          &store->url,
                          reply->type == REDIS_REPLY_INTEGER
                          ? (int64_t) reply->integer : (int64_t) -1,
                          store->wait);
        }
    }

    freeReplyObject(reply);

    conn->waiting = 0;
    rc = NGX_OK;

    if (refused && store->sentinel.len) {
        /*
         * a primary without its replicas: after a failover, the demoted
         * one, until the sentinels reconfigure it; they are asked again
         */

        ngx_http_dynamo_rl_store_held(conn, &held, 0);

        if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY) {
            ngx_http_dynamo_rl_store_conn_fail(conn, "too few replicas (wait=),"
                                               " the sentinels asked again", 0);
        }

        return NGX_ERROR;
    }

    if (conn->owing) {
        conn->owing = 0;
        rc = ngx_http_dynamo_rl_store_wait(conn, conn->owed);
    }

    ngx_http_dynamo_rl_store_held(conn, &held, enough);

    if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {
        /* a handler's command failed the connection */
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
        return NGX_ERROR;
    }

    ngx_http_dynamo_rl_store_conn_idle(conn);

    return NGX_OK;
}


/* the held claims, with their replies or as by an unavailable store */

static void
ngx_http_dynamo_rl_store_held(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_queue_t *held, ngx_uint_t enough)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    while (!ngx_queue_empty(held)) {
        q = ngx_queue_head(held);
        ngx_queue_remove(q);

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (enough) {
            ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                                NGX_HTTP_DYNAMO_RL_STORE_R_OK,
                                                NGX_OK, cmd->reply);

        } else {
            ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                               NGX_HTTP_DYNAMO_RL_STORE_R_ERROR,
                                               NGX_ERROR, NULL);
        }

        freeReplyObject(cmd->reply);
        cmd->reply = NULL;
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
    }
}


/*
 * the connection is lost, or the process exits: the held claims are
 * answered as by an unavailable store, or not; the WAITs are gone
 */

static void
ngx_http_dynamo_rl_store_wait_drop(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t call)
{
    ngx_queue_t                      held, *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    conn->waiting = 0;
    conn->owing = 0;

    if (ngx_queue_empty(&conn->held)) {
        return;
    }

    ngx_queue_init(&held);
    ngx_queue_add(&held, &conn->held);
    ngx_queue_init(&conn->held);

    if (call) {
        ngx_http_dynamo_rl_store_held(conn, &held, 0);
        return;
    }

    while (!ngx_queue_empty(&held)) {
        q = ngx_queue_head(&held);
        ngx_queue_remove(q);

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        freeReplyObject(cmd->reply);
        cmd->reply = NULL;
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
    }
}


/*
 * sentinel://host[:port][,host[:port]...]/name: the sentinels, asked in
 * turn for the primary of "name" on every connect
 */

static char *
ngx_http_dynamo_rl_store_sentinel_url(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *url)
{
    u_char     *p, *last, *q, *comma;
    ngx_url_t   u;

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

    while (p < q) {
        comma = ngx_strlchr(p, q, ',');

        if (comma == NULL) {
            comma = q;
        }

        ngx_memzero(&u, sizeof(ngx_url_t));

        u.url.data = p;
        u.url.len = comma - p;
        u.default_port = 26379;
        u.no_resolve = 1;

        if (u.url.len == 0 || ngx_parse_url(cf->pool, &u) != NGX_OK
            || u.uri.len || u.family == AF_UNIX)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%s in the store URL \"%V\"",
                               u.err ? u.err : "invalid sentinel", url);
            return NGX_CONF_ERROR;
        }

        if (ngx_http_dynamo_rl_store_resolve_add(cf, store->resolve, &u)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        p = comma + 1;
    }

    return NGX_CONF_OK;
}
