
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>


/*
 * Discovery document validation and the snapshot index, without nginx:
 * the reference fixtures and hand-written edge cases.  Output is TAP.
 */


typedef struct {
    char                           *doc;
    ngx_int_t                       rc;
    ngx_http_dynamo_rl_index_t      index;
    ngx_http_dynamo_rl_json_err_t   err;
} snap_t;


static void *test_alloc(void *data, size_t size);
static char *slurp(const char *name);
static void load(snap_t *s, const char *doc);
static ngx_uint_t count(snap_t *s, uint64_t id);
static ngx_http_dynamo_rl_worker_t *find(snap_t *s, uint64_t id);
static void test_fixtures(void);
static void test_ids(void);
static void test_documents(void);
static void test_workers(void);
static void test_scan(void);
static void test_table(void);
static void test_rewrite(void);
static void test_admin_url(void);


#define W(fields)                                                            \
    "{\"protocol_version\":1,\"namespace\":\"dynamo\",\"workers\":["         \
    fields "]}"

#define WORKER(id, extra)                                                    \
    "{\"namespace\":\"dynamo\",\"component\":\"backend\","                   \
    "\"endpoint\":\"rl\",\"instance_id\":" id ","                            \
    "\"transport\":{\"tcp\":\"127.0.0.1:9999/1/rl\"},"                       \
    "\"request_plane_url\":\"dyn://dynamo.backend.rl\"" extra "}"

/* worker 1 with no routes and the fields of "extra" */

#define W1(extra)  W(WORKER("1", ",\"routes\":[]" extra))
#define SYS(url)   ",\"system_url\":\"" url "\""

#define OKW(id)                                                              \
    WORKER(id, ",\"system_url\":\"http://127.0.0.1:8081\","                  \
               "\"routes\":[\"liveness_probe\"]")


static void *
test_alloc(void *data, size_t size)
{
    /* the process exits after the tests: nothing is freed */
    return malloc(size ? size : 1);
}


static char *
slurp(const char *name)
{
    long   n;
    char  *buf, path[256];
    FILE  *f;

    snprintf(path, sizeof(path), "t/fixtures/%s", name);

    f = fopen(path, "rb");
    if (f == NULL) {
        printf("Bail out! cannot open %s\n", path);
        exit(1);
    }

    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);

    buf = malloc(n + 1);
    if (buf == NULL || fread(buf, 1, n, f) != (size_t) n) {
        printf("Bail out! cannot read %s\n", path);
        exit(1);
    }

    buf[n] = '\0';
    fclose(f);

    return buf;
}


static void
load(snap_t *s, const char *doc)
{
    s->doc = (char *) doc;
    s->rc = ngx_http_dynamo_rl_json_index((u_char *) doc, strlen(doc),
                                          test_alloc, NULL, &s->index,
                                          &s->err);
}


static ngx_uint_t
count(snap_t *s, uint64_t id)
{
    ngx_uint_t                     n, i, k;
    ngx_http_dynamo_rl_worker_t  **wp;

    wp = ngx_http_dynamo_rl_index_find(&s->index, id, &n);

    if (wp == NULL) {
        return n == 0 ? 0 : 1000;
    }

    /* the n workers found have the id, and sorted[] has no other */

    for (i = 0; i < n; i++) {
        if (wp[i]->id != id) {
            return 1000;
        }
    }

    for (i = 0, k = 0; i < s->index.nsorted; i++) {
        k += (s->index.sorted[i]->id == id);
    }

    return k == n ? n : 1000;
}


static ngx_http_dynamo_rl_worker_t *
find(snap_t *s, uint64_t id)
{
    ngx_uint_t                     n;
    ngx_http_dynamo_rl_worker_t  **wp;

    wp = ngx_http_dynamo_rl_index_find(&s->index, id, &n);

    return wp ? *wp : NULL;
}


