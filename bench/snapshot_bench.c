
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>


/*
 * Snapshot micro-benchmark, without nginx: for discovery documents of
 * 1, 100, 1,000 and 10,000 workers x 20 routes it measures
 *
 *   (a) jansson's bare json_loadb(JSON_REJECT_DUPLICATES) + json_decref
 *       of the document's bytes, except that jansson rejects integers
 *       above 2^63 - 1: each such id is changed to a same-length int64
 *       (a leading 9 becomes 8, a leading 1 of 20 digits becomes -);
 *   (a') the document's own bytes with JSON_DECODE_INT_AS_REAL added;
 *   (b) ngx_http_dynamo_rl_json_index() of the same bytes into an arena
 *       that mimics an nginx pool (16 KB blocks, larger allocations from
 *       malloc), freed after each run, as the module does per process;
 *   (c) the admin decision on the built index, the logic of
 *       ngx_http_dynamo_rl_admin_decide() without the request: the
 *       index lookup, the namespace scope, the state, the byte-exact
 *       route match and the copy of system_url and engine path.
 *
 * (a), (a') and (b) run interleaved, A A' B A A' B, for each size; (c)
 * interleaves all the sizes in each round.  Ratios are medians of
 * per-round ratios.
 *
 *     snapshot-bench                      the whole table
 *     snapshot-bench quick                fewer rounds (a smoke run)
 *     snapshot-bench once N parse|real|index|decide|decide-same
 *                                         one run (decide: 100,000
 *                                         decisions), for callgrind's
 *                                         --toggle-collect=bench_*_once
 *                                         or =bench_decisions
 *     snapshot-bench rewrite [N]         dynamo_rl_admin_url: the discovery
 *                                         plane's work on an N-worker
 *                                         answer (10,000 by default),
 *                                         the index build alone (what a
 *                                         passthrough answer costs) and
 *                                         with the rewrite pass of every
 *                                         worker's element; the median
 *                                         of the per-round ratios
 *     snapshot-bench emit N URL FILE [all]
 *                                         write an N-worker document
 *                                         whose worker BENCH_TARGET_ID
 *                                         (or every worker) has
 *                                         system_url URL, and its ids,
 *                                         one a line, to FILE.ids;
 *                                         prints BENCH_TARGET_ID
 */


/* above 2^63, the largest 64-bit prime; the worker the admin calls target */
#define BENCH_TARGET_ID      18446744073709551557ULL

#define BENCH_ROUTES         20
#define BENCH_QUERIES        4096
#define BENCH_MAX_ROUNDS     31
#define BENCH_POOL_SIZE      16384
#define BENCH_POOL_LARGE     4095
#define BENCH_DECIDE_ONCE    100000


typedef struct bench_block_s  bench_block_t;

struct bench_block_s {
    bench_block_t                  *next;
    u_char                         *last;
    u_char                         *end;
};


typedef struct {
    bench_block_t                  *blocks;
    bench_block_t                  *large;
} bench_arena_t;


typedef struct {
    ngx_uint_t                      nworkers;
    u_char                         *doc;
    u_char                         *twin;         /* (a)'s bytes */
    size_t                          len;
    uint64_t                       *ids;          /* document order */

    double                          parse_ns[BENCH_MAX_ROUNDS];
    double                          real_ns[BENCH_MAX_ROUNDS];
    double                          index_ns[BENCH_MAX_ROUNDS];
    double                          ratio[BENCH_MAX_ROUNDS];
    double                          real_ratio[BENCH_MAX_ROUNDS];

    double                          random_ns[BENCH_MAX_ROUNDS];
    double                          same_ns[BENCH_MAX_ROUNDS];
    double                          random_ratio[BENCH_MAX_ROUNDS];
    double                          same_ratio[BENCH_MAX_ROUNDS];
    double                          flat_ns[BENCH_MAX_ROUNDS];
    double                          flat_ratio[BENCH_MAX_ROUNDS];

    size_t                          arena_bytes;
} bench_size_t;


typedef struct {
    uint64_t                        id;
    ngx_str_t                       route;
} bench_query_t;


static void *bench_alloc(void *data, size_t size);
static void bench_arena_free(bench_arena_t *a);
static uint64_t bench_next(uint64_t *state);
static u_char *bench_generate(ngx_uint_t n, char *target_url,
    ngx_uint_t twin, size_t *len, uint64_t **ids);
static double bench_now(void);
static double bench_median(double *v, ngx_uint_t n);
static void bench_range(double *v, ngx_uint_t n, double *lo, double *hi);
void bench_parse_once(u_char *doc, size_t len, size_t flags);
void bench_index_once(u_char *doc, size_t len, size_t *bytes);
static void bench_build(bench_size_t *s, bench_arena_t *arena,
    ngx_http_dynamo_rl_index_t *index);
