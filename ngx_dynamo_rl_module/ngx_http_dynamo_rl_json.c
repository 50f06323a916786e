
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_json.h"

#include <jansson.h>


/*
 * The only file that sees jansson.  No json_t leaves it, nothing here logs
 * or touches nginx's runtime: the unit tests and the fuzz harness call
 * ngx_http_dynamo_rl_json_index() with an allocator of their own.
 */


static ngx_int_t ngx_http_dynamo_rl_json_worker(json_t *obj,
    ngx_http_dynamo_rl_worker_t *w, ngx_http_dynamo_rl_alloc_pt alloc,
    void *data, ngx_http_dynamo_rl_index_t *index);
static ngx_int_t ngx_http_dynamo_rl_json_string(json_t *obj, const char *key,
    ngx_uint_t required, ngx_str_t *s, ngx_http_dynamo_rl_alloc_pt alloc,
    void *data);
static ngx_int_t ngx_http_dynamo_rl_json_transport(json_t *obj);
static ngx_int_t ngx_http_dynamo_rl_json_routes(json_t *obj,
    ngx_http_dynamo_rl_worker_t *w, ngx_http_dynamo_rl_alloc_pt alloc,
    void *data, ngx_http_dynamo_rl_index_t *index);
static ngx_uint_t ngx_http_dynamo_rl_json_integer(u_char *p, u_char *last);
static ngx_inline ngx_uint_t ngx_http_dynamo_rl_slot_hash(uint64_t id);
static int ngx_libc_cdecl ngx_http_dynamo_rl_cmp_workers(const void *one,
    const void *two);