static void
test_fixtures(void)
{
    snap_t                        s;
    ngx_http_dynamo_rl_worker_t  *w;

    load(&s, slurp("rl-workers-vllm-healthy-2.json"));
    ok(s.rc == NGX_OK, "healthy-2 is valid");
    ok(s.index.nworkers == 2 && s.index.nsorted == 2, "healthy-2: 2 workers");

    w = find(&s, 7587888160958628117ULL);
    ok(w != NULL && w->state == NGX_HTTP_DYNAMO_RL_WORKER_OK,
       "healthy-2: 7587888160958628117 eligible");
    ok(w != NULL && w->nroutes == 11, "healthy-2: 11 routes");
    ok(w != NULL && w->system_url.len == 21
       && ngx_strncmp(w->system_url.data, "http://10.0.3.17:8081", 21) == 0,
       "healthy-2: system_url copied");
    ok(find(&s, 7587888160958628342ULL) != NULL, "healthy-2: second id");
    ok(find(&s, 7587888160958628118ULL) == NULL, "healthy-2: neighbour id");
    ok(s.doc[s.index.workers[1].start] == '{'
       && s.doc[s.index.workers[1].end - 1] == '}',
       "healthy-2: element span");

    load(&s, slurp("rl-workers-probe-error.json"));
    ok(s.rc == NGX_OK && s.index.nworkers == 3, "probe-error is valid");
    ok(find(&s, 7587888160958628117ULL)->state
       == NGX_HTTP_DYNAMO_RL_WORKER_OK, "probe-error: healthy worker");
    ok(find(&s, 7587888160958628342ULL)->state
       == NGX_HTTP_DYNAMO_RL_WORKER_ERROR, "probe-error: timed out worker");
    ok(find(&s, 7587888160958629001ULL)->state
       == NGX_HTTP_DYNAMO_RL_WORKER_ERROR, "probe-error: undiscoverable");

    load(&s, slurp("rl-workers-optional-fields-absent.json"));
    ok(s.rc == NGX_OK, "optional-fields-absent is valid");
    ok(find(&s, 7587888160958631555ULL)->state
       == NGX_HTTP_DYNAMO_RL_WORKER_NO_URL, "no system_url");
    w = find(&s, 42);
    ok(w != NULL && w->state == NGX_HTTP_DYNAMO_RL_WORKER_OK
       && w->nroutes == 0, "empty routes, eligible, nothing advertised");

    load(&s, slurp("rl-workers-empty.json"));
    ok(s.rc == NGX_OK && s.index.nworkers == 0 && s.index.nelts == 0,
       "empty fleet is valid");

    load(&s, slurp("rl-workers-multi-namespace-prefix.json"));
    ok(s.rc == NGX_OK && s.index.nworkers == 3, "multi-namespace is valid");
    w = find(&s, 1311768467463791001ULL);
    ok(w != NULL && w->namespace.len == 16
       && ngx_strncmp(w->namespace.data, "prod-rl-1a2b3c4d", 16) == 0,
       "multi-namespace: namespace copied");
    ok(w != NULL && w->nroutes == 9, "multi-namespace: control/* routes");

    load(&s, slurp("rl-workers-discovery-failed-500.json"));
    ok(s.rc == NGX_DECLINED, "the 500 body is not a snapshot");
}


static void
test_ids(void)
{
    snap_t  s;

    load(&s, W(OKW("18446744073709551615") "," OKW("9007199254740993") ","
               OKW("0")));
    ok(s.rc == NGX_OK && s.index.nsorted == 3, "u64 ids: document valid");
    ok(count(&s, 18446744073709551615ULL) == 1, "u64 max exact");
    ok(count(&s, 18446744073709551614ULL) == 0, "u64 max - 1 absent");
    ok(count(&s, 9007199254740993ULL) == 1, "2^53 + 1 exact");
    ok(count(&s, 9007199254740992ULL) == 0, "2^53 absent");
    ok(count(&s, 0) == 1, "id 0");

    load(&s, W(OKW("18446744073709551616") "," OKW("5") ","
               OKW("-99999999999999999999")));
    ok(s.rc == NGX_OK, "2^64: the document stays usable");
    ok(s.index.workers[0].state == NGX_HTTP_DYNAMO_RL_WORKER_INVALID
       && !s.index.workers[0].has_id, "2^64: worker invalid");
    ok(count(&s, 5) == 1, "2^64: the rest of the fleet usable");

    load(&s, W(OKW("-1") "," OKW("1.0") "," OKW("1e3") "," OKW("\"7\"") ","
               OKW("true") "," OKW("null") "," OKW("7")));
    ok(s.rc == NGX_OK && s.index.nworkers == 7, "odd ids: valid document");
    ok(s.index.nsorted == 1 && count(&s, 7) == 1,
       "odd ids: only the integer is indexed");
    ok(count(&s, 1) == 0 && count(&s, 1000) == 0 && count(&s, 0) == 0,
       "odd ids: ordinals never leak as ids");

    load(&s, W(OKW("3") "," OKW("3") "," OKW("4")));
    ok(count(&s, 3) == 2 && count(&s, 4) == 1, "duplicate ids both kept");

    load(&s, W(WORKER("8", ",\"routes\":[],\"instance\\u005fid\":9")));
    ok(s.rc == NGX_DECLINED, "escaped duplicate key rejected by jansson");

    load(&s, W(WORKER("8", ",\"routes\":[],\"transpor\\u0074x\":9")));
    ok(s.rc == NGX_OK && s.index.workers[0].state
       == NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "escaped member name: invalid");
}