static ngx_int_t bench_decide(ngx_http_dynamo_rl_index_t *index,
    uint64_t *flat, ngx_str_t *scope, uint64_t id, ngx_str_t *route,
    u_char *out);
static ngx_http_dynamo_rl_worker_t **bench_flat_find(
    ngx_http_dynamo_rl_index_t *index, uint64_t *flat, uint64_t id);
static double bench_decisions(ngx_http_dynamo_rl_index_t *index,
    uint64_t *flat, bench_query_t *q, ngx_uint_t iterations);
static void bench_queries(bench_size_t *s, bench_query_t *q,
    ngx_uint_t same);
static int bench_emit(int argc, char **argv);
static int bench_once(int argc, char **argv);
static int bench_rewrite(int argc, char **argv);
static size_t bench_rewrite_once(u_char *doc, size_t len, u_char *out,
    ngx_str_t *url);


static char  *bench_routes[BENCH_ROUTES] = {
    "abort_request",
    "destroy_weights_update_group",
    "flush_cache",
    "get_weight_version",
    "init_weights_update_group",
    "liveness_probe",
    "load_lora",
    "pause_generation",
    "resume_generation",
    "unload_lora",
    "update_weights_from_disk",
    "update_weights_from_distributed",
    "update_weights_from_tensor",
    "control/get_weight_version",
    "control/is_paused",
    "control/pause_generation",
    "control/resume_generation",
    "update/finish_weight_update",
    "update/start_weight_update",
    "update/update_weights"
};


static ngx_uint_t   bench_sizes[] = { 1, 100, 1000, 10000 };
static ngx_str_t    bench_scope = ngx_string("dynamo");
static volatile uint64_t  bench_sink;
static ngx_uint_t   bench_url_all;


static void *
bench_alloc(void *data, size_t size)
{
    bench_arena_t  *a = data;

    u_char         *p;
    bench_block_t  *b;

    if (size > BENCH_POOL_LARGE) {
        b = malloc(sizeof(bench_block_t) + size);
        if (b == NULL) {
            return NULL;
        }

        b->last = (u_char *) b + sizeof(bench_block_t);
        b->end = b->last + size;
        b->next = a->large;
        a->large = b;

        return (u_char *) b + sizeof(bench_block_t);
    }

    /* as ngx_palloc(): the start aligned to NGX_ALIGNMENT */

    b = a->blocks;

    if (b != NULL) {
        b->last = ngx_align_ptr(b->last, NGX_ALIGNMENT);
    }

    if (b == NULL || b->last > b->end
        || (size_t) (b->end - b->last) < size)
    {
        b = malloc(BENCH_POOL_SIZE);
        if (b == NULL) {
            return NULL;
        }

        b->last = (u_char *) b + sizeof(bench_block_t);
        b->end = (u_char *) b + BENCH_POOL_SIZE;
        b->next = a->blocks;
        a->blocks = b;
    }

    p = b->last;
    b->last += size;

    return p;
}


static void
bench_arena_free(bench_arena_t *a)
{
    bench_block_t  *b, *next;

    for (b = a->blocks; b; b = next) {
        next = b->next;
        free(b);
    }

    for (b = a->large; b; b = next) {
        next = b->next;
        free(b);
    }

    a->blocks = NULL;
    a->large = NULL;
}


/* splitmix64: deterministic ids, the same documents on every run */

static uint64_t
bench_next(uint64_t *state)
{
    uint64_t  z;

    z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;

    return z ^ (z >> 31);
}


/*
 * A compact document as the RL listener (serde_json) writes it.  A quarter
 * of the ids are below 2^53, a quarter between 2^53 and 2^63, half above
 * 2^63; one worker in eight is in a suffixed namespace; one in four has an
 * admin_base_url.  Worker n / 2 has the id BENCH_TARGET_ID and, when given,
 * the system_url target_url (every worker has it with "emit ... all").
 */

