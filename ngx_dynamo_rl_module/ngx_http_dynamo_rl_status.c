
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


/* the counters and denials, copied out of the zone before rendering */

typedef struct {
    ngx_uint_t                       requests[NGX_HTTP_DYNAMO_RL_PLANES]
                                             [NGX_HTTP_DYNAMO_RL_OUTCOMES];
    ngx_uint_t                       denials[NGX_HTTP_DYNAMO_RL_PLANES]
                                            [NGX_HTTP_DYNAMO_RL_REASONS];
    ngx_uint_t                       admin_results[2];
    ngx_uint_t                       duration[NGX_HTTP_DYNAMO_RL_PLANES]
                                             [NGX_HTTP_DYNAMO_RL_BUCKETS];
    ngx_uint_t                       duration_ms[NGX_HTTP_DYNAMO_RL_PLANES];
    ngx_uint_t                       refresh_ok;
    ngx_uint_t                       refresh_failed;

    ngx_uint_t                       generation;
    ngx_uint_t                       source;
    ngx_msec_t                       age;
    time_t                           fetched;
    ngx_uint_t                       has_snapshot;

    ngx_uint_t                       records;
    ngx_uint_t                       in_flight;
    ngx_uint_t                       capacity;
    ngx_uint_t                       evictions;
    ngx_uint_t                       expired;
    ngx_uint_t                       duplicates;
    ngx_uint_t                       exhausted;

    ngx_uint_t                       nrecent;
    ngx_http_dynamo_rl_recent_t      recent[NGX_HTTP_DYNAMO_RL_RECENT];

    ngx_http_dynamo_rl_gate_state_t  gate;
} ngx_http_dynamo_rl_report_t;


static ngx_uint_t ngx_http_dynamo_rl_reason(ngx_str_t *reason);
static ngx_uint_t ngx_http_dynamo_rl_outcome(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
static void ngx_http_dynamo_rl_report(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp);
static ngx_int_t ngx_http_dynamo_rl_status_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_metrics_handler(ngx_http_request_t *r);
static u_char *ngx_http_dynamo_rl_status_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp, ngx_http_dynamo_rl_index_t *index,
    u_char *p, u_char *last);
static size_t ngx_http_dynamo_rl_fleet_len(ngx_http_dynamo_rl_index_t *index);
static u_char *ngx_http_dynamo_rl_fleet_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index, u_char *p, u_char *last);
static ngx_int_t ngx_http_dynamo_rl_status_html(ngx_http_request_t *r,
    ngx_str_t *json);
static u_char *ngx_http_dynamo_rl_metrics_text(
    ngx_http_dynamo_rl_report_t *rp, u_char *p);


static ngx_str_t  ngx_http_dynamo_rl_plane_names[] = {
    ngx_string("request"),
    ngx_string("discovery"),
    ngx_string("admin")
};


static ngx_str_t  ngx_http_dynamo_rl_outcome_names
    [NGX_HTTP_DYNAMO_RL_PLANES][NGX_HTTP_DYNAMO_RL_OUTCOMES] =
{
    { ngx_string("succeeded"), ngx_string("failed"),
      ngx_string("canceled"), ngx_string("rejected") },
    { ngx_string("ok"), ngx_string("invalid"),
      ngx_null_string, ngx_string("rejected") },
    { ngx_string("ok"), ngx_string("error"),
      ngx_null_string, ngx_string("rejected") }
};


/* every reason the module gives: fixed strings, safe as label values */

static ngx_str_t  ngx_http_dynamo_rl_reasons[] = {
    ngx_string("method"),
    ngx_string("bad_path"),
    ngx_string("bad_attempt_id"),
    ngx_string("duplicate_attempt"),
    ngx_string("ledger_full"),
    ngx_string("gate_closed"),
    ngx_string("discovery_unavailable"),
    ngx_string("unknown_worker"),
    ngx_string("ambiguous_worker"),
    ngx_string("worker_invalid"),
    ngx_string("worker_error"),
    ngx_string("no_system_url"),
    ngx_string("route_not_advertised"),
    ngx_string("discovery_invalid"),
    ngx_string("redirected"),
    ngx_string("cross_origin"),
    ngx_string("bad_body"),
    ngx_string("unsupported_encoding"),
    ngx_string("metadata_upload_denied"),
    ngx_string("rid_mismatch"),
    ngx_null_string
};


/*
 * the status document without its fleet: the fixed fields, the counters
 * of each plane and reason, and the recent denials and the gate, whose
 * bounds are added to it; a worker of the fleet takes at most
 * NGX_HTTP_DYNAMO_RL_WORKER_JSON bytes plus its escaped strings
 */

#define NGX_HTTP_DYNAMO_RL_STATUS_FIXED  16384
#define NGX_HTTP_DYNAMO_RL_WORKER_JSON   160
#define NGX_HTTP_DYNAMO_RL_FLEET_TAIL                                        \
    (sizeof("],\"workers\":,\"eligible\":") - 1 + 2 * NGX_INT_T_LEN)