static void
test_documents(void)
{
    snap_t  s;

    static const char  *bad[] = {
        "",
        "not json",
        "{\"protocol_version\":1,\"workers\":[",
        "[]",
        "{\"workers\":[]}",
        "{\"protocol_version\":2,\"workers\":[]}",
        "{\"protocol_version\":\"1\",\"workers\":[]}",
        "{\"protocol_version\":1.0,\"workers\":[]}",
        "{\"protocol_version\":true,\"workers\":[]}",
        "{\"protocol_version\":1}",
        "{\"protocol_version\":1,\"workers\":{}}",
        "{\"protocol_version\":1,\"workers\":null}",
        "{\"protocol_version\":1,\"protocol_version\":1,\"workers\":[]}",
        "{\"protocol_version\":1,\"workers\":[]} x",
        NULL
    };

    const char  **d;
    char          name[128];

    for (d = bad; *d; d++) {
        load(&s, *d);
        snprintf(name, sizeof(name), "invalid document %d refused",
                 (int) (d - bad));
        ok(s.rc == NGX_DECLINED && s.err.reason != NULL, name);
    }

    load(&s, "{\"protocol_version\":1,\"workers\":[1,\"x\",null,"
             OKW("12") "]}");
    ok(s.rc == NGX_OK && s.index.nelts == 4 && s.index.nworkers == 1
       && count(&s, 12) == 1, "non-object elements are not workers");

    load(&s, "{\"protocol_version\":1,\"extra\":{\"workers\":[" OKW("1")
             "]},\"workers\":[" OKW("2") "]}");
    ok(s.rc == NGX_OK && count(&s, 2) == 1 && count(&s, 1) == 0,
       "a nested \"workers\" is not the fleet");
}


