
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_scan.h"
#include "ngx_http_dynamo_rl_body.h"


/*
 * The body policy of the request plane: each POST or PUT body, and the
 * body of any other method that carries one, is read whole in the
 * precontent phase, before the ledger records the attempt
 * and before anything is forwarded, as the mirror module reads a body it
 * mirrors; the scanner of _scan.c judges it in one pass, and the phases
 * go on from the same handler with the verdict in the request context.
 */


static ngx_int_t ngx_http_dynamo_rl_body_verdict(
    ngx_http_dynamo_rl_ctx_t *ctx);
static ngx_uint_t ngx_http_dynamo_rl_body_carried(ngx_http_request_t *r);
static void ngx_http_dynamo_rl_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_body_check(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_buf_t *ngx_http_dynamo_rl_body_room(ngx_http_request_t *r);
static u_char *ngx_http_dynamo_rl_body_whole(ngx_http_request_t *r,
    size_t *len);
static ngx_int_t ngx_http_dynamo_rl_body_upload(ngx_http_request_t *r,
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_int_t ngx_http_dynamo_rl_body_rid(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_body_scan_t *bs);
static ngx_int_t ngx_http_dynamo_rl_body_strip(ngx_http_request_t *r,
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_uint_t when, u_char *body,
    size_t len);
static void ngx_http_dynamo_rl_body_refuse(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_uint_t status, char *reason, char *message);
static void *ngx_http_dynamo_rl_body_alloc(void *data, size_t size);


/*
 * NGX_OK: no policy applies, or the body passed it; NGX_DONE: the body is
 * being read, the phases go on from the body handler; NGX_DECLINED: the
 * body is refused, ctx->body_status the status to finalize the request
 * with, and ctx->body_reason and body_message set when the refusal is the
 * module's own
 */

ngx_int_t
ngx_http_dynamo_rl_body_start(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    ngx_int_t   rc;
    ngx_buf_t  *header_in;

    switch (ctx->body_state) {

    case NGX_HTTP_DYNAMO_RL_BODY_CHECKED:
        ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_DONE;
        return ngx_http_dynamo_rl_body_verdict(ctx);

    case NGX_HTTP_DYNAMO_RL_BODY_DONE:
        return NGX_OK;

    case NGX_HTTP_DYNAMO_RL_BODY_READING:
        return NGX_DONE;
    }

    /*
     * a body is judged whatever the method: a GET's or a PATCH's body is
     * forwarded as a POST's is, with the same controls in it
     */

    if (!drlcf->body_policy
        || (!(r->method & (NGX_HTTP_POST|NGX_HTTP_PUT))
            && !ngx_http_dynamo_rl_body_carried(r)))
    {
        ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_DONE;
        return NGX_OK;
    }

    /*
     * "identity" is the only coding a body may name: the preaccess walk of
     * the request's headers noted any other
     */

    if (ctx->body_coded) {
        ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_DONE;

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: request body with a content coding "
                      "refused");

        ngx_http_dynamo_rl_body_refuse(ctx, NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                       "unsupported_encoding",
                                       "request bodies must not have a "
                                       "Content-Encoding");

        return ngx_http_dynamo_rl_body_verdict(ctx);
    }

    ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_READING;

    r->request_body_in_single_buf = 1;

    ctx->body_sync = 1;

    header_in = ngx_http_dynamo_rl_body_room(r);
    if (header_in == NULL) {
        ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_DONE;
        ctx->body_status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return ngx_http_dynamo_rl_body_verdict(ctx);
    }

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_dynamo_rl_body_handler);

    r->header_in = header_in;

    ctx->body_sync = 0;

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        /* nginx's own refusal: 413, 400 for broken chunked framing */
        ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_DONE;
        ctx->body_status = rc;
        return ngx_http_dynamo_rl_body_verdict(ctx);
    }

    /*
     * the reference the read took: the request holds its own, so unless
     * a body is being discarded (its handler and lingering timer are set
     * again there), this is what ngx_http_finalize_request(r, NGX_DONE)
     * would do, without its walk to ngx_http_close_request()
     */

    if (r->discard_body) {
        ngx_http_finalize_request(r, NGX_DONE);

    } else {
        r->main->count--;
    }

    if (ctx->body_state == NGX_HTTP_DYNAMO_RL_BODY_CHECKED) {

        /*
         * the whole body was there already (it came with the header, as
         * a small one does) and is judged: the phases go on from here,
         * not from a second run of them inside the body handler
         */

        ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_DONE;
        return ngx_http_dynamo_rl_body_verdict(ctx);
    }

    return NGX_DONE;
}