/* upper bounds in milliseconds; the last bucket is +Inf */

static ngx_msec_t  ngx_http_dynamo_rl_buckets[NGX_HTTP_DYNAMO_RL_BUCKETS - 1]
    = { 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000 };


static char  ngx_http_dynamo_rl_html_head[] =
"<!DOCTYPE html>\n"
"<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
"<meta http-equiv=\"refresh\" content=\"2\">\n"
"<title>dynamo_rl gateway</title>\n"
"<style>\n"
"body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\n"
"h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}\n"
"#gate{padding:1em;border-radius:6px;font-size:1.2em}\n"
".open{background:#dff5e1}.closed{background:#fde2e2}\n"
".expired{background:#f9c74f}\n"
"table{border-collapse:collapse}td,th{padding:.2em .8em;"
"border-bottom:1px solid #ddd;text-align:left}\n"
".ok{color:#1b7f2a}.deny{color:#b3261e}.num{text-align:right}\n"
"</style></head><body>\n"
"<h1>dynamo_rl gateway</h1>\n"
"<div id=\"gate\"></div>\n"
"<h2>Fleet</h2><p id=\"snapshot\"></p>\n"
"<table id=\"fleet\"><thead><tr><th>instance id</th><th>namespace</th>"
"<th>model</th><th>routes</th><th>admin</th></tr></thead>"
"<tbody></tbody></table>\n"
"<h2>Recent denials</h2>\n"
"<table id=\"recent\"><thead><tr><th>time</th><th>plane</th>"
"<th>reason</th><th>status</th></tr></thead><tbody></tbody></table>\n"
"<h2>Requests</h2>\n"
"<table id=\"requests\"><tbody></tbody></table>\n"
"<h2>Ledger</h2><p id=\"ledger\"></p>\n"
"<script type=\"application/json\" id=\"data\">";

static char  ngx_http_dynamo_rl_html_tail[] =
"</script>\n<script>\n"
"var d=JSON.parse(document.getElementById('data').textContent);\n"
"function el(t,c,x){var e=document.createElement(t);"
"if(c)e.className=c;e.textContent=x;return e}\n"
"function row(tb,cells){var tr=document.createElement('tr');"
"cells.forEach(function(c){tr.appendChild(el('td',c[1],c[0]))});"
"tb.appendChild(tr)}\n"
"var g=d.gate,gd=document.getElementById('gate');\n"
"gd.className=g.expired?'expired':g.state;\n"
"gd.appendChild(el('strong',null,'gate '+g.state.toUpperCase()"
"+(g.expired?' (lease expired)':'')));\n"
"gd.appendChild(el('div',null,'epoch '+g.epoch+', in flight '"
"+g.in_flight+(g.state=='closed'?', draining'+(g.in_flight?'':' done')"
":'')));\n"
"if(g.reason)gd.appendChild(el('div',null,'reason: '+g.reason));\n"
"if(g.lease_expires)gd.appendChild(el('div',null,'lease until '"
"+g.lease_expires));\n"
"var s=d.snapshot;\n"
"document.getElementById('snapshot').textContent=s.generation?"
"'snapshot '+s.generation+' from '+s.source+', '+s.age_ms+' ms old, '"
"+s.workers+' workers, '+s.eligible+' admin-eligible':'no snapshot yet';\n"
"var fb=document.querySelector('#fleet tbody');\n"
"(s.fleet||[]).forEach(function(w){row(fb,[[w.instance_id],"
"[w.namespace],[w.model||''],[w.routes,'num'],"
"[w.admin,w.admin=='eligible'?'ok':'deny']])});\n"
"var rb=document.querySelector('#recent tbody');\n"
"d.recent_denials.forEach(function(x){row(rb,[[x.time],[x.plane],"
"[x.reason,'deny'],[x.status,'num']])});\n"
"var qb=document.querySelector('#requests tbody');\n"
"Object.keys(d.counters.requests).forEach(function(p){"
"var o=d.counters.requests[p];Object.keys(o).forEach(function(k){"
"row(qb,[[p],[k],[o[k],'num']])})});\n"
"var l=d.ledger;document.getElementById('ledger').textContent="
"l.records+' records ('+l.in_flight+' in flight) of about '+l.capacity"
"+', '+l.evictions+' evicted, '+l.duplicates+' duplicates refused';\n"
"</script></body></html>\n";


/*
 * the log phase, before the access log: the request's plane, outcome,
 * denial and duration go into the zone's counters
 */

