
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * Unit tests of the pure parsers of a caller's scope: the namespace
 * scope and the route list that variables give, the health path of the
 * admin plane, and the judgment of a worker's 2xx answer, as TAP for
 * "prove -e ''".
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdio.h>
#include <string.h>


typedef struct {
    char                        *value;
    ngx_int_t                    rc;
    ngx_uint_t                   mode;
    char                        *name;
    char                        *suffix;
} ngx_http_dynamo_rl_test_scope_t;


typedef struct {
    char                        *value;
    ngx_int_t                    rc;
    ngx_uint_t                   n;
} ngx_http_dynamo_rl_test_routes_t;


typedef struct {
    char                        *body;
    ngx_int_t                    rc;
} ngx_http_dynamo_rl_test_answer_t;


typedef struct {
    char                        *value;
    ngx_int_t                    rc;
    uint64_t                     id;
    char                        *name;
} ngx_http_dynamo_rl_test_health_t;


static ngx_http_dynamo_rl_test_scope_t  ngx_http_dynamo_rl_scopes[] = {
    { "any", NGX_OK, NGX_HTTP_DYNAMO_RL_NS_ANY, "", "" },
    { " any\t", NGX_OK, NGX_HTTP_DYNAMO_RL_NS_ANY, "", "" },
    { "prefix=team-a", NGX_OK, NGX_HTTP_DYNAMO_RL_NS_PREFIX, "team-a", "" },
    { "exact=ns", NGX_OK, NGX_HTTP_DYNAMO_RL_NS_EXACT, "ns", "" },
    { "exact=ns suffix=x1", NGX_OK, NGX_HTTP_DYNAMO_RL_NS_EXACT, "ns",
      "x1" },
    { "exact=a.b_c \t suffix=Z-9", NGX_OK, NGX_HTTP_DYNAMO_RL_NS_EXACT,
      "a.b_c", "Z-9" },
    { "", NGX_DECLINED, 0, NULL, NULL },
    { "  ", NGX_DECLINED, 0, NULL, NULL },
    { "env", NGX_DECLINED, 0, NULL, NULL },
    { "ANY", NGX_DECLINED, 0, NULL, NULL },
    { "any any", NGX_DECLINED, 0, NULL, NULL },
    { "prefix=", NGX_DECLINED, 0, NULL, NULL },
    { "exact=", NGX_DECLINED, 0, NULL, NULL },
    { "exact=ns suffix=", NGX_DECLINED, 0, NULL, NULL },
    { "exact=ns suffix=x1 suffix=x2", NGX_DECLINED, 0, NULL, NULL },
    { "prefix=a exact=b", NGX_DECLINED, 0, NULL, NULL },
    { "prefix=a suffix=b", NGX_DECLINED, 0, NULL, NULL },
    { "suffix=b exact=a", NGX_DECLINED, 0, NULL, NULL },
    { "prefix=team a", NGX_DECLINED, 0, NULL, NULL },
    { "prefix=a/b", NGX_DECLINED, 0, NULL, NULL },
    { "exact=a\\b", NGX_DECLINED, 0, NULL, NULL },
    { "exact=a\x01", NGX_DECLINED, 0, NULL, NULL },
    { "exact=a\nb", NGX_DECLINED, 0, NULL, NULL },
    { "exact=\xc3\xa9", NGX_DECLINED, 0, NULL, NULL },
    { NULL, 0, 0, NULL, NULL }
};


static ngx_http_dynamo_rl_test_routes_t  ngx_http_dynamo_rl_routes[] = {
    { "liveness_probe", NGX_OK, 1 },
    { "liveness_probe flush_cache", NGX_OK, 2 },
    { "\tcontrol/pause_generation  update/weights ", NGX_OK, 2 },
    { "a\n      b\r\nc", NGX_OK, 3 },
    { "", NGX_DECLINED, 0 },
    { " \t ", NGX_DECLINED, 0 },
    { "liveness_probe ../x", NGX_DECLINED, 0 },
    { "a//b", NGX_DECLINED, 0 },
    { "a/", NGX_DECLINED, 0 },
    { "-a", NGX_DECLINED, 0 },
    { "a,b", NGX_DECLINED, 0 },
    { NULL, 0, 0 }
};


static ngx_http_dynamo_rl_test_answer_t  ngx_http_dynamo_rl_answers[] = {
    { "{\"status\":\"ok\"}", NGX_DECLINED },
    { "{\"status\":\"success\"}", NGX_DECLINED },
    { "{\"status\":\"errors\"}", NGX_DECLINED },
    { "{\"status\":\"\"}", NGX_DECLINED },
    { "{\"success\":true}", NGX_DECLINED },
    { "{\"success\":0}", NGX_DECLINED },
    { "[]", NGX_DECLINED },
    { "\"ok\"", NGX_DECLINED },
    { "{\"status\":\"error\"}", NGX_OK },
    { "{\"status\":\"ERROR\"}", NGX_OK },
    { "{\"status\":\"eRrOr\",\"message\":\"starting\"}", NGX_OK },
    { "{\"success\":false}", NGX_OK },
    { "{\"status\":\"ok\",\"success\":false}", NGX_OK },
    { "", NGX_OK },
    { "Engine paused", NGX_OK },
    { "{\"status\":", NGX_OK },
    { NULL, 0 }
};


/* routes_find of "flush_cache": whole words only */

static ngx_http_dynamo_rl_test_answer_t  ngx_http_dynamo_rl_finds[] = {
    { "a flush_cache b", NGX_OK },
    { "a flush_cache_x", NGX_DECLINED },
    { "flush_cach", NGX_DECLINED },
    { "", NGX_DECLINED },
    { NULL, 0 }
};