/*
 * a request that carries a body: a Content-Length above 0, chunked
 * framing, or an HTTP/2 stream that the client has not closed with its
 * headers (nginx marks such a stream chunked when it has no length; the
 * stream's own state is checked as well)
 */

static ngx_uint_t
ngx_http_dynamo_rl_body_carried(ngx_http_request_t *r)
{
    if (r->headers_in.content_length_n > 0 || r->headers_in.chunked) {
        return 1;
    }

#if (NGX_HTTP_V2)
    if (r->stream != NULL && !r->stream->in_closed) {
        return 1;
    }
#endif

    return 0;
}


static ngx_int_t
ngx_http_dynamo_rl_body_verdict(ngx_http_dynamo_rl_ctx_t *ctx)
{
    if (ctx->body_status == 0) {
        return NGX_OK;
    }

    ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_BODY;

    return NGX_DECLINED;
}


static void
ngx_http_dynamo_rl_body_handler(ngx_http_request_t *r)
{
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    ctx = ngx_http_dynamo_rl_get_ctx(r);
    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_http_dynamo_rl_body_check(r, ctx, drlcf) != NGX_OK) {
        ctx->body_status = NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->body_state = NGX_HTTP_DYNAMO_RL_BODY_CHECKED;

    r->preserve_body = 1;

    if (ctx->body_sync) {
        /* called from within the read: ngx_http_dynamo_rl_body_start() */
        return;
    }

    /* the phases go on from the precontent handler */

    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


/* NGX_OK with the verdict in ctx, NGX_ERROR when the check cannot run */

static ngx_int_t
ngx_http_dynamo_rl_body_check(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    u_char                          *body;
    size_t                           len;
    ngx_int_t                        rc;
    ngx_uint_t                       when;
    ngx_http_dynamo_rl_body_scan_t  *bs;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    body = ngx_http_dynamo_rl_body_whole(r, &len);
    if (body == NULL) {
        return NGX_ERROR;
    }

    /*
     * a GET whose HTTP/2 stream ended with an empty DATA frame carries
     * nothing: it is not a body to judge
     */

    if (len == 0 && !(r->method & (NGX_HTTP_POST|NGX_HTTP_PUT))) {
        return NGX_OK;
    }

    /*
     * the scanner's room (15k) is the process's: a scan runs to its end
     * without yielding, and a request neither allocates nor frees it
     */

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    bs = drmcf->body_scan;

    if (bs == NULL) {
        bs = ngx_palloc(ngx_cycle->pool,
                        sizeof(ngx_http_dynamo_rl_body_scan_t));
        if (bs == NULL) {
            return NGX_ERROR;
        }

        bs->alloc = ngx_http_dynamo_rl_body_alloc;
        bs->seed = (uint32_t) ngx_random();

        drmcf->body_scan = bs;
    }

    /* an object with more members than the room: from the request's pool */

    bs->alloc_data = r->pool;
    bs->tree = drlcf->body_tree;

    if (ngx_http_dynamo_rl_body_scan(body, len, bs) != NGX_OK) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: request body refused: %s at byte %uz",
                      bs->err, (size_t) (bs->err_pos - body));

        ngx_http_dynamo_rl_body_refuse(ctx, NGX_HTTP_BAD_REQUEST, "bad_body",
                                       (char *) bs->err);
        return NGX_OK;
    }

    if (bs->nvext != NULL
        && ngx_http_dynamo_rl_body_member(bs, NGX_HTTP_DYNAMO_RL_BODY_NVEXT,
                                          "metadata_upload")
           != NULL)
    {
        rc = ngx_http_dynamo_rl_body_upload(r, bs, drlcf);

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc != NGX_OK) {
            ngx_http_dynamo_rl_body_refuse(ctx, NGX_HTTP_FORBIDDEN,
                                           "metadata_upload_denied",
                                           "nvext.metadata_upload is not "
                                           "allowed to this destination");
            return NGX_OK;
        }
    }

    if (ngx_http_dynamo_rl_route_generate(r) == NGX_OK) {
        rc = ngx_http_dynamo_rl_body_rid(r, ctx, bs);

        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    when = NGX_HTTP_DYNAMO_RL_CUT_ALWAYS;

    if (drlcf->strip_routing_headers) {
        when |= NGX_HTTP_DYNAMO_RL_CUT_ROUTING;
    }

    if (ctx->tenant.len) {
        when |= NGX_HTTP_DYNAMO_RL_CUT_TENANT;
    }

    return ngx_http_dynamo_rl_body_strip(r, bs, when, body, len);
}