static u_char *
bench_generate(ngx_uint_t n, char *target_url, ngx_uint_t twin, size_t *len,
    uint64_t **ids)
{
    char        ns[32], ip[32], url[128], dec[32];
    u_char     *doc, *p;
    size_t      size;
    uint64_t    id, state;
    ngx_uint_t  i, k;

    size = 256 + (n + 1) * 1400;

    doc = malloc(size);
    *ids = malloc((n + 1) * sizeof(uint64_t));

    if (doc == NULL || *ids == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }

    state = 20240601;

    p = doc;
    p += sprintf((char *) p,
                 "{\"protocol_version\":1,\"namespace\":\"dynamo\","
                 "\"workers\":[");

    for (i = 0; i < n; i++) {
        id = bench_next(&state);

        switch (i % 4) {
        case 0:
            id &= (1ULL << 53) - 1;
            break;
        case 1:
            id = (id >> 2) | (1ULL << 60);
            break;
        default:
            id |= 1ULL << 63;
        }

        if (i == n / 2) {
            id = BENCH_TARGET_ID;
        }

        (*ids)[i] = id;

        if (i % 8 == 7) {
            sprintf(ns, "dynamo-%08x", (unsigned) (id >> 32));

        } else {
            sprintf(ns, "dynamo");
        }

        sprintf(ip, "10.%u.%u.%u", (unsigned) (i >> 16) & 0xff,
                (unsigned) (i >> 8) & 0xff, (unsigned) i & 0xff);

        if (target_url != NULL && (i == n / 2 || bench_url_all)) {
            snprintf(url, sizeof(url), "%s", target_url);

        } else {
            snprintf(url, sizeof(url), "http://%s:8081", ip);
        }

        sprintf(dec, "%llu", (unsigned long long) id);

        if (twin && id > 0x7fffffffffffffffULL) {
            /*
             * the same length and structure in a form jansson accepts:
             * 9xxx (19 digits) becomes 8xxx, 1xxx (20 digits) -xxx,
             * 10xxx -1xxx
             */

            if (dec[0] == '9') {
                dec[0] = '8';

            } else {
                dec[0] = '-';

                if (dec[1] == '0') {
                    dec[1] = '1';
                }
            }
        }

        p += sprintf((char *) p,
                     "%s{\"namespace\":\"%s\",\"component\":\"backend\","
                     "\"endpoint\":\"generate\",\"instance_id\":%s,"
                     "\"transport\":{\"tcp\":\"%s:9999/%llx/generate\"},"
                     "\"request_plane_url\":\"dyn://%s.backend.generate\","
                     "\"system_url\":\"%s\",",
                     i ? "," : "", ns, dec, ip,
                     (unsigned long long) id, ns, url);

        if (i % 4 == 3) {
            p += sprintf((char *) p, "\"admin_base_url\":\"http://%s:8120\",",
                         ip);
        }

        p += sprintf((char *) p,
                     "\"model\":\"Qwen/Qwen3-30B-A3B\",\"routes\":[");

        for (k = 0; k < BENCH_ROUTES; k++) {
            p += sprintf((char *) p, "%s\"%s\"", k ? "," : "",
                         bench_routes[k]);
        }

        p += sprintf((char *) p, "],\"world_size\":4}");

        if ((size_t) (p - doc) + 1400 > size) {
            fprintf(stderr, "document buffer too small\n");
            exit(1);
        }
    }

    p += sprintf((char *) p, "]}");

    *len = p - doc;

    return doc;
}


static double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec * 1e9 + ts.tv_nsec;
}