static void
test_workers(void)
{
    snap_t                        s;
    ngx_http_dynamo_rl_worker_t  *w;

    static struct {
        const char  *doc;
        ngx_uint_t   state;
        const char  *name;
    } cases[] = {
        { W(WORKER("1", ",\"routes\":{}")),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "routes not an array" },
        { W(WORKER("1", "")),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "routes missing" },
        { W(WORKER("1", ",\"routes\":[\"\"]")),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "empty route" },
        { W(WORKER("1", ",\"routes\":[5]")),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "non-string route" },
        { W("{\"namespace\":\"dynamo\",\"endpoint\":\"rl\",\"instance_id\":1,"
            "\"transport\":{\"tcp\":\"x\"},\"request_plane_url\":\"d\","
            "\"routes\":[],\"system_url\":\"http://h:1\"}"),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "component missing" },
        { W("{\"namespace\":\"dynamo\",\"component\":\"b\",\"endpoint\":\"rl\","
            "\"instance_id\":1,\"request_plane_url\":\"d\",\"routes\":[],"
            "\"system_url\":\"http://h:1\"}"),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "transport missing" },
        { W("{\"namespace\":\"dynamo\",\"component\":\"b\",\"endpoint\":\"rl\","
            "\"instance_id\":1,\"transport\":{\"a\":\"x\",\"b\":\"y\"},"
            "\"request_plane_url\":\"d\",\"routes\":[],"
            "\"system_url\":\"http://h:1\"}"),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "transport with two keys" },
        { W1(",\"world_size\":0" SYS("http://h:1")),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "world_size 0" },
        { W1(",\"model\":5" SYS("http://h:1")),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "model not a string" },
        { W1(",\"system_url\":5"),
          NGX_HTTP_DYNAMO_RL_WORKER_INVALID, "system_url not a string" },
        { W1(",\"error\":\"probe timed out\"" SYS("http://h:1")),
          NGX_HTTP_DYNAMO_RL_WORKER_ERROR, "error present" },
        { W1(",\"error\":null" SYS("http://h:1")),
          NGX_HTTP_DYNAMO_RL_WORKER_OK, "error null is absent" },
        { W1(SYS("http://u@h:1")),
          NGX_HTTP_DYNAMO_RL_WORKER_NO_URL, "system_url with userinfo" },
        { W1(SYS("http://h:1/engine")),
          NGX_HTTP_DYNAMO_RL_WORKER_NO_URL, "system_url with a path" },
        { W1(SYS("")),
          NGX_HTTP_DYNAMO_RL_WORKER_NO_URL, "blank system_url" },
        { W1(",\"admin_base_url\":\"http://h:2\""),
          NGX_HTTP_DYNAMO_RL_WORKER_NO_URL, "admin_base_url is not used" },
        { NULL, 0, NULL }
    };

    ngx_uint_t  i;

    for (i = 0; cases[i].doc; i++) {
        load(&s, cases[i].doc);
        ok(s.rc == NGX_OK && s.index.nworkers == 1
           && s.index.workers[0].state == cases[i].state, cases[i].name);
    }

    load(&s, W(WORKER("1", ",\"routes\":[\"b\",\"../x\",\"/x\",\"a/b\","
                           "\"x/\",\"a\"],\"system_url\":\"http://h:1\"")));
    w = find(&s, 1);
    ok(w != NULL && w->state == NGX_HTTP_DYNAMO_RL_WORKER_OK
       && w->nroutes == 3 && s.index.bad_routes == 3,
       "routes outside the grammar are dropped and counted");
}


static void
test_scan(void)
{
    size_t                            len;
    const char                       *doc;
    ngx_http_dynamo_rl_scan_t         scan;
    ngx_http_dynamo_rl_scan_worker_t  w[4];

    doc = "{\"workers\":[{\"instance_id\":12,\"t\":{\"instance_id\":3}},"
          "{\"x\":\"instance_id\",\"instance_id\":\"5\"}]}";
    len = strlen(doc);

    scan.workers = w;
    scan.nalloc = 4;

    ok(ngx_http_dynamo_rl_scan_discovery((u_char *) doc, len, &scan)
       == NGX_OK && scan.nworkers == 2, "scan: two workers");
    ok(w[0].id_start != NULL && w[0].id_end - w[0].id_start == 2
       && w[0].id_start[0] == '1', "scan: the worker's own id token");
    ok(w[1].id_start == NULL, "scan: a string id has no token");

    scan.nalloc = 1;
    ok(ngx_http_dynamo_rl_scan_discovery((u_char *) doc, len, &scan)
       == NGX_DECLINED, "scan: capacity respected");

    scan.nalloc = 4;
    ok(ngx_http_dynamo_rl_scan_discovery((u_char *) "{\"a\":\"\\\"", 8,
                                         &scan)
       == NGX_DECLINED, "scan: unterminated string");
    ok(ngx_http_dynamo_rl_scan_discovery((u_char *) "]]", 2, &scan)
       == NGX_DECLINED, "scan: unbalanced");
}


/*
 * dynamo_rl_admin_url's rewrite of one worker element: system_url names
 * the gateway, or is cut, admin_base_url is cut with one comma, every
 * other byte stays
 */

typedef struct {
    const char  *elt;
    const char  *url;        /* NULL: the worker keeps no system_url */
    uint64_t     id;
    const char  *expect;
    const char  *name;
} rewrite_case_t;