/*
 * A body that nginx will read into memory, of which the header's buffer
 * holds a part but has no room for the rest, would be two pieces: that
 * part, and the rest in a buffer of its own.  The scanner needs one
 * piece, so the part is moved to the start of a buffer of the body's
 * size and that buffer is the header's while the read starts: nginx then
 * reads the rest after it ("the whole request body may be placed in
 * r->header_in"), as it does for a small body, in the memory it would
 * have taken anyway.  Returns the header's own buffer, put back once the
 * read started; NULL on an allocation failure.
 */

static ngx_buf_t *
ngx_http_dynamo_rl_body_room(ngx_http_request_t *r)
{
    off_t                      rest;
    size_t                     preread;
    ngx_buf_t                 *b, *header_in;
    ngx_http_core_loc_conf_t  *clcf;

    header_in = r->header_in;

    if (r->request_body != NULL
        || r->discard_body
        || r->headers_in.chunked
        || r->request_body_in_file_only
#if (NGX_HTTP_V2)
        || r->stream != NULL
#endif
        )
    {
        return header_in;
    }

    preread = header_in->last - header_in->pos;
    rest = r->headers_in.content_length_n - (off_t) preread;

    if (preread == 0
        || rest <= 0
        || rest <= (off_t) (header_in->end - header_in->last))
    {
        return header_in;
    }

    /* in memory: what ngx_http_read_client_request_body() would allocate */

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (rest >= (off_t) (clcf->client_body_buffer_size
                         + (clcf->client_body_buffer_size >> 2)))
    {
        return header_in;
    }

    b = ngx_create_temp_buf(r->pool,
                            (size_t) r->headers_in.content_length_n);
    if (b == NULL) {
        return NULL;
    }

    b->last = ngx_cpymem(b->pos, header_in->pos, preread);

    header_in->pos = header_in->last;

    r->header_in = b;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl body: %uz of %O bytes read with the header, "
                   "moved", preread, r->headers_in.content_length_n);

    return header_in;
}


/*
 * the body in one piece of memory: its buffers themselves when they follow
 * each other in memory (nginx read it into one buffer), otherwise a copy
 * of its buffers and its temp file (bounded by client_max_body_size)
 */

static u_char *
ngx_http_dynamo_rl_body_whole(ngx_http_request_t *r, size_t *len)
{
    u_char       *body, *p;
    off_t         size;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    *len = 0;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return (u_char *) "";
    }

    body = r->request_body->bufs->buf->pos;
    p = body;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        if (cl->buf->in_file || cl->buf->pos != p) {
            break;
        }

        p = cl->buf->last;
    }

    if (cl == NULL) {
        *len = p - body;
        return *len ? body : (u_char *) "";
    }

    size = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

    body = ngx_pnalloc(r->pool, size ? (size_t) size : 1);
    if (body == NULL) {
        return NULL;
    }

    p = body;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (!b->in_file) {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
            continue;
        }

        n = ngx_read_file(b->file, p, (size_t) (b->file_last - b->file_pos),
                          b->file_pos);

        if (n != b->file_last - b->file_pos) {
            ngx_log_error(NGX_LOG_CRIT, r->connection->log, 0,
                          "dynamo rl: cannot read the request body from "
                          "\"%V\"", &b->file->name);
            return NULL;
        }

        p += n;
    }

    *len = p - body;

    return body;
}


/* NGX_OK: metadata_upload.url is a string that one prefix allows */