ngx_int_t
ngx_http_dynamo_rl_json_index(u_char *doc, size_t len,
    ngx_http_dynamo_rl_alloc_pt alloc, void *data,
    ngx_http_dynamo_rl_index_t *index, ngx_http_dynamo_rl_json_err_t *err)
{
    u_char                            *buf, *p, *q, *d;
    size_t                             size;
    uint64_t                           id;
    json_t                            *root, *v, *workers, *elt;
    ngx_int_t                          rc;
    ngx_uint_t                         i, k, n, h;
    json_error_t                       jerr;
    ngx_http_dynamo_rl_scan_t          scan;
    ngx_http_dynamo_rl_slot_t         *slot;
    ngx_http_dynamo_rl_worker_t       *w;
    ngx_http_dynamo_rl_scan_worker_t  *sw;

    ngx_memzero(index, sizeof(ngx_http_dynamo_rl_index_t));
    ngx_memzero(err, sizeof(ngx_http_dynamo_rl_json_err_t));

    err->reason = "document is not valid JSON";

    /*
     * the scan and the rewritten copy are scratch, about half of what
     * the build allocates: malloc()ed and freed, never in the index's pool
     */

    root = NULL;
    buf = NULL;

    scan.nalloc = ngx_http_dynamo_rl_scan_bound(doc, len);
    scan.workers = malloc((scan.nalloc + 1)
                          * sizeof(ngx_http_dynamo_rl_scan_worker_t));
    if (scan.workers == NULL) {
        goto nomem;
    }

    if (ngx_http_dynamo_rl_scan_discovery(doc, len, &scan) != NGX_OK) {
        goto invalid;
    }

    /* every instance_id that is a u64 becomes its worker's ordinal */

    size = len + scan.nworkers * NGX_INT64_LEN + 1;

    buf = malloc(size);
    if (buf == NULL) {
        goto nomem;
    }

    p = buf;
    q = doc;

    for (k = 0; k < scan.nworkers; k++) {
        sw = &scan.workers[k];

        if (sw->id_start == NULL) {
            continue;
        }

        if (ngx_http_dynamo_rl_parse_u64(sw->id_start,
                                         sw->id_end - sw->id_start, &id)
            != NGX_OK)
        {
            /*
             * a JSON integer outside u64, such as 2^64, would fail the
             * whole document in jansson: it becomes null, and only its
             * worker is invalid
             */

            if (ngx_http_dynamo_rl_json_integer(sw->id_start, sw->id_end)) {
                p = ngx_cpymem(p, q, sw->id_start - q);
                p = ngx_cpymem(p, "null", 4);
                q = sw->id_end;
            }

            sw->id_start = NULL;
            continue;
        }

        p = ngx_cpymem(p, q, sw->id_start - q);

        /* ngx_sprintf() is not available to the unit tests */

        for (n = k, i = 1; n >= 10; n /= 10) {
            i++;
        }

        p += i;
        d = p;
        n = k;

        do {
            *--d = (u_char) ('0' + n % 10);
            n /= 10;
        } while (n);

        q = sw->id_end;

        /* remember the real id where the scan kept its token */
        sw->id_end = (u_char *) (uintptr_t) id;
    }

    p = ngx_cpymem(p, q, doc + len - q);

    root = json_loadb((char *) buf, p - buf, JSON_REJECT_DUPLICATES, &jerr);

    if (root == NULL) {
        err->line = jerr.line;
        err->column = jerr.column;

        /* jansson quotes the document's bytes near the error */

        (void) ngx_http_dynamo_rl_escape_log((u_char *) err->text,
                                             (u_char *) err->text
                                             + sizeof(err->text),
                                             (u_char *) jerr.text,
                                             ngx_strlen(jerr.text));
        goto invalid;
    }

    if (!json_is_object(root)) {
        err->reason = "document is not a JSON object";
        goto invalid;
    }

    v = json_object_get(root, "protocol_version");

    if (v == NULL) {
        err->reason = "\"protocol_version\" is missing";
        goto invalid;
    }

    if (!json_is_integer(v) || json_integer_value(v) != 1) {
        err->reason = "\"protocol_version\" is not the integer 1";
        goto invalid;
    }

    workers = json_object_get(root, "workers");

    if (workers == NULL || !json_is_array(workers)) {
        err->reason = "\"workers\" is missing or not an array";
        goto invalid;
    }

    index->nelts = json_array_size(workers);

    /* the scan and jansson must agree on the objects in "workers" */

    n = 0;

    json_array_foreach(workers, i, elt) {
        if (json_is_object(elt)) {
            n++;
        }
    }

    if (n != scan.nworkers || scan.workers_start == NULL
        || scan.workers_end == NULL)
    {
        err->reason = "document structure is ambiguous";
        goto invalid;
    }

    index->workers_start = scan.workers_start - doc;
    index->workers_end = scan.workers_end - doc;

    index->workers = alloc(data, (n + 1) * sizeof(ngx_http_dynamo_rl_worker_t));
    index->sorted = alloc(data, (n + 1) * sizeof(void *));

    if (index->workers == NULL || index->sorted == NULL) {
        goto nomem;
    }

    k = 0;

    json_array_foreach(workers, i, elt) {
        if (!json_is_object(elt)) {
            continue;
        }

        w = &index->workers[k];
        sw = &scan.workers[k];

        ngx_memzero(w, sizeof(ngx_http_dynamo_rl_worker_t));

        w->start = sw->start - doc;
        w->end = sw->end - doc;

        if (sw->url_start != NULL && sw->url_end != NULL) {
            w->url_start = sw->url_start - doc;
            w->url_end = sw->url_end - doc;
        }

        if (sw->base_start != NULL && sw->base_end != NULL) {
            w->base_start = sw->base_start - doc;
            w->base_end = sw->base_end - doc;
        }

        v = json_object_get(elt, "instance_id");

        if (sw->id_start != NULL && v != NULL && json_is_integer(v)
            && (ngx_uint_t) json_integer_value(v) == k)
        {
            w->id = (uint64_t) (uintptr_t) sw->id_end;
            w->has_id = 1;

        } else {
            w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
            w->reason = "\"instance_id\" is not an unsigned 64-bit integer";
        }

        if (sw->escaped_key) {
            w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
            w->reason = "escaped member name";
        }

        if (ngx_http_dynamo_rl_json_worker(elt, w, alloc, data, index)
            != NGX_OK)
        {
            goto nomem;
        }

        if (w->has_id) {
            index->sorted[index->nsorted++] = w;
        }

        k++;
    }

    index->nworkers = k;

    json_decref(root);
    free(buf);
    free(scan.workers);

    ngx_qsort(index->sorted, index->nsorted, sizeof(void *),
              ngx_http_dynamo_rl_cmp_workers);

    /*
     * an open-addressing table of {id, first position in sorted[]}, twice
     * the workers: a lookup reads about one slot, where a binary search
     * missed the cache at most of its steps in a large fleet
     */

    for (size = 2; size < 2 * index->nsorted; size *= 2) { /* void */ }

    index->slots = alloc(data, size * sizeof(ngx_http_dynamo_rl_slot_t));
    if (index->slots == NULL) {
        err->reason = "out of memory";
        return NGX_ERROR;
    }

    ngx_memzero(index->slots, size * sizeof(ngx_http_dynamo_rl_slot_t));
    index->mask = size - 1;

    slot = NULL;

    for (i = 0; i < index->nsorted; i++) {
        if (i > 0 && index->sorted[i - 1]->id == index->sorted[i]->id) {
            slot->n++;
            continue;
        }

        h = ngx_http_dynamo_rl_slot_hash(index->sorted[i]->id);

        while (index->slots[h & index->mask].first) {
            h++;
        }

        slot = &index->slots[h & index->mask];

        slot->id = index->sorted[i]->id;
        slot->worker = index->sorted[i];
        slot->first = (uint32_t) (i + 1);
        slot->n = 1;
    }

    return NGX_OK;

nomem:

    err->reason = "out of memory";
    rc = NGX_ERROR;
    goto done;

invalid:

    rc = NGX_DECLINED;

done:

    if (root != NULL) {
        json_decref(root);
    }

    free(buf);
    free(scan.workers);

    return rc;
}