static void
test_rewrite(void)
{
    char                              doc[1024], out[2048];
    u_char                           *end;
    size_t                            len;
    ngx_str_t                         url;
    rewrite_case_t                   *c;
    ngx_http_dynamo_rl_scan_t         scan;
    ngx_http_dynamo_rl_scan_worker_t  w[4];

    static rewrite_case_t  cases[] = {
        { "{\"a\":1,\"system_url\":\"http://10.0.0.5:9345\",\"b\":2}",
          "https://gw:9090/v1/rl/workers/", 7,
          "{\"a\":1,\"system_url\":\"https://gw:9090/v1/rl/workers/7\","
          "\"b\":2}", "replaced in place" },
        { "{\"system_url\" : \"http://w:1/\" ,"
          "\"admin_base_url\":\"http://w:2\"}",
          "http://g/", 18446744073709551615ULL,
          "{\"system_url\" : \"http://g/18446744073709551615\" }",
          "u64 max, spaces kept, admin_base_url cut with its comma" },
        { "{\"admin_base_url\":\"http://w:2\",\"system_url\":\"http://w:1\"}",
          "http://g/", 0,
          "{\"system_url\":\"http://g/0\"}",
          "admin_base_url first" },
        { "{\"system_url\":\"http://w:1\",\"admin_base_url\":\"http://w:2\"}",
          NULL, 3, "{}", "both cut, nothing left" },
        { "{\"system_url\":\"http://w:1\",\"admin_base_url\":\"x\",\"c\":3}",
          NULL, 3, "{\"c\":3}", "both cut, first members" },
        { "{\"c\":3,\"system_url\":null,\"admin_base_url\":{\"x\":[1,{}]}}",
          NULL, 3, "{\"c\":3}", "null and object values cut" },
        { "{\"c\":3,\"system_url\":[\"a\",\"b\"],\"d\":4}",
          NULL, 3, "{\"c\":3,\"d\":4}", "array value cut" },
        { "{\"c\":3}", "http://g/", 9, "{\"c\":3}",
          "no system_url: nothing added" },
        { "{\"c\":{\"system_url\":\"inner\",\"admin_base_url\":1}}",
          "http://g/", 9,
          "{\"c\":{\"system_url\":\"inner\",\"admin_base_url\":1}}",
          "nested members are not the worker's" },
        { "{\"s\":\"system_url\",\"system_url\":\"http://w\",\"e\":false}",
          "http://g/", 12,
          "{\"s\":\"system_url\",\"system_url\":\"http://g/12\",\"e\":false}",
          "a value spelled like the name is not a member" },
        { "{ \"x\" : 1 ,\n \"admin_base_url\" : \"u\" \n}", "http://g/", 1,
          "{ \"x\" : 1  \n}", "cut with the comma before it, spaces kept" },
        { "{\"system_url\":\"a\\\"b\",\"z\":true}", NULL, 1,
          "{\"z\":true}", "escaped value cut" },
        { "{\"system\\u005furl\":\"http://w:1\",\"c\":1}", NULL, 1,
          "{\"c\":1}", "a name spelled with escapes is cut" },
        { "{\"c\":1,\"admin\\u005Fbase_url\":\"http://w:2\"}", "http://g/", 1,
          "{\"c\":1}", "admin_base_url spelled with escapes is cut" },
        { "{\"admi\\n_base_url\":1,\"system_urL\":2}", "http://g/", 1,
          "{\"admi\\n_base_url\":1,\"system_urL\":2}",
          "other names stay" },
        { NULL, NULL, 0, NULL, NULL }
    };

    for (c = cases; c->elt; c++) {
        len = sprintf(doc, "{\"workers\":[%s]}", c->elt);

        scan.workers = w;
        scan.nalloc = 4;

        if (ngx_http_dynamo_rl_scan_discovery((u_char *) doc, len, &scan)
            != NGX_OK || scan.nworkers != 1)
        {
            ok(0, c->name);
            continue;
        }

        url.data = (u_char *) c->url;
        url.len = c->url ? strlen(c->url) : 0;

        end = ngx_http_dynamo_rl_admin_rewrite((u_char *) out, &w[0],
                                               c->url ? &url : NULL, c->id);

        if ((size_t) (end - (u_char *) out)
            > strlen(c->elt)
              + (c->url ? NGX_HTTP_DYNAMO_RL_REWRITE_ROOM(url.len) : 0))
        {
            ok(0, c->name);
            continue;
        }

        *end = '\0';

        if (strcmp(out, c->expect) != 0) {
            printf("# got    %s\n# expect %s\n", out, c->expect);
        }

        ok(strcmp(out, c->expect) == 0, c->name);
    }
}