static ngx_int_t
ngx_http_dynamo_rl_body_upload(ngx_http_request_t *r,
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    u_char                       *url, *last;
    ngx_http_dynamo_rl_member_t  *m;

    if (drlcf->upload_prefixes == NULL || bs->upload == NULL) {
        return NGX_DECLINED;
    }

    m = ngx_http_dynamo_rl_body_member(bs, NGX_HTTP_DYNAMO_RL_BODY_UPLOAD,
                                       "url");

    if (m == NULL || m->value[0] != '"') {
        return NGX_DECLINED;
    }

    url = ngx_pnalloc(r->pool, m->value_end - m->value);
    if (url == NULL) {
        return NGX_ERROR;
    }

    last = ngx_http_dynamo_rl_json_unescape(url, m->value + 1,
                                            m->value_end - 1);

    return ngx_http_dynamo_rl_upload_url_valid(url, last - url,
                                               drlcf->upload_prefixes->elts,
                                               drlcf->upload_prefixes->nelts);
}


/*
 * on /generate, SGLang's engine request id is the attempt's identity:
 * NGX_DECLINED when the body has none or it is the attempt id (or becomes
 * it), NGX_OK with a refusal in ctx, NGX_ERROR
 */

static ngx_int_t
ngx_http_dynamo_rl_body_rid(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_body_scan_t *bs)
{
    u_char                       *rid, *last;
    ngx_uint_t                    i;
    ngx_http_dynamo_rl_member_t  *m;

    m = ngx_http_dynamo_rl_body_member(bs, NGX_HTTP_DYNAMO_RL_BODY_TOP, "rid");

    if (m == NULL) {
        return NGX_DECLINED;
    }

    rid = NULL;
    last = NULL;

    if (m->value[0] == '"') {
        rid = ngx_pnalloc(r->pool, m->value_end - m->value);
        if (rid == NULL) {
            return NGX_ERROR;
        }

        last = ngx_http_dynamo_rl_json_unescape(rid, m->value + 1,
                                                m->value_end - 1);
    }

    if (rid == NULL
        || ngx_http_dynamo_rl_attempt_id_valid(rid, last - rid) != NGX_OK)
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: invalid \"rid\" in a /generate body");

        ngx_http_dynamo_rl_body_refuse(ctx, NGX_HTTP_BAD_REQUEST,
                                       "bad_attempt_id",
                                       "invalid rid: a string of 1 to 128 "
                                       "bytes of [A-Za-z0-9._:-]");
        return NGX_OK;
    }

    /* the id it names: a UUID's lower-case form (the body stays as it is) */

    (void) ngx_http_dynamo_rl_attempt_id_canonical(rid, last - rid);

    if (ctx->client_id) {
        if ((size_t) (last - rid) != ctx->attempt_id.len
            || ngx_strncmp(rid, ctx->attempt_id.data, ctx->attempt_id.len)
               != 0)
        {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "dynamo rl: \"rid\" \"%*s\" of a /generate body "
                          "is not the attempt id", (size_t) (last - rid),
                          rid);

            ngx_http_dynamo_rl_body_refuse(ctx, NGX_HTTP_BAD_REQUEST,
                                           "rid_mismatch",
                                           "the body's rid differs from "
                                           "the attempt id");
            return NGX_OK;
        }

        return NGX_DECLINED;
    }

    /*
     * the rid replaces the minted id, upstream and in the answer; the
     * minted UUID stays Dynamo's request id unless the rid is one
     */

    ctx->attempt_id.data = rid;
    ctx->attempt_id.len = last - rid;
    ctx->client_id = 1;

    if (ngx_http_dynamo_rl_uuid_valid(rid, last - rid) == NGX_OK) {
        ctx->request_id = ctx->attempt_id;

        if (ctx->id_headers[2] != NULL) {
            ctx->id_headers[2]->value = ctx->request_id;
        }
    }

    for (i = 0; i < 2; i++) {
        if (ctx->id_headers[i] != NULL) {
            ctx->id_headers[i]->value = ctx->attempt_id;
        }
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl body: attempt \"%V\" from rid",
                   &ctx->attempt_id);

    return NGX_DECLINED;
}


/*
 * the members the rules remove under "when" left out (the routing pins,
 * priorities, the cache salt, dynamo_rl_strip_nvext): one new buffer with
 * every other byte, and Content-Length set to its length
 */

