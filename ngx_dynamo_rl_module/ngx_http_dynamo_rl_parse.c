
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"


static ngx_int_t ngx_http_dynamo_rl_host_valid(u_char *p, u_char *last);
static u_char *ngx_http_dynamo_rl_url_scheme(u_char *p, size_t len);
static u_char *ngx_http_dynamo_rl_url_host_end(u_char *p, u_char *last);
static void ngx_http_dynamo_rl_sse_line(ngx_http_dynamo_rl_sse_t *sse);
static void ngx_http_dynamo_rl_sse_field(ngx_http_dynamo_rl_sse_t *sse);
static void ngx_http_dynamo_rl_sse_json(ngx_http_dynamo_rl_sse_t *sse,
    u_char c);
static void ngx_http_dynamo_rl_sse_close(ngx_http_dynamo_rl_sse_t *sse);
static ngx_uint_t ngx_http_dynamo_rl_sse_in_array(
    ngx_http_dynamo_rl_sse_t *sse);
static ngx_uint_t ngx_http_dynamo_rl_sse_kind(ngx_http_dynamo_rl_sse_t *sse,
    u_char c);
static void ngx_http_dynamo_rl_sse_key(ngx_http_dynamo_rl_sse_t *sse);
static void ngx_http_dynamo_rl_sse_string(ngx_http_dynamo_rl_sse_t *sse);
static ngx_inline uint64_t ngx_http_dynamo_rl_le64(u_char *p);
static ngx_inline uint64_t ngx_http_dynamo_rl_siphash_cd(u_char *key, u_char *p,
    size_t len, ngx_uint_t c, ngx_uint_t d);
static ngx_int_t ngx_http_dynamo_rl_caseeq(u_char *a, u_char *b, size_t n);
static ngx_int_t ngx_http_dynamo_rl_state_token(u_char **pos, u_char *end,
    ngx_str_t *tok, u_char sep);
static ngx_int_t ngx_http_dynamo_rl_state_u64(u_char **pos, u_char *end,
    uint64_t *n, ngx_uint_t dash, u_char sep);
static ngx_int_t ngx_http_dynamo_rl_routes_word(u_char **pos, u_char *last,
    ngx_str_t *word);
static ngx_int_t ngx_http_dynamo_rl_state_hex(ngx_str_t *tok, u_char *dst,
    size_t size, size_t *len);
static ngx_uint_t ngx_http_dynamo_rl_scan_key(u_char *p, u_char *last);
static void ngx_http_dynamo_rl_scan_member(
    ngx_http_dynamo_rl_scan_worker_t *w, ngx_uint_t key, u_char *end);
static u_char *ngx_http_dynamo_rl_rewrite_cut(u_char *start, u_char *end,
    u_char *key, u_char *value_end, u_char *done, u_char **cut_end);


#define NGX_HTTP_DYNAMO_RL_SCAN_OTHER    0
#define NGX_HTTP_DYNAMO_RL_SCAN_ROOT     1
#define NGX_HTTP_DYNAMO_RL_SCAN_WORKERS  2
#define NGX_HTTP_DYNAMO_RL_SCAN_WORKER   3
#define NGX_HTTP_DYNAMO_RL_SCAN_URL      4   /* a worker's system_url value */
#define NGX_HTTP_DYNAMO_RL_SCAN_BASE     5   /* its admin_base_url value */

#define NGX_HTTP_DYNAMO_RL_KEY_OTHER     0
#define NGX_HTTP_DYNAMO_RL_KEY_WORKERS   1
#define NGX_HTTP_DYNAMO_RL_KEY_ID        2
#define NGX_HTTP_DYNAMO_RL_KEY_URL       3
#define NGX_HTTP_DYNAMO_RL_KEY_BASE      4

/* words of a caller's scope: a map's value may span lines */
#define NGX_HTTP_DYNAMO_RL_SPACE(c)                                          \
    ((c) == ' ' || (c) == '\t' || (c) == '\r' || (c) == '\n')


ngx_http_dynamo_rl_attempt_reason_t
    ngx_http_dynamo_rl_attempt_reasons[NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS] =
{
    { ngx_null_string, "" },
    { ngx_string("worker_exited"), "we" },
    { ngx_string("not_forwarded"), "nf" },
    { ngx_string("send_timeout"), "st" },
    { ngx_string("gateway_shutdown"), "gs" },
    { ngx_string("client_closed"), "cc" },
    { ngx_string("upstream_status"), "us" },
    { ngx_string("upstream_incomplete"), "ui" },
    { ngx_string("in_stream_error"), "ie" },
    { ngx_string("aborted"), "ab" },
    { ngx_string("undelivered"), "ud" },
    { ngx_string("replica_lost"), "rl" }
};


/*
 * an attempt id is 1..128 bytes of [A-Za-z0-9._:-]; anything else,
 * including CR, LF, spaces, controls and non-ASCII bytes, is refused
 */