static void
test_admin_url(void)
{
    ngx_uint_t  i;

    static struct {
        const char  *url;
        ngx_int_t    rc;
    } urls[] = {
        { "https://gw:9090/v1/rl/workers/", NGX_OK },
        { "HTTP://gw/", NGX_OK },
        { "http://[::1]:9090/a/", NGX_OK },
        { "http://", NGX_DECLINED },
        { "http:///x/", NGX_DECLINED },
        { "ftp://gw/", NGX_DECLINED },
        { "gw:9090/v1/", NGX_DECLINED },
        { "http://gw/v1?x=", NGX_DECLINED },
        { "http://gw/v1#", NGX_DECLINED },
        { "http://gw/v 1/", NGX_DECLINED },
        { "http://gw/\"/", NGX_DECLINED },
        { "http://gw/\\/", NGX_DECLINED },
        { "http://gw/\x7f/", NGX_DECLINED },
        { "http://gw/\xc3\xa9/", NGX_DECLINED },
        { "", NGX_DECLINED },
        { NULL, 0 }
    };

    for (i = 0; urls[i].url; i++) {
        ok(ngx_http_dynamo_rl_admin_url_valid((u_char *) urls[i].url,
                                              strlen(urls[i].url))
           == urls[i].rc, urls[i].url);
    }
}


/*
 * the id table under load: ids that share their low or high 32 bits, a
 * run of neighbours, duplicates; every id found with all its copies,
 * nothing else found
 */

static void
test_table(void)
{
    char        *doc, *p;
    snap_t       s;
    uint64_t     id;
    ngx_uint_t   i, n, bad, absent;

    n = 900;

    doc = malloc(n * 400 + 256);
    if (doc == NULL) {
        ok(0, "table: memory");
        return;
    }

    p = doc + sprintf(doc, "{\"protocol_version\":1,\"namespace\":\"dynamo\","
                      "\"workers\":[");

    for (i = 0; i < n; i++) {
        id = (i < 300) ? (uint64_t) i << 32
             : (i < 600) ? 0xffffffff00000000ULL + i
             : 1000000 + i;

        p += sprintf(p, "%s" OKW("%llu"), i ? "," : "",
                     (unsigned long long) id);

        if (i % 97 == 0) {
            p += sprintf(p, "," OKW("%llu"), (unsigned long long) id);
        }
    }

    strcpy(p, "]}");

    load(&s, doc);
    ok(s.rc == NGX_OK && s.index.nsorted == n + (n + 96) / 97,
       "table: 900 ids and 10 duplicates indexed");

    bad = 0;
    absent = 0;

    for (i = 0; i < n; i++) {
        id = (i < 300) ? (uint64_t) i << 32
             : (i < 600) ? 0xffffffff00000000ULL + i
             : 1000000 + i;

        if (count(&s, id) != (i % 97 == 0 ? 2 : 1)) {
            bad++;
        }

        if (i < 300 && count(&s, id + 1) != 0) {
            absent++;
        }
    }

    ok(bad == 0, "table: every id found, with its duplicate");
    ok(absent == 0, "table: no neighbour of a sparse id found");
    ok(count(&s, 1ULL << 31) == 0 && count(&s, 12345) == 0,
       "table: absent ids not found");

    free(doc);

    load(&s, W(""));
    ok(s.rc == NGX_OK && count(&s, 0) == 0 && count(&s, 7) == 0,
       "table: an empty fleet finds nothing");
}


int
main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);

    test_fixtures();
    test_ids();
    test_documents();
    test_workers();
    test_scan();
    test_table();
    test_rewrite();
    test_admin_url();

    return done_testing();
}