static ngx_int_t
ngx_http_dynamo_rl_body_strip(ngx_http_request_t *r,
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_uint_t when, u_char *body,
    size_t len)
{
    u_char       *p, *last, **cut;
    size_t        size;
    ngx_buf_t    *b;
    ngx_uint_t    i, n;
    ngx_chain_t  *cl;

    cut = bs->cut;

    n = ngx_http_dynamo_rl_body_cuts(bs, when, cut);

    if (n == 0) {
        return NGX_OK;
    }

    size = len;

    for (i = 0; i < n; i++) {
        size -= cut[2 * i + 1] - cut[2 * i];
    }

    b = ngx_create_temp_buf(r->pool, size ? size : 1);
    if (b == NULL) {
        return NGX_ERROR;
    }

    p = b->pos;
    last = body;

    for (i = 0; i < n; i++) {
        p = ngx_cpymem(p, last, cut[2 * i] - last);
        last = cut[2 * i + 1];
    }

    p = ngx_cpymem(p, last, body + len - last);

    b->last = p;
    b->last_buf = 1;
    b->last_in_chain = 1;

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf = b;
    cl->next = NULL;

    r->request_body->bufs = cl;
    r->headers_in.content_length_n = size;

    if (r->headers_in.content_length != NULL) {
        p = ngx_pnalloc(r->pool, NGX_OFF_T_LEN);
        if (p == NULL) {
            return NGX_ERROR;
        }

        r->headers_in.content_length->value.data = p;
        r->headers_in.content_length->value.len =
                                      ngx_sprintf(p, "%uz", size) - p;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl body: %ui member(s) removed, %uz bytes",
                   n, size);

    return NGX_OK;
}


static void
ngx_http_dynamo_rl_body_refuse(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_uint_t status, char *reason, char *message)
{
    ctx->body_status = status;
    ctx->body_reason = reason;
    ctx->body_message = message;
}


/* dynamo_rl_metadata_upload off | prefix ... */

char *
ngx_http_dynamo_rl_metadata_upload(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    u_char      *p;
    ngx_str_t   *value, *prefix;
    ngx_uint_t   i;

    if (drlcf->upload_prefixes != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && ngx_strcmp(value[1].data, "off") == 0)
    {
        drlcf->upload_prefixes = NULL;
        return NGX_CONF_OK;
    }

    drlcf->upload_prefixes = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                              sizeof(ngx_str_t));
    if (drlcf->upload_prefixes == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        /* a prefix must name a scheme and a host, and be a url itself */

        p = ngx_strlchr(value[i].data, value[i].data + value[i].len, ':');

        if (p == NULL || p == value[i].data
            || value[i].data + value[i].len - p < 4
            || p[1] != '/' || p[2] != '/'
            || ngx_http_dynamo_rl_upload_url_valid(value[i].data,
                                                   value[i].len,
                                                   &value[i], 1)
               != NGX_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid metadata upload prefix \"%V\": a "
                               "scheme, a host and a path without \"%%\", "
                               "\"\\\", \"..\" or control bytes",
                               &value[i]);
            return NGX_CONF_ERROR;
        }

        prefix = ngx_array_push(drlcf->upload_prefixes);
        if (prefix == NULL) {
            return NGX_CONF_ERROR;
        }

        *prefix = value[i];
    }

    return NGX_CONF_OK;
}


/* dynamo_rl_strip_nvext member[.member] ...: below nvext */

char *
ngx_http_dynamo_rl_strip_nvext(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    u_char                          *path;
    ngx_str_t                       *value;
    ngx_uint_t                       i;
    const char                      *err;
    ngx_http_dynamo_rl_body_tree_t  *tree;

    tree = drlcf->body_tree;

    if (tree == NULL) {
        tree = ngx_palloc(cf->pool, sizeof(ngx_http_dynamo_rl_body_tree_t));
        if (tree == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_http_dynamo_rl_body_tree_init(tree);
        drlcf->body_tree = tree;
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        /* the tree keeps the names, each ends where a "." was */

        path = ngx_pnalloc(cf->pool, value[i].len + 1);
        if (path == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memcpy(path, value[i].data, value[i].len + 1);

        err = ngx_http_dynamo_rl_body_tree_add(tree, path, value[i].len,
                                               NGX_HTTP_DYNAMO_RL_CUT_ALWAYS);
        if (err != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid nvext path \"%V\": it %s",
                               &value[i], err);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_dynamo_rl_body_alloc(void *data, size_t size)
{
    return ngx_palloc(data, size);
}
