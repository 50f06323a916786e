
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include "ngx_http_dynamo_rl_store_tls.h"


/*
 * The connection's log is the TLS layer's own while it lives: what
 * OpenSSL and nginx's TLS code would log (a handshake refused, an alert,
 * a read that failed) is kept as the reason of the failure the store
 * client logs once, never as lines of its own.
 */


#define NGX_HTTP_DYNAMO_RL_STORE_TLS_DEPTH  9


struct ngx_http_dynamo_rl_store_tls_s {
    /* configuration */
    ngx_ssl_t                       ssl;
    ngx_str_t                       name;         /* SNI, the name checked */
    ngx_str_t                       trusted;
    ngx_str_t                       certificate;
    ngx_str_t                       certificate_key;
    ngx_uint_t                      seen;
    ngx_flag_t                      verify;

    unsigned                        addr:1;       /* name is an address */
    unsigned                        asked:1;      /* for a client cert */

    /* per worker process */
    ngx_ssl_session_t              *session;
    ngx_log_t                       log;
    ngx_log_t                      *real;
    ngx_uint_t                      level;
    size_t                          cause_len;
    u_char                          cause[256];
    u_char                          reason[320];
};


static void ngx_http_dynamo_rl_store_tls_writer(ngx_log_t *log,
    ngx_uint_t level, u_char *buf, size_t len);
static void ngx_http_dynamo_rl_store_tls_save(ngx_connection_t *c);
static int ngx_http_dynamo_rl_store_tls_asked(ngx_ssl_conn_t *ssl_conn,
    X509 **x509, EVP_PKEY **pkey);
static void ngx_http_dynamo_rl_store_tls_cleanup(void *data);
static ngx_int_t ngx_http_dynamo_rl_store_tls_is_addr(ngx_str_t *name);


ngx_http_dynamo_rl_store_tls_t *
ngx_http_dynamo_rl_store_tls_create(ngx_conf_t *cf, ngx_str_t *host)
{
    ngx_http_dynamo_rl_store_tls_t  *tls;

    tls = ngx_pcalloc(cf->pool, sizeof(ngx_http_dynamo_rl_store_tls_t));
    if (tls == NULL) {
        return NULL;
    }

    /* an IPv6 address keeps its brackets in the URL's host */

    tls->name = *host;

    if (tls->name.len > 2 && tls->name.data[0] == '[') {
        tls->name.data++;
        tls->name.len -= 2;
    }

    tls->verify = 1;

    return tls;
}


/* tls_verify=on|off, tls_name=, tls_trusted_certificate=, ... */

char *
ngx_http_dynamo_rl_store_tls_param(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_tls_t *tls, ngx_str_t *value)
{
    ngx_str_t   s;
    ngx_uint_t  j;

    static const char  *names[] = {
        "tls_verify=", "tls_name=", "tls_trusted_certificate=",
        "tls_certificate=", "tls_certificate_key="
    };

    if (tls == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" requires a \"rediss://\" store URL",
                           value);
        return NGX_CONF_ERROR;
    }

    for (j = 0; j < sizeof(names) / sizeof(names[0]); j++) {
        if (ngx_strncmp(value->data, names[j], ngx_strlen(names[j])) == 0) {
            break;
        }
    }

    if (j == sizeof(names) / sizeof(names[0])) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    if (tls->seen & (1 << j)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate parameter \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    tls->seen |= 1 << j;

    s.data = value->data + ngx_strlen(names[j]);
    s.len = value->len - ngx_strlen(names[j]);

    if (s.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "empty value in \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    switch (j) {

    case 0: /* tls_verify */
        if (s.len == 2 && ngx_strncmp(s.data, "on", 2) == 0) {
            tls->verify = 1;

        } else if (s.len == 3 && ngx_strncmp(s.data, "off", 3) == 0) {
            tls->verify = 0;

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid tls_verify \"%V\","
                               " it must be \"on\" or \"off\"", &s);
            return NGX_CONF_ERROR;
        }

        break;

    case 1: /* tls_name */
        tls->name = s;
        break;

    case 2: /* tls_trusted_certificate */
        tls->trusted = s;
        break;

    case 3: /* tls_certificate */
        tls->certificate = s;
        break;

    default: /* tls_certificate_key */
        tls->certificate_key = s;
        break;
    }

    return NGX_CONF_OK;
}