void
ngx_http_dynamo_rl_account(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_uint_t                       plane, outcome, reason, i;
    ngx_msec_int_t                   ms;
    ngx_time_t                      *tp;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_shctx_t      *sh;
    ngx_http_dynamo_rl_recent_t     *rc;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (drmcf->shm_zone == NULL
        || ctx->plane < NGX_HTTP_DYNAMO_RL_PLANE_REQUEST)
    {
        return;
    }

    zone = drmcf->shm_zone->data;
    sh = zone->sh;

    ngx_http_dynamo_rl_drain_leave(ctx);

    plane = ctx->plane - NGX_HTTP_DYNAMO_RL_PLANE_REQUEST;
    outcome = ngx_http_dynamo_rl_outcome(r, ctx);

    (void) ngx_atomic_fetch_add(&sh->requests[plane][outcome], 1);

    if (ctx->admin_result.len) {
        (void) ngx_atomic_fetch_add(&sh->admin_results[ctx->admin_error], 1);
    }

    tp = ngx_timeofday();
    ms = (ngx_msec_int_t) ((tp->sec - r->start_sec) * 1000
                           + (tp->msec - r->start_msec));
    ms = ngx_max(ms, 0);

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_BUCKETS - 1; i++) {
        if ((ngx_msec_t) ms <= ngx_http_dynamo_rl_buckets[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&sh->duration[plane][i], 1);
    (void) ngx_atomic_fetch_add(&sh->duration_ms[plane], ms);

    if (ctx->deny_reason.len == 0) {
        return;
    }

    reason = ngx_http_dynamo_rl_reason(&ctx->deny_reason);

    (void) ngx_atomic_fetch_add(&sh->denials[plane][reason], 1);

    ngx_shmtx_lock(&zone->shpool->mutex);

    rc = &sh->recent[sh->recent_next++ % NGX_HTTP_DYNAMO_RL_RECENT];

    rc->time = tp->sec;
    rc->plane = (u_char) plane;
    rc->reason = (u_char) reason;
    rc->status = (u_short) r->headers_out.status;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


static ngx_uint_t
ngx_http_dynamo_rl_reason(ngx_str_t *reason)
{
    ngx_uint_t  i;

    for (i = 0; ngx_http_dynamo_rl_reasons[i].len; i++) {
        if (ngx_http_dynamo_rl_reasons[i].len == reason->len
            && ngx_strncmp(ngx_http_dynamo_rl_reasons[i].data, reason->data,
                           reason->len)
               == 0)
        {
            return i;
        }
    }

    /* cannot happen: every reason is in the table */

    return 0;
}


static ngx_uint_t
ngx_http_dynamo_rl_outcome(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_uint_t  i, plane;

    if (ctx->deny_reason.len
        && !(ctx->deny_reason.len == sizeof("discovery_invalid") - 1
             && ngx_strncmp(ctx->deny_reason.data, "discovery_invalid",
                            ctx->deny_reason.len)
                == 0))
    {
        return 3;
    }

    plane = ctx->plane - NGX_HTTP_DYNAMO_RL_PLANE_REQUEST;

    for (i = 0; ctx->outcome.len && i < NGX_HTTP_DYNAMO_RL_OUTCOMES; i++) {
        if (ngx_http_dynamo_rl_outcome_names[plane][i].len
            == ctx->outcome.len
            && ngx_strncmp(ngx_http_dynamo_rl_outcome_names[plane][i].data,
                           ctx->outcome.data, ctx->outcome.len)
               == 0)
        {
            return i;
        }
    }

    /*
     * no verdict: refused before the module decided (allow/deny, auth),
     * or ended before one could be reached
     */

    return r->headers_out.status >= NGX_HTTP_BAD_REQUEST ? 3 : 1;
}


char *
ngx_http_dynamo_rl_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_dynamo_rl_content_handler(cf,
               ngx_http_dynamo_rl_status_handler);
}


char *
ngx_http_dynamo_rl_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_dynamo_rl_content_handler(cf,
               ngx_http_dynamo_rl_metrics_handler);
}