static double
bench_median(double *v, ngx_uint_t n)
{
    double      t, s[BENCH_MAX_ROUNDS];
    ngx_uint_t  i, j;

    for (i = 0; i < n; i++) {
        s[i] = v[i];

        for (j = i; j > 0 && s[j - 1] > s[j]; j--) {
            t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    }

    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}


static void
bench_range(double *v, ngx_uint_t n, double *lo, double *hi)
{
    ngx_uint_t  i;

    *lo = v[0];
    *hi = v[0];

    for (i = 1; i < n; i++) {
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
}


/* (a): not static, not inlined, so that callgrind can toggle on it */

__attribute__((noinline)) void
bench_parse_once(u_char *doc, size_t len, size_t flags)
{
    json_t        *root;
    json_error_t   jerr;

    root = json_loadb((char *) doc, len, JSON_REJECT_DUPLICATES | flags,
                      &jerr);

    if (root == NULL) {
        fprintf(stderr, "json_loadb: %s\n", jerr.text);
        exit(1);
    }

    json_decref(root);
}


/* (b): the index, built and thrown away as a process does on a swap */

__attribute__((noinline)) void
bench_index_once(u_char *doc, size_t len, size_t *bytes)
{
    bench_arena_t                  arena;
    bench_block_t                 *b;
    ngx_http_dynamo_rl_index_t     index;
    ngx_http_dynamo_rl_json_err_t  err;

    arena.blocks = NULL;
    arena.large = NULL;

    if (ngx_http_dynamo_rl_json_index(doc, len, bench_alloc, &arena, &index,
                                      &err)
        != NGX_OK)
    {
        fprintf(stderr, "index: %s\n", err.reason);
        exit(1);
    }

    if (bytes) {
        *bytes = 0;

        for (b = arena.blocks; b; b = b->next) {
            *bytes += BENCH_POOL_SIZE;
        }

        for (b = arena.large; b; b = b->next) {
            *bytes += b->end - (u_char *) b;
        }
    }

    bench_sink += index.nsorted;

    bench_arena_free(&arena);
}


static void
bench_build(bench_size_t *s, bench_arena_t *arena,
    ngx_http_dynamo_rl_index_t *index)
{
    ngx_uint_t                      i;
    ngx_http_dynamo_rl_json_err_t   err;

    arena->blocks = NULL;
    arena->large = NULL;

    if (ngx_http_dynamo_rl_json_index(s->doc, s->len, bench_alloc, arena,
                                      index, &err)
        != NGX_OK
        || index->nsorted != s->nworkers || index->bad_routes)
    {
        fprintf(stderr, "%lu workers: index failed: %s\n",
                (unsigned long) s->nworkers, err.reason);
        exit(1);
    }

    for (i = 0; i < index->nworkers; i++) {
        if (index->workers[i].state != NGX_HTTP_DYNAMO_RL_WORKER_OK
            || index->workers[i].nroutes != BENCH_ROUTES)
        {
            fprintf(stderr, "worker %lu: %s\n", (unsigned long) i,
                    index->workers[i].reason);
            exit(1);
        }
    }
}


/*
 * ngx_http_dynamo_rl_admin_decide() without the request: 200 when the call
 * would be forwarded, with "out" holding system_url and the engine path
 * taken from the snapshot's bytes
 */

static ngx_int_t
bench_decide(ngx_http_dynamo_rl_index_t *index, uint64_t *flat,
    ngx_str_t *scope, uint64_t id, ngx_str_t *route, u_char *out)
{
    u_char                        *p;
    size_t                         len;
    ngx_uint_t                     n, k;
    ngx_str_t                     *r;
    ngx_http_dynamo_rl_worker_t  **wp, **last, *w;

    w = NULL;
    n = 0;

    if (flat == NULL) {
        wp = ngx_http_dynamo_rl_index_find(index, id, &k);

    } else {
        /* the old layout counted the duplicates by their ids */

        wp = bench_flat_find(index, flat, id);
        last = index->sorted + index->nsorted;

        for (k = 0; wp != NULL && wp + k < last && wp[k]->id == id; k++) {
            /* void */
        }
    }

    for ( /* void */ ; k; k--, wp++) {
        if (ngx_http_dynamo_rl_namespace_match(NGX_HTTP_DYNAMO_RL_NS_PREFIX,
                                               scope, (*wp)->namespace.data,
                                               (*wp)->namespace.len)
            == NGX_OK)
        {
            w = *wp;
            n++;
        }
    }

    if (n == 0) {
        return NGX_HTTP_NOT_FOUND;
    }

    if (n > 1) {
        return NGX_HTTP_CONFLICT;
    }

    if (w->state != NGX_HTTP_DYNAMO_RL_WORKER_OK) {
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    r = ngx_http_dynamo_rl_route_find(w->routes, w->nroutes, route);

    if (r == NULL) {
        return NGX_HTTP_FORBIDDEN;
    }

    len = w->system_url.len;

    if (w->system_url.data[len - 1] == '/') {
        len--;
    }

    p = ngx_cpymem(out, w->system_url.data, len);
    p = ngx_cpymem(p, "/engine/", sizeof("/engine/") - 1);
    ngx_memcpy(p, r->data, r->len);

    return NGX_HTTP_OK;
}


/*
 * a diagnostic, the module's layout before its id table: a binary search
 * over a contiguous copy of the sorted ids
 */

static ngx_http_dynamo_rl_worker_t **
bench_flat_find(ngx_http_dynamo_rl_index_t *index, uint64_t *flat,
    uint64_t id)
{
    ngx_uint_t  lo, hi, mid;

    lo = 0;
    hi = index->nsorted;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (flat[mid] < id) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    if (lo < index->nsorted && flat[lo] == id) {
        return &index->sorted[lo];
    }

    return NULL;
}


/* ns per decision over "iterations" decisions cycling through "q" */

__attribute__((noinline)) static double
bench_decisions(ngx_http_dynamo_rl_index_t *index, uint64_t *flat,
    bench_query_t *q, ngx_uint_t iterations)
{
    u_char          out[512];
    double          start;
    uint64_t        sum, bytes;
    ngx_uint_t      i;
    bench_query_t  *e;

    sum = 0;
    bytes = 0;
    start = bench_now();

    for (i = 0; i < iterations; i++) {
        e = &q[i & (BENCH_QUERIES - 1)];
        sum += bench_decide(index, flat, &bench_scope, e->id, &e->route,
                            out);
        bytes += out[7];
    }

    start = bench_now() - start;

    if (sum != (uint64_t) iterations * NGX_HTTP_OK) {
        fprintf(stderr, "a decision did not allow\n");
        exit(1);
    }

    bench_sink += bytes;

    return start / iterations;
}


/*
 * present ids at random (same = 0) or always the target worker; routes at
 * random among the 20, the same sequence for every size, in buffers of
 * their own as a request's URI would be
 */

static void
bench_queries(bench_size_t *s, bench_query_t *q, ngx_uint_t same)
{
    size_t      len;
    uint64_t    state, r;
    ngx_uint_t  i;

    state = 7;

    for (i = 0; i < BENCH_QUERIES; i++) {
        r = bench_next(&state);

        q[i].id = same ? BENCH_TARGET_ID : s->ids[r % s->nworkers];

        len = strlen(bench_routes[(r >> 32) % BENCH_ROUTES]);

        if (q[i].route.data == NULL) {
            q[i].route.data = malloc(64);
            if (q[i].route.data == NULL) {
                exit(1);
            }
        }

        ngx_memcpy(q[i].route.data, bench_routes[(r >> 32) % BENCH_ROUTES],
                   len);
        q[i].route.len = len;
    }
}


static int
bench_emit(int argc, char **argv)
{
    char         name[1024];
    FILE        *f;
    u_char      *doc;
    size_t       len;
    uint64_t    *ids;
    ngx_uint_t   i, n;

    if ((argc != 5 && (argc != 6 || strcmp(argv[5], "all") != 0))
        || (n = strtoul(argv[2], NULL, 10)) == 0)
    {
        fprintf(stderr, "usage: %s emit N URL FILE [all]\n", argv[0]);
        return 2;
    }

    bench_url_all = (argc == 6);

    doc = bench_generate(n, argv[3], 0, &len, &ids);

    f = fopen(argv[4], "wb");

    if (f == NULL || fwrite(doc, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 1;
    }

    snprintf(name, sizeof(name), "%s.ids", argv[4]);

    f = fopen(name, "w");
    if (f == NULL) {
        fprintf(stderr, "cannot write %s\n", name);
        return 1;
    }

    for (i = 0; i < n; i++) {
        fprintf(f, "%llu\n", (unsigned long long) ids[i]);
    }

    if (fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", name);
        return 1;
    }

    printf("%llu\n", (unsigned long long) BENCH_TARGET_ID);

    return 0;
}


static int
bench_once(int argc, char **argv)
{
    u_char                      *doc;
    size_t                       len;
    uint64_t                    *ids;
    ngx_uint_t                   n;
    bench_size_t                 s;
    bench_arena_t                arena;
    bench_query_t               *q;
    ngx_http_dynamo_rl_index_t   index;

    if (argc != 4 || (n = strtoul(argv[2], NULL, 10)) == 0) {
        fprintf(stderr, "usage: %s once N parse|real|index|decide|"
                "decide-same\n", argv[0]);
        return 2;
    }

    if (strcmp(argv[3], "parse") == 0) {
        doc = bench_generate(n, NULL, 1, &len, &ids);
        bench_parse_once(doc, len, 0);

    } else if (strcmp(argv[3], "real") == 0) {
        doc = bench_generate(n, NULL, 0, &len, &ids);
        bench_parse_once(doc, len, JSON_DECODE_INT_AS_REAL);

    } else if (strncmp(argv[3], "decide", 6) == 0) {

        /* BENCH_DECIDE_ONCE decisions in bench_decisions() */

        ngx_memzero(&s, sizeof(bench_size_t));
        s.nworkers = n;
        s.doc = bench_generate(n, NULL, 0, &s.len, &s.ids);
        len = s.len;

        bench_build(&s, &arena, &index);

        q = calloc(BENCH_QUERIES, sizeof(bench_query_t));
        if (q == NULL) {
            return 1;
        }

        bench_queries(&s, q, strcmp(argv[3], "decide-same") == 0);
        (void) bench_decisions(&index, NULL, q, BENCH_DECIDE_ONCE);

    } else {
        doc = bench_generate(n, NULL, 0, &len, &ids);
        bench_index_once(doc, len, NULL);
    }

    printf("%lu workers, %lu bytes, %s once\n", (unsigned long) n,
           (unsigned long) len, argv[3]);

    return 0;
}


int
main(int argc, char **argv)
{
    double                       t, budget, one, lo, hi;
    size_t                       len;
    uint64_t                    *ids;
    ngx_uint_t                   i, j, k, m, nsizes, rounds, iterations;
    bench_size_t                 sizes[4], *s;
    bench_arena_t                arenas[4];
    uint64_t                    *flat[4];
    bench_query_t               *random_q[4], *same_q[4];
    ngx_http_dynamo_rl_index_t   indexes[4];

    if (argc > 1 && strcmp(argv[1], "emit") == 0) {
        return bench_emit(argc, argv);
    }

    if (argc > 1 && strcmp(argv[1], "once") == 0) {
        return bench_once(argc, argv);
    }

    if (argc > 1 && strcmp(argv[1], "rewrite") == 0) {
        return bench_rewrite(argc, argv);
    }

    rounds = 9;
    budget = 40e6;          /* ns per batch of (a) or (b) */
    iterations = 1000000;

    if (argc > 1 && strcmp(argv[1], "quick") == 0) {
        rounds = 3;
        budget = 5e6;
        iterations = 100000;
    }

    nsizes = sizeof(bench_sizes) / sizeof(bench_sizes[0]);

    for (i = 0; i < nsizes; i++) {
        s = &sizes[i];
        ngx_memzero(s, sizeof(bench_size_t));
        s->nworkers = bench_sizes[i];
        s->doc = bench_generate(s->nworkers, NULL, 0, &s->len, &s->ids);
        s->twin = bench_generate(s->nworkers, NULL, 1, &len, &ids);

        if (len != s->len) {
            fprintf(stderr, "twin document differs in length\n");
            return 1;
        }
    }

    printf("snapshot-bench: %lu rounds, interleaved; jansson %s\n\n",
           (unsigned long) rounds, JANSSON_VERSION);

    /* (a) and (b): A B A B per size, each batch of m runs */

    for (i = 0; i < nsizes; i++) {
        s = &sizes[i];

        /* warm up and calibrate on (b), the slower one */

        bench_parse_once(s->twin, s->len, 0);
        bench_parse_once(s->doc, s->len, JSON_DECODE_INT_AS_REAL);
        bench_index_once(s->doc, s->len, &s->arena_bytes);

        t = bench_now();
        bench_index_once(s->doc, s->len, NULL);
        one = bench_now() - t;

        m = (ngx_uint_t) (budget / one);
        m = m ? m : 1;

        for (j = 0; j < rounds; j++) {
            t = bench_now();

            for (k = 0; k < m; k++) {
                bench_parse_once(s->twin, s->len, 0);
            }

            s->parse_ns[j] = (bench_now() - t) / m;

            t = bench_now();

            for (k = 0; k < m; k++) {
                bench_parse_once(s->doc, s->len, JSON_DECODE_INT_AS_REAL);
            }

            s->real_ns[j] = (bench_now() - t) / m;

            t = bench_now();

            for (k = 0; k < m; k++) {
                bench_index_once(s->doc, s->len, NULL);
            }

            s->index_ns[j] = (bench_now() - t) / m;

            s->ratio[j] = s->index_ns[j] / s->parse_ns[j];
            s->real_ratio[j] = s->index_ns[j] / s->real_ns[j];
        }
    }

    /* (c): every size in every round, in the same order */

    for (i = 0; i < nsizes; i++) {
        s = &sizes[i];

        bench_build(s, &arenas[i], &indexes[i]);

        random_q[i] = calloc(BENCH_QUERIES, sizeof(bench_query_t));
        same_q[i] = calloc(BENCH_QUERIES, sizeof(bench_query_t));

        if (random_q[i] == NULL || same_q[i] == NULL) {
            return 1;
        }

        bench_queries(s, random_q[i], 0);
        bench_queries(s, same_q[i], 1);

        flat[i] = malloc((indexes[i].nsorted + 1) * sizeof(uint64_t));
        if (flat[i] == NULL) {
            return 1;
        }

        for (k = 0; k < indexes[i].nsorted; k++) {
            flat[i][k] = indexes[i].sorted[k]->id;
        }

        (void) bench_decisions(&indexes[i], NULL, random_q[i],
                               iterations / 10);
        (void) bench_decisions(&indexes[i], NULL, same_q[i],
                               iterations / 10);
        (void) bench_decisions(&indexes[i], flat[i], random_q[i],
                               iterations / 10);
    }

    for (j = 0; j < rounds; j++) {
        for (i = 0; i < nsizes; i++) {
            s = &sizes[i];

            s->random_ns[j] = bench_decisions(&indexes[i], NULL,
                                              random_q[i], iterations);
            s->same_ns[j] = bench_decisions(&indexes[i], NULL, same_q[i],
                                            iterations);
            s->flat_ns[j] = bench_decisions(&indexes[i], flat[i],
                                            random_q[i], iterations);
        }

        for (i = 0; i < nsizes; i++) {
            s = &sizes[i];

            /* against the 1-worker snapshot, in which both are the same */

            s->random_ratio[j] = s->random_ns[j] / sizes[0].same_ns[j];
            s->same_ratio[j] = s->same_ns[j] / sizes[0].same_ns[j];
            s->flat_ratio[j] = s->flat_ns[j] / sizes[0].flat_ns[j];
        }
    }

    printf("rebuild (per worker process) against jansson's bare parse\n\n");
    printf("%8s %10s %10s %10s %10s %8s %8s %9s\n",
           "workers", "doc bytes", "(a) parse", "(a') real", "(b) index",
           "(b)/(a)", "(b)/(a')", "index MB");

    for (i = 0; i < nsizes; i++) {
        s = &sizes[i];

        printf("%8lu %10lu %10.3f %10.3f %10.3f %8.2f %8.2f %9.2f\n",
               (unsigned long) s->nworkers, (unsigned long) s->len,
               bench_median(s->parse_ns, rounds) / 1e6,
               bench_median(s->real_ns, rounds) / 1e6,
               bench_median(s->index_ns, rounds) / 1e6,
               bench_median(s->ratio, rounds),
               bench_median(s->real_ratio, rounds),
               s->arena_bytes / 1048576.0);
    }

    printf("\ntimes in ms, medians of the rounds; ratios are medians of "
           "per-round ratios\n"
           "(a)  json_loadb(JSON_REJECT_DUPLICATES) + json_decref of the "
           "document, each id\n"
           "     above 2^63 changed to a same-length int64 (jansson rejects "
           "them)\n"
           "(a') the document's own bytes, JSON_DECODE_INT_AS_REAL added\n"
           "(b)  ngx_http_dynamo_rl_json_index() into a pool-like arena, "
           "freed each run;\n"
           "     index MB: what the arena held (what a process keeps until "
           "the next swap)\n\n");

    printf("admin decision on the built index, ns per decision\n\n");
    printf("%8s %11s %11s %9s %9s | %11s %9s\n", "workers", "random ids",
           "same id", "random/1", "same/1", "flat ids", "flat/1");

    for (i = 0; i < nsizes; i++) {
        s = &sizes[i];

        printf("%8lu %11.1f %11.1f %9.2f %9.2f | %11.1f %9.2f\n",
               (unsigned long) s->nworkers,
               bench_median(s->random_ns, rounds),
               bench_median(s->same_ns, rounds),
               bench_median(s->random_ratio, rounds),
               bench_median(s->same_ratio, rounds),
               bench_median(s->flat_ns, rounds),
               bench_median(s->flat_ratio, rounds));
    }

    printf("\nrandom ids: a present worker and one of its 20 routes at "
           "random per decision;\nsame id: always the same worker; "
           "ratios against the 1-worker snapshot, whose\nrandom and same "
           "are one worker; flat ids: a diagnostic, the same decision "
           "with\na binary search over a contiguous copy of the sorted "
           "ids (the module's\nlayout before its id table)\n");

    s = &sizes[nsizes - 1];

    bench_range(s->ratio, rounds, &lo, &hi);

    printf("\nSUMMARY rebuild/parse(%lu) = %.2f (median of %lu per-round "
           "ratios, range %.2f..%.2f; %.1f ms vs %.1f ms; %.2f against "
           "the as-real parse)\n",
           (unsigned long) s->nworkers, bench_median(s->ratio, rounds),
           (unsigned long) rounds, lo, hi,
           bench_median(s->index_ns, rounds) / 1e6,
           bench_median(s->parse_ns, rounds) / 1e6,
           bench_median(s->real_ratio, rounds));

    bench_range(s->random_ratio, rounds, &lo, &hi);

    printf("SUMMARY decision(%lu)/decision(1) = %.2f random ids "
           "(range %.2f..%.2f), %.2f same id; %+.1f ns and %+.1f ns "
           "per decision\n",
           (unsigned long) s->nworkers, bench_median(s->random_ratio, rounds),
           lo, hi, bench_median(s->same_ratio, rounds),
           bench_median(s->random_ns, rounds)
           - bench_median(sizes[0].same_ns, rounds),
           bench_median(s->same_ns, rounds)
           - bench_median(sizes[0].same_ns, rounds));

    for (i = 0; i < nsizes; i++) {
        bench_arena_free(&arenas[i]);
    }

    return 0;
}


/*
 * the discovery plane's own work on one answer with dynamo_rl_admin_url:
 * the index build, then the pass that ngx_http_dynamo_rl_discovery_send()
 * makes, each worker's uniqueness looked up and its element rewritten
 */

static size_t
bench_rewrite_once(u_char *doc, size_t len, u_char *out, ngx_str_t *url)
{
    u_char                            *p, *q;
    ngx_uint_t                         i, k;
    bench_arena_t                      arena;
    ngx_http_dynamo_rl_worker_t       *w;
    ngx_http_dynamo_rl_index_t         index;
    ngx_http_dynamo_rl_json_err_t      err;
    ngx_http_dynamo_rl_scan_worker_t   sw;

    arena.blocks = NULL;
    arena.large = NULL;

    if (ngx_http_dynamo_rl_json_index(doc, len, bench_alloc, &arena, &index,
                                      &err)
        != NGX_OK)
    {
        fprintf(stderr, "index: %s\n", err.reason);
        exit(1);
    }

    p = out;
    q = doc;

    if (url != NULL) {
        for (i = 0; i < index.nworkers; i++) {
            w = &index.workers[i];

            (void) ngx_http_dynamo_rl_index_find(&index, w->id, &k);

            sw.start = doc + w->start;
            sw.end = doc + w->end;
            sw.url_start = w->url_start ? doc + w->url_start : NULL;
            sw.url_end = w->url_start ? doc + w->url_end : NULL;
            sw.base_start = w->base_start ? doc + w->base_start : NULL;
            sw.base_end = w->base_start ? doc + w->base_end : NULL;

            p = ngx_cpymem(p, q, sw.start - q);
            p = ngx_http_dynamo_rl_admin_rewrite(p, &sw,
                    (w->state == NGX_HTTP_DYNAMO_RL_WORKER_OK && k == 1)
                    ? url : NULL,
                    w->id);
            q = sw.end;
        }

        p = ngx_cpymem(p, q, doc + len - q);
    }

    bench_sink += index.nsorted + (p - out);

    bench_arena_free(&arena);

    return p - out;
}


static int
bench_rewrite(int argc, char **argv)
{
    double       t, pass[BENCH_MAX_ROUNDS], rw[BENCH_MAX_ROUNDS];
    double       ratio[BENCH_MAX_ROUNDS], lo, hi;
    u_char      *doc, *out;
    size_t       len, olen;
    uint64_t    *ids;
    ngx_str_t    url;
    ngx_uint_t   n, j, k, m, rounds;

    n = argc > 2 ? strtoul(argv[2], NULL, 10) : 10000;
    rounds = 15;

    if (n == 0) {
        fprintf(stderr, "usage: %s rewrite [N]\n", argv[0]);
        return 2;
    }

    bench_url_all = 1;
    doc = bench_generate(n, "http://10.0.0.1:9345", 0, &len, &ids);

    ngx_str_set(&url, "https://dynamo-rl-admin.dynamo.svc.cluster.local:9090"
                      "/v1/rl/workers/");

    out = malloc(len + n * NGX_HTTP_DYNAMO_RL_REWRITE_ROOM(url.len));
    if (out == NULL) {
        return 1;
    }

    olen = bench_rewrite_once(doc, len, out, &url);

    t = bench_now();
    (void) bench_rewrite_once(doc, len, out, NULL);
    m = (ngx_uint_t) (40e6 / (bench_now() - t));
    m = m ? m : 1;

    for (j = 0; j < rounds; j++) {
        t = bench_now();

        for (k = 0; k < m; k++) {
            (void) bench_rewrite_once(doc, len, out, NULL);
        }

        pass[j] = (bench_now() - t) / m;

        t = bench_now();

        for (k = 0; k < m; k++) {
            (void) bench_rewrite_once(doc, len, out, &url);
        }

        rw[j] = (bench_now() - t) / m;
        ratio[j] = rw[j] / pass[j];
    }

    bench_range(ratio, rounds, &lo, &hi);

    printf("dynamo_rl_admin_url, %lu workers x %d routes, %lu bytes in, "
           "%lu bytes out, %lu rounds of %lu\n\n",
           (unsigned long) n, BENCH_ROUTES, (unsigned long) len,
           (unsigned long) olen, (unsigned long) rounds, (unsigned long) m);
    printf("| work per answer | median ms |\n|---|---|\n");
    printf("| passthrough: index build | %.3f |\n",
           bench_median(pass, rounds) / 1e6);
    printf("| rewrite: index build + rewrite pass | %.3f |\n\n",
           bench_median(rw, rounds) / 1e6);
    printf("rewrite / passthrough: median %.3f (range %.3f .. %.3f)\n",
           bench_median(ratio, rounds), lo, hi);

    return 0;
}