char *
ngx_http_dynamo_rl_store_tls_init(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_tls_t *tls)
{
    u_char              *p;
    ngx_pool_cleanup_t  *cln;

    if ((tls->certificate.len == 0) != (tls->certificate_key.len == 0)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"tls_certificate\" and \"tls_certificate_key\""
                           " go together");
        return NGX_CONF_ERROR;
    }

    if (tls->verify && tls->name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "no name to check the store's certificate"
                           " against: set \"tls_name=\"");
        return NGX_CONF_ERROR;
    }

    /* a NUL-terminated copy, for SSL_set_tlsext_host_name() */

    p = ngx_pnalloc(cf->pool, tls->name.len + 1);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(p, tls->name.data, tls->name.len);
    p[tls->name.len] = '\0';
    tls->name.data = p;

    tls->addr = (ngx_http_dynamo_rl_store_tls_is_addr(&tls->name) == NGX_OK);

    tls->ssl.log = cf->log;

    if (ngx_ssl_create(&tls->ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, tls)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(&tls->ssl);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = &tls->ssl;

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_dynamo_rl_store_tls_cleanup;
    cln->data = tls;

    if (tls->certificate.len
        && ngx_ssl_certificate(cf, &tls->ssl, &tls->certificate,
                               &tls->certificate_key, NULL)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    /* without one, a store that asks for it is told in the reason */

    if (tls->certificate.len == 0) {
        SSL_CTX_set_client_cert_cb(tls->ssl.ctx,
                                   ngx_http_dynamo_rl_store_tls_asked);
    }

    if (tls->verify) {
        if (ngx_ssl_trusted_certificate(cf, &tls->ssl, &tls->trusted,
                                        NGX_HTTP_DYNAMO_RL_STORE_TLS_DEPTH)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        /* without tls_trusted_certificate: the system's CAs */

        if (tls->trusted.len == 0
            && SSL_CTX_set_default_verify_paths(tls->ssl.ctx) != 1)
        {
            ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0,
                          "SSL_CTX_set_default_verify_paths() failed");
            return NGX_CONF_ERROR;
        }
    }

    if (ngx_ssl_client_session_cache(cf, &tls->ssl, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * NGX_AGAIN: the handshake goes on in the event loop, "handler" is
 * called when it ends or times out; NGX_OK or NGX_ERROR: it ended, the
 * caller calls its handler itself.  Either way _tls_check() tells.
 */

ngx_int_t
ngx_http_dynamo_rl_store_tls_connect(ngx_http_dynamo_rl_store_tls_t *tls,
    ngx_connection_t *c, ngx_msec_t timeout, ngx_connection_handler_pt handler)
{
    ngx_int_t  rc;

    tls->real = c->log;
    tls->log = *c->log;
    tls->log.log_level = NGX_LOG_INFO;
    tls->log.writer = ngx_http_dynamo_rl_store_tls_writer;
    tls->log.wdata = tls;
    tls->log.next = NULL;
    tls->log.handler = NULL;
    tls->cause_len = 0;
    tls->asked = 0;

    if (c->pool == NULL) {
        c->pool = ngx_create_pool(1024, c->log);
        if (c->pool == NULL) {
            return NGX_ERROR;
        }
    }

    if (ngx_ssl_create_connection(&tls->ssl, c, NGX_SSL_CLIENT) != NGX_OK) {
        return NGX_ERROR;
    }

    c->sendfile = 0;
    c->log = &tls->log;
    c->read->log = &tls->log;
    c->write->log = &tls->log;

    if (tls->addr == 0
        && SSL_set_tlsext_host_name(c->ssl->connection,
                                    (char *) tls->name.data)
           == 0)
    {
        ngx_ssl_error(NGX_LOG_ERR, c->log, 0,
                      "SSL_set_tlsext_host_name(\"%V\") failed", &tls->name);
        return NGX_ERROR;
    }

    if (tls->session != NULL
        && ngx_ssl_set_session(c, tls->session) != NGX_OK)
    {
        return NGX_ERROR;
    }

    c->ssl->save_session = ngx_http_dynamo_rl_store_tls_save;

    rc = ngx_ssl_handshake(c);

    if (rc == NGX_AGAIN) {
        if (!c->write->timer_set) {
            ngx_add_timer(c->write, timeout);
        }

        c->ssl->handler = handler;
    }

    return rc;
}


/* NULL: the handshake succeeded and the store is who it should be */

const char *
ngx_http_dynamo_rl_store_tls_check(ngx_http_dynamo_rl_store_tls_t *tls,
    ngx_connection_t *c)
{
    u_char  *p;
    long     rc;
    X509    *cert;

    p = tls->reason;

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (c->read->timedout || c->write->timedout) {
        c->timedout = 1;
        return "the TLS handshake timed out";
    }

    if (c->ssl == NULL || !c->ssl->handshaked) {
        p = ngx_snprintf(p, sizeof(tls->reason) - 1,
                         "the TLS handshake failed: %*s", tls->cause_len,
                         tls->cause_len ? tls->cause : (u_char *) "");
        tls->cause_len = 0;
        *p = '\0';
        return (char *) tls->reason;
    }

    if (tls->verify) {
        rc = SSL_get_verify_result(c->ssl->connection);

        if (rc != X509_V_OK) {
            p = ngx_snprintf(p, sizeof(tls->reason) - 1,
                             "the store's certificate is not trusted:"
                             " (%l: %s)", rc,
                             X509_verify_cert_error_string(rc));
            *p = '\0';
            return (char *) tls->reason;
        }

        /*
         * the subjectAltName alone, never the CN (RFC 6125, 6.4.4), and
         * no partial wildcard ("r*.example.test"): ngx_ssl_check_host()
         * allows both
         */

        cert = SSL_get_peer_certificate(c->ssl->connection);

        if (cert == NULL) {
            rc = 0;

        } else if (tls->addr) {
            rc = (X509_check_ip_asc(cert, (char *) tls->name.data, 0) == 1);

        } else {
            rc = (X509_check_host(cert, (char *) tls->name.data,
                                  tls->name.len,
                                  X509_CHECK_FLAG_NEVER_CHECK_SUBJECT
                                  |X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS,
                                  NULL)
                  == 1);
        }

        X509_free(cert);

        if (!rc) {
            p = ngx_snprintf(p, sizeof(tls->reason) - 1,
                             "the store's certificate does not match"
                             " \"%V\"", &tls->name);
            *p = '\0';
            return (char *) tls->reason;
        }
    }

    ngx_log_error(NGX_LOG_INFO, tls->real, 0,
                  "dynamo rl store: %s to \"%V\"%s%s",
                  SSL_get_version(c->ssl->connection), &tls->name,
                  SSL_session_reused(c->ssl->connection)
                  ? ", session reused" : "",
                  tls->verify ? ", verified" : ", not verified");

    tls->cause_len = 0;

    return NULL;
}


/* the reason the TLS layer saw for a failure, else the store's own */

const char *
ngx_http_dynamo_rl_store_tls_cause(ngx_http_dynamo_rl_store_tls_t *tls,
    const char *cause, ngx_err_t *err)
{
    u_char  *p, *last;

    if (tls == NULL || cause == (const char *) tls->reason
        || (tls->cause_len == 0 && !tls->asked))
    {
        return cause;
    }

    p = tls->reason;
    last = p + sizeof(tls->reason) - 1;

    if (tls->cause_len) {
        /* the TLS layer's line has the error number */
        p = ngx_slprintf(p, last, "%s: %*s", cause, tls->cause_len,
                         tls->cause);
        *err = 0;

    } else {
        p = ngx_slprintf(p, last, "%s", cause);
    }

    if (tls->asked) {
        p = ngx_slprintf(p, last, " (the store asked for a client"
                         " certificate, and \"tls_certificate=\" is not"
                         " set)");
    }

    *p = '\0';

    tls->cause_len = 0;
    tls->asked = 0;

    return (char *) tls->reason;
}


/* before ngx_close_connection(): no close_notify, the session kept */

void
ngx_http_dynamo_rl_store_tls_close(ngx_connection_t *c)
{
    if (c->ssl != NULL) {
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;

        (void) ngx_ssl_shutdown(c);
    }

    if (c->pool != NULL) {
        ngx_destroy_pool(c->pool);
        c->pool = NULL;
    }
}


/* a line of the connection's log: its text after "[level] pid#tid: " */

static void
ngx_http_dynamo_rl_store_tls_writer(ngx_log_t *log, ngx_uint_t level,
    u_char *buf, size_t len)
{
    u_char                          *p, *last;
    ngx_http_dynamo_rl_store_tls_t  *tls;

    tls = log->wdata;

    if (level > NGX_LOG_INFO
        || (tls->cause_len && level >= tls->level))
    {
        return;
    }

    last = buf + len;

    while (last > buf && (last[-1] == LF || last[-1] == CR)) {
        last--;
    }

    p = ngx_strlchr(buf, last, ']');
    p = (p == NULL) ? NULL : ngx_strlcasestrn(p, last, (u_char *) ": ", 1);

    if (p == NULL) {
        return;
    }

    p += 2;

    if (p < last && *p == '*') {
        while (p < last && *p != ' ') {
            p++;
        }

        if (p < last) {
            p++;
        }
    }

    len = ngx_min((size_t) (last - p), sizeof(tls->cause));

    ngx_memcpy(tls->cause, p, len);
    tls->cause_len = len;
    tls->level = level;
}


static void
ngx_http_dynamo_rl_store_tls_save(ngx_connection_t *c)
{
    ngx_ssl_session_t               *session;
    ngx_http_dynamo_rl_store_tls_t  *tls;

    tls = SSL_CTX_get_ex_data(c->ssl->session_ctx, ngx_ssl_server_conf_index);

    session = ngx_ssl_get_session(c);
    if (session == NULL) {
        return;
    }

    if (tls->session != NULL) {
        ngx_ssl_free_session(tls->session);
    }

    tls->session = session;
}


static int
ngx_http_dynamo_rl_store_tls_asked(ngx_ssl_conn_t *ssl_conn, X509 **x509,
    EVP_PKEY **pkey)
{
    ngx_http_dynamo_rl_store_tls_t  *tls;

    tls = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl_conn),
                              ngx_ssl_server_conf_index);

    if (tls != NULL) {
        tls->asked = 1;
    }

    return 0;
}


static void
ngx_http_dynamo_rl_store_tls_cleanup(void *data)
{
    ngx_http_dynamo_rl_store_tls_t  *tls = data;

    if (tls->session != NULL) {
        ngx_ssl_free_session(tls->session);
        tls->session = NULL;
    }
}


static ngx_int_t
ngx_http_dynamo_rl_store_tls_is_addr(ngx_str_t *name)
{
#if (NGX_HAVE_INET6)
    u_char  addr6[16];
#endif

    if (ngx_inet_addr(name->data, name->len) != INADDR_NONE) {
        return NGX_OK;
    }

#if (NGX_HAVE_INET6)
    if (ngx_inet6_addr(name->data, name->len, addr6) == NGX_OK) {
        return NGX_OK;
    }
#endif

    return NGX_DECLINED;
}