static void
ngx_http_dynamo_rl_report(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp)
{
    ngx_uint_t                   i, j, n;
    ngx_http_dynamo_rl_zone_t   *zone;
    ngx_http_dynamo_rl_shctx_t  *sh;

    zone = ngx_http_dynamo_rl_get_zone(r);
    sh = zone->sh;

    ngx_memzero(rp, sizeof(ngx_http_dynamo_rl_report_t));

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        for (j = 0; j < NGX_HTTP_DYNAMO_RL_OUTCOMES; j++) {
            rp->requests[i][j] = sh->requests[i][j];
        }

        for (j = 0; j < NGX_HTTP_DYNAMO_RL_REASONS; j++) {
            rp->denials[i][j] = sh->denials[i][j];
        }

        for (j = 0; j < NGX_HTTP_DYNAMO_RL_BUCKETS; j++) {
            rp->duration[i][j] = sh->duration[i][j];
        }

        rp->duration_ms[i] = sh->duration_ms[i];
    }

    rp->admin_results[0] = sh->admin_results[0];
    rp->admin_results[1] = sh->admin_results[1];

    ngx_http_dynamo_rl_gate_state(zone, &rp->gate);

    ngx_shmtx_lock(&zone->shpool->mutex);

    rp->refresh_ok = sh->refresh_ok;
    rp->refresh_failed = sh->refresh_failed;

    rp->has_snapshot = (sh->raw != NULL);
    rp->generation = sh->generation;
    rp->source = sh->source;

    /* another process's cached clock may be a little ahead of this one's */

    rp->age = (ngx_msec_int_t) (ngx_current_msec - sh->fetched) > 0
              ? ngx_current_msec - sh->fetched : 0;
    rp->fetched = sh->fetched_time;

    rp->records = sh->records;
    rp->in_flight = sh->in_flight;
    rp->evictions = sh->evictions;
    rp->expired = sh->expired;
    rp->duplicates = sh->duplicates;
    rp->exhausted = sh->exhausted;

    /* a record takes one 128-byte slot with an id of up to 50 bytes */
    rp->capacity = sh->records + zone->shpool->pfree * (ngx_pagesize / 128);

    n = ngx_min(sh->recent_next, NGX_HTTP_DYNAMO_RL_RECENT);

    for (i = 0; i < n; i++) {
        rp->recent[i] = sh->recent[(sh->recent_next - 1 - i)
                                   % NGX_HTTP_DYNAMO_RL_RECENT];
    }

    rp->nrecent = n;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


static ngx_int_t
ngx_http_dynamo_rl_status_handler(ngx_http_request_t *r)
{
    u_char                       *p, *last;
    size_t                        size;
    ngx_int_t                     rc;
    ngx_str_t                     json, type, format;
    ngx_uint_t                    html;
    ngx_http_dynamo_rl_index_t   *index;
    ngx_http_dynamo_rl_report_t   rp;

    rc = ngx_http_dynamo_rl_read_only(r);

    if (rc != NGX_DECLINED) {
        return rc;
    }

    html = 0;

    if (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK) {
        html = (format.len == 4 && ngx_strncmp(format.data, "html", 4) == 0);

    } else if (r->headers_in.accept != NULL
               && ngx_strlcasestrn(r->headers_in.accept->value.data,
                                   r->headers_in.accept->value.data
                                   + r->headers_in.accept->value.len,
                                   (u_char *) "text/html", 9 - 1)
                  != NULL)
    {
        html = 1;
    }

    ngx_http_dynamo_rl_report(r, &rp);

    /*
     * one index for the whole render: another worker process may store
     * a snapshot meanwhile, and asking again could give a larger one
     * than the buffer was sized for, and free this one
     */

    index = ngx_http_dynamo_rl_discovery_index(r);

    size = NGX_HTTP_DYNAMO_RL_STATUS_FIXED + NGX_HTTP_DYNAMO_RL_RECENT * 128
           + ngx_http_dynamo_rl_gate_json_len(&rp.gate)
           + ngx_http_dynamo_rl_fleet_len(index);

    p = ngx_pnalloc(r->pool, size);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_http_dynamo_rl_status_json(r, &rp, index, p, p + size);

    if (last == NULL) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "status of dynamo_rl zone \"%V\" exceeds its "
                      "%uz bytes", &ngx_http_dynamo_rl_get_zone(r)->name,
                      size);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    json.data = p;
    json.len = last - p;

    if (html) {
        return ngx_http_dynamo_rl_status_html(r, &json);
    }

    ngx_str_set(&type, "application/json");

    return ngx_http_dynamo_rl_send(r, NGX_HTTP_OK, &type, &json);
}


/* NULL if the document would pass "last", which the sizing rules out */

