
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>


/*
 * Discovery documents: the scan and jansson must agree, every indexed
 * worker's bytes lie inside the document, ids are sorted, routes obey the
 * grammar, and an eligible worker has an acceptable system_url.  The
 * answer rewritten for dynamo_rl_admin_url is a valid document with the
 * same workers: each eligible worker's system_url names the gateway, no
 * other worker keeps one, and no worker keeps an admin_base_url.
 */


typedef struct {
    void      **blocks;
    size_t      n;
    size_t      size;
} fuzz_arena_t;


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void *fuzz_alloc(void *data, size_t size);
static void fuzz_rewrite(u_char *doc, size_t len,
    ngx_http_dynamo_rl_index_t *index);


static void *
fuzz_alloc(void *data, size_t size)
{
    void          *p, **b;
    fuzz_arena_t  *a = data;

    if (a->n == a->size) {
        a->size = a->size ? 2 * a->size : 64;

        b = realloc(a->blocks, a->size * sizeof(void *));
        if (b == NULL) {
            return NULL;
        }

        a->blocks = b;
    }

    p = malloc(size ? size : 1);
    if (p == NULL) {
        return NULL;
    }

    a->blocks[a->n++] = p;

    return p;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                          i, j, k;
    u_char                         *doc;
    ngx_int_t                       rc;
    ngx_uint_t                      n;
    fuzz_arena_t                    arena;
    ngx_http_dynamo_rl_worker_t    *w, **wp;
    ngx_http_dynamo_rl_index_t      index;
    ngx_http_dynamo_rl_json_err_t   err;

    if (size > 1 << 20) {
        return 0;
    }

    doc = malloc(size ? size : 1);
    if (doc == NULL) {
        return 0;
    }

    ngx_memcpy(doc, data, size);
    ngx_memzero(&arena, sizeof(fuzz_arena_t));

    rc = ngx_http_dynamo_rl_json_index(doc, size, fuzz_alloc, &arena,
                                       &index, &err);

    if (rc == NGX_OK) {
        if (index.nworkers > index.nelts || index.nsorted > index.nworkers
            || index.workers_start >= index.workers_end
            || index.workers_end >= size || doc[index.workers_start] != '['
            || doc[index.workers_end] != ']')
        {
            abort();
        }

        for (i = 0; i < index.nworkers; i++) {
            w = &index.workers[i];

            if (w->start <= index.workers_start || w->end > index.workers_end
                || doc[w->start] != '{' || doc[w->end - 1] != '}')
            {
                abort();
            }

            for (j = 0; j < w->nroutes; j++) {
                if (ngx_http_dynamo_rl_route_valid(w->routes[j].data,
                                                   w->routes[j].len)
                    != NGX_OK)
                {
                    abort();
                }
            }

            if (w->state == NGX_HTTP_DYNAMO_RL_WORKER_OK
                && (!w->has_id
                    || ngx_http_dynamo_rl_system_url_valid(w->system_url.data,
                                                           w->system_url.len)
                       != NGX_OK))
            {
                abort();
            }
        }

        for (i = 1; i < index.nsorted; i++) {
            if (index.sorted[i - 1]->id > index.sorted[i]->id) {
                abort();
            }
        }

        /* every id found: its first worker, and how many share it */

        for (i = 0; i < index.nsorted; i++) {
            wp = ngx_http_dynamo_rl_index_find(&index, index.sorted[i]->id,
                                               &n);

            for (k = 0; i + k < index.nsorted
                        && index.sorted[i + k]->id == index.sorted[i]->id;
                 k++)
            {
                /* void */
            }

            if (wp == NULL || n == 0) {
                abort();
            }

            for (j = 0; j < n; j++) {
                if (wp[j]->id != index.sorted[i]->id) {
                    abort();
                }
            }

            /* i is the first of its id in sorted[] or follows it */

            for (j = i; j > 0 && index.sorted[j - 1]->id == index.sorted[i]->id;
                 j--)
            {
                /* void */
            }

            if (n != k + (i - j)) {
                abort();
            }
        }

        fuzz_rewrite(doc, size, &index);
    }

    for (i = 0; i < arena.n; i++) {
        free(arena.blocks[i]);
    }

    free(arena.blocks);
    free(doc);

    return 0;
}


static void
fuzz_rewrite(u_char *doc, size_t len, ngx_http_dynamo_rl_index_t *index)
{
    u_char                            *out, *p, *q, *e, digits[NGX_INT64_LEN];
    size_t                             i, n;
    uint64_t                           id;
    ngx_str_t                          url, *urlp;
    fuzz_arena_t                       arena;
    ngx_http_dynamo_rl_worker_t       *w, *v;
    ngx_http_dynamo_rl_index_t         again;
    ngx_http_dynamo_rl_json_err_t      err;
    ngx_http_dynamo_rl_scan_worker_t   sw;

    ngx_str_set(&url, "https://gw:9090/v1/rl/workers/");

    out = malloc(len + index->nworkers
                       * NGX_HTTP_DYNAMO_RL_REWRITE_ROOM(url.len) + 1);
    if (out == NULL) {
        return;
    }

    /* as the discovery plane does when every worker is in scope */

    p = out;
    q = doc;

    for (i = 0; i < index->nworkers; i++) {
        w = &index->workers[i];

        sw.start = doc + w->start;
        sw.end = doc + w->end;
        sw.url_start = w->url_start ? doc + w->url_start : NULL;
        sw.url_end = w->url_start ? doc + w->url_end : NULL;
        sw.base_start = w->base_start ? doc + w->base_start : NULL;
        sw.base_end = w->base_start ? doc + w->base_end : NULL;

        urlp = (w->state == NGX_HTTP_DYNAMO_RL_WORKER_OK) ? &url : NULL;

        p = ngx_cpymem(p, q, sw.start - q);
        p = ngx_http_dynamo_rl_admin_rewrite(p, &sw, urlp, w->id);
        q = sw.end;
    }

    p = ngx_cpymem(p, q, doc + len - q);

    ngx_memzero(&arena, sizeof(fuzz_arena_t));

    if (ngx_http_dynamo_rl_json_index(out, p - out, fuzz_alloc, &arena,
                                      &again, &err)
        != NGX_OK
        || again.nworkers != index->nworkers || again.nelts != index->nelts)
    {
        abort();
    }

    for (i = 0; i < index->nworkers; i++) {
        w = &index->workers[i];
        v = &again.workers[i];

        if (v->base_start != 0 || v->has_id != w->has_id
            || (w->has_id && v->id != w->id)
            || v->nroutes != w->nroutes
            || v->namespace.len != w->namespace.len)
        {
            abort();
        }

        if (w->state != NGX_HTTP_DYNAMO_RL_WORKER_OK) {
            if (v->url_start != 0) {
                abort();
            }

            continue;
        }

        /* system_url is the gateway's URL and the decimal id */

        e = digits + NGX_INT64_LEN;
        id = w->id;

        do {
            *--e = (u_char) ('0' + id % 10);
            id /= 10;
        } while (id);

        n = digits + NGX_INT64_LEN - e;

        if (v->system_url.len != url.len + n
            || ngx_memcmp(v->system_url.data, url.data, url.len) != 0
            || ngx_memcmp(v->system_url.data + url.len, e, n) != 0)
        {
            abort();
        }
    }

    for (i = 0; i < arena.n; i++) {
        free(arena.blocks[i]);
    }

    free(arena.blocks);
    free(out);
}