ngx_int_t
ngx_http_dynamo_rl_attempt_id_valid(u_char *p, size_t len)
{
    u_char  c;
    size_t  i;

    if (len == 0 || len > NGX_HTTP_DYNAMO_RL_ATTEMPT_ID_LEN) {
        return NGX_DECLINED;
    }

    for (i = 0; i < len; i++) {
        c = p[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || c == '.' || c == '_' || c == ':' || c == '-')
        {
            continue;
        }

        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * RFC 9562 UUIDv7: 48 bits of Unix time in milliseconds, version 7,
 * 12 bits rand_a, variant 10, 62 bits rand_b; "rnd" holds 10 bytes
 */

u_char *
ngx_http_dynamo_rl_uuid7(u_char *dst, uint64_t ms, u_char *rnd)
{
    u_char      b[16], c;
    ngx_uint_t  i;

    static const u_char  hex[] = "0123456789abcdef";

    /* where each byte's two digits go, the dashes between */

    static const u_char  pos[] = {
        0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34
    };

    b[0] = (u_char) (ms >> 40);
    b[1] = (u_char) (ms >> 32);
    b[2] = (u_char) (ms >> 24);
    b[3] = (u_char) (ms >> 16);
    b[4] = (u_char) (ms >> 8);
    b[5] = (u_char) ms;

    ngx_memcpy(&b[6], rnd, 10);

    b[6] = (u_char) (0x70 | (b[6] & 0x0f));
    b[8] = (u_char) (0x80 | (b[8] & 0x3f));

    for (i = 0; i < 16; i++) {
        c = b[i];
        dst[pos[i]] = hex[c >> 4];
        dst[pos[i] + 1] = hex[c & 0x0f];
    }

    dst[8] = '-';
    dst[13] = '-';
    dst[18] = '-';
    dst[23] = '-';

    return dst + 36;
}


/*
 * nginx selects a location by the decoded and normalised $uri, while a
 * plain proxy_pass forwards the raw bytes; the two must be identical
 */

ngx_int_t
ngx_http_dynamo_rl_target_canonical(u_char *raw, size_t raw_len,
    u_char *uri, size_t uri_len)
{
    u_char  *q;

    q = ngx_strlchr(raw, raw + raw_len, '?');

    if (q != NULL) {
        raw_len = q - raw;
    }

    if (raw_len != uri_len || ngx_memcmp(raw, uri, uri_len) != 0) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* canonical decimal: no sign, no leading zeros, at most 2^64 - 1 */

ngx_int_t
ngx_http_dynamo_rl_parse_u64(u_char *p, size_t len, uint64_t *n)
{
    size_t    i;
    uint64_t  v, d;

    if (len == 0 || len > 20 || (p[0] == '0' && len > 1)) {
        return NGX_DECLINED;
    }

    v = 0;

    for (i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return NGX_DECLINED;
        }

        d = p[i] - '0';

        if (v > (UINT64_MAX - d) / 10) {
            return NGX_DECLINED;
        }

        v = v * 10 + d;
    }

    *n = v;

    return NGX_OK;
}


/* route = segment *( "/" segment ), segment = [A-Za-z0-9][A-Za-z0-9._-]* */

ngx_int_t
ngx_http_dynamo_rl_route_valid(u_char *p, size_t len)
{
    u_char      c;
    size_t      i;
    ngx_uint_t  start;

    if (len == 0) {
        return NGX_DECLINED;
    }

    start = 1;

    for (i = 0; i < len; i++) {
        c = p[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9'))
        {
            start = 0;
            continue;
        }

        if (start) {
            return NGX_DECLINED;
        }

        if (c == '.' || c == '_' || c == '-') {
            continue;
        }

        if (c == '/') {
            start = 1;
            continue;
        }

        return NGX_DECLINED;
    }

    return start ? NGX_DECLINED : NGX_OK;
}


/* "{instance_id}/engine/{route}", the part after the location prefix */

ngx_int_t
ngx_http_dynamo_rl_parse_admin_path(u_char *p, size_t len, uint64_t *id,
    ngx_str_t *route)
{
    u_char  *slash, *last;

    static u_char  engine[] = "/engine/";

    last = p + len;

    slash = ngx_strlchr(p, last, '/');
    if (slash == NULL) {
        return NGX_DECLINED;
    }

    if (ngx_http_dynamo_rl_parse_u64(p, slash - p, id) != NGX_OK) {
        return NGX_DECLINED;
    }

    if ((size_t) (last - slash) < sizeof(engine) - 1
        || ngx_memcmp(slash, engine, sizeof(engine) - 1) != 0)
    {
        return NGX_DECLINED;
    }

    route->data = slash + sizeof(engine) - 1;
    route->len = last - route->data;

    return ngx_http_dynamo_rl_route_valid(route->data, route->len);
}


/*
 * system_url: "http" or "https", "://", a host (name, IPv4 or bracketed
 * IPv6), an optional port and at most a single "/"; no userinfo, query,
 * fragment or path
 */

ngx_int_t
ngx_http_dynamo_rl_system_url_valid(u_char *p, size_t len)
{
    u_char      *last, *host, *port;
    ngx_uint_t   n, digits;

    last = p + len;

    host = ngx_http_dynamo_rl_url_scheme(p, len);
    if (host == NULL) {
        return NGX_DECLINED;
    }

    if (last > host && last[-1] == '/') {
        last--;
    }

    /* a "/" left in the host stops it there, and is refused below */

    p = ngx_http_dynamo_rl_url_host_end(host, last);
    if (p == NULL) {
        return NGX_DECLINED;
    }

    if (ngx_http_dynamo_rl_host_valid(host, p) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (p == last) {
        return NGX_OK;
    }

    if (*p++ != ':') {
        return NGX_DECLINED;
    }

    port = p;
    n = 0;
    digits = 0;

    for ( /* void */ ; p < last; p++) {
        if (*p < '0' || *p > '9' || ++digits > 5) {
            return NGX_DECLINED;
        }

        n = n * 10 + (*p - '0');
    }

    if (p == port || n == 0 || n > 65535) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_host_valid(u_char *p, u_char *last)
{
    u_char      c;
    ngx_uint_t  label;

    if (p == last) {
        return NGX_DECLINED;
    }

    if (*p == '[') {
        /* bracketed IPv6: hex digits, ':' and '.', and no zone id */

        if (last - p < 4 || last[-1] != ']') {
            return NGX_DECLINED;
        }

        for (p++; p < last - 1; p++) {
            c = *p;

            if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
                || (c >= 'A' && c <= 'F') || c == ':' || c == '.')
            {
                continue;
            }

            return NGX_DECLINED;
        }

        return NGX_OK;
    }

    /* a name or IPv4: dot-separated labels of [A-Za-z0-9-] */

    label = 0;

    for ( /* void */ ; p < last; p++) {
        c = *p;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '-' || c == '_')
        {
            if (++label > 63) {
                return NGX_DECLINED;
            }

            continue;
        }

        if (c == '.' && label > 0) {
            label = 0;
            continue;
        }

        return NGX_DECLINED;
    }

    return label > 0 ? NGX_OK : NGX_DECLINED;
}


/*
 * Dynamo's RL listener rule: prefix "P" matches "P" and "P-*", or every
 * name starting with "P" when "P" ends in "-", and "dynamo" matches every
 * name; exact is equality
 */

ngx_int_t
ngx_http_dynamo_rl_namespace_match(ngx_uint_t mode, ngx_str_t *scope,
    u_char *ns, size_t len)
{
    switch (mode) {

    case NGX_HTTP_DYNAMO_RL_NS_ANY:
        return NGX_OK;

    case NGX_HTTP_DYNAMO_RL_NS_EXACT:
        if (len == scope->len && ngx_memcmp(ns, scope->data, len) == 0) {
            return NGX_OK;
        }

        return NGX_DECLINED;

    default: /* NGX_HTTP_DYNAMO_RL_NS_PREFIX */

        /* Dynamo's global namespace: every namespace is under it */

        if (scope->len == 6 && ngx_strncmp(scope->data, "dynamo", 6) == 0) {
            return NGX_OK;
        }

        if (len < scope->len
            || ngx_memcmp(ns, scope->data, scope->len) != 0)
        {
            return NGX_DECLINED;
        }

        if (len == scope->len) {
            return NGX_OK;
        }

        if (ns[scope->len] == '-'
            || (scope->len > 0 && scope->data[scope->len - 1] == '-'))
        {
            return NGX_OK;
        }

        return NGX_DECLINED;
    }
}


/* an upper bound of the number of objects in a document */

ngx_uint_t
ngx_http_dynamo_rl_scan_bound(u_char *p, size_t len)
{
    size_t      i;
    ngx_uint_t  n;

    n = 0;

    for (i = 0; i < len; i++) {
        if (p[i] == '{') {
            n++;
        }
    }

    return n;
}


/*
 * Finds, without judging the document (jansson does that), the byte spans
 * of the elements of the top-level "workers" array and of each element's
 * "instance_id" token.  jansson cannot hold integers above 2^63 - 1, and
 * the discovery plane keeps the listener's bytes, so both need positions.
 * The spans of each element's "system_url" and "admin_base_url" members,
 * from the name's quote to the value's end, are what
 * ngx_http_dynamo_rl_admin_rewrite() replaces or cuts.
 */

ngx_int_t
ngx_http_dynamo_rl_scan_discovery(u_char *p, size_t len,
    ngx_http_dynamo_rl_scan_t *scan)
{
    u_char                            c, *last, *start;
    ngx_uint_t                        depth, key, escaped;
    ngx_uint_t                        role[NGX_HTTP_DYNAMO_RL_SCAN_DEPTH];
    ngx_uint_t                        want_key[NGX_HTTP_DYNAMO_RL_SCAN_DEPTH];
    ngx_http_dynamo_rl_scan_worker_t  *w;

    last = p + len;
    depth = 0;
    key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;
    w = NULL;

    scan->workers_start = NULL;
    scan->workers_end = NULL;
    scan->nworkers = 0;

    while (p < last) {
        c = *p;

        switch (c) {

        case ' ': case '\t': case '\r': case '\n': case ':':
            p++;
            continue;

        case ',':
            if (depth > 0) {
                want_key[depth - 1] = 1;
            }

            key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;
            p++;
            continue;

        case '"':
            start = ++p;
            escaped = 0;

            while (p < last && *p != '"') {
                if (*p == '\\') {
                    escaped = 1;
                    p++;
                }

                p++;
            }

            if (p >= last) {
                return NGX_DECLINED;
            }

            if (depth > 0 && want_key[depth - 1]) {
                want_key[depth - 1] = 0;
                key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;

                if (role[depth - 1] == NGX_HTTP_DYNAMO_RL_SCAN_ROOT
                    && p - start == 7 && ngx_strncmp(start, "workers", 7) == 0)
                {
                    key = NGX_HTTP_DYNAMO_RL_KEY_WORKERS;
                }

                if (role[depth - 1] == NGX_HTTP_DYNAMO_RL_SCAN_WORKER) {
                    if (escaped) {
                        w->escaped_key = 1;
                    }

                    if (p - start == 11
                        && ngx_strncmp(start, "instance_id", 11) == 0)
                    {
                        key = NGX_HTTP_DYNAMO_RL_KEY_ID;

                    } else {
                        /* "system_url" also when spelled with escapes */

                        key = ngx_http_dynamo_rl_scan_key(start, p);

                        if (key == NGX_HTTP_DYNAMO_RL_KEY_URL) {
                            w->url_start = start - 1;

                        } else if (key == NGX_HTTP_DYNAMO_RL_KEY_BASE) {
                            w->base_start = start - 1;
                        }
                    }
                }

                p++;
                continue;
            }

            p++;

            if (depth == 3 && role[2] == NGX_HTTP_DYNAMO_RL_SCAN_WORKER) {
                ngx_http_dynamo_rl_scan_member(w, key, p);
            }

            key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;
            continue;

        case '{':
        case '[':
            if (depth == NGX_HTTP_DYNAMO_RL_SCAN_DEPTH) {
                return NGX_DECLINED;
            }

            role[depth] = NGX_HTTP_DYNAMO_RL_SCAN_OTHER;
            want_key[depth] = (c == '{');

            if (depth == 0 && c == '{') {
                role[depth] = NGX_HTTP_DYNAMO_RL_SCAN_ROOT;

            } else if (depth == 1 && c == '['
                       && key == NGX_HTTP_DYNAMO_RL_KEY_WORKERS
                       && scan->workers_start == NULL)
            {
                role[depth] = NGX_HTTP_DYNAMO_RL_SCAN_WORKERS;
                scan->workers_start = p;

            } else if (depth == 3 && role[2] == NGX_HTTP_DYNAMO_RL_SCAN_WORKER
                       && key == NGX_HTTP_DYNAMO_RL_KEY_URL)
            {
                role[depth] = NGX_HTTP_DYNAMO_RL_SCAN_URL;

            } else if (depth == 3 && role[2] == NGX_HTTP_DYNAMO_RL_SCAN_WORKER
                       && key == NGX_HTTP_DYNAMO_RL_KEY_BASE)
            {
                role[depth] = NGX_HTTP_DYNAMO_RL_SCAN_BASE;

            } else if (depth == 2 && c == '{'
                       && role[1] == NGX_HTTP_DYNAMO_RL_SCAN_WORKERS)
            {
                if (scan->nworkers == scan->nalloc) {
                    return NGX_DECLINED;
                }

                role[depth] = NGX_HTTP_DYNAMO_RL_SCAN_WORKER;
                w = &scan->workers[scan->nworkers++];
                w->start = p;
                w->end = NULL;
                w->id_start = NULL;
                w->id_end = NULL;
                w->url_start = NULL;
                w->url_end = NULL;
                w->base_start = NULL;
                w->base_end = NULL;
                w->escaped_key = 0;
            }

            key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;
            depth++;
            p++;
            continue;

        case '}':
        case ']':
            if (depth == 0) {
                return NGX_DECLINED;
            }

            depth--;

            if (role[depth] == NGX_HTTP_DYNAMO_RL_SCAN_WORKER) {
                w->end = p + 1;

            } else if (role[depth] == NGX_HTTP_DYNAMO_RL_SCAN_WORKERS) {
                scan->workers_end = p;

            } else if (role[depth] == NGX_HTTP_DYNAMO_RL_SCAN_URL) {
                ngx_http_dynamo_rl_scan_member(w, NGX_HTTP_DYNAMO_RL_KEY_URL,
                                               p + 1);

            } else if (role[depth] == NGX_HTTP_DYNAMO_RL_SCAN_BASE) {
                ngx_http_dynamo_rl_scan_member(w, NGX_HTTP_DYNAMO_RL_KEY_BASE,
                                               p + 1);
            }

            key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;
            p++;
            continue;

        default:
            /* a number or a literal */

            start = p;

            while (p < last) {
                c = *p;

                if (c == ' ' || c == '\t' || c == '\r' || c == '\n'
                    || c == ',' || c == ':' || c == '"' || c == '['
                    || c == ']' || c == '{' || c == '}')
                {
                    break;
                }

                p++;
            }

            if (depth == 3 && role[2] == NGX_HTTP_DYNAMO_RL_SCAN_WORKER) {
                if (key == NGX_HTTP_DYNAMO_RL_KEY_ID) {
                    w->id_start = start;
                    w->id_end = p;
                }

                ngx_http_dynamo_rl_scan_member(w, key, p);
            }

            key = NGX_HTTP_DYNAMO_RL_KEY_OTHER;
            continue;
        }
    }

    if (depth != 0) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * dynamo_rl_admin_url's value: "http://" or "https://" and a host, no
 * query, fragment, space, control byte, quote or backslash, so that a
 * client's system_url + "/engine/" + route stays a path of the gateway
 * and the value needs no escaping in JSON
 */

ngx_int_t
ngx_http_dynamo_rl_admin_url_valid(u_char *p, size_t len)
{
    size_t  i, n;

    if (len > 7 && ngx_http_dynamo_rl_caseeq(p, (u_char *) "http://", 7)
                   == NGX_OK)
    {
        n = 7;

    } else if (len > 8
               && ngx_http_dynamo_rl_caseeq(p, (u_char *) "https://", 8)
                  == NGX_OK)
    {
        n = 8;

    } else {
        return NGX_DECLINED;
    }

    if (p[n] == '/') {
        return NGX_DECLINED;
    }

    for (i = n; i < len; i++) {
        if (p[i] <= ' ' || p[i] >= 0x7f || p[i] == '?' || p[i] == '#'
            || p[i] == '"' || p[i] == '\\')
        {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/*
 * a worker's member name, between its quotes: "system_url" or
 * "admin_base_url", escapes decoded as jansson decodes them, so that no
 * spelling keeps a worker's address in a rewritten answer
 */

static ngx_uint_t
ngx_http_dynamo_rl_scan_key(u_char *p, u_char *last)
{
    u_char      c, name[16];
    size_t      n;
    ngx_uint_t  i, code;

    n = 0;

    while (p < last) {
        if (n == sizeof(name)) {
            return NGX_HTTP_DYNAMO_RL_KEY_OTHER;
        }

        c = *p++;

        if (c == '\\') {
            if (p == last) {
                return NGX_HTTP_DYNAMO_RL_KEY_OTHER;
            }

            c = *p++;

            if (c == 'u') {
                if (last - p < 4) {
                    return NGX_HTTP_DYNAMO_RL_KEY_OTHER;
                }

                code = 0;

                for (i = 0; i < 4; i++) {
                    c = p[i];

                    if (c >= '0' && c <= '9') {
                        code = code * 16 + c - '0';

                    } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
                        code = code * 16 + (c | 0x20) - 'a' + 10;

                    } else {
                        return NGX_HTTP_DYNAMO_RL_KEY_OTHER;
                    }
                }

                p += 4;

                if (code >= 0x80) {
                    return NGX_HTTP_DYNAMO_RL_KEY_OTHER;
                }

                c = (u_char) code;

            } else if (c != '"' && c != '\\' && c != '/') {
                /* \b \f \n \r \t: never a letter of the two names */
                c = '\b';
            }
        }

        name[n++] = c;
    }

    if (n == 10 && ngx_strncmp(name, "system_url", 10) == 0) {
        return NGX_HTTP_DYNAMO_RL_KEY_URL;
    }

    if (n == 14 && ngx_strncmp(name, "admin_base_url", 14) == 0) {
        return NGX_HTTP_DYNAMO_RL_KEY_BASE;
    }

    return NGX_HTTP_DYNAMO_RL_KEY_OTHER;
}


static void
ngx_http_dynamo_rl_scan_member(ngx_http_dynamo_rl_scan_worker_t *w,
    ngx_uint_t key, u_char *end)
{
    if (key == NGX_HTTP_DYNAMO_RL_KEY_URL) {
        w->url_end = end;

    } else if (key == NGX_HTTP_DYNAMO_RL_KEY_BASE) {
        w->base_end = end;
    }
}


/*
 * A worker's element, as ngx_http_dynamo_rl_scan_discovery() found it, for
 * a discovery answer that names the gateway's admin plane: the value of
 * "system_url" becomes the JSON string "url" (its contents, escaped by the
 * caller) followed by the decimal id, or, without "url", the member is
 * cut; "admin_base_url" is always cut.  A cut member takes one comma with
 * it, the one before it if there is one, so that the element stays valid
 * JSON; every other byte is kept.  "dst" has room for the element's
 * length plus NGX_HTTP_DYNAMO_RL_REWRITE_ROOM(url).
 */

u_char *
ngx_http_dynamo_rl_admin_rewrite(u_char *dst,
    ngx_http_dynamo_rl_scan_worker_t *w, ngx_str_t *url, uint64_t id)
{
    u_char      *done, *from, *to, *key[2], *end[2], *t, digits[NGX_INT64_LEN];
    ngx_uint_t   i, n;

    n = 0;

    if (w->url_start != NULL && w->url_end != NULL) {
        key[n] = w->url_start;
        end[n] = w->url_end;
        n++;
    }

    if (w->base_start != NULL && w->base_end != NULL) {
        key[n] = w->base_start;
        end[n] = w->base_end;

        if (n == 1 && key[1] < key[0]) {
            key[1] = key[0];
            end[1] = end[0];
            key[0] = w->base_start;
            end[0] = w->base_end;
        }

        n++;
    }

    done = w->start;

    for (i = 0; i < n; i++) {

        if (key[i] == w->url_start && url != NULL) {

            /* the name and the colon stay, the value is replaced */

            for (from = key[i] + 1; from < end[i] && *from != '"'; from++) {
                if (*from == '\\') {
                    from++;
                }
            }

            from++;

            while (from < end[i]
                   && (*from == ':' || NGX_HTTP_DYNAMO_RL_SPACE(*from)))
            {
                from++;
            }

            dst = ngx_cpymem(dst, done, from - done);
            *dst++ = '"';
            dst = ngx_cpymem(dst, url->data, url->len);

            t = digits + NGX_INT64_LEN;

            do {
                *--t = (u_char) ('0' + id % 10);
                id /= 10;
            } while (id);

            dst = ngx_cpymem(dst, t, digits + NGX_INT64_LEN - t);
            *dst++ = '"';

            done = end[i];
            continue;
        }

        from = ngx_http_dynamo_rl_rewrite_cut(w->start, w->end, key[i],
                                              end[i], done, &to);

        dst = ngx_cpymem(dst, done, from - done);
        done = to;
    }

    return ngx_cpymem(dst, done, w->end - done);
}


/* the bytes a member and one of its commas take, not before "done" */

static u_char *
ngx_http_dynamo_rl_rewrite_cut(u_char *start, u_char *end, u_char *key,
    u_char *value_end, u_char *done, u_char **cut_end)
{
    u_char  *p;

    p = key;

    while (p > done && NGX_HTTP_DYNAMO_RL_SPACE(p[-1])) {
        p--;
    }

    if (p > done && p[-1] == ',') {
        *cut_end = value_end;
        return p - 1;
    }

    p = value_end;

    while (p < end && NGX_HTTP_DYNAMO_RL_SPACE(*p)) {
        p++;
    }

    *cut_end = (p < end && *p == ',') ? p + 1 : value_end;

    return key;
}


/*
 * Server-sent events: a stream succeeded only if a line "data: [DONE]"
 * came, and failed if a "data: {"error"..." frame (Dynamo's newest
 * adapter) or an "event: error" line (older ones) came.  Lines end with
 * LF, CR or CRLF; only the first bytes of a line are kept.
 * SSE terminal detection for the ledger, one pass over any split of the
 * stream: done once a "data: [DONE]" line came; error (and aborted) once
 * an event said that the generation failed.  How Dynamo says so, per
 * route (ai-dynamo/dynamo, lib/llm/src/http/service/):
 *
 *   - every route, an error after the 200 was committed: an event whose
 *     data is a JSON object with a top-level "error" member (newer
 *     adapters, then "data: [DONE]"), or an "event: error" line (older
 *     ones, disconnect.rs), any order of members, any spacing, the
 *     object split over several data lines;
 *   - /v1/responses: an event of type "response.failed" or "error" (its
 *     data's top-level "type", or an "event:" line naming it);
 *   - /v1/chat/completions, /v1/completions: a choice's "finish_reason"
 *     "abort", or "nvext": {"detailed_finish_reason": "cancelled"}, which
 *     is how a cancelled generation is told apart from a stop
 *     (finish_reason is "stop" then: the client asks for the detail with
 *     nvext.extra_fields);
 *   - /generate (SGLang's native stream): "meta_info": {"finish_reason":
 *     {"type": "abort"}}, SGLang's own; a cancellation Dynamo sees
 *     itself comes as an "error" member.
 *
 * Lines end with LF, CR or CRLF; an empty line ends an event.  The
 * tokenizer reads an event's data without building it: nesting is
 * followed to NGX_HTTP_DYNAMO_RL_SSE_DEPTH levels, only the names of the
 * objects above and only string values of the members above are kept (24
 * bytes), escapes are skipped, not decoded; data that is not a JSON
 * object is not judged.
 */

#define NGX_HTTP_DYNAMO_RL_SSE_FIELD_NAME   0
#define NGX_HTTP_DYNAMO_RL_SSE_FIELD_DATA   1
#define NGX_HTTP_DYNAMO_RL_SSE_FIELD_EVENT  2
#define NGX_HTTP_DYNAMO_RL_SSE_FIELD_OTHER  3

/* the tokenizer's states */
#define NGX_HTTP_DYNAMO_RL_SSE_START    0   /* before the event's data */
#define NGX_HTTP_DYNAMO_RL_SSE_OFF      1   /* not a JSON object */
#define NGX_HTTP_DYNAMO_RL_SSE_KEY      2   /* a member's name or '}' */
#define NGX_HTTP_DYNAMO_RL_SSE_IN_KEY   3
#define NGX_HTTP_DYNAMO_RL_SSE_COLON    4
#define NGX_HTTP_DYNAMO_RL_SSE_VALUE    5   /* a value, or ']' */
#define NGX_HTTP_DYNAMO_RL_SSE_STRING   6
#define NGX_HTTP_DYNAMO_RL_SSE_SCALAR   7
#define NGX_HTTP_DYNAMO_RL_SSE_NEXT     8   /* ',' or the container's end */

/* what a container is: an object or array the verdict looks into */
#define NGX_HTTP_DYNAMO_RL_SSE_OBJECT   0   /* any other object */
#define NGX_HTTP_DYNAMO_RL_SSE_ARRAY    1   /* any other array */
#define NGX_HTTP_DYNAMO_RL_SSE_TOP      2
#define NGX_HTTP_DYNAMO_RL_SSE_CHOICES  3   /* top.choices */
#define NGX_HTTP_DYNAMO_RL_SSE_CHOICE   4   /* top.choices[i] */
#define NGX_HTTP_DYNAMO_RL_SSE_NVEXT    5   /* top.nvext */
#define NGX_HTTP_DYNAMO_RL_SSE_META     6   /* top.meta_info */
#define NGX_HTTP_DYNAMO_RL_SSE_META_FR  7   /* top.meta_info.finish_reason */

/* a member's name, judged in its object */
#define NGX_HTTP_DYNAMO_RL_SSE_K_OTHER     0
#define NGX_HTTP_DYNAMO_RL_SSE_K_ERROR     1   /* top.error */
#define NGX_HTTP_DYNAMO_RL_SSE_K_TYPE      2   /* top.type */
#define NGX_HTTP_DYNAMO_RL_SSE_K_CHOICES   3
#define NGX_HTTP_DYNAMO_RL_SSE_K_NVEXT     4
#define NGX_HTTP_DYNAMO_RL_SSE_K_META      5
#define NGX_HTTP_DYNAMO_RL_SSE_K_FINISH    6   /* choice.finish_reason */
#define NGX_HTTP_DYNAMO_RL_SSE_K_DETAILED  7   /* nvext.detailed_... */
#define NGX_HTTP_DYNAMO_RL_SSE_K_META_FR   8   /* meta_info.finish_reason */
#define NGX_HTTP_DYNAMO_RL_SSE_K_FR_TYPE   9   /* ....finish_reason.type */

#define ngx_http_dynamo_rl_sse_is(sse, s)                                    \
    ((sse)->blen == sizeof(s) - 1                                            \
     && ngx_strncmp((sse)->buf, s, sizeof(s) - 1) == 0)


void
ngx_http_dynamo_rl_sse_scan(ngx_http_dynamo_rl_sse_t *sse, u_char *p,
    size_t len, ngx_uint_t last)
{
    u_char  c, *end;

    /* the end of the stream comes as (NULL, 0, 1) */

    end = len ? p + len : p;

    for ( /* void */ ; p < end; p++) {
        c = *p;

        if (c == '\n' || c == '\r') {
            if (c == '\n' && sse->cr) {
                sse->cr = 0;
                continue;
            }

            ngx_http_dynamo_rl_sse_line(sse);
            sse->cr = (c == '\r');
            continue;
        }

        sse->cr = 0;

        if (sse->len < sizeof(sse->line)) {
            sse->line[sse->len] = c;
        }

        sse->len++;

        if (sse->field == NGX_HTTP_DYNAMO_RL_SSE_FIELD_NAME) {
            if (c == ':') {
                ngx_http_dynamo_rl_sse_field(sse);
            }

            continue;
        }

        if (sse->field != NGX_HTTP_DYNAMO_RL_SSE_FIELD_DATA) {
            continue;
        }

        /* one space after the colon is not the value's */

        if (!sse->value) {
            sse->value = 1;

            if (c == ' ') {
                continue;
            }
        }

        if (sse->json != NGX_HTTP_DYNAMO_RL_SSE_OFF) {
            ngx_http_dynamo_rl_sse_json(sse, c);
        }
    }

    if (last && sse->len) {
        ngx_http_dynamo_rl_sse_line(sse);
    }
}


/* the line's field name ends at its first colon */

static void
ngx_http_dynamo_rl_sse_field(ngx_http_dynamo_rl_sse_t *sse)
{
    if (sse->len == 5 && ngx_strncmp(sse->line, "data:", 5) == 0) {
        sse->field = NGX_HTTP_DYNAMO_RL_SSE_FIELD_DATA;
        sse->value = 0;

    } else if (sse->len == 6 && ngx_strncmp(sse->line, "event:", 6) == 0) {
        sse->field = NGX_HTTP_DYNAMO_RL_SSE_FIELD_EVENT;

    } else {
        sse->field = NGX_HTTP_DYNAMO_RL_SSE_FIELD_OTHER;
    }
}


static void
ngx_http_dynamo_rl_sse_line(ngx_http_dynamo_rl_sse_t *sse)
{
    u_char     *v;
    size_t      n, len;
    ngx_uint_t  field;

    len = sse->len;
    n = ngx_min(len, sizeof(sse->line));
    field = sse->field;

    sse->len = 0;
    sse->field = NGX_HTTP_DYNAMO_RL_SSE_FIELD_NAME;

    if (len == 0) {
        /* the event ends: the next one's data starts afresh */

        sse->json = NGX_HTTP_DYNAMO_RL_SSE_START;
        sse->depth = 0;
        return;
    }

    if (field == NGX_HTTP_DYNAMO_RL_SSE_FIELD_DATA) {
        v = sse->line + 5;
        n -= 5;
        len -= 5;

        if (n && *v == ' ') {
            v++;
            n--;
            len--;
        }

        if (len == 6 && ngx_strncmp(v, "[DONE]", 6) == 0) {
            sse->done = 1;
            sse->json = NGX_HTTP_DYNAMO_RL_SSE_OFF;
            return;
        }

        /* the data lines of one event are joined with LF */

        if (sse->json != NGX_HTTP_DYNAMO_RL_SSE_OFF) {
            ngx_http_dynamo_rl_sse_json(sse, '\n');
        }

        return;
    }

    if (field == NGX_HTTP_DYNAMO_RL_SSE_FIELD_EVENT) {
        v = sse->line + 6;
        n -= 6;
        len -= 6;

        if (n && *v == ' ') {
            v++;
            n--;
            len--;
        }

        if ((len == 5 && ngx_strncmp(v, "error", 5) == 0)
            || (len == 15 && n == 15
                && ngx_strncmp(v, "response.failed", 15) == 0))
        {
            sse->error = 1;
        }
    }
}


/* one byte of an event's data */

static void
ngx_http_dynamo_rl_sse_json(ngx_http_dynamo_rl_sse_t *sse, u_char c)
{
    ngx_uint_t  kind;

    switch (sse->json) {

    case NGX_HTTP_DYNAMO_RL_SSE_START:
        if (c == ' ' || c == '\t' || c == '\n') {
            return;
        }

        if (c != '{') {
            sse->json = NGX_HTTP_DYNAMO_RL_SSE_OFF;
            return;
        }

        sse->depth = 1;
        sse->kind[0] = NGX_HTTP_DYNAMO_RL_SSE_TOP;
        sse->json = NGX_HTTP_DYNAMO_RL_SSE_KEY;
        return;

    case NGX_HTTP_DYNAMO_RL_SSE_KEY:
        if (c == '"') {
            sse->blen = 0;
            sse->esc = 0;
            sse->json = NGX_HTTP_DYNAMO_RL_SSE_IN_KEY;

        } else if (c == '}') {
            ngx_http_dynamo_rl_sse_close(sse);
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_IN_KEY:
    case NGX_HTTP_DYNAMO_RL_SSE_STRING:
        if (sse->esc) {
            sse->esc = 0;
            c = 0;

        } else if (c == '\\') {
            sse->esc = 1;

        } else if (c == '"') {
            if (sse->json == NGX_HTTP_DYNAMO_RL_SSE_IN_KEY) {
                ngx_http_dynamo_rl_sse_key(sse);
                sse->json = NGX_HTTP_DYNAMO_RL_SSE_COLON;

            } else {
                ngx_http_dynamo_rl_sse_string(sse);
                sse->json = NGX_HTTP_DYNAMO_RL_SSE_NEXT;
            }

            return;
        }

        /* an escaped byte never matches: the names judged have none */

        if (sse->blen < sizeof(sse->buf)) {
            sse->buf[sse->blen] = c;
        }

        if (sse->blen < 255) {
            sse->blen++;
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_COLON:
        if (c == ':') {
            sse->json = NGX_HTTP_DYNAMO_RL_SSE_VALUE;
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_VALUE:
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            return;
        }

        if (sse->key == NGX_HTTP_DYNAMO_RL_SSE_K_ERROR && c != 'n') {
            /* a top-level "error" member that is not null */
            sse->error = 1;
        }

        if (c == '"') {
            sse->blen = 0;
            sse->esc = 0;
            sse->json = NGX_HTTP_DYNAMO_RL_SSE_STRING;
            return;
        }

        if (c == '{' || c == '[') {
            kind = ngx_http_dynamo_rl_sse_kind(sse, c);

            if (sse->depth < NGX_HTTP_DYNAMO_RL_SSE_DEPTH) {
                sse->kind[sse->depth] = (u_char) kind;
            }

            if (sse->depth == 255) {
                sse->json = NGX_HTTP_DYNAMO_RL_SSE_OFF;
                return;
            }

            sse->depth++;
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_OTHER;
            sse->json = (c == '{') ? NGX_HTTP_DYNAMO_RL_SSE_KEY
                                   : NGX_HTTP_DYNAMO_RL_SSE_VALUE;
            return;
        }

        if (c == ']') {
            ngx_http_dynamo_rl_sse_close(sse);
            return;
        }

        sse->json = NGX_HTTP_DYNAMO_RL_SSE_SCALAR;
        return;

    case NGX_HTTP_DYNAMO_RL_SSE_SCALAR:
    case NGX_HTTP_DYNAMO_RL_SSE_NEXT:
        if (c == ',') {
            sse->json = ngx_http_dynamo_rl_sse_in_array(sse)
                        ? NGX_HTTP_DYNAMO_RL_SSE_VALUE
                        : NGX_HTTP_DYNAMO_RL_SSE_KEY;
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_OTHER;

        } else if (c == '}' || c == ']') {
            ngx_http_dynamo_rl_sse_close(sse);
        }

        return;

    default: /* NGX_HTTP_DYNAMO_RL_SSE_OFF */
        return;
    }
}


/* the end of a container: the event's object ends the judging */

static void
ngx_http_dynamo_rl_sse_close(ngx_http_dynamo_rl_sse_t *sse)
{
    sse->depth--;
    sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_OTHER;

    sse->json = (sse->depth == 0) ? NGX_HTTP_DYNAMO_RL_SSE_OFF
                                  : NGX_HTTP_DYNAMO_RL_SSE_NEXT;
}


static ngx_uint_t
ngx_http_dynamo_rl_sse_in_array(ngx_http_dynamo_rl_sse_t *sse)
{
    ngx_uint_t  kind;

    if (sse->depth > NGX_HTTP_DYNAMO_RL_SSE_DEPTH) {
        /* too deep to know: as an object, whose names are not judged */
        return 0;
    }

    kind = sse->kind[sse->depth - 1];

    return kind == NGX_HTTP_DYNAMO_RL_SSE_ARRAY
           || kind == NGX_HTTP_DYNAMO_RL_SSE_CHOICES;
}


/* the container a value opens, from the member or the array it is in */

static ngx_uint_t
ngx_http_dynamo_rl_sse_kind(ngx_http_dynamo_rl_sse_t *sse, u_char c)
{
    ngx_uint_t  parent;

    parent = (sse->depth <= NGX_HTTP_DYNAMO_RL_SSE_DEPTH)
             ? sse->kind[sse->depth - 1] : NGX_HTTP_DYNAMO_RL_SSE_OBJECT;

    if (c == '[') {
        return (sse->key == NGX_HTTP_DYNAMO_RL_SSE_K_CHOICES)
               ? NGX_HTTP_DYNAMO_RL_SSE_CHOICES : NGX_HTTP_DYNAMO_RL_SSE_ARRAY;
    }

    if (parent == NGX_HTTP_DYNAMO_RL_SSE_CHOICES) {
        return NGX_HTTP_DYNAMO_RL_SSE_CHOICE;
    }

    switch (sse->key) {

    case NGX_HTTP_DYNAMO_RL_SSE_K_NVEXT:
        return NGX_HTTP_DYNAMO_RL_SSE_NVEXT;

    case NGX_HTTP_DYNAMO_RL_SSE_K_META:
        return NGX_HTTP_DYNAMO_RL_SSE_META;

    case NGX_HTTP_DYNAMO_RL_SSE_K_META_FR:
        return NGX_HTTP_DYNAMO_RL_SSE_META_FR;

    default:
        return NGX_HTTP_DYNAMO_RL_SSE_OBJECT;
    }
}


/* a member's name, in the object it is in */

static void
ngx_http_dynamo_rl_sse_key(ngx_http_dynamo_rl_sse_t *sse)
{
    ngx_uint_t  kind;

    sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_OTHER;

    if (sse->depth > NGX_HTTP_DYNAMO_RL_SSE_DEPTH) {
        return;
    }

    kind = sse->kind[sse->depth - 1];

    switch (kind) {

    case NGX_HTTP_DYNAMO_RL_SSE_TOP:
        if (ngx_http_dynamo_rl_sse_is(sse, "error")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_ERROR;

        } else if (ngx_http_dynamo_rl_sse_is(sse, "type")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_TYPE;

        } else if (ngx_http_dynamo_rl_sse_is(sse, "choices")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_CHOICES;

        } else if (ngx_http_dynamo_rl_sse_is(sse, "nvext")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_NVEXT;

        } else if (ngx_http_dynamo_rl_sse_is(sse, "meta_info")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_META;
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_CHOICE:
        if (ngx_http_dynamo_rl_sse_is(sse, "finish_reason")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_FINISH;
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_NVEXT:
        if (ngx_http_dynamo_rl_sse_is(sse, "detailed_finish_reason")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_DETAILED;
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_META:
        if (ngx_http_dynamo_rl_sse_is(sse, "finish_reason")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_META_FR;
        }

        return;

    case NGX_HTTP_DYNAMO_RL_SSE_META_FR:
        if (ngx_http_dynamo_rl_sse_is(sse, "type")) {
            sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_FR_TYPE;
        }

        return;

    default:
        return;
    }
}


/* a string value of a member the verdict reads */

static void
ngx_http_dynamo_rl_sse_string(ngx_http_dynamo_rl_sse_t *sse)
{
    switch (sse->key) {

    case NGX_HTTP_DYNAMO_RL_SSE_K_TYPE:
        if (ngx_http_dynamo_rl_sse_is(sse, "response.failed")
            || ngx_http_dynamo_rl_sse_is(sse, "error"))
        {
            sse->error = 1;
        }

        break;

    case NGX_HTTP_DYNAMO_RL_SSE_K_FINISH:
    case NGX_HTTP_DYNAMO_RL_SSE_K_FR_TYPE:
        if (ngx_http_dynamo_rl_sse_is(sse, "abort")) {
            sse->error = 1;
            sse->aborted = 1;
        }

        break;

    case NGX_HTTP_DYNAMO_RL_SSE_K_DETAILED:
        if (ngx_http_dynamo_rl_sse_is(sse, "cancelled")
            || ngx_http_dynamo_rl_sse_is(sse, "abort"))
        {
            sse->error = 1;
            sse->aborted = 1;
        }

        break;
    }

    sse->key = NGX_HTTP_DYNAMO_RL_SSE_K_OTHER;
}


/*
 * a gate lease: "120s", "5m", "1h", "500ms" or bare seconds, more than
 * zero and at most a week
 */

ngx_int_t
ngx_http_dynamo_rl_parse_lease(u_char *p, size_t len, ngx_msec_t *ms)
{
    u_char    *last;
    uint64_t   n, unit;

    last = p + len;
    n = 0;

    if (p == last || *p < '0' || *p > '9') {
        return NGX_DECLINED;
    }

    while (p < last && *p >= '0' && *p <= '9') {
        n = n * 10 + (*p++ - '0');

        if (n > 604800000) {
            return NGX_DECLINED;
        }
    }

    if (last - p == 2 && p[0] == 'm' && p[1] == 's') {
        unit = 1;

    } else if (last - p == 1 && *p == 's') {
        unit = 1000;

    } else if (last - p == 1 && *p == 'm') {
        unit = 60000;

    } else if (last - p == 1 && *p == 'h') {
        unit = 3600000;

    } else if (p == last) {
        unit = 1000;

    } else {
        return NGX_DECLINED;
    }

    n *= unit;

    if (n == 0 || n > 604800000) {
        return NGX_DECLINED;
    }

    *ms = (ngx_msec_t) n;

    return NGX_OK;
}


/*
 * SipHash-2-4 (Aumasson and Bernstein): the ledger's index is keyed with
 * a secret drawn when the zone is created, so that clients, who choose
 * their attempt ids, cannot choose ids that share a bucket
 */

#define ngx_http_dynamo_rl_rotl(x, b)  (((x) << (b)) | ((x) >> (64 - (b))))

#define ngx_http_dynamo_rl_sipround(v0, v1, v2, v3)                          \
    v0 += v1; v1 = ngx_http_dynamo_rl_rotl(v1, 13); v1 ^= v0;                 \
    v0 = ngx_http_dynamo_rl_rotl(v0, 32);                                     \
    v2 += v3; v3 = ngx_http_dynamo_rl_rotl(v3, 16); v3 ^= v2;                 \
    v0 += v3; v3 = ngx_http_dynamo_rl_rotl(v3, 21); v3 ^= v0;                 \
    v2 += v1; v1 = ngx_http_dynamo_rl_rotl(v1, 17); v1 ^= v2;                 \
    v2 = ngx_http_dynamo_rl_rotl(v2, 32)


static ngx_inline uint64_t
ngx_http_dynamo_rl_le64(u_char *p)
{
    return (uint64_t) p[0] | (uint64_t) p[1] << 8
           | (uint64_t) p[2] << 16 | (uint64_t) p[3] << 24
           | (uint64_t) p[4] << 32 | (uint64_t) p[5] << 40
           | (uint64_t) p[6] << 48 | (uint64_t) p[7] << 56;
}


/*
 * SipHash-c-d: c rounds per 8 bytes of input, d rounds at the end; both
 * are constants in each caller, so the rounds are unrolled
 */

static ngx_inline uint64_t
ngx_http_dynamo_rl_siphash_cd(u_char *key, u_char *p, size_t len,
    ngx_uint_t c, ngx_uint_t d)
{
    size_t      n;
    uint64_t    k0, k1, v0, v1, v2, v3, m, b;
    ngx_uint_t  i;

    k0 = ngx_http_dynamo_rl_le64(key);
    k1 = ngx_http_dynamo_rl_le64(key + 8);

    v0 = k0 ^ 0x736f6d6570736575ULL;
    v1 = k1 ^ 0x646f72616e646f6dULL;
    v2 = k0 ^ 0x6c7967656e657261ULL;
    v3 = k1 ^ 0x7465646279746573ULL;

    b = (uint64_t) len << 56;

    for (n = len / 8; n; n--, p += 8) {
        m = ngx_http_dynamo_rl_le64(p);

        v3 ^= m;

        for (i = 0; i < c; i++) {
            ngx_http_dynamo_rl_sipround(v0, v1, v2, v3);
        }

        v0 ^= m;
    }

    for (n = len % 8; n; n--) {
        b |= (uint64_t) p[n - 1] << (8 * (n - 1));
    }

    v3 ^= b;

    for (i = 0; i < c; i++) {
        ngx_http_dynamo_rl_sipround(v0, v1, v2, v3);
    }

    v0 ^= b;

    v2 ^= 0xff;

    for (i = 0; i < d; i++) {
        ngx_http_dynamo_rl_sipround(v0, v1, v2, v3);
    }

    return v0 ^ v1 ^ v2 ^ v3;
}


uint64_t
ngx_http_dynamo_rl_siphash(u_char *key, u_char *p, size_t len)
{
    return ngx_http_dynamo_rl_siphash_cd(key, p, len, 2, 4);
}


/*
 * SipHash-1-3, as Rust's standard hash tables use against hash flooding:
 * still keyed, so a client cannot choose ids that share a bucket, at
 * about half the rounds of SipHash-2-4 (the ledger hashes every id)
 */

uint64_t
ngx_http_dynamo_rl_siphash13(u_char *key, u_char *p, size_t len)
{
    return ngx_http_dynamo_rl_siphash_cd(key, p, len, 1, 3);
}


/*
 * a cross-site request that a browser sends without a preflight: a
 * Sec-Fetch-Site other than "same-origin" or "none", or an Origin other
 * than the listener's own "scheme://host"; a request without either
 * header is not from a browser page (curl, SDKs); "host" is the request's
 * Host, "origins" the number of Origin headers
 */

ngx_int_t
ngx_http_dynamo_rl_same_origin(ngx_str_t *origin, ngx_uint_t origins,
    ngx_str_t *site, ngx_str_t *host, ngx_uint_t https)
{
    size_t   n;
    u_char  *p;

    if (site != NULL
        && !(site->len == 11
             && ngx_http_dynamo_rl_caseeq(site->data,
                                          (u_char *) "same-origin", 11)
                == NGX_OK)
        && !(site->len == 4
             && ngx_http_dynamo_rl_caseeq(site->data, (u_char *) "none", 4)
                == NGX_OK))
    {
        return NGX_DECLINED;
    }

    if (origins == 0) {
        return NGX_OK;
    }

    if (origins > 1 || host == NULL || host->len == 0) {
        return NGX_DECLINED;
    }

    p = origin->data;
    n = https ? sizeof("https://") - 1 : sizeof("http://") - 1;

    if (origin->len != n + host->len
        || ngx_http_dynamo_rl_caseeq(p, (u_char *) (https ? "https://"
                                                          : "http://"), n)
           != NGX_OK
        || ngx_http_dynamo_rl_caseeq(p + n, host->data, host->len) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * a name is compared only with those of its own length, at most two;
 * NGX_HTTP_DYNAMO_RL_HEADER_LENS has a bit for each length here.  In a
 * pin's or a request id's name an underscore matches a dash: with
 * "underscores_in_headers on" nginx's own $http_ variables make no
 * difference between them, and neither may the check that removes them;
 * Content-Encoding is matched as nginx itself matches it
 */

ngx_uint_t
ngx_http_dynamo_rl_header_class(u_char *name, size_t len)
{
    char        *s1, *s2;
    ngx_int_t    rc;
    ngx_uint_t   c1, c2;

    if (len > 32 || !(NGX_HTTP_DYNAMO_RL_HEADER_LENS & (1ULL << len))) {
        return NGX_HTTP_DYNAMO_RL_HEADER_OTHER;
    }

    s2 = NULL;
    c1 = NGX_HTTP_DYNAMO_RL_HEADER_ROUTING;
    c2 = NGX_HTTP_DYNAMO_RL_HEADER_ROUTING;

    switch (len) {

    case 9:
        s1 = "x-dp-rank";
        break;

    case 11:
        s1 = "x-tenant-id";
        c1 = NGX_HTTP_DYNAMO_RL_HEADER_ASSIGNED;
        break;

    case 10:
        s1 = "request-id";
        c1 = NGX_HTTP_DYNAMO_RL_HEADER_REQUEST_ID;
        break;

    case 16:
        s1 = "content-encoding";
        c1 = NGX_HTTP_DYNAMO_RL_HEADER_CODING;
        s2 = "x-dynamo-dp-rank";
        break;

    case 17:
        s1 = "x-prefill-dp-rank";
        break;

    case 19:
        s1 = "x-dynamo-request-id";
        c1 = NGX_HTTP_DYNAMO_RL_HEADER_REQUEST_ID;
        break;

    case 20:
        s1 = "x-worker-instance-id";
        s2 = "x-data-parallel-rank";
        break;

    case 21:
        s1 = "x-prefill-instance-id";
        break;

    case 24:
        s1 = "x-dynamo-prefill-dp-rank";
        break;

    case 25:
        s1 = "x-dynamo-request-priority";
        c1 = NGX_HTTP_DYNAMO_RL_HEADER_ASSIGNED;
        break;

    case 27:
        s1 = "x-dynamo-worker-instance-id";
        break;

    case 28:
        s1 = "x-dynamo-prefill-instance-id";
        break;

    default: /* 32 */
        s1 = "x-dynamo-request-strict-priority";
        c1 = NGX_HTTP_DYNAMO_RL_HEADER_ASSIGNED;
        break;
    }

    rc = (c1 == NGX_HTTP_DYNAMO_RL_HEADER_CODING)
         ? ngx_http_dynamo_rl_caseeq(name, (u_char *) s1, len)
         : ngx_http_dynamo_rl_header_eq(name, (u_char *) s1, len);

    if (rc == NGX_OK) {
        return c1;
    }

    if (s2 != NULL
        && ngx_http_dynamo_rl_header_eq(name, (u_char *) s2, len) == NGX_OK)
    {
        return c2;
    }

    return NGX_HTTP_DYNAMO_RL_HEADER_OTHER;
}


/* "lc" is lowercase, with dashes; an underscore of "name" matches a dash */

ngx_int_t
ngx_http_dynamo_rl_header_eq(u_char *name, u_char *lc, size_t len)
{
    u_char  c;

    while (len--) {
        c = ngx_tolower(*name);

        if (c != *lc && !(c == '_' && *lc == '-')) {
            return NGX_DECLINED;
        }

        name++;
        lc++;
    }

    return NGX_OK;
}


/* ASCII letters in any case; the pure code links without ngx_string.c */

static ngx_int_t
ngx_http_dynamo_rl_caseeq(u_char *a, u_char *b, size_t n)
{
    while (n--) {
        if (ngx_tolower(*a) != ngx_tolower(*b)) {
            return NGX_DECLINED;
        }

        a++;
        b++;
    }

    return NGX_OK;
}


/*
 * text from an upstream for a log line: bytes outside printable ASCII,
 * and the backslash, as \xNN; truncated at "last", always terminated
 */

u_char *
ngx_http_dynamo_rl_escape_log(u_char *dst, u_char *last, u_char *src,
    size_t len)
{
    u_char  c;

    static u_char  hex[] = "0123456789abcdef";

    if (dst >= last) {
        return dst;
    }

    last--;

    while (len-- && dst < last) {
        c = *src++;

        if (c >= 0x20 && c < 0x7f && c != '\\') {
            *dst++ = c;
            continue;
        }

        if (last - dst < 4) {
            break;
        }

        *dst++ = '\\';
        *dst++ = 'x';
        *dst++ = hex[c >> 4];
        *dst++ = hex[c & 0xf];
    }

    *dst = '\0';

    return dst;
}


/*
 * the host of a system_url that ngx_http_dynamo_rl_system_url_valid()
 * accepted: what follows the scheme, up to a port, a path or the end
 */

ngx_int_t
ngx_http_dynamo_rl_system_url_host(u_char *p, size_t len, ngx_str_t *host)
{
    u_char  *last;

    last = p + len;

    host->data = ngx_http_dynamo_rl_url_scheme(p, len);
    if (host->data == NULL) {
        return NGX_DECLINED;
    }

    p = ngx_http_dynamo_rl_url_host_end(host->data, last);
    if (p == NULL) {
        return NGX_DECLINED;
    }

    host->len = p - host->data;

    return host->len ? NGX_OK : NGX_DECLINED;
}


/* what follows "http://" or "https://", NULL without either */

static u_char *
ngx_http_dynamo_rl_url_scheme(u_char *p, size_t len)
{
    if (len > 7 && ngx_strncmp(p, "http://", 7) == 0) {
        return p + 7;
    }

    if (len > 8 && ngx_strncmp(p, "https://", 8) == 0) {
        return p + 8;
    }

    return NULL;
}


/*
 * the end of a URL's host: after the "]" of a bracketed IPv6 address,
 * else at a port, a path or the end; NULL when a "[" is not closed
 */

static u_char *
ngx_http_dynamo_rl_url_host_end(u_char *p, u_char *last)
{
    if (p < last && *p == '[') {
        p = ngx_strlchr(p, last, ']');
        return (p == NULL) ? NULL : p + 1;
    }

    while (p < last && *p != ':' && *p != '/') {
        p++;
    }

    return p;
}


/*
 * The state file, text so that an operator can read it:
 *
 *     dynamo_rl_state 2
 *     written <ms since the epoch>
 *     gate <open|closed> <epoch> <lease ms> <remaining ms|-> <changed s>
 *         <reason in hex|->
 *     a <id> <state> <status> <stream> <bytes> <started ms ago>
 *         <ended ms ago|-> <remaining ttl ms|-> <reason|owner pid>
 *     ...
 *     end <records> <SipHash-2-4 of everything before "end", 16 hex>
 *
 * each on one line, fields separated by one space; "-" marks an unset
 * value; a record without an end was in flight when the file was written,
 * in the worker process "owner"; a finished one has its reason's code
 * (0: none).  Version 1, still read, has neither (its records in flight
 * are taken as failed)
 */

uint64_t
ngx_http_dynamo_rl_state_checksum(u_char *p, size_t len)
{
    static u_char  key[16] = "dynamo_rl state";

    return ngx_http_dynamo_rl_siphash(key, p, len);
}


ngx_int_t
ngx_http_dynamo_rl_state_parse(u_char *p, size_t len,
    ngx_http_dynamo_rl_state_file_t *sf, char **err)
{
    u_char                             *pos, *end, *last, *q;
    uint64_t                            n, sum, got;
    ngx_int_t                           rc;
    ngx_str_t                           tok;
    ngx_uint_t                          i;
    ngx_http_dynamo_rl_state_record_t   rec;

    pos = p;
    last = p + len;

    if (len == 0) {
        *err = "empty";
        return NGX_ERROR;
    }

    if (len < sizeof("dynamo_rl_state ") - 1
        || ngx_memcmp(p, "dynamo_rl_state ", sizeof("dynamo_rl_state ") - 1)
           != 0)
    {
        *err = "not a state file";
        return NGX_ERROR;
    }

    pos += sizeof("dynamo_rl_state ") - 1;

    if (ngx_http_dynamo_rl_state_u64(&pos, last, &n, 0, '\n') != NGX_OK) {
        *err = "bad version line";
        return NGX_ERROR;
    }

    if (n != 1 && n != NGX_HTTP_DYNAMO_RL_STATE_VERSION) {
        *err = "unsupported version";
        return NGX_ERROR;
    }

    sf->version = (ngx_uint_t) n;

    /* the last line: "end <records> <checksum>\n" */

    if (last == p || last[-1] != '\n') {
        *err = "truncated";
        return NGX_ERROR;
    }

    for (end = last - 1; end > pos && end[-1] != '\n'; end--) {
        /* void */
    }

    q = end;

    if (last - q < (ssize_t) sizeof("end 0 0123456789abcdef") - 1
        || ngx_memcmp(q, "end ", 4) != 0)
    {
        *err = "truncated";
        return NGX_ERROR;
    }

    q += 4;

    if (ngx_http_dynamo_rl_state_u64(&q, last, &n, 0, ' ') != NGX_OK
        || ngx_http_dynamo_rl_state_token(&q, last, &tok, '\n') != NGX_OK
        || tok.len != 16 || q != last)
    {
        *err = "bad end line";
        return NGX_ERROR;
    }

    sum = 0;

    for (i = 0; i < 16; i++) {
        if (tok.data[i] >= '0' && tok.data[i] <= '9') {
            sum = sum << 4 | (uint64_t) (tok.data[i] - '0');

        } else if (tok.data[i] >= 'a' && tok.data[i] <= 'f') {
            sum = sum << 4 | (uint64_t) (tok.data[i] - 'a' + 10);

        } else {
            *err = "bad end line";
            return NGX_ERROR;
        }
    }

    got = ngx_http_dynamo_rl_state_checksum(p, end - p);

    if (got != sum) {
        *err = "checksum mismatch";
        return NGX_ERROR;
    }

    sf->nrecords = (ngx_uint_t) n;

    if (last - pos < 8 || ngx_memcmp(pos, "written ", 8) != 0) {
        *err = "bad written line";
        return NGX_ERROR;
    }

    pos += 8;

    if (ngx_http_dynamo_rl_state_u64(&pos, end, &sf->written, 0, '\n')
        != NGX_OK)
    {
        *err = "bad written line";
        return NGX_ERROR;
    }

    if (end - pos < 5 || ngx_memcmp(pos, "gate ", 5) != 0) {
        *err = "bad gate line";
        return NGX_ERROR;
    }

    pos += 5;

    if (ngx_http_dynamo_rl_state_token(&pos, end, &tok, ' ') != NGX_OK) {
        *err = "bad gate line";
        return NGX_ERROR;
    }

    if (tok.len == 6 && ngx_memcmp(tok.data, "closed", 6) == 0) {
        sf->closed = 1;

    } else if (tok.len == 4 && ngx_memcmp(tok.data, "open", 4) == 0) {
        sf->closed = 0;

    } else {
        *err = "bad gate state";
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_state_u64(&pos, end, &n, 0, ' ') != NGX_OK
        || ngx_http_dynamo_rl_state_u64(&pos, end, &sf->lease, 0, ' ')
           != NGX_OK
        || ngx_http_dynamo_rl_state_u64(&pos, end, &sf->remaining, 1, ' ')
           != NGX_OK
        || ngx_http_dynamo_rl_state_u64(&pos, end, &sf->changed, 0, ' ')
           != NGX_OK
        || ngx_http_dynamo_rl_state_token(&pos, end, &tok, '\n') != NGX_OK)
    {
        *err = "bad gate line";
        return NGX_ERROR;
    }

    sf->epoch = (ngx_uint_t) n;
    sf->leased = (sf->remaining != (uint64_t) -1);

    if (!sf->leased) {
        sf->remaining = 0;
    }

    if (tok.len == 1 && tok.data[0] == '-') {
        sf->reason_len = 0;

    } else if (ngx_http_dynamo_rl_state_hex(&tok, sf->reason,
                                            sizeof(sf->reason),
                                            &sf->reason_len)
               != NGX_OK)
    {
        *err = "bad gate reason";
        return NGX_ERROR;
    }

    sf->records = pos;
    sf->end = end;

    /* every record is checked before any is used */

    for (i = 0; /* void */; i++) {
        rc = ngx_http_dynamo_rl_state_record(&pos, end, &rec);

        if (rc == NGX_DONE) {
            break;
        }

        /* version 2: an owner or a reason on every record */

        if (rc != NGX_OK || rec.tail != (sf->version > 1)) {
            *err = "bad attempt record";
            return NGX_ERROR;
        }
    }

    if (i != sf->nrecords) {
        *err = "record count mismatch";
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* NGX_OK: a record; NGX_DONE: no more; NGX_ERROR: a malformed line */

ngx_int_t
ngx_http_dynamo_rl_state_record(u_char **pos, u_char *end,
    ngx_http_dynamo_rl_state_record_t *rec)
{
    u_char     *p, *q;
    uint64_t    n;
    ngx_str_t   tok;

    p = *pos;

    if (p == end) {
        return NGX_DONE;
    }

    if (end - p < 2 || p[0] != 'a' || p[1] != ' ') {
        return NGX_ERROR;
    }

    p += 2;

    if (ngx_http_dynamo_rl_state_token(&p, end, &tok, ' ') != NGX_OK
        || ngx_http_dynamo_rl_attempt_id_valid(tok.data, tok.len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    rec->id = tok.data;
    rec->len = tok.len;

    if (ngx_http_dynamo_rl_state_u64(&p, end, &n, 0, ' ') != NGX_OK
        || n < 1 || n > 5)
    {
        return NGX_ERROR;
    }

    rec->state = (ngx_uint_t) n;

    if (ngx_http_dynamo_rl_state_u64(&p, end, &n, 0, ' ') != NGX_OK
        || n > 999)
    {
        return NGX_ERROR;
    }

    rec->status = (ngx_uint_t) n;

    if (ngx_http_dynamo_rl_state_u64(&p, end, &n, 0, ' ') != NGX_OK
        || n > 1)
    {
        return NGX_ERROR;
    }

    rec->stream = (ngx_uint_t) n;

    if (ngx_http_dynamo_rl_state_u64(&p, end, &rec->bytes, 0, ' ') != NGX_OK
        || ngx_http_dynamo_rl_state_u64(&p, end, &rec->started_ago, 0, ' ')
           != NGX_OK
        || ngx_http_dynamo_rl_state_u64(&p, end, &rec->ended_ago, 1, ' ')
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the ttl ends the line, or the owner's pid or the reason follows */

    q = p;
    rec->owner = 0;
    rec->reason = 0;
    rec->tail = 0;

    if (ngx_http_dynamo_rl_state_u64(&p, end, &rec->remaining, 1, '\n')
        != NGX_OK)
    {
        p = q;

        if (ngx_http_dynamo_rl_state_u64(&p, end, &rec->remaining, 1, ' ')
            != NGX_OK
            || ngx_http_dynamo_rl_state_u64(&p, end, &n, 0, '\n') != NGX_OK)
        {
            return NGX_ERROR;
        }

        rec->tail = 1;

        if (rec->remaining == (uint64_t) -1) {
            if (n == 0 || n > 0x7fffffff) {
                return NGX_ERROR;
            }

            rec->owner = (ngx_uint_t) n;

        } else {
            if (n >= NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS) {
                return NGX_ERROR;
            }

            rec->reason = (ngx_uint_t) n;
        }
    }

    /* in flight: neither an end nor a ttl; finished: both */

    rec->in_flight = (rec->ended_ago == (uint64_t) -1);

    if (rec->in_flight != (rec->remaining == (uint64_t) -1)
        || rec->in_flight != (rec->state < 3)
        || (rec->owner != 0 && !rec->in_flight))
    {
        return NGX_ERROR;
    }

    *pos = p;

    return NGX_OK;
}


/* a token of one or more bytes, then exactly the separator */

static ngx_int_t
ngx_http_dynamo_rl_state_token(u_char **pos, u_char *end, ngx_str_t *tok,
    u_char sep)
{
    u_char  *p;

    for (p = *pos; p < end && *p != ' ' && *p != '\n'; p++) {
        if (*p < 0x21 || *p > 0x7e) {
            return NGX_ERROR;
        }
    }

    if (p == *pos || p == end || *p != sep) {
        return NGX_ERROR;
    }

    tok->data = *pos;
    tok->len = p - *pos;

    *pos = p + 1;

    return NGX_OK;
}


/* canonical decimal, or with "dash" a "-" that reads as (uint64_t) -1 */

static ngx_int_t
ngx_http_dynamo_rl_state_u64(u_char **pos, u_char *end, uint64_t *n,
    ngx_uint_t dash, u_char sep)
{
    ngx_str_t  tok;

    if (ngx_http_dynamo_rl_state_token(pos, end, &tok, sep) != NGX_OK) {
        return NGX_ERROR;
    }

    if (dash && tok.len == 1 && tok.data[0] == '-') {
        *n = (uint64_t) -1;
        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_parse_u64(tok.data, tok.len, n) != NGX_OK
        || *n == (uint64_t) -1)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_state_hex(ngx_str_t *tok, u_char *dst, size_t size,
    size_t *len)
{
    u_char      c;
    size_t      i;
    ngx_uint_t  v;

    if (tok->len % 2 || tok->len / 2 > size) {
        return NGX_ERROR;
    }

    for (i = 0; i < tok->len; i++) {
        c = tok->data[i];

        if (c >= '0' && c <= '9') {
            v = c - '0';

        } else if (c >= 'a' && c <= 'f') {
            v = c - 'a' + 10;

        } else {
            return NGX_ERROR;
        }

        if (i % 2) {
            dst[i / 2] |= (u_char) v;

        } else {
            dst[i / 2] = (u_char) (v << 4);
        }
    }

    *len = tok->len / 2;

    return NGX_OK;
}


/*
 * a caller's namespace scope, from a variable, in the directive's own
 * grammar: "any", "prefix=P", "exact=NS" or "exact=NS suffix=S", the
 * words separated by spaces, tabs or line breaks; names are non-empty and of
 * [A-Za-z0-9._-]; "env" is configuration, not a caller's scope; anything
 * else does not parse, and never widens a scope
 */

ngx_int_t
ngx_http_dynamo_rl_parse_scope(u_char *p, size_t len, ngx_uint_t *mode,
    ngx_str_t *name, ngx_str_t *suffix)
{
    u_char     *last;
    ngx_str_t   word[3];
    ngx_uint_t  n;

    last = p + len;
    n = 0;

    while (p < last) {

        if (NGX_HTTP_DYNAMO_RL_SPACE(*p)) {
            p++;
            continue;
        }

        if (n == 3) {
            return NGX_DECLINED;
        }

        word[n].data = p;

        while (p < last && !NGX_HTTP_DYNAMO_RL_SPACE(*p)) {
            p++;
        }

        word[n].len = p - word[n].data;
        n++;
    }

    ngx_str_null(name);
    ngx_str_null(suffix);

    if (n == 1 && word[0].len == 3
        && ngx_strncmp(word[0].data, "any", 3) == 0)
    {
        *mode = NGX_HTTP_DYNAMO_RL_NS_ANY;
        return NGX_OK;
    }

    if (n == 1 && word[0].len > 7
        && ngx_strncmp(word[0].data, "prefix=", 7) == 0)
    {
        name->data = word[0].data + 7;
        name->len = word[0].len - 7;
        *mode = NGX_HTTP_DYNAMO_RL_NS_PREFIX;

        return ngx_http_dynamo_rl_scope_name(name->data, name->len);
    }

    if (n == 0 || n == 3 || word[0].len <= 6
        || ngx_strncmp(word[0].data, "exact=", 6) != 0)
    {
        return NGX_DECLINED;
    }

    name->data = word[0].data + 6;
    name->len = word[0].len - 6;
    *mode = NGX_HTTP_DYNAMO_RL_NS_EXACT;

    if (ngx_http_dynamo_rl_scope_name(name->data, name->len) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (n == 1) {
        return NGX_OK;
    }

    if (word[1].len <= 7 || ngx_strncmp(word[1].data, "suffix=", 7) != 0) {
        return NGX_DECLINED;
    }

    suffix->data = word[1].data + 7;
    suffix->len = word[1].len - 7;

    return ngx_http_dynamo_rl_scope_name(suffix->data, suffix->len);
}


ngx_int_t
ngx_http_dynamo_rl_scope_name(u_char *p, size_t len)
{
    u_char  c;
    size_t  i;

    if (len == 0) {
        return NGX_DECLINED;
    }

    for (i = 0; i < len; i++) {
        c = p[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')
        {
            continue;
        }

        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * a caller's route list, from a variable: routes of the route grammar
 * separated by spaces, tabs or line breaks, at least one; "n" is how many
 */

ngx_int_t
ngx_http_dynamo_rl_parse_routes(u_char *p, size_t len, ngx_uint_t *n)
{
    u_char     *last;
    ngx_str_t   word;

    last = p + len;
    *n = 0;

    while (ngx_http_dynamo_rl_routes_word(&p, last, &word) == NGX_OK) {

        if (ngx_http_dynamo_rl_route_valid(word.data, word.len) != NGX_OK) {
            return NGX_DECLINED;
        }

        (*n)++;
    }

    return *n ? NGX_OK : NGX_DECLINED;
}


/* byte-identical only; a worker advertises a few dozen routes at most */

ngx_str_t *
ngx_http_dynamo_rl_route_find(ngx_str_t *routes, ngx_uint_t n,
    ngx_str_t *route)
{
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        if (routes[i].len == route->len
            && ngx_memcmp(routes[i].data, route->data, route->len) == 0)
        {
            return &routes[i];
        }
    }

    return NULL;
}


/* a route byte-identical to one word of a parsed route list */

ngx_int_t
ngx_http_dynamo_rl_routes_find(u_char *p, size_t len, ngx_str_t *route)
{
    u_char     *last;
    ngx_str_t   word;

    last = p + len;

    while (ngx_http_dynamo_rl_routes_word(&p, last, &word) == NGX_OK) {

        if (word.len == route->len
            && ngx_memcmp(word.data, route->data, route->len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/* the next word of a route list from *pos, NGX_DONE after the last */

static ngx_int_t
ngx_http_dynamo_rl_routes_word(u_char **pos, u_char *last, ngx_str_t *word)
{
    u_char  *p;

    for (p = *pos; p < last && NGX_HTTP_DYNAMO_RL_SPACE(*p); p++) {
        /* void */
    }

    if (p == last) {
        *pos = p;
        return NGX_DONE;
    }

    word->data = p;

    while (p < last && !NGX_HTTP_DYNAMO_RL_SPACE(*p)) {
        p++;
    }

    word->len = p - word->data;
    *pos = p;

    return NGX_OK;
}


/*
 * "{instance_id}/health" or "{instance_id}/live" after the admin location's
 * prefix: the worker's probes, which Dynamo's system server answers
 */

ngx_int_t
ngx_http_dynamo_rl_parse_health_path(u_char *p, size_t len, uint64_t *id)
{
    u_char  *slash;
    size_t   n;

    static u_char  health[] = "/health";
    static u_char  live[] = "/live";

    slash = ngx_strlchr(p, p + len, '/');
    if (slash == NULL) {
        return NGX_DECLINED;
    }

    n = p + len - slash;

    if (!(n == sizeof(health) - 1
          && ngx_memcmp(slash, health, sizeof(health) - 1) == 0)
        && !(n == sizeof(live) - 1
             && ngx_memcmp(slash, live, sizeof(live) - 1) == 0))
    {
        return NGX_DECLINED;
    }

    return ngx_http_dynamo_rl_parse_u64(p, slash - p, id);
}


/*
 * the upper bounds of the duration histograms, in milliseconds, chosen
 * for generation: a cached prompt's first token in a few milliseconds,
 * a long rollout or a weight update in minutes, up to an hour; the last
 * bucket, +Inf, is implicit
 */

ngx_msec_t  ngx_http_dynamo_rl_buckets[NGX_HTTP_DYNAMO_RL_BUCKETS - 1] = {
    5, 10, 25, 50, 100, 250, 500,
    1000, 2500, 5000, 10000, 30000, 60000,
    120000, 300000, 600000, 1800000, 3600000
};


/*
 * every reason the module gives for a refusal on a plane, fixed strings
 * safe as label values, with the planes that can give it: the metrics
 * export only these combinations; a new reason needs its row here
 */

ngx_http_dynamo_rl_reason_t  ngx_http_dynamo_rl_reasons[] = {
    { ngx_string("method"), NGX_HTTP_DYNAMO_RL_ON_ALL },
    { ngx_string("bad_path"), NGX_HTTP_DYNAMO_RL_ON_ALL },
    { ngx_string("bad_attempt_id"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("duplicate_attempt"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("ledger_full"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("gate_closed"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("discovery_unavailable"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("unknown_worker"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("ambiguous_worker"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("worker_invalid"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("worker_error"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("no_system_url"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("route_not_advertised"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("discovery_invalid"), NGX_HTTP_DYNAMO_RL_ON_DISCOVERY },
    { ngx_string("redirected"), NGX_HTTP_DYNAMO_RL_ON_ALL },
    { ngx_string("cross_origin"), NGX_HTTP_DYNAMO_RL_ON_ADMIN },
    { ngx_string("caller_scope"), NGX_HTTP_DYNAMO_RL_ON_ADMIN
                                  |NGX_HTTP_DYNAMO_RL_ON_DISCOVERY },
    { ngx_string("bad_body"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("unsupported_encoding"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("metadata_upload_denied"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("rid_mismatch"), NGX_HTTP_DYNAMO_RL_ON_REQUEST },
    { ngx_string("store_unavailable"), NGX_HTTP_DYNAMO_RL_ON_REQUEST
                                       |NGX_HTTP_DYNAMO_RL_ON_STORE },
    { ngx_string("gate_unknown"), NGX_HTTP_DYNAMO_RL_ON_REQUEST
                                  |NGX_HTTP_DYNAMO_RL_ON_STORE },
    { ngx_string("gate_lost"), NGX_HTTP_DYNAMO_RL_ON_REQUEST
                               |NGX_HTTP_DYNAMO_RL_ON_STORE },
    { ngx_null_string, 0 }
};


/*
 * the canonical reason phrase of an error status (RFC 9110), Dynamo's
 * "type" of a flat error: every 4xx and 5xx nginx or the module answers
 */

static struct {
    ngx_uint_t    status;
    ngx_str_t     type;
} ngx_http_dynamo_rl_status_types[] = {
    { 400, ngx_string("Bad Request") },
    { 401, ngx_string("Unauthorized") },
    { 402, ngx_string("Payment Required") },
    { 403, ngx_string("Forbidden") },
    { 404, ngx_string("Not Found") },
    { 405, ngx_string("Method Not Allowed") },
    { 406, ngx_string("Not Acceptable") },
    { 408, ngx_string("Request Timeout") },
    { 409, ngx_string("Conflict") },
    { 410, ngx_string("Gone") },
    { 411, ngx_string("Length Required") },
    { 412, ngx_string("Precondition Failed") },
    { 413, ngx_string("Payload Too Large") },
    { 414, ngx_string("URI Too Long") },
    { 415, ngx_string("Unsupported Media Type") },
    { 416, ngx_string("Range Not Satisfiable") },
    { 418, ngx_string("I'm a teapot") },
    { 421, ngx_string("Misdirected Request") },
    { 422, ngx_string("Unprocessable Content") },
    { 429, ngx_string("Too Many Requests") },
    { 500, ngx_string("Internal Server Error") },
    { 501, ngx_string("Not Implemented") },
    { 502, ngx_string("Bad Gateway") },
    { 503, ngx_string("Service Unavailable") },
    { 504, ngx_string("Gateway Timeout") },
    { 505, ngx_string("HTTP Version Not Supported") },
    { 507, ngx_string("Insufficient Storage") },
    { 0, ngx_null_string }
};


/* nginx's own 494-499 go out as 400; another status, as its class's */

void
ngx_http_dynamo_rl_status_type(ngx_uint_t status, ngx_str_t *type)
{
    ngx_uint_t  i;

    for (i = 0; ngx_http_dynamo_rl_status_types[i].status; i++) {
        if (ngx_http_dynamo_rl_status_types[i].status == status) {
            *type = ngx_http_dynamo_rl_status_types[i].type;
            return;
        }
    }

    if (status >= 500) {
        ngx_str_set(type, "Internal Server Error");

    } else {
        ngx_str_set(type, "Bad Request");
    }
}


/* the bucket of a duration: the first bound it does not pass, or +Inf */

ngx_uint_t
ngx_http_dynamo_rl_bucket(ngx_msec_t ms)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_BUCKETS - 1; i++) {
        if (ms <= ngx_http_dynamo_rl_buckets[i]) {
            break;
        }
    }

    return i;
}


/* the row of a reason, or NGX_HTTP_DYNAMO_RL_REASONS if it has none */

ngx_uint_t
ngx_http_dynamo_rl_reason_find(u_char *p, size_t len, ngx_uint_t plane)
{
    ngx_uint_t                    i;
    ngx_http_dynamo_rl_reason_t  *rs;

    for (i = 0; ngx_http_dynamo_rl_reasons[i].name.len; i++) {
        rs = &ngx_http_dynamo_rl_reasons[i];

        if (rs->name.len == len
            && ngx_strncmp(rs->name.data, p, len) == 0
            && (rs->planes & (1 << plane)))
        {
            return i;
        }
    }

    return NGX_HTTP_DYNAMO_RL_REASONS;
}


/*
 * an attempt id in the UUID grammar names one UUID whatever the case of
 * its hex digits, as Dynamo's request-id does: it is compared, stored and
 * sent in its canonical lower-case form, made here in place; NGX_OK when
 * the id is a UUID, NGX_DECLINED (and the id as it was) otherwise
 */

ngx_int_t
ngx_http_dynamo_rl_attempt_id_canonical(u_char *p, size_t len)
{
    size_t  i;

    if (ngx_http_dynamo_rl_uuid_valid(p, len) != NGX_OK) {
        return NGX_DECLINED;
    }

    for (i = 0; i < len; i++) {
        p[i] = ngx_tolower(p[i]);
    }

    return NGX_OK;
}


/* a UUID in its canonical text form, 8-4-4-4-12 hex digits */

ngx_int_t
ngx_http_dynamo_rl_uuid_valid(u_char *p, size_t len)
{
    u_char      c;
    ngx_uint_t  i;

    if (len != NGX_HTTP_DYNAMO_RL_UUID_LEN) {
        return NGX_DECLINED;
    }

    for (i = 0; i < len; i++) {
        c = p[i];

        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-') {
                return NGX_DECLINED;
            }

            continue;
        }

        if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a'
                                         && (c | 0x20) <= 'f')))
        {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/* a valid UUID's text to its 16 bytes, and back in lower case */

void
ngx_http_dynamo_rl_uuid_pack(u_char *bin, u_char *text)
{
    u_char      c, v;
    ngx_uint_t  i, n;

    n = 0;
    v = 0;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_UUID_LEN; i++) {
        c = text[i];

        if (c == '-') {
            continue;
        }

        c = (c <= '9') ? c - '0' : (c | 0x20) - 'a' + 10;

        if (n++ & 1) {
            *bin++ = (u_char) (v << 4 | c);

        } else {
            v = c;
        }
    }
}


u_char *
ngx_http_dynamo_rl_uuid_unpack(u_char *text, u_char *bin)
{
    ngx_uint_t     i;
    static u_char  hex[] = "0123456789abcdef";

    for (i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            *text++ = '-';
        }

        *text++ = hex[bin[i] >> 4];
        *text++ = hex[bin[i] & 0xf];
    }

    return text;
}


/*
 * readiness (dynamo_rl_ready): without a store, the zone decides and is
 * there; with one, this worker process's connection is up, the store has
 * not refused its claims of late ("refusing": the window of the up gauge)
 * and its last read of the store's gate (0: none yet) is at most "stale"
 * old, as a location without the ledger needs to admit anything
 */

ngx_uint_t
ngx_http_dynamo_rl_ready_check(ngx_uint_t store, ngx_uint_t connected,
    ngx_uint_t refusing, uint64_t read, uint64_t now, ngx_msec_t stale)
{
    if (!store) {
        return NGX_HTTP_DYNAMO_RL_READY;
    }

    if (!connected) {
        return NGX_HTTP_DYNAMO_RL_READY_STORE_DOWN;
    }

    if (refusing) {
        return NGX_HTTP_DYNAMO_RL_READY_STORE_REFUSING;
    }

    if (read == 0) {
        return NGX_HTTP_DYNAMO_RL_READY_GATE_UNKNOWN;
    }

    if (now > read && now - read > stale) {
        return NGX_HTTP_DYNAMO_RL_READY_GATE_STALE;
    }

    return NGX_HTTP_DYNAMO_RL_READY;
}