static ngx_http_dynamo_rl_test_health_t  ngx_http_dynamo_rl_healths[] = {
    { "18446744073709551615/health", NGX_OK, 18446744073709551615ULL,
      "u64 max" },
    { "0/health", NGX_OK, 0, "0" },
    { "01/health", NGX_DECLINED, 0, "01" },
    { "1/health/", NGX_DECLINED, 0, "1/health/" },
    { "1/healthz", NGX_DECLINED, 0, "1/healthz" },
    { "1/engine/health", NGX_DECLINED, 0, "1/engine/health" },
    { "/health", NGX_DECLINED, 0, "/health" },
    { "18446744073709551616/health", NGX_DECLINED, 0, "u64 max + 1" },
    { "7/live", NGX_OK, 7, "7/live" },
    { "18446744073709551615/live", NGX_OK, 18446744073709551615ULL,
      "u64 max live" },
    { "7/live/", NGX_DECLINED, 0, "7/live/" },
    { "7/lives", NGX_DECLINED, 0, "7/lives" },
    { "7/liv", NGX_DECLINED, 0, "7/liv" },
    { "07/live", NGX_DECLINED, 0, "07/live" },
    { "7/engine/live", NGX_DECLINED, 0, "7/engine/live" },
    { NULL, 0, 0, NULL }
};


static ngx_uint_t  ngx_http_dynamo_rl_n;
static ngx_uint_t  ngx_http_dynamo_rl_failed;


static void ngx_http_dynamo_rl_ok(ngx_uint_t ok, const char *what,
    const char *value);
static ngx_uint_t ngx_http_dynamo_rl_eq(ngx_str_t *s, char *c);


int
main(void)
{
    char                              *why;
    uint64_t                           id;
    ngx_int_t                          rc;
    ngx_str_t                          name, suffix, route;
    ngx_uint_t                         mode, n, ok;
    ngx_http_dynamo_rl_test_scope_t   *s;
    ngx_http_dynamo_rl_test_routes_t  *rt;
    ngx_http_dynamo_rl_test_answer_t  *a;
    ngx_http_dynamo_rl_test_health_t  *h;

    n = 0;

    for (s = ngx_http_dynamo_rl_scopes; s->value; s++) { n++; }
    for (rt = ngx_http_dynamo_rl_routes; rt->value; rt++) { n++; }
    for (a = ngx_http_dynamo_rl_answers; a->body; a++) { n++; }
    for (a = ngx_http_dynamo_rl_finds; a->body; a++) { n++; }
    for (h = ngx_http_dynamo_rl_healths; h->value; h++) { n++; }

    printf("1..%u\n", (unsigned) n);

    for (s = ngx_http_dynamo_rl_scopes; s->value; s++) {
        mode = 99;

        rc = ngx_http_dynamo_rl_parse_scope((u_char *) s->value,
                                            strlen(s->value), &mode, &name,
                                            &suffix);

        ok = (rc == s->rc);

        if (ok && rc == NGX_OK) {
            ok = (mode == s->mode && ngx_http_dynamo_rl_eq(&name, s->name)
                  && ngx_http_dynamo_rl_eq(&suffix, s->suffix));
        }

        ngx_http_dynamo_rl_ok(ok, "parse_scope", s->value);
    }

    for (rt = ngx_http_dynamo_rl_routes; rt->value; rt++) {
        rc = ngx_http_dynamo_rl_parse_routes((u_char *) rt->value,
                                             strlen(rt->value), &n);

        ngx_http_dynamo_rl_ok(rc == rt->rc && (rc != NGX_OK || n == rt->n),
                              "parse_routes", rt->value);
    }

    for (a = ngx_http_dynamo_rl_answers; a->body; a++) {
        why = NULL;

        rc = ngx_http_dynamo_rl_json_admin_error((u_char *) a->body,
                                                 strlen(a->body), &why);

        ngx_http_dynamo_rl_ok(rc == a->rc && (rc != NGX_OK || why != NULL),
                              "json_admin_error", a->body);
    }

    ngx_str_set(&route, "flush_cache");

    for (a = ngx_http_dynamo_rl_finds; a->body; a++) {
        rc = ngx_http_dynamo_rl_routes_find((u_char *) a->body,
                                            strlen(a->body), &route);

        ngx_http_dynamo_rl_ok(rc == a->rc, "routes_find", a->body);
    }

    /* the health path */

    for (h = ngx_http_dynamo_rl_healths; h->value; h++) {
        id = 0xdeadbeef;

        rc = ngx_http_dynamo_rl_parse_health_path((u_char *) h->value,
                                                  strlen(h->value), &id);

        ngx_http_dynamo_rl_ok(rc == h->rc && (rc != NGX_OK || id == h->id),
                              "parse_health_path", h->name);
    }

    return ngx_http_dynamo_rl_failed ? 1 : 0;
}


static void
ngx_http_dynamo_rl_ok(ngx_uint_t ok, const char *what, const char *value)
{
    const char  *p;

    ngx_http_dynamo_rl_n++;

    printf("%s %u - %s \"", ok ? "ok" : "not ok",
           (unsigned) ngx_http_dynamo_rl_n, what);

    for (p = value; *p; p++) {
        if (*p >= 0x20 && *p < 0x7f) {
            putchar(*p);

        } else {
            printf("\\x%02x", (unsigned char) *p);
        }
    }

    printf("\"\n");

    if (!ok) {
        ngx_http_dynamo_rl_failed++;
    }
}


static ngx_uint_t
ngx_http_dynamo_rl_eq(ngx_str_t *s, char *c)
{
    return s->len == strlen(c) && (s->len == 0
                                   || memcmp(s->data, c, s->len) == 0);
}