static u_char *
ngx_http_dynamo_rl_status_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp, ngx_http_dynamo_rl_index_t *index,
    u_char *p, u_char *last)
{
    ngx_uint_t                    i, j;
    ngx_http_dynamo_rl_zone_t    *zone;
    ngx_http_dynamo_rl_recent_t  *rc;

    zone = ngx_http_dynamo_rl_get_zone(r);

    p = ngx_sprintf(p, "{\"version\":\"" NGX_HTTP_DYNAMO_RL_VERSION "\","
                    "\"nginx\":\"" NGINX_VERSION "\",\"zone\":\"%V\","
                    "\"time\":\"", &zone->name);
    p = ngx_http_dynamo_rl_iso_time(p, ngx_http_dynamo_rl_wall());

    p = ngx_sprintf(p, "\",\"snapshot\":{\"generation\":%ui,", rp->generation);

    if (rp->has_snapshot) {
        p = ngx_sprintf(p, "\"age_ms\":%M,\"source\":\"%s\",\"fetched\":\"",
                        rp->age,
                        rp->source == NGX_HTTP_DYNAMO_RL_SOURCE_REFRESH
                        ? "refresh" : "discovery");
        p = ngx_http_dynamo_rl_iso_time(p, (uint64_t) rp->fetched * 1000);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "\"age_ms\":null,\"source\":null,\"fetched\":null",
                       sizeof("\"age_ms\":null,\"source\":null,"
                              "\"fetched\":null") - 1);
    }

    p = ngx_http_dynamo_rl_fleet_json(r, index, p,
                                      last - (NGX_HTTP_DYNAMO_RL_STATUS_FIXED
                                              / 2));
    if (p == NULL) {
        return NULL;
    }

    /* what follows is bounded by the fixed part, the gate and the denials */

    if ((size_t) (last - p) < NGX_HTTP_DYNAMO_RL_STATUS_FIXED / 2
                              + NGX_HTTP_DYNAMO_RL_RECENT * 128
                              + ngx_http_dynamo_rl_gate_json_len(&rp->gate))
    {
        return NULL;
    }

    p = ngx_cpymem(p, "},\"gate\":", sizeof("},\"gate\":") - 1);
    p = ngx_http_dynamo_rl_gate_json(p, &rp->gate);

    p = ngx_sprintf(p, ",\"ledger\":{\"records\":%ui,\"in_flight\":%ui,"
                    "\"capacity\":%ui,\"evictions\":%ui,\"expired\":%ui,"
                    "\"duplicates\":%ui,\"exhausted\":%ui},",
                    rp->records, rp->in_flight, rp->capacity, rp->evictions,
                    rp->expired, rp->duplicates, rp->exhausted);

    p = ngx_cpymem(p, "\"counters\":{\"requests\":{",
                   sizeof("\"counters\":{\"requests\":{") - 1);

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        p = ngx_sprintf(p, "%s\"%V\":{", i ? "," : "",
                        &ngx_http_dynamo_rl_plane_names[i]);

        for (j = 0; j < NGX_HTTP_DYNAMO_RL_OUTCOMES; j++) {
            if (ngx_http_dynamo_rl_outcome_names[i][j].len == 0) {
                continue;
            }

            p = ngx_sprintf(p, "%s\"%V\":%ui", j ? "," : "",
                            &ngx_http_dynamo_rl_outcome_names[i][j],
                            rp->requests[i][j]);
        }

        *p++ = '}';
    }

    p = ngx_cpymem(p, "},\"denials\":{", sizeof("},\"denials\":{") - 1);

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        p = ngx_sprintf(p, "%s\"%V\":{", i ? "," : "",
                        &ngx_http_dynamo_rl_plane_names[i]);

        for (j = 0; ngx_http_dynamo_rl_reasons[j].len; j++) {
            p = ngx_sprintf(p, "%s\"%V\":%ui", j ? "," : "",
                            &ngx_http_dynamo_rl_reasons[j],
                            rp->denials[i][j]);
        }

        *p++ = '}';
    }

    p = ngx_sprintf(p, "},\"admin_results\":{\"ok\":%ui,\"error\":%ui},"
                    "\"discovery_refreshes\":{\"ok\":%ui,\"failed\":%ui}},"
                    "\"recent_denials\":[",
                    rp->admin_results[0], rp->admin_results[1],
                    rp->refresh_ok, rp->refresh_failed);

    for (i = 0; i < rp->nrecent; i++) {
        rc = &rp->recent[i];

        p = ngx_cpymem(p, i ? ",{\"time\":\"" : "{\"time\":\"",
                       i ? sizeof(",{\"time\":\"") - 1
                         : sizeof("{\"time\":\"") - 1);
        p = ngx_http_dynamo_rl_iso_time(p, (uint64_t) rc->time * 1000);
        p = ngx_sprintf(p, "\",\"plane\":\"%V\",\"reason\":\"%V\","
                        "\"status\":%ui}",
                        &ngx_http_dynamo_rl_plane_names[rc->plane],
                        &ngx_http_dynamo_rl_reasons[rc->reason],
                        (ngx_uint_t) rc->status);
    }

    p = ngx_cpymem(p, "]}", 2);

    return p;
}


/* the bound of the fleet's JSON, from the index it is rendered from */

static size_t
ngx_http_dynamo_rl_fleet_len(ngx_http_dynamo_rl_index_t *index)
{
    size_t       size;
    ngx_uint_t   i;

    size = sizeof(",\"fleet\":[") - 1 + NGX_HTTP_DYNAMO_RL_FLEET_TAIL;

    if (index == NULL) {
        return size;
    }

    for (i = 0; i < index->nworkers; i++) {
        size += NGX_HTTP_DYNAMO_RL_WORKER_JSON
                + 6 * (index->workers[i].namespace.len
                       + index->workers[i].model.len);
    }

    return size;
}


/*
 * the workers of the index, as the status location's scope sees them;
 * each worker is written only if its bound fits before "last", else NULL
 */