static ngx_int_t
ngx_http_dynamo_rl_json_worker(json_t *obj, ngx_http_dynamo_rl_worker_t *w,
    ngx_http_dynamo_rl_alloc_pt alloc, void *data,
    ngx_http_dynamo_rl_index_t *index)
{
    json_t     *v;
    ngx_str_t   s;
    ngx_int_t   rc;

    rc = ngx_http_dynamo_rl_json_string(obj, "namespace", 1, &w->namespace,
                                        alloc, data);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"namespace\" is missing or not a string";
    }

    if (ngx_http_dynamo_rl_json_string(obj, "component", 1, NULL, NULL, NULL)
        != NGX_OK)
    {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"component\" is missing or not a string";
    }

    if (ngx_http_dynamo_rl_json_string(obj, "endpoint", 1, NULL, NULL, NULL)
        != NGX_OK)
    {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"endpoint\" is missing or not a string";
    }

    if (ngx_http_dynamo_rl_json_string(obj, "request_plane_url", 1, NULL,
                                       NULL, NULL)
        != NGX_OK)
    {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"request_plane_url\" is missing or not a string";
    }

    if (ngx_http_dynamo_rl_json_transport(obj) != NGX_OK) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"transport\" is missing or not a single-key object";
    }

    rc = ngx_http_dynamo_rl_json_routes(obj, w, alloc, data, index);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"routes\" is missing or not an array of "
                    "non-empty strings";
    }

    rc = ngx_http_dynamo_rl_json_string(obj, "model", 0, &w->model,
                                        alloc, data);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"model\" is not a string";
    }

    if (ngx_http_dynamo_rl_json_string(obj, "admin_base_url", 0, NULL, NULL,
                                       NULL)
        == NGX_DECLINED)
    {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"admin_base_url\" is not a string";
    }

    v = json_object_get(obj, "world_size");

    if (v != NULL && !json_is_null(v)
        && (!json_is_integer(v) || json_integer_value(v) < 1
            || json_integer_value(v) > 0xffffffffLL))
    {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"world_size\" is not a positive 32-bit integer";
    }

    rc = ngx_http_dynamo_rl_json_string(obj, "system_url", 0, &w->system_url,
                                        alloc, data);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"system_url\" is not a string";
    }

    rc = ngx_http_dynamo_rl_json_string(obj, "error", 0, &s, NULL, NULL);

    if (rc == NGX_DECLINED) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_INVALID;
        w->reason = "\"error\" is not a string";
    }

    if (w->state != NGX_HTTP_DYNAMO_RL_WORKER_OK) {
        return NGX_OK;
    }

    if (rc == NGX_OK) {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_ERROR;
        w->reason = "worker reports an error";
        return NGX_OK;
    }

    if (w->system_url.len == 0
        || ngx_http_dynamo_rl_system_url_valid(w->system_url.data,
                                               w->system_url.len)
           != NGX_OK)
    {
        w->state = NGX_HTTP_DYNAMO_RL_WORKER_NO_URL;
        w->reason = w->system_url.len ? "\"system_url\" is not acceptable"
                                      : "no \"system_url\"";
    }

    return NGX_OK;
}