static u_char *
ngx_http_dynamo_rl_fleet_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index, u_char *p, u_char *last)
{
    char                           *admin;
    size_t                          len;
    ngx_uint_t                      i, k, n, eligible, dup;
    ngx_http_dynamo_rl_worker_t    *w, **wp;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if ((size_t) (last - p) < ngx_http_dynamo_rl_fleet_len(NULL)) {
        return NULL;
    }

    if (index == NULL) {
        return ngx_cpymem(p, ",\"workers\":0,\"eligible\":0,\"fleet\":[]",
                          sizeof(",\"workers\":0,\"eligible\":0,"
                                 "\"fleet\":[]") - 1);
    }

    eligible = 0;
    n = 0;

    p = ngx_cpymem(p, ",\"fleet\":[", sizeof(",\"fleet\":[") - 1);

    for (i = 0; i < index->nworkers; i++) {
        w = &index->workers[i];

        if (ngx_http_dynamo_rl_in_scope(drlcf, &w->namespace) != NGX_OK) {
            continue;
        }

        /* ambiguous as the admin plane sees it: twice in this scope */

        dup = 0;

        if (w->has_id) {
            wp = ngx_http_dynamo_rl_index_find(index, w->id, &k);

            for ( /* void */ ; k; k--, wp++) {
                if (ngx_http_dynamo_rl_in_scope(drlcf, &(*wp)->namespace)
                    == NGX_OK)
                {
                    dup++;
                }
            }

            dup = (dup > 1);
        }

        switch (w->state) {

        case NGX_HTTP_DYNAMO_RL_WORKER_INVALID:
            admin = "worker_invalid";
            break;

        case NGX_HTTP_DYNAMO_RL_WORKER_ERROR:
            admin = "worker_error";
            break;

        case NGX_HTTP_DYNAMO_RL_WORKER_NO_URL:
            admin = "no_system_url";
            break;

        default:
            admin = dup ? "ambiguous_worker" : "eligible";
        }

        if (admin[0] == 'e') {
            eligible++;
        }

        len = NGX_HTTP_DYNAMO_RL_WORKER_JSON
              + 6 * (w->namespace.len + w->model.len)
              + NGX_HTTP_DYNAMO_RL_FLEET_TAIL;

        if ((size_t) (last - p) < len) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{\"instance_id\":", n++ ? "," : "");

        if (w->has_id) {
            p = ngx_sprintf(p, "\"%uL\"", w->id);

        } else {
            p = ngx_cpymem(p, "null", 4);
        }

        p = ngx_cpymem(p, ",\"namespace\":\"", sizeof(",\"namespace\":\"") - 1);
        p = (u_char *) ngx_escape_json(p, w->namespace.data,
                                       w->namespace.len);
        p = ngx_cpymem(p, "\",\"model\":", sizeof("\",\"model\":") - 1);

        if (w->model.len) {
            *p++ = '"';
            p = (u_char *) ngx_escape_json(p, w->model.data, w->model.len);
            *p++ = '"';

        } else {
            p = ngx_cpymem(p, "null", 4);
        }

        p = ngx_sprintf(p, ",\"routes\":%ui,\"admin\":\"%s\"}",
                        w->nroutes, admin);
    }

    return ngx_sprintf(p, "],\"workers\":%ui,\"eligible\":%ui", n, eligible);
}


/*
 * the dashboard: one page with the same JSON inside, rendered by inline
 * script; "<" is escaped so that no string can close the script element
 */

static ngx_int_t
ngx_http_dynamo_rl_status_html(ngx_http_request_t *r, ngx_str_t *json)
{
    u_char     *p, *s, *last;
    size_t      len, n;
    ngx_str_t   type;

    n = 0;

    for (s = json->data; s < json->data + json->len; s++) {
        if (*s == '<' || *s == '>' || *s == '&') {
            n++;
        }
    }

    len = sizeof(ngx_http_dynamo_rl_html_head) - 1 + json->len + 5 * n
          + sizeof(ngx_http_dynamo_rl_html_tail) - 1;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_cpymem(p, ngx_http_dynamo_rl_html_head,
                      sizeof(ngx_http_dynamo_rl_html_head) - 1);

    for (s = json->data; s < json->data + json->len; s++) {
        switch (*s) {

        case '<':
            last = ngx_cpymem(last, "\\u003c", 6);
            break;

        case '>':
            last = ngx_cpymem(last, "\\u003e", 6);
            break;

        case '&':
            last = ngx_cpymem(last, "\\u0026", 6);
            break;

        default:
            *last++ = *s;
        }
    }

    last = ngx_cpymem(last, ngx_http_dynamo_rl_html_tail,
                      sizeof(ngx_http_dynamo_rl_html_tail) - 1);

    ngx_str_set(&type, "text/html");

    json->data = p;
    json->len = last - p;

    return ngx_http_dynamo_rl_send(r, NGX_HTTP_OK, &type, json);
}


static ngx_int_t
ngx_http_dynamo_rl_metrics_handler(ngx_http_request_t *r)
{
    u_char                       *p, *last;
    size_t                        size;
    ngx_int_t                     rc;
    ngx_str_t                     type, body;
    ngx_http_dynamo_rl_report_t   rp;

    rc = ngx_http_dynamo_rl_read_only(r);

    if (rc != NGX_DECLINED) {
        return rc;
    }

    ngx_http_dynamo_rl_report(r, &rp);

    /* the exposition has a fixed set of series */
    size = 32768;

    p = ngx_pnalloc(r->pool, size);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_http_dynamo_rl_metrics_text(&rp, p);

    ngx_str_set(&type, "text/plain; version=0.0.4; charset=utf-8");

    body.data = p;
    body.len = last - p;

    return ngx_http_dynamo_rl_send(r, NGX_HTTP_OK, &type, &body);
}


static u_char *
ngx_http_dynamo_rl_metrics_text(ngx_http_dynamo_rl_report_t *rp, u_char *p)
{
    ngx_uint_t  i, j, sum;

    p = ngx_cpymem(p, "# HELP dynamo_rl_requests_total Requests by plane "
                   "and outcome.\n# TYPE dynamo_rl_requests_total counter\n",
                   sizeof("# HELP dynamo_rl_requests_total Requests by plane "
                          "and outcome.\n# TYPE dynamo_rl_requests_total "
                          "counter\n") - 1);

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        for (j = 0; j < NGX_HTTP_DYNAMO_RL_OUTCOMES; j++) {
            if (ngx_http_dynamo_rl_outcome_names[i][j].len) {
                p = ngx_sprintf(p, "dynamo_rl_requests_total{plane=\"%V\","
                                "outcome=\"%V\"} %ui\n",
                                &ngx_http_dynamo_rl_plane_names[i],
                                &ngx_http_dynamo_rl_outcome_names[i][j],
                                rp->requests[i][j]);
            }
        }
    }

    p = ngx_sprintf(p, "# HELP dynamo_rl_denials_total Requests the gateway "
                    "refused, by plane and reason.\n"
                    "# TYPE dynamo_rl_denials_total counter\n");

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        for (j = 0; ngx_http_dynamo_rl_reasons[j].len; j++) {
            p = ngx_sprintf(p, "dynamo_rl_denials_total{plane=\"%V\","
                            "reason=\"%V\"} %ui\n",
                            &ngx_http_dynamo_rl_plane_names[i],
                            &ngx_http_dynamo_rl_reasons[j],
                            rp->denials[i][j]);
        }
    }

    p = ngx_sprintf(p, "# HELP dynamo_rl_admin_calls_total Admin calls "
                    "answered by a worker, by result.\n"
                    "# TYPE dynamo_rl_admin_calls_total counter\n"
                    "dynamo_rl_admin_calls_total{result=\"ok\"} %ui\n"
                    "dynamo_rl_admin_calls_total{result=\"error\"} %ui\n",
                    rp->admin_results[0], rp->admin_results[1]);

    p = ngx_sprintf(p, "# HELP dynamo_rl_discovery_refreshes_total Snapshot "
                    "refreshes, by result.\n"
                    "# TYPE dynamo_rl_discovery_refreshes_total counter\n"
                    "dynamo_rl_discovery_refreshes_total{result=\"ok\"} %ui\n"
                    "dynamo_rl_discovery_refreshes_total{result=\"failed\"} "
                    "%ui\n",
                    rp->refresh_ok, rp->refresh_failed);

    p = ngx_sprintf(p, "# HELP dynamo_rl_snapshot_generation Generation of "
                    "the discovery snapshot, 0 before the first.\n"
                    "# TYPE dynamo_rl_snapshot_generation gauge\n"
                    "dynamo_rl_snapshot_generation %ui\n"
                    "# HELP dynamo_rl_snapshot_age_seconds Age of the "
                    "discovery snapshot, -1 without one.\n"
                    "# TYPE dynamo_rl_snapshot_age_seconds gauge\n"
                    "dynamo_rl_snapshot_age_seconds ",
                    rp->generation);

    if (rp->has_snapshot) {
        p = ngx_sprintf(p, "%M.%03M\n", rp->age / 1000, rp->age % 1000);

    } else {
        p = ngx_cpymem(p, "-1\n", 3);
    }

    /* the gate's state as a label: one of the three series is 1 */

    p = ngx_sprintf(p, "# HELP dynamo_rl_gate_state The gate's state: open, "
                    "closed, or expired (closed, its lease run out).\n"
                    "# TYPE dynamo_rl_gate_state gauge\n"
                    "dynamo_rl_gate_state{state=\"open\"} %ui\n"
                    "dynamo_rl_gate_state{state=\"closed\"} %ui\n"
                    "dynamo_rl_gate_state{state=\"expired\"} %ui\n",
                    (ngx_uint_t) !rp->gate.closed,
                    (ngx_uint_t) (rp->gate.closed && !rp->gate.expired),
                    (ngx_uint_t) (rp->gate.closed && rp->gate.expired));

    p = ngx_sprintf(p, "# HELP dynamo_rl_gate_closed 1 while the gate is "
                    "closed.\n# TYPE dynamo_rl_gate_closed gauge\n"
                    "dynamo_rl_gate_closed %ui\n"
                    "# HELP dynamo_rl_gate_epoch Changes of the gate since "
                    "the zone was created.\n"
                    "# TYPE dynamo_rl_gate_epoch gauge\n"
                    "dynamo_rl_gate_epoch %ui\n"
                    "# HELP dynamo_rl_gate_lease_expiry_seconds Unix time "
                    "the gate's lease runs out, 0 without one.\n"
                    "# TYPE dynamo_rl_gate_lease_expiry_seconds gauge\n"
                    "dynamo_rl_gate_lease_expiry_seconds %uL\n"
                    "# HELP dynamo_rl_gate_lease_expired 1 while closed "
                    "with a lease that ran out.\n"
                    "# TYPE dynamo_rl_gate_lease_expired gauge\n"
                    "dynamo_rl_gate_lease_expired %ui\n"
                    "# HELP dynamo_rl_in_flight Request-plane requests in "
                    "progress.\n# TYPE dynamo_rl_in_flight gauge\n"
                    "dynamo_rl_in_flight %ui\n",
                    rp->gate.closed, rp->gate.epoch,
                    rp->gate.closed ? rp->gate.expires_wall / 1000 : 0,
                    rp->gate.expired, rp->gate.in_flight);

    p = ngx_sprintf(p, "# HELP dynamo_rl_ledger_records Attempt records in "
                    "the zone.\n# TYPE dynamo_rl_ledger_records gauge\n"
                    "dynamo_rl_ledger_records %ui\n"
                    "# HELP dynamo_rl_ledger_in_flight Attempts not yet "
                    "finished.\n# TYPE dynamo_rl_ledger_in_flight gauge\n"
                    "dynamo_rl_ledger_in_flight %ui\n"
                    "# HELP dynamo_rl_ledger_evictions_total Finished "
                    "records evicted before their ttl.\n"
                    "# TYPE dynamo_rl_ledger_evictions_total counter\n"
                    "dynamo_rl_ledger_evictions_total %ui\n"
                    "# HELP dynamo_rl_ledger_expired_total Finished records "
                    "removed after their ttl.\n"
                    "# TYPE dynamo_rl_ledger_expired_total counter\n"
                    "dynamo_rl_ledger_expired_total %ui\n"
                    "# HELP dynamo_rl_ledger_duplicates_total Requests "
                    "refused for a used attempt id.\n"
                    "# TYPE dynamo_rl_ledger_duplicates_total counter\n"
                    "dynamo_rl_ledger_duplicates_total %ui\n"
                    "# HELP dynamo_rl_ledger_exhausted_total Requests "
                    "refused for a full ledger.\n"
                    "# TYPE dynamo_rl_ledger_exhausted_total counter\n"
                    "dynamo_rl_ledger_exhausted_total %ui\n",
                    rp->records, rp->in_flight, rp->evictions, rp->expired,
                    rp->duplicates, rp->exhausted);

    p = ngx_sprintf(p, "# HELP dynamo_rl_request_duration_seconds Request "
                    "duration by plane.\n"
                    "# TYPE dynamo_rl_request_duration_seconds histogram\n");

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        sum = 0;

        for (j = 0; j < NGX_HTTP_DYNAMO_RL_BUCKETS; j++) {
            sum += rp->duration[i][j];

            if (j < NGX_HTTP_DYNAMO_RL_BUCKETS - 1) {
                p = ngx_sprintf(p, "dynamo_rl_request_duration_seconds_bucket"
                                "{plane=\"%V\",le=\"%M.%03M\"} %ui\n",
                                &ngx_http_dynamo_rl_plane_names[i],
                                ngx_http_dynamo_rl_buckets[j] / 1000,
                                ngx_http_dynamo_rl_buckets[j] % 1000, sum);

            } else {
                p = ngx_sprintf(p, "dynamo_rl_request_duration_seconds_bucket"
                                "{plane=\"%V\",le=\"+Inf\"} %ui\n",
                                &ngx_http_dynamo_rl_plane_names[i], sum);
            }
        }

        p = ngx_sprintf(p, "dynamo_rl_request_duration_seconds_sum"
                        "{plane=\"%V\"} %ui.%03ui\n"
                        "dynamo_rl_request_duration_seconds_count"
                        "{plane=\"%V\"} %ui\n",
                        &ngx_http_dynamo_rl_plane_names[i],
                        rp->duration_ms[i] / 1000, rp->duration_ms[i] % 1000,
                        &ngx_http_dynamo_rl_plane_names[i], sum);
    }

    return p;
}