/*
 * NGX_OK: a string (copied when "s" is given); NGX_DONE: optional and
 * absent or null; NGX_DECLINED: wrong type or missing; NGX_ERROR: no memory
 */

static ngx_int_t
ngx_http_dynamo_rl_json_string(json_t *obj, const char *key,
    ngx_uint_t required, ngx_str_t *s, ngx_http_dynamo_rl_alloc_pt alloc,
    void *data)
{
    json_t  *v;
    size_t   len;

    v = json_object_get(obj, key);

    if (v == NULL || (!required && json_is_null(v))) {
        return required ? NGX_DECLINED : NGX_DONE;
    }

    if (!json_is_string(v)) {
        return NGX_DECLINED;
    }

    if (s == NULL) {
        return NGX_OK;
    }

    len = json_string_length(v);

    if (alloc == NULL) {
        s->len = len;
        s->data = NULL;
        return NGX_OK;
    }

    s->data = alloc(data, len + 1);
    if (s->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(s->data, json_string_value(v), len);
    s->len = len;

    return NGX_OK;
}


/* serde's externally tagged enum: {"tcp": "..."}; a string is tolerated */

static ngx_int_t
ngx_http_dynamo_rl_json_transport(json_t *obj)
{
    json_t      *v, *t;
    const char  *key;

    v = json_object_get(obj, "transport");

    if (v == NULL) {
        return NGX_DECLINED;
    }

    if (json_is_string(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v) || json_object_size(v) != 1) {
        return NGX_DECLINED;
    }

    json_object_foreach(v, key, t) {
        if (!json_is_string(t)) {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_json_routes(json_t *obj, ngx_http_dynamo_rl_worker_t *w,
    ngx_http_dynamo_rl_alloc_pt alloc, void *data,
    ngx_http_dynamo_rl_index_t *index)
{
    json_t      *v, *r;
    size_t       len, i;
    ngx_str_t   *route;
    const char  *s;

    v = json_object_get(obj, "routes");

    if (v == NULL || !json_is_array(v)) {
        return NGX_DECLINED;
    }

    json_array_foreach(v, i, r) {
        if (!json_is_string(r) || json_string_length(r) == 0) {
            return NGX_DECLINED;
        }
    }

    w->routes = alloc(data, (json_array_size(v) + 1) * sizeof(ngx_str_t));
    if (w->routes == NULL) {
        return NGX_ERROR;
    }

    json_array_foreach(v, i, r) {
        s = json_string_value(r);
        len = json_string_length(r);

        /* a route outside the grammar is never allowed */

        if (ngx_http_dynamo_rl_route_valid((u_char *) s, len) != NGX_OK) {
            index->bad_routes++;
            continue;
        }

        route = &w->routes[w->nroutes++];

        route->data = alloc(data, len);
        if (route->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(route->data, s, len);
        route->len = len;
    }

    return NGX_OK;
}


/* -?(0|[1-9][0-9]*), the JSON integer grammar */

static ngx_uint_t
ngx_http_dynamo_rl_json_integer(u_char *p, u_char *last)
{
    if (p < last && *p == '-') {
        p++;
    }

    if (p == last || (*p == '0' && last - p > 1)) {
        return 0;
    }

    for ( /* void */ ; p < last; p++) {
        if (*p < '0' || *p > '9') {
            return 0;
        }
    }

    return 1;
}


/*
 * the first worker with that id, and in *n how many have it: they follow
 * the first in sorted[]; the count spares reading the next one's id, and
 * for a unique id the slot's own pointer spares reading sorted[]; the
 * probe visits each slot at most once, so that even a table without an
 * empty slot (never built, but a lookup must not trust that) ends
 */

ngx_http_dynamo_rl_worker_t **
ngx_http_dynamo_rl_index_find(ngx_http_dynamo_rl_index_t *index, uint64_t id,
    ngx_uint_t *n)
{
    ngx_uint_t                  h, i;
    ngx_http_dynamo_rl_slot_t  *slot;

    h = ngx_http_dynamo_rl_slot_hash(id);

    for (i = 0; i <= index->mask; i++, h++) {
        slot = &index->slots[h & index->mask];

        if (slot->first == 0) {
            break;
        }

        if (slot->id == id) {
            *n = slot->n;
            return slot->n == 1 ? &slot->worker
                                : &index->sorted[slot->first - 1];
        }
    }

    *n = 0;

    return NULL;
}


/* Fibonacci hashing: the high bits of the product, which all bits reach */

static ngx_inline ngx_uint_t
ngx_http_dynamo_rl_slot_hash(uint64_t id)
{
    return (ngx_uint_t) ((id * 0x9e3779b97f4a7c15ULL) >> 32);
}


static int ngx_libc_cdecl
ngx_http_dynamo_rl_cmp_workers(const void *one, const void *two)
{
    ngx_http_dynamo_rl_worker_t  *a, *b;

    a = *(ngx_http_dynamo_rl_worker_t **) one;
    b = *(ngx_http_dynamo_rl_worker_t **) two;

    if (a->id != b->id) {
        return a->id < b->id ? -1 : 1;
    }

    /* stable for equal ids: document order */

    return a < b ? -1 : (a > b);
}


/*
 * the gate API's body: {"action":"close","reason":"...","lease":"120s"},
 * {"action":"renew"[,"lease":...]} or {"action":"open"}; nothing else
 */

ngx_int_t
ngx_http_dynamo_rl_json_gate(u_char *p, size_t len,
    ngx_http_dynamo_rl_gate_req_t *req, char **err)
{
    json_t       *root, *v;
    size_t        n;
    const char   *key, *s;
    json_error_t  jerr;

    ngx_memzero(req, sizeof(ngx_http_dynamo_rl_gate_req_t));

    root = json_loadb((char *) p, len, JSON_REJECT_DUPLICATES, &jerr);

    if (root == NULL) {
        *err = "body is not valid JSON";
        return NGX_DECLINED;
    }

    if (!json_is_object(root)) {
        *err = "body is not a JSON object";
        goto invalid;
    }

    json_object_foreach(root, key, v) {
        if (ngx_strcmp(key, "action") != 0 && ngx_strcmp(key, "reason") != 0
            && ngx_strcmp(key, "lease") != 0 && ngx_strcmp(key, "epoch") != 0)
        {
            *err = "unknown member: only \"action\", \"reason\", "
                   "\"lease\" and \"epoch\"";
            goto invalid;
        }
    }

    v = json_object_get(root, "action");

    if (v == NULL || !json_is_string(v)) {
        *err = "\"action\" must be \"close\", \"renew\" or \"open\"";
        goto invalid;
    }

    s = json_string_value(v);

    if (ngx_strcmp(s, "close") == 0) {
        req->action = NGX_HTTP_DYNAMO_RL_GATE_CLOSE;

    } else if (ngx_strcmp(s, "renew") == 0) {
        req->action = NGX_HTTP_DYNAMO_RL_GATE_RENEW;

    } else if (ngx_strcmp(s, "open") == 0) {
        req->action = NGX_HTTP_DYNAMO_RL_GATE_OPEN;

    } else {
        *err = "\"action\" must be \"close\", \"renew\" or \"open\"";
        goto invalid;
    }

    v = json_object_get(root, "reason");

    if (req->action == NGX_HTTP_DYNAMO_RL_GATE_CLOSE) {
        if (v == NULL || !json_is_string(v) || json_string_length(v) == 0
            || json_string_length(v) > sizeof(req->reason))
        {
            *err = "\"close\" needs a \"reason\" of 1 to 128 bytes";
            goto invalid;
        }

        n = json_string_length(v);
        ngx_memcpy(req->reason, json_string_value(v), n);
        req->reason_len = n;

    } else if (v != NULL) {
        *err = "only \"close\" takes a \"reason\"";
        goto invalid;
    }

    v = json_object_get(root, "lease");

    if (v != NULL) {
        if (req->action == NGX_HTTP_DYNAMO_RL_GATE_OPEN
            || !json_is_string(v)
            || ngx_http_dynamo_rl_parse_lease((u_char *) json_string_value(v),
                                              json_string_length(v),
                                              &req->lease)
               != NGX_OK)
        {
            *err = "\"lease\" must be a time such as \"120s\", at most "
                   "a week, on \"close\" or \"renew\"";
            goto invalid;
        }
    }

    /* "epoch": act only if the gate has not changed since it was read */

    v = json_object_get(root, "epoch");

    if (v != NULL) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            *err = "\"epoch\" must be a non-negative integer";
            goto invalid;
        }

        req->epoch = (ngx_uint_t) json_integer_value(v);
        req->has_epoch = 1;
    }

    json_decref(root);

    return NGX_OK;

invalid:

    json_decref(root);

    return NGX_DECLINED;
}


/*
 * a worker's logical failure inside a 2xx: {"status":"error"} in any
 * letter case (vLLM, the native sidecar), {"success":false} (SGLang), or
 * a body that is not JSON at all, where every engine route answers JSON;
 * NGX_OK means an error was found, and "why" says which
 */

ngx_int_t
ngx_http_dynamo_rl_json_admin_error(u_char *p, size_t len, char **why)
{
    json_t      *root, *v;
    ngx_int_t    rc;
    ngx_uint_t   i;
    const char  *s;

    root = json_loadb((char *) p, len, JSON_DECODE_ANY, NULL);

    if (root == NULL) {
        *why = "the body is not JSON";
        return NGX_OK;
    }

    rc = NGX_DECLINED;

    if (json_is_object(root)) {
        v = json_object_get(root, "status");

        if (v != NULL && json_is_string(v)) {
            s = json_string_value(v);

            /* no nginx core here: ngx_tolower() is a macro */

            for (i = 0; i < 5 && json_string_length(v) == 5; i++) {
                if ((u_char) ngx_tolower(s[i]) != "error"[i]) {
                    break;
                }
            }

            if (i == 5) {
                *why = "\"status\" is \"error\"";
                rc = NGX_OK;
            }
        }

        v = json_object_get(root, "success");

        if (v != NULL && json_is_false(v)) {
            *why = "\"success\" is false";
            rc = NGX_OK;
        }
    }

    json_decref(root);

    return rc;
}


/*
 * the snapshot's set of (instance_id, system_url), as one keyed hash that
 * no order of the workers changes: the sum of each member's hash
 */

uint64_t
ngx_http_dynamo_rl_index_members(ngx_http_dynamo_rl_index_t *index,
    u_char *key)
{
    u_char                        buf[16];
    uint64_t                      h, id, sum;
    ngx_uint_t                    i, k;
    ngx_http_dynamo_rl_worker_t  *w;

    sum = index->nsorted;

    for (i = 0; i < index->nsorted; i++) {
        w = index->sorted[i];

        h = ngx_http_dynamo_rl_siphash(key, w->system_url.data
                                            ? w->system_url.data
                                            : (u_char *) "",
                                       w->system_url.len);
        id = w->id;

        for (k = 0; k < 8; k++) {
            buf[k] = (u_char) (id >> (8 * k));
            buf[8 + k] = (u_char) (h >> (8 * k));
        }

        sum += ngx_http_dynamo_rl_siphash(key, buf, sizeof(buf));
    }

    return sum;
}
