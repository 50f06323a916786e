
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_gate.h"
#include "ngx_http_dynamo_rl_discovery.h"
#include "ngx_http_dynamo_rl_status.h"

#include <openssl/rand.h>


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
    ngx_uint_t                       hist[NGX_HTTP_DYNAMO_RL_HISTOGRAMS]
                                         [NGX_HTTP_DYNAMO_RL_BUCKETS];
    ngx_uint_t                       hist_sum[NGX_HTTP_DYNAMO_RL_HISTOGRAMS];
    ngx_uint_t                       refresh_ok;
    ngx_uint_t                       refresh_failed;

    ngx_uint_t                       generation;
    ngx_uint_t                       source;
    ngx_msec_t                       age;
    time_t                           fetched;
    ngx_uint_t                       has_snapshot;
    ngx_uint_t                       workers;
    ngx_uint_t                       eligible;

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

    /* with dynamo_rl_store, its figures, copied without the mutex */
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_stats_t store_stats;
    ngx_uint_t                       store_fallback;

    /* the fleet as the gate last read it, if that read is fresh */
    ngx_uint_t                       fleet_fresh;
    ngx_uint_t                       fleet_replicas;
    ngx_uint_t                       fleet_acked;
    uint64_t                         fleet_in_flight;
    ngx_uint_t                       fleet_lost;
    ngx_uint_t                       fleet_drained;
} ngx_http_dynamo_rl_report_t;


/* a histogram's series in the metrics */

typedef struct {
    char                            *name;
    char                            *label;
    ngx_str_t                        value;
    char                            *help;
} ngx_http_dynamo_rl_hist_t;


static ngx_int_t ngx_http_dynamo_rl_status_header_filter(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_status_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_uint_t ngx_http_dynamo_rl_outcome(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
static void ngx_http_dynamo_rl_report(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp);
static ngx_int_t ngx_http_dynamo_rl_status_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_metrics_handler(ngx_http_request_t *r);
static u_char *ngx_http_dynamo_rl_status_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp, ngx_http_dynamo_rl_index_t *index,
    u_char *p, u_char *last);
static u_char *ngx_http_dynamo_rl_durations_json(
    ngx_http_dynamo_rl_report_t *rp, u_char *p);
static size_t ngx_http_dynamo_rl_fleet_len(ngx_http_dynamo_rl_index_t *index);
static char *ngx_http_dynamo_rl_worker_admin(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index, ngx_http_dynamo_rl_worker_t *w);
static void ngx_http_dynamo_rl_fleet_count(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp);
static u_char *ngx_http_dynamo_rl_fleet_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index, u_char *p, u_char *last);
static ngx_int_t ngx_http_dynamo_rl_status_html(ngx_http_request_t *r,
    ngx_str_t *json);
static u_char *ngx_http_dynamo_rl_metrics_text(
    ngx_http_dynamo_rl_report_t *rp, u_char *p);
static size_t ngx_http_dynamo_rl_store_json_len(
    ngx_http_dynamo_rl_report_t *rp);
static u_char *ngx_http_dynamo_rl_store_json(ngx_http_dynamo_rl_report_t *rp,
    u_char *p);
static u_char *ngx_http_dynamo_rl_store_text(ngx_http_dynamo_rl_report_t *rp,
    u_char *p);
static void ngx_http_dynamo_rl_fleet_report(ngx_http_dynamo_rl_report_t *rp,
    ngx_http_dynamo_rl_shctx_t *sh);
static u_char *ngx_http_dynamo_rl_fleet_text(ngx_http_dynamo_rl_report_t *rp,
    u_char *p);
static u_char *ngx_http_dynamo_rl_histogram_text(u_char *p, char *name,
    char *label, ngx_str_t *value, ngx_uint_t *counts, ngx_uint_t sum);
static ngx_uint_t ngx_http_dynamo_rl_reason_shown(
    ngx_http_dynamo_rl_report_t *rp, ngx_uint_t plane, ngx_uint_t reason);
static ngx_int_t ngx_http_dynamo_rl_ready_handler(ngx_http_request_t *r);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


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


/* the histograms beside the planes': JSON names, metric label values */

static ngx_str_t  ngx_http_dynamo_rl_hist_names[] = {
    ngx_string("upstream_header"),
    ngx_string("attempt_succeeded"),
    ngx_string("attempt_failed"),
    ngx_string("attempt_canceled"),
    ngx_string("admin_ok"),
    ngx_string("admin_error"),
    ngx_string("refresh_ok"),
    ngx_string("refresh_failed")
};


/* the same as metrics: the first series of each carries its help text */

static ngx_http_dynamo_rl_hist_t  ngx_http_dynamo_rl_hists[] = {
    { "dynamo_rl_upstream_header_seconds", NULL, ngx_null_string,
      "Request plane: time to the frontend's response header, which "
      "comes with the first token of a stream." },
    { "dynamo_rl_attempt_duration_seconds", "outcome",
      ngx_string("succeeded"),
      "Request plane: whole attempts forwarded to the frontend, by "
      "outcome." },
    { "dynamo_rl_attempt_duration_seconds", "outcome",
      ngx_string("failed"), NULL },
    { "dynamo_rl_attempt_duration_seconds", "outcome",
      ngx_string("canceled"), NULL },
    { "dynamo_rl_admin_call_duration_seconds", "result", ngx_string("ok"),
      "Admin calls answered by a worker, by result." },
    { "dynamo_rl_admin_call_duration_seconds", "result",
      ngx_string("error"), NULL },
    { "dynamo_rl_discovery_refresh_duration_seconds", "result",
      ngx_string("ok"), "Snapshot refreshes from the listener, by result." },
    { "dynamo_rl_discovery_refresh_duration_seconds", "result",
      ngx_string("failed"), NULL }
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

/* a histogram in the status document: its name, counts, count and sum */
#define NGX_HTTP_DYNAMO_RL_HIST_JSON                                         \
    (96 + (NGX_HTTP_DYNAMO_RL_BUCKETS + 2) * (NGX_ATOMIC_T_LEN + 1))

/* the dashboard runs only its own style and script, and polls its origin */
#define NGX_HTTP_DYNAMO_RL_CSP                                               \
    "default-src 'none'; script-src 'nonce-%V'; style-src 'nonce-%V'; "    \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; "             \
    "frame-ancestors 'none'"

/* the metrics: every line but the histograms', and a histogram's line */
#define NGX_HTTP_DYNAMO_RL_METRICS_FIXED  16384
#define NGX_HTTP_DYNAMO_RL_METRICS_LINE                                      \
    (128 + NGX_ATOMIC_T_LEN)


/*
 * the dashboard, around its nonce and its data: the style and the script
 * run under a Content-Security-Policy that allows only them, the script
 * polls the status document and draws with inline SVG
 */

static char  ngx_http_dynamo_rl_html_head[] =
"<!DOCTYPE html>\n"
"<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
"<meta name=\"viewport\" content=\"width=device-width\">\n"
"<title>dynamo_rl gateway</title>\n"
"<style nonce=\"";

static char  ngx_http_dynamo_rl_html_style[] =
"\">\n"
"body{font:13px/1.35 system-ui,sans-serif;margin:0;color:#222;background:#f6f7f"
"9}\n"
"main{max-width:1180px;margin:0 auto;padding:12px 16px}\n"
"header{display:flex;align-items:baseline;gap:12px}\n"
"h1{font-size:18px;margin:4px 0}h2{font-size:14px;margin:14px 0 4px}\n"
"#conn{padding:2px 8px;border-radius:10px;background:#dff5e1;color:#1b5e20}\n"
"#conn.down{background:#b3261e;color:#fff;font-weight:bold}\n"
"body.down .card,body.down svg{opacity:.45}\n"
".row{display:grid;grid-template-columns:1fr 1fr;gap:10px}\n"
".card{background:#fff;border:1px solid #dde;border-radius:6px;padding:8px 10px"
"}\n"
"#gate{font-size:15px}#gate b{font-size:17px}\n"
".open{border-left:6px solid #2e7d32}.closed{border-left:6px solid #f9a825}\n"
".expired{border-left:6px solid #b3261e}\n"
"#store{margin-top:10px}#store.up{border-left:6px solid #2e7d32}\n"
"#store.down{border-left:6px solid #b3261e}\n"
"svg{width:100%;display:block}\n"
".legend span{margin-right:10px;white-space:nowrap}\n"
".legend svg{display:inline;width:10px;vertical-align:-1px}\n"
"table{border-collapse:collapse;width:100%}\n"
"td,th{padding:2px 6px;border-bottom:1px solid #eee;text-align:left}\n"
".num{text-align:right}.ok{color:#1b7f2a}.deny{color:#b3261e}\n"
".muted{color:#777}\n"
"</style></head><body>\n"
"<main>\n"
"<header><h1>dynamo_rl gateway</h1><span id=\"conn\">live</span>\n"
"<span id=\"info\" class=\"muted\"></span></header>\n"
"<div class=\"row\">\n"
"<div id=\"gate\" class=\"card\"></div>\n"
"<div class=\"card\"><div id=\"snapshot\"></div><div id=\"ledger\"></div></div>"
"\n"
"</div>\n"
"<div id=\"store\" class=\"card\" hidden></div>\n"
"<h2>Gate history</h2>\n"
"<div class=\"card\"><svg id=\"strip\" height=\"34\"></svg>\n"
"<div class=\"legend\" id=\"strip-legend\"></div></div>\n"
"<div class=\"row\">\n"
"<div><h2>Request outcomes per second</h2>\n"
"<div class=\"card\"><svg id=\"c-out\" height=\"130\"></svg>\n"
"<div class=\"legend\" id=\"l-out\"></div></div></div>\n"
"<div><h2>Denials per second</h2>\n"
"<div class=\"card\"><svg id=\"c-den\" height=\"130\"></svg>\n"
"<div class=\"legend\" id=\"l-den\"></div></div></div>\n"
"<div><h2>In flight</h2>\n"
"<div class=\"card\"><svg id=\"c-fly\" height=\"130\"></svg>\n"
"<div class=\"legend\" id=\"l-fly\"></div></div></div>\n"
"<div><h2>Upstream header time, ms</h2>\n"
"<div class=\"card\"><svg id=\"c-ttft\" height=\"130\"></svg>\n"
"<div class=\"legend\" id=\"l-ttft\"></div>\n"
"<div class=\"muted\" id=\"n-ttft\">time to the frontend's response header "
"(a stream's comes with its first event), as the upper bound of its "
"histogram bucket: 5, 10, 25, 50, 100 ms, ...</div></div></div>\n"
"</div>\n"
"<div class=\"row\">\n"
"<div><h2>Fleet</h2><div class=\"card\"><table id=\"fleet\"><thead><tr>\n"
"<th>instance id</th><th>namespace</th><th>model</th><th>routes</th>\n"
"<th>admin</th></tr></thead><tbody></tbody></table></div></div>\n"
"<div><h2>Recent denials, grouped</h2><div class=\"card\">\n"
"<table id=\"recent\"><thead>\n"
"<tr><th>last</th><th>plane</th><th>reason</th><th>status</th>\n"
"<th class=\"num\">count</th></tr></thead>\n"
"<tbody></tbody></table></div></div>\n"
"</div>\n"
"</main>\n"
"<script type=\"application/json\" id=\"data\">";

static char  ngx_http_dynamo_rl_html_script[] =
"</script>\n"
"<script nonce=\"";

static char  ngx_http_dynamo_rl_html_tail[] =
"\">\n"
"(function(){'use strict';\n"
"var D=document,EVERY=2000,KEEP=300,hist=[],polls=0,down=0;\n"
"var NS=D.getElementById('strip').namespaceURI;\n"
"var PH={open:'#2e7d32',draining:'#f9a825',drained:'#1565c0',\n"
"expired:'#b3261e',unknown:'#bbb'};\n"
"function $(i){return D.getElementById(i)}\n"
"function el(t,c,x){var e=D.createElement(t);if(c)e.className=c;\n"
"if(x!==undefined)e.textContent=x;return e}\n"
"function sv(t,a){var e=D.createElementNS(NS,t);\n"
"for(var k in a)e.setAttribute(k,a[k]);return e}\n"
"function clear(e){while(e.firstChild)e.removeChild(e.firstChild)}\n"
"function sum(o){var s=0;for(var k in o)s+=o[k];return s}\n"
"function phase(g){return g.expired?'expired':g.state=='open'?'open':\n"
"g.in_flight?'draining':'drained'}\n"
"function legend(id,items){var l=$(id);clear(l);items.forEach(function(x){\n"
"var s=el('span');\n"
"var v=sv('svg',{width:10,height:10});v.appendChild(sv('rect',{width:10,\n"
"height:10,fill:x[1]}));s.appendChild(v);s.appendChild(D.createTextNode(\n"
"' '+x[0]));l.appendChild(s)})}\n"
"function sample(d){var c=d.counters,u=d.durations||{};return{t:Date.now(),\n"
"gate:d.gate,phase:phase(d.gate),req:c.requests.request,\n"
"den:{request:sum(c.denials.request),discovery:sum(c.denials.discovery),\n"
"admin:sum(c.denials.admin)},admin:sum(c.admin_results),\n"
"hdr:(u.upstream_header||{}).buckets||[],le:u.le_ms||[]}}\n"
"function rate(a,b,f){var dt=(b.t-a.t)/1000;return dt>0?\n"
"Math.max(0,(f(b)-f(a))/dt):0}\n"
"function quant(a,b,q){var d=[],n=0,i;for(i=0;i<b.hdr.length;i++){\n"
"d.push((b.hdr[i]||0)-(a.hdr[i]||0));n+=d[i]}if(n<=0)return null;\n"
"var k=q*n,c=0;for(i=0;i<d.length;i++){c+=d[i];if(c>=k)\n"
"return i<b.le.length?b.le[i]:b.le[b.le.length-1]}return null}\n"
"function series(f){var v=[];for(var i=1;i<hist.length;i++)\n"
"v.push({t:hist[i].t,v:f(hist[i-1],hist[i])});return v}\n"
"function chart(id,lid,ss){var g=$(id),W=g.clientWidth||560,H=130,\n"
"L=44,B=16,max=0,t0=hist.length?hist[0].t:0,t1=hist.length?\n"
"hist[hist.length-1].t:1,pts=0;clear(g);g.setAttribute('viewBox',\n"
"'0 0 '+W+' '+H);ss.forEach(function(s){s.v.forEach(function(p){\n"
"if(p.v!==null&&p.v>max)max=p.v})});max=max>0?max*1.1:1;\n"
"function X(t){return L+(W-L-4)*(t1>t0?(t-t0)/(t1-t0):1)}\n"
"function Y(v){return 4+(H-B-8)*(1-v/max)}\n"
"[0,.5,1].forEach(function(f){var y=Y(max*f);g.appendChild(sv('line',\n"
"{x1:L,x2:W-4,y1:y,y2:y,stroke:'#e5e5e5'}));var t=sv('text',{x:L-4,\n"
"y:y+4,'text-anchor':'end','font-size':10,fill:'#666'});\n"
"t.textContent=fmt(max*f);g.appendChild(t)});\n"
"var tl=sv('text',{x:W-4,y:H-3,'text-anchor':'end','font-size':10,\n"
"fill:'#666'});tl.textContent='last '+Math.round((t1-t0)/1000)+' s';\n"
"g.appendChild(tl);ss.forEach(function(s){var d='',m='M';s.v.forEach(\n"
"function(p){if(p.v===null){m='M';return}d+=m+X(p.t).toFixed(1)+','+\n"
"Y(p.v).toFixed(1);m='L';pts++});if(d)g.appendChild(sv('path',{d:d,\n"
"fill:'none',stroke:s.c,'stroke-width':1.6}))});\n"
"g.setAttribute('data-points',pts);legend(lid,ss.map(function(s){\n"
"var l=s.v.length?s.v[s.v.length-1].v:null;return[s.n+' '+\n"
"(l===null?'-':fmt(l)),s.c]}))}\n"
"function fmt(v){return v>=100?Math.round(v)+'':v>=10?v.toFixed(1):\n"
"v.toFixed(2)}\n"
"function strip(){var g=$('strip'),W=g.clientWidth||1100,H=34,n=hist.length,\n"
"i,x,w;clear(g);g.setAttribute('viewBox','0 0 '+W+' '+H);if(!n)return;\n"
"var t0=hist[0].t,t1=hist[n-1].t+EVERY;for(i=0;i<n;i++){\n"
"x=W*(hist[i].t-t0)/(t1-t0);w=W*((i+1<n?hist[i+1].t:t1)-hist[i].t)/\n"
"(t1-t0);g.appendChild(sv('rect',{x:x.toFixed(1),y:2,width:\n"
"Math.max(w,1).toFixed(1),height:18,fill:PH[hist[i].phase]||PH.unknown,\n"
"'data-phase':hist[i].phase}));if(i&&hist[i].admin>hist[i-1].admin)\n"
"g.appendChild(sv('rect',{x:x.toFixed(1),y:22,width:2,height:10,\n"
"fill:'#333'}))}g.setAttribute('data-phases',hist.map(function(h){\n"
"return h.phase}).filter(function(p,j,a){return!j||p!=a[j-1]}).join(' '))}\n"
"function row(tb,cells){var tr=el('tr');cells.forEach(function(c){\n"
"tr.appendChild(el('td',c[1],c[0]))});tb.appendChild(tr)}\n"
"function render(d){var g=d.gate,gd=$('gate'),p=phase(g);store(d);\n"
"gd.className='card '+(g.expired?'expired':g.state);clear(gd);\n"
"gd.appendChild(el('b',null,'gate '+g.state.toUpperCase()+\n"
"(g.expired?' (lease expired)':'')));gd.appendChild(el('div',null,\n"
"'phase '+p+', epoch '+g.epoch+', in flight '+g.in_flight));\n"
"if(g.reason)gd.appendChild(el('div',null,'reason: '+g.reason));\n"
"if(g.lease_expires)gd.appendChild(el('div',null,'lease until '+\n"
"g.lease_expires));var s=d.snapshot,l=d.ledger;\n"
"$('snapshot').textContent=s.generation?'snapshot '+s.generation+\n"
"' from '+s.source+', '+s.age_ms+' ms old, '+s.workers+' workers, '+\n"
"s.eligible+' admin-eligible':'no snapshot yet';\n"
"$('ledger').textContent='ledger: '+l.records+' records ('+l.in_flight+\n"
"' in flight) of about '+l.capacity+', '+l.evictions+' evicted, '+\n"
"l.duplicates+' duplicates refused';$('info').textContent=\n"
"'nginx '+d.nginx+', module '+d.version+', zone '+d.zone+', '+d.time;\n"
"var fb=$('fleet').tBodies[0];clear(fb);(s.fleet||[]).forEach(function(w){\n"
"row(fb,[[w.instance_id],[w.namespace],[w.model||''],[w.routes,'num'],\n"
"[w.admin,w.admin=='eligible'?'ok':'deny']])});\n"
"var rb=$('recent').tBodies[0],rg=[],rk={};clear(rb);\n"
"d.recent_denials.forEach(function(x){var k=x.plane+' '+x.reason+' '+\n"
"x.status;if(rk[k])rk[k].n++;else rg.push(rk[k]={x:x,n:1})});\n"
"rg.forEach(function(e){row(rb,[[e.x.time],[e.x.plane],\n"
"[e.x.reason,'deny'],[e.x.status,'num'],[e.n,'num']])});draw()}\n"
"function store(d){var s=d.store,e=$('store'),f;if(!s){e.hidden=true;\n"
"return}e.hidden=false;e.className='card '+(s.up?'up':'down');clear(e);\n"
"e.appendChild(el('b',null,'store '+(s.up?'UP':'DOWN')+(s.fallback?\n"
"', the zone decides (on_error=local)':'')));e.appendChild(el('div',\n"
"null,'address '+s.url+', replica '+s.replica));e.appendChild(el('div',\n"
"null,'queue '+s.queue+', fallbacks '+s.fallbacks+', dropped '+\n"
"s.dropped+', reconnects '+s.reconnects));f=s.fleet;e.appendChild(el(\n"
"'div',null,!f?'fleet not known: no fresh read of the gate':'fleet: '+\n"
"f.replicas+' replica'+(f.replicas==1?'':'s')+', '+f.acked+\n"
"' acked the epoch, '+f.in_flight+' in flight, '+f.lost+' lost; '+\n"
"(d.gate.state!='closed'?'gate open':\n"
"f.drained?'drained, the refresh can run':'draining')));\n"
"e.lastChild.id='drain'}\n"
"function draw(){var r=function(k){return function(a,b){return rate(a,b,\n"
"function(h){return h.req[k]||0})}};\n"
"chart('c-out','l-out',[{n:'succeeded',c:'#2e7d32',v:series(r('succeeded'))},\n"
"{n:'failed',c:'#b3261e',v:series(r('failed'))},{n:'canceled',c:'#8e24aa',\n"
"v:series(r('canceled'))},{n:'rejected',c:'#f9a825',\n"
"v:series(r('rejected'))}]);var dn=function(k){return function(a,b){\n"
"return rate(a,b,function(h){return h.den[k]})}};\n"
"chart('c-den','l-den',[{n:'request',c:'#f9a825',v:series(dn('request'))},\n"
"{n:'discovery',c:'#1565c0',v:series(dn('discovery'))},{n:'admin',\n"
"c:'#b3261e',v:series(dn('admin'))}]);chart('c-fly','l-fly',[{n:\n"
"'in flight',c:'#1565c0',v:hist.map(function(h){return{t:h.t,\n"
"v:h.gate.in_flight}})}]);chart('c-ttft','l-ttft',[{n:'p50',c:'#2e7d32',\n"
"v:series(function(a,b){return quant(a,b,.5)})},{n:'p95',c:'#b3261e',\n"
"v:series(function(a,b){return quant(a,b,.95)})}]);strip()}\n"
"function push(d){hist.push(sample(d));if(hist.length>KEEP)hist.shift();\n"
"polls++;var b=D.body,n=sum(hist[hist.length-1].req);b.setAttribute(\n"
"'data-polls',polls);if(polls==1)b.setAttribute('data-first',n);\n"
"b.setAttribute('data-last',n)}\n"
"function state(ok,why){var c=$('conn');if(ok){down=0;c.className='';\n"
"c.textContent='live, every '+EVERY/1000+' s';D.body.className=''}\n"
"else{if(!down)down=new Date();c.className='down';c.textContent=\n"
"'gateway unreachable since '+down.toLocaleTimeString()+' ('+why+\n"
"'), retrying';D.body.className='down'}}\n"
"function poll(){fetch(location.pathname+'?format=json',{cache:'no-store',\n"
"headers:{Accept:'application/json'}}).then(function(r){if(!r.ok)\n"
"throw new Error('HTTP '+r.status);return r.json()}).then(function(d){\n"
"push(d);render(d);state(1)}).catch(function(e){state(0,e.message||e)})}\n"
"legend('strip-legend',[['open',PH.open],['closed, draining',PH.draining],\n"
"['closed, drained: refresh',PH.drained],['lease expired',PH.expired],\n"
"['admin call','#333']]);push(JSON.parse($('data').textContent));\n"
"render(JSON.parse($('data').textContent));state(1);\n"
"setInterval(poll,EVERY)})();\n"
"</script></body></html>\n";


/*
 * the log phase, before the access log: the request's plane, outcome,
 * denial and durations go into the zone's counters; durations run on the
 * monotonic clock from the plane's first look at the request to the end
 * of its response (or now, if it never ended: a client that went away)
 */

void
ngx_http_dynamo_rl_account(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    uint64_t                         end;
    ngx_msec_t                       ms;
    ngx_uint_t                       plane, outcome, reason, bucket;
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

    /* the clock is read only when the response never ended */

    end = ngx_http_dynamo_rl_ctx_end(ctx);
    ms = (ngx_msec_t) (end > ctx->started ? end - ctx->started : 0);
    bucket = ngx_http_dynamo_rl_bucket(ms);

    (void) ngx_atomic_fetch_add(&sh->duration[plane][bucket], 1);
    (void) ngx_atomic_fetch_add(&sh->duration_ms[plane], ms);

    if (ctx->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST) {

        if (ctx->header_at >= ctx->started && ctx->header_at) {
            ngx_http_dynamo_rl_zone_observe(sh, NGX_HTTP_DYNAMO_RL_HIST_HEADER,
                                            (ngx_msec_t) (ctx->header_at
                                                          - ctx->started));
        }

        /* an attempt let through to the frontend: succeeded to canceled */

        if (ctx->admitted && outcome < 3) {
            ngx_http_dynamo_rl_zone_observe(sh,
                                            NGX_HTTP_DYNAMO_RL_HIST_ATTEMPT
                                            + outcome, ms);
        }

    } else if (ctx->admin_result.len) {
        ngx_http_dynamo_rl_zone_observe(sh,
                                        NGX_HTTP_DYNAMO_RL_HIST_ADMIN
                                        + ctx->admin_error, ms);
    }

    if (ctx->deny_reason.len == 0) {
        return;
    }

    reason = ngx_http_dynamo_rl_reason_find(ctx->deny_reason.data,
                                            ctx->deny_reason.len, plane);

    if (reason == NGX_HTTP_DYNAMO_RL_REASONS) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "dynamo rl: reason \"%V\" on the %V plane is not in "
                      "the table of reasons, not counted",
                      &ctx->deny_reason,
                      &ngx_http_dynamo_rl_plane_names[plane]);
        return;
    }

    (void) ngx_atomic_fetch_add(&sh->denials[plane][reason], 1);

    ngx_shmtx_lock(&zone->shpool->mutex);

    rc = &sh->recent[sh->recent_next++ % NGX_HTTP_DYNAMO_RL_RECENT];

    rc->time = ngx_time();
    rc->plane = (u_char) plane;
    rc->reason = (u_char) reason;
    rc->status = (u_short) r->headers_out.status;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_int_t
ngx_http_dynamo_rl_status_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_dynamo_rl_status_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_dynamo_rl_status_body_filter;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_status_header_filter(ngx_http_request_t *r)
{
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx != NULL) {
        ngx_http_dynamo_rl_status_header(r, ctx);
    }

    return ngx_http_next_header_filter(r);
}


/*
 * the request plane's time to the upstream's response header: Dynamo's
 * frontend sends it with the first event of a stream, so for SSE this is
 * the time to the first token
 */

void
ngx_http_dynamo_rl_status_header(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    if (r->upstream != NULL && r->upstream->headers_in.status_n != 0
        && ctx->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        && ctx->header_at == 0)
    {
        ctx->header_at = ngx_http_dynamo_rl_now();
    }
}


static ngx_int_t
ngx_http_dynamo_rl_status_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main || in == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx != NULL) {
        ngx_http_dynamo_rl_status_body(ctx, in);
    }

    return ngx_http_next_body_filter(r, in);
}


/* the end of a response: its last buffer handed to the output */

void
ngx_http_dynamo_rl_status_body(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_chain_t *in)
{
    ngx_chain_t  *cl;

    if (ctx->ended_at) {
        return;
    }

    for (cl = in; cl; cl = cl->next) {
        if (cl->buf->last_buf) {
            ctx->ended_at = ngx_http_dynamo_rl_now();
            break;
        }
    }
}


static ngx_uint_t
ngx_http_dynamo_rl_outcome(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_uint_t  i, plane;

    /*
     * a refusal, but for the listener's invalid document and for an
     * attempt refused after it was forwarded, which the ledger settled
     */

    if (ctx->deny_reason.len && !ctx->settled
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
    ngx_uint_t                       i, j, n, source;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_snap_t       *snap;
    ngx_http_dynamo_rl_shctx_t      *sh;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    zone = ngx_http_dynamo_rl_get_zone(r);
    sh = zone->sh;
    snap = ngx_http_dynamo_rl_snapshot_of(r, &source);

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

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_HISTOGRAMS; i++) {
        for (j = 0; j < NGX_HTTP_DYNAMO_RL_BUCKETS; j++) {
            rp->hist[i][j] = sh->hist[i][j];
        }

        rp->hist_sum[i] = sh->hist_sum[i];
    }

    rp->admin_results[0] = sh->admin_results[0];
    rp->admin_results[1] = sh->admin_results[1];

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (drmcf->store != NULL) {
        rp->store = drmcf->store;
        rp->store_stats = sh->store;
        rp->store_stats.up = ngx_http_dynamo_rl_store_conn_up(&sh->store);
        rp->store_fallback = sh->store_fallback;
    }

    ngx_http_dynamo_rl_gate_state(zone, &rp->gate);

    ngx_shmtx_lock(&zone->shpool->mutex);

    rp->refresh_ok = sh->refresh_ok;
    rp->refresh_failed = sh->refresh_failed;

    if (snap != NULL) {
        rp->has_snapshot = (snap->raw != NULL);
        rp->generation = snap->generation;
        rp->source = snap->source;

        /* another process's cached clock may be a little ahead of ours */

        rp->age = (ngx_msec_int_t) (ngx_current_msec - snap->fetched) > 0
                  ? ngx_current_msec - snap->fetched : 0;
        rp->fetched = snap->fetched_time;
    }

    rp->records = sh->records;
    rp->in_flight = sh->in_flight;
    rp->evictions = sh->evictions;
    rp->expired = sh->expired;
    rp->duplicates = sh->duplicates;
    rp->exhausted = sh->exhausted;

    /* a record takes one 128-byte slot with an id of up to 49 bytes */
    rp->capacity = sh->records + zone->shpool->pfree * (ngx_pagesize / 128);

    n = ngx_min(sh->recent_next, NGX_HTTP_DYNAMO_RL_RECENT);

    for (i = 0; i < n; i++) {
        rp->recent[i] = sh->recent[(sh->recent_next - 1 - i)
                                   % NGX_HTTP_DYNAMO_RL_RECENT];
    }

    rp->nrecent = n;

    if (rp->store != NULL) {
        ngx_http_dynamo_rl_fleet_report(rp, sh);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * the fleet from the zone, under its mutex: only while the gate's last
 * read is fresh (gate_stale), as a location without the ledger goes by it
 */

static void
ngx_http_dynamo_rl_fleet_report(ngx_http_dynamo_rl_report_t *rp,
    ngx_http_dynamo_rl_shctx_t *sh)
{
    if (!sh->fleet_known || !sh->store_known
        || ngx_http_dynamo_rl_now() - sh->store_read
           > rp->store->gate_stale)
    {
        return;
    }

    rp->fleet_fresh = 1;
    rp->fleet_replicas = sh->fleet_replicas;
    rp->fleet_acked = sh->fleet_acked;
    rp->fleet_in_flight = sh->fleet_in_flight;
    rp->fleet_lost = sh->fleet_lost;
    rp->fleet_drained = sh->fleet_drained;
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
           + (NGX_HTTP_DYNAMO_RL_PLANES + NGX_HTTP_DYNAMO_RL_HISTOGRAMS)
             * NGX_HTTP_DYNAMO_RL_HIST_JSON
           + ngx_http_dynamo_rl_gate_json_len(&rp.gate)
           + ngx_http_dynamo_rl_fleet_len(index)
           + ngx_http_dynamo_rl_store_json_len(&rp) + 1;

    p = ngx_pnalloc(r->pool, size);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_http_dynamo_rl_status_json(r, &rp, index, p, p + size - 1);

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

    /* a JSON answer ends with a newline, as a text file does */

    *last++ = LF;
    json.len++;

    ngx_str_set(&type, "application/json");

    return ngx_http_dynamo_rl_send(r, NGX_HTTP_OK, &type, &json);
}


/* NULL if the document would pass "last", which the sizing rules out */

static u_char *
ngx_http_dynamo_rl_status_json(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp, ngx_http_dynamo_rl_index_t *index,
    u_char *p, u_char *last)
{
    ngx_uint_t                    i, j, n;
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
                              + (NGX_HTTP_DYNAMO_RL_PLANES
                                 + NGX_HTTP_DYNAMO_RL_HISTOGRAMS)
                                * NGX_HTTP_DYNAMO_RL_HIST_JSON
                              + ngx_http_dynamo_rl_gate_json_len(&rp->gate)
                              + ngx_http_dynamo_rl_store_json_len(rp))
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

    if (rp->store != NULL) {
        p = ngx_http_dynamo_rl_store_json(rp, p);
    }

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

        n = 0;

        for (j = 0; ngx_http_dynamo_rl_reasons[j].name.len; j++) {
            if (!ngx_http_dynamo_rl_reason_shown(rp, i, j)) {
                continue;
            }

            p = ngx_sprintf(p, "%s\"%V\":%ui", n++ ? "," : "",
                            &ngx_http_dynamo_rl_reasons[j].name,
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
                        &ngx_http_dynamo_rl_reasons[rc->reason].name,
                        (ngx_uint_t) rc->status);
    }

    p = ngx_cpymem(p, "],\"durations\":", sizeof("],\"durations\":") - 1);
    p = ngx_http_dynamo_rl_durations_json(rp, p);

    *p++ = '}';

    return p;
}


/*
 * every histogram, for the dashboard: the bounds once, then per histogram
 * the count of each bucket (not cumulative, +Inf last) and the sum
 */

static u_char *
ngx_http_dynamo_rl_durations_json(ngx_http_dynamo_rl_report_t *rp, u_char *p)
{
    ngx_uint_t  i, j, n;

    p = ngx_cpymem(p, "{\"le_ms\":[", sizeof("{\"le_ms\":[") - 1);

    for (j = 0; j < NGX_HTTP_DYNAMO_RL_BUCKETS - 1; j++) {
        p = ngx_sprintf(p, "%s%M", j ? "," : "", ngx_http_dynamo_rl_buckets[j]);
    }

    *p++ = ']';

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES + NGX_HTTP_DYNAMO_RL_HISTOGRAMS;
         i++)
    {
        if (i < NGX_HTTP_DYNAMO_RL_PLANES) {
            p = ngx_sprintf(p, ",\"%V\":{\"buckets\":[",
                            &ngx_http_dynamo_rl_plane_names[i]);

        } else {
            p = ngx_sprintf(p, ",\"%V\":{\"buckets\":[",
                            &ngx_http_dynamo_rl_hist_names
                                [i - NGX_HTTP_DYNAMO_RL_PLANES]);
        }

        n = 0;

        for (j = 0; j < NGX_HTTP_DYNAMO_RL_BUCKETS; j++) {
            if (i < NGX_HTTP_DYNAMO_RL_PLANES) {
                p = ngx_sprintf(p, "%s%ui", j ? "," : "", rp->duration[i][j]);
                n += rp->duration[i][j];

            } else {
                p = ngx_sprintf(p, "%s%ui", j ? "," : "",
                                rp->hist[i - NGX_HTTP_DYNAMO_RL_PLANES][j]);
                n += rp->hist[i - NGX_HTTP_DYNAMO_RL_PLANES][j];
            }
        }

        p = ngx_sprintf(p, "],\"count\":%ui,\"sum_ms\":%ui}", n,
                        i < NGX_HTTP_DYNAMO_RL_PLANES
                        ? rp->duration_ms[i]
                        : rp->hist_sum[i - NGX_HTTP_DYNAMO_RL_PLANES]);
    }

    *p++ = '}';

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
    char                         *admin;
    size_t                        len;
    ngx_uint_t                    i, n, eligible;
    ngx_http_dynamo_rl_worker_t  *w;

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

        admin = ngx_http_dynamo_rl_worker_admin(r, index, w);

        if (admin == NULL) {
            continue;
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
 * a worker's admin eligibility as the location's scope sees it: "eligible"
 * or the admin plane's reason to refuse it; NULL when out of scope
 */

static char *
ngx_http_dynamo_rl_worker_admin(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index, ngx_http_dynamo_rl_worker_t *w)
{
    ngx_uint_t                      k, dup;
    ngx_http_dynamo_rl_worker_t   **wp;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (ngx_http_dynamo_rl_in_scope(drlcf, &w->namespace) != NGX_OK) {
        return NULL;
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
        return "worker_invalid";

    case NGX_HTTP_DYNAMO_RL_WORKER_ERROR:
        return "worker_error";

    case NGX_HTTP_DYNAMO_RL_WORKER_NO_URL:
        return "no_system_url";

    default:
        return dup ? "ambiguous_worker" : "eligible";
    }
}


/* the workers in the location's scope, and those eligible for admin */

static void
ngx_http_dynamo_rl_fleet_count(ngx_http_request_t *r,
    ngx_http_dynamo_rl_report_t *rp)
{
    char                         *admin;
    ngx_uint_t                    i;
    ngx_http_dynamo_rl_index_t   *index;
    ngx_http_dynamo_rl_worker_t  *w;

    index = ngx_http_dynamo_rl_discovery_index(r);

    if (index == NULL) {
        return;
    }

    for (i = 0; i < index->nworkers; i++) {
        w = &index->workers[i];

        admin = ngx_http_dynamo_rl_worker_admin(r, index, w);

        if (admin == NULL) {
            continue;
        }

        rp->workers++;

        if (admin[0] == 'e') {
            rp->eligible++;
        }
    }
}


/*
 * the dashboard: one page with the same JSON inside, rendered by inline
 * script; "<" is escaped so that no string can close the script element;
 * a nonce from RAND_bytes() for each answer is all its policy allows
 */

static ngx_int_t
ngx_http_dynamo_rl_status_html(ngx_http_request_t *r, ngx_str_t *json)
{
    u_char           *p, *s, *last;
    size_t            len, n;
    ngx_str_t         type, nonce, src;
    ngx_table_elt_t  *h;
    u_char            rnd[16];

    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        ngx_log_error(NGX_LOG_CRIT, r->connection->log, 0,
                      "RAND_bytes() failed for the dashboard's nonce");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    nonce.data = ngx_pnalloc(r->pool, ngx_base64_encoded_length(sizeof(rnd)));
    if (nonce.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    src.data = rnd;
    src.len = sizeof(rnd);

    ngx_encode_base64(&nonce, &src);

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = sizeof(NGX_HTTP_DYNAMO_RL_CSP) - 1 + 2 * nonce.len;

    h->value.data = ngx_pnalloc(r->pool, len);
    if (h->value.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->value.len = ngx_sprintf(h->value.data, NGX_HTTP_DYNAMO_RL_CSP,
                               &nonce, &nonce)
                   - h->value.data;
    h->hash = 1;
    ngx_str_set(&h->key, "Content-Security-Policy");

    n = 0;

    for (s = json->data; s < json->data + json->len; s++) {
        if (*s == '<' || *s == '>' || *s == '&') {
            n++;
        }
    }

    len = sizeof(ngx_http_dynamo_rl_html_head) - 1
          + sizeof(ngx_http_dynamo_rl_html_style) - 1
          + json->len + 5 * n
          + sizeof(ngx_http_dynamo_rl_html_script) - 1
          + sizeof(ngx_http_dynamo_rl_html_tail) - 1
          + 2 * nonce.len;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = ngx_cpymem(p, ngx_http_dynamo_rl_html_head,
                      sizeof(ngx_http_dynamo_rl_html_head) - 1);
    last = ngx_cpymem(last, nonce.data, nonce.len);
    last = ngx_cpymem(last, ngx_http_dynamo_rl_html_style,
                      sizeof(ngx_http_dynamo_rl_html_style) - 1);

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

    last = ngx_cpymem(last, ngx_http_dynamo_rl_html_script,
                      sizeof(ngx_http_dynamo_rl_html_script) - 1);
    last = ngx_cpymem(last, nonce.data, nonce.len);
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
    ngx_http_dynamo_rl_fleet_count(r, &rp);

    /* the exposition has a fixed set of series */

    size = NGX_HTTP_DYNAMO_RL_METRICS_FIXED
           + (NGX_HTTP_DYNAMO_RL_PLANES + NGX_HTTP_DYNAMO_RL_HISTOGRAMS)
             * (NGX_HTTP_DYNAMO_RL_BUCKETS + 2)
             * NGX_HTTP_DYNAMO_RL_METRICS_LINE;

    if (rp.store != NULL) {
        size += 4096 + rp.store->replica.len
                + (NGX_HTTP_DYNAMO_RL_STORE_OPS
                   * NGX_HTTP_DYNAMO_RL_STORE_RESULTS
                   + NGX_HTTP_DYNAMO_RL_STORE_BUCKETS + 2)
                  * NGX_HTTP_DYNAMO_RL_METRICS_LINE;
    }

    /* the fleet's five series, their help text in the fixed part */

    if (rp.fleet_fresh) {
        size += 1024 + 5 * NGX_HTTP_DYNAMO_RL_METRICS_LINE;
    }

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
    ngx_uint_t                  i, j;
    ngx_http_dynamo_rl_hist_t  *h;

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

    /* only the reasons each plane can give */

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        for (j = 0; ngx_http_dynamo_rl_reasons[j].name.len; j++) {
            if (!ngx_http_dynamo_rl_reason_shown(rp, i, j)) {
                continue;
            }

            p = ngx_sprintf(p, "dynamo_rl_denials_total{plane=\"%V\","
                            "reason=\"%V\"} %ui\n",
                            &ngx_http_dynamo_rl_plane_names[i],
                            &ngx_http_dynamo_rl_reasons[j].name,
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

    p = ngx_sprintf(p, "# HELP dynamo_rl_snapshot_workers Workers of the "
                    "discovery snapshot in the metrics location's namespace "
                    "scope.\n"
                    "# TYPE dynamo_rl_snapshot_workers gauge\n"
                    "dynamo_rl_snapshot_workers %ui\n"
                    "# HELP dynamo_rl_snapshot_eligible_workers Of those, "
                    "the workers the admin plane would call.\n"
                    "# TYPE dynamo_rl_snapshot_eligible_workers gauge\n"
                    "dynamo_rl_snapshot_eligible_workers %ui\n",
                    rp->workers, rp->eligible);

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
                    "# HELP dynamo_rl_ledger_capacity About how many "
                    "records the zone has room for.\n"
                    "# TYPE dynamo_rl_ledger_capacity gauge\n"
                    "dynamo_rl_ledger_capacity %ui\n"
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
                    rp->records, rp->capacity, rp->in_flight,
                    rp->evictions, rp->expired, rp->duplicates,
                    rp->exhausted);

    p = ngx_sprintf(p, "# HELP dynamo_rl_request_duration_seconds Request "
                    "duration by plane.\n"
                    "# TYPE dynamo_rl_request_duration_seconds histogram\n");

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_PLANES; i++) {
        p = ngx_http_dynamo_rl_histogram_text(p,
                                        "dynamo_rl_request_duration_seconds",
                                        "plane",
                                        &ngx_http_dynamo_rl_plane_names[i],
                                        rp->duration[i], rp->duration_ms[i]);
    }

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_HISTOGRAMS; i++) {
        h = &ngx_http_dynamo_rl_hists[i];

        if (h->help != NULL) {
            p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s histogram\n",
                            h->name, h->help, h->name);
        }

        p = ngx_http_dynamo_rl_histogram_text(p, h->name, h->label,
                                              &h->value, rp->hist[i],
                                              rp->hist_sum[i]);
    }

    if (rp->store != NULL) {
        p = ngx_http_dynamo_rl_store_text(rp, p);
    }

    if (rp->fleet_fresh) {
        p = ngx_http_dynamo_rl_fleet_text(rp, p);
    }

    return p;
}


static size_t
ngx_http_dynamo_rl_store_json_len(ngx_http_dynamo_rl_report_t *rp)
{
    if (rp->store == NULL) {
        return 0;
    }

    return sizeof("\"store\":{\"url\":\"\",\"replica\":\"\",\"up\":false,"
                  "\"fallback\":false,\"queue\":,\"fallbacks\":,"
                  "\"dropped\":,\"reconnects\":,\"conflicts\":},")
           + sizeof(",\"fleet\":{\"replicas\":,\"acked\":,\"in_flight\":,"
                    "\"lost\":,\"drained\":false}") + 4 * NGX_INT64_LEN
           + rp->store->url.len
           + ngx_escape_json(NULL, rp->store->url.data, rp->store->url.len)
           + rp->store->replica.len + 6 * NGX_ATOMIC_T_LEN;
}


static u_char *
ngx_http_dynamo_rl_store_json(ngx_http_dynamo_rl_report_t *rp, u_char *p)
{
    ngx_http_dynamo_rl_store_stats_t  *st;

    st = &rp->store_stats;

    p = ngx_cpymem(p, "\"store\":{\"url\":\"",
                   sizeof("\"store\":{\"url\":\"") - 1);
    p = (u_char *) ngx_escape_json(p, rp->store->url.data,
                                   rp->store->url.len);

    p = ngx_sprintf(p, "\",\"replica\":\"%V\",\"up\":%s,\"fallback\":%s,"
                    "\"queue\":%uA,\"fallbacks\":%uA,\"dropped\":%uA,"
                    "\"reconnects\":%uA,\"conflicts\":%uA",
                    &rp->store->replica, st->up ? "true" : "false",
                    rp->store_fallback ? "true" : "false",
                    st->queue, st->fallbacks, st->dropped, st->reconnects,
                    st->conflicts);

    /* the fleet's figures, null while the gate's read is not fresh */

    if (!rp->fleet_fresh) {
        return ngx_cpymem(p, ",\"fleet\":null},",
                          sizeof(",\"fleet\":null},") - 1);
    }

    return ngx_sprintf(p, ",\"fleet\":{\"replicas\":%ui,\"acked\":%ui,"
                       "\"in_flight\":%uL,\"lost\":%ui,\"drained\":%s}},",
                       rp->fleet_replicas, rp->fleet_acked,
                       rp->fleet_in_flight, rp->fleet_lost,
                       rp->fleet_drained ? "true" : "false");
}


/* the store's series: operations by fixed labels, round trips, the queue */

static u_char *
ngx_http_dynamo_rl_store_text(ngx_http_dynamo_rl_report_t *rp, u_char *p)
{
    ngx_uint_t                         i, j, n;
    ngx_http_dynamo_rl_store_stats_t  *st;

    static char  *ops[] = { "claim", "move", "gate", "beat", "get",
                            "connect" };
    static char  *results[] = { "ok", "error", "unavailable", "timeout" };
    static char  *bounds[] = { "0.0001", "0.00025", "0.0005", "0.001",
                               "0.0025", "0.005", "0.01", "0.025", "0.05",
                               "0.1", "0.25", "0.5", "1" };

    st = &rp->store_stats;

    p = ngx_sprintf(p, "# HELP dynamo_rl_store_info The shared store's "
                    "replica name for this gateway.\n"
                    "# TYPE dynamo_rl_store_info gauge\n"
                    "dynamo_rl_store_info{replica=\"%V\"} 1\n"
                    "# HELP dynamo_rl_store_up 1 while every worker "
                    "process is connected to the shared store and it "
                    "refuses none of their claims.\n"
                    "# TYPE dynamo_rl_store_up gauge\n"
                    "dynamo_rl_store_up %uA\n"
                    "# HELP dynamo_rl_store_queue Store commands waiting "
                    "for an answer or a connection.\n"
                    "# TYPE dynamo_rl_store_queue gauge\n"
                    "dynamo_rl_store_queue %uA\n"
                    "# HELP dynamo_rl_store_fallbacks_total Decisions the "
                    "zone took for an unavailable store (on_error=local).\n"
                    "# TYPE dynamo_rl_store_fallbacks_total counter\n"
                    "dynamo_rl_store_fallbacks_total %uA\n"
                    "# HELP dynamo_rl_store_dropped_total Record updates "
                    "given up for a full queue.\n"
                    "# TYPE dynamo_rl_store_dropped_total counter\n"
                    "dynamo_rl_store_dropped_total %uA\n"
                    "# HELP dynamo_rl_store_reconnects_total Connections "
                    "to the store made again after a failure.\n"
                    "# TYPE dynamo_rl_store_reconnects_total counter\n"
                    "dynamo_rl_store_reconnects_total %uA\n"
                    "# HELP dynamo_rl_store_conflicts_total Ids forwarded "
                    "under on_error=local that another replica had "
                    "claimed meanwhile.\n"
                    "# TYPE dynamo_rl_store_conflicts_total counter\n"
                    "dynamo_rl_store_conflicts_total %uA\n"
                    "# HELP dynamo_rl_store_operations_total Store "
                    "operations by kind and result.\n"
                    "# TYPE dynamo_rl_store_operations_total counter\n",
                    &rp->store->replica, st->up, st->queue, st->fallbacks,
                    st->dropped, st->reconnects, st->conflicts);

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_STORE_OPS; i++) {
        for (j = 0; j < NGX_HTTP_DYNAMO_RL_STORE_RESULTS; j++) {
            p = ngx_sprintf(p, "dynamo_rl_store_operations_total{op=\"%s\","
                            "result=\"%s\"} %uA\n",
                            ops[i], results[j], st->ops[i][j]);
        }
    }

    p = ngx_sprintf(p, "# HELP dynamo_rl_store_round_trip_seconds Time from "
                    "a store command's queueing to its answer.\n"
                    "# TYPE dynamo_rl_store_round_trip_seconds histogram\n");

    n = 0;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_STORE_BUCKETS; i++) {
        n += st->rtt[i];

        p = ngx_sprintf(p, "dynamo_rl_store_round_trip_seconds_bucket"
                        "{le=\"%s\"} %ui\n",
                        i < NGX_HTTP_DYNAMO_RL_STORE_BUCKETS - 1
                        ? bounds[i] : "+Inf", n);
    }

    return ngx_sprintf(p, "dynamo_rl_store_round_trip_seconds_sum "
                       "%uA.%06uA\n"
                       "dynamo_rl_store_round_trip_seconds_count %ui\n",
                       st->rtt_sum_us / 1000000, st->rtt_sum_us % 1000000, n);
}


/*
 * the fleet of replicas that share the store, as the gate read last had
 * it: no series while that read is older than gate_stale
 */

static u_char *
ngx_http_dynamo_rl_fleet_text(ngx_http_dynamo_rl_report_t *rp, u_char *p)
{
    return ngx_sprintf(p, "# HELP dynamo_rl_fleet_replicas Gateway replicas "
                       "that share the store and report to it.\n"
                       "# TYPE dynamo_rl_fleet_replicas gauge\n"
                       "dynamo_rl_fleet_replicas %ui\n"
                       "# HELP dynamo_rl_fleet_acked Of those, the replicas "
                       "that saw the gate's current epoch.\n"
                       "# TYPE dynamo_rl_fleet_acked gauge\n"
                       "dynamo_rl_fleet_acked %ui\n"
                       "# HELP dynamo_rl_fleet_in_flight Request-plane "
                       "requests in progress on those replicas.\n"
                       "# TYPE dynamo_rl_fleet_in_flight gauge\n"
                       "dynamo_rl_fleet_in_flight %uL\n"
                       "# HELP dynamo_rl_fleet_lost Replicas silent for three "
                       "heartbeats (forgotten a minute past that, never while "
                       "the gate they saw open stays closed).\n"
                       "# TYPE dynamo_rl_fleet_lost gauge\n"
                       "dynamo_rl_fleet_lost %ui\n"
                       "# HELP dynamo_rl_fleet_drained 1 while the gate is "
                       "closed, every replica saw it, none has requests in "
                       "flight and none is lost.\n"
                       "# TYPE dynamo_rl_fleet_drained gauge\n"
                       "dynamo_rl_fleet_drained %ui\n",
                       rp->fleet_replicas, rp->fleet_acked,
                       rp->fleet_in_flight, rp->fleet_lost,
                       rp->fleet_drained);
}


/* one series of a histogram: cumulative buckets, the sum and the count */

static u_char *
ngx_http_dynamo_rl_histogram_text(u_char *p, char *name, char *label,
    ngx_str_t *value, ngx_uint_t *counts, ngx_uint_t sum)
{
    u_char      lb[64];
    ngx_uint_t  j, n;
    ngx_str_t   l, s;

    /* the label and a comma before "le", or nothing */

    if (label != NULL) {
        l.data = lb;
        l.len = ngx_snprintf(lb, sizeof(lb), "%s=\"%V\",", label, value)
                - lb;

        s.data = lb;
        s.len = l.len - 1;

    } else {
        ngx_str_null(&l);
        ngx_str_null(&s);
    }

    n = 0;

    for (j = 0; j < NGX_HTTP_DYNAMO_RL_BUCKETS; j++) {
        n += counts[j];

        if (j < NGX_HTTP_DYNAMO_RL_BUCKETS - 1) {
            p = ngx_sprintf(p, "%s_bucket{%Vle=\"%M.%03M\"} %ui\n",
                            name, &l, ngx_http_dynamo_rl_buckets[j] / 1000,
                            ngx_http_dynamo_rl_buckets[j] % 1000, n);

        } else {
            p = ngx_sprintf(p, "%s_bucket{%Vle=\"+Inf\"} %ui\n",
                            name, &l, n);
        }
    }

    if (label != NULL) {
        return ngx_sprintf(p, "%s_sum{%V} %ui.%03ui\n%s_count{%V} %ui\n",
                           name, &s, sum / 1000, sum % 1000, name, &s, n);
    }

    return ngx_sprintf(p, "%s_sum %ui.%03ui\n%s_count %ui\n",
                       name, sum / 1000, sum % 1000, name, n);
}


/* the reasons a plane can give: those of the store only with a store */

static ngx_uint_t
ngx_http_dynamo_rl_reason_shown(ngx_http_dynamo_rl_report_t *rp,
    ngx_uint_t plane, ngx_uint_t reason)
{
    ngx_uint_t  planes;

    planes = ngx_http_dynamo_rl_reasons[reason].planes;

    if (!(planes & (1 << plane))) {
        return 0;
    }

    return !(planes & NGX_HTTP_DYNAMO_RL_ON_STORE) || rp->store != NULL;
}


/*
 * dynamo_rl_ready, a readiness probe: 200 while this worker process can
 * admit generation as the fleet would, else 503 and the reason; a closed
 * gate is the fleet's answer, given by every replica alike, and leaves
 * the replica ready
 */

static ngx_int_t
ngx_http_dynamo_rl_ready_handler(ngx_http_request_t *r)
{
    u_char                          *p;
    char                            *reason, *message;
    uint64_t                         now;
    ngx_int_t                        rc;
    ngx_str_t                        body;
    ngx_uint_t                       state, refusing;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_shctx_t      *sh;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    rc = ngx_http_dynamo_rl_read_only(r);

    if (rc != NGX_DECLINED) {
        return rc;
    }

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    store = drmcf->store;
    sh = ngx_http_dynamo_rl_get_zone(r)->sh;
    now = ngx_http_dynamo_rl_now();

    if (store == NULL) {
        state = ngx_http_dynamo_rl_ready_check(0, 0, 0, 0, now, 0);

    } else {
        refusing = ngx_http_dynamo_rl_store_conn_refusing(store->stats);

        state = ngx_http_dynamo_rl_ready_check(1,
                                          ngx_http_dynamo_rl_store_ready(store),
                                          refusing, store->gate_read, now,
                                          store->gate_stale);
    }

    switch (state) {

    case NGX_HTTP_DYNAMO_RL_READY:
        break;

    case NGX_HTTP_DYNAMO_RL_READY_STORE_DOWN:
        reason = "store_down";
        message = "not ready: this worker process is not connected to the "
                  "shared store";
        goto unready;

    case NGX_HTTP_DYNAMO_RL_READY_STORE_REFUSING:
        reason = "store_refusing";
        message = "not ready: the shared store refused a claim of this "
                  "worker process within the last 30 s";
        goto unready;

    case NGX_HTTP_DYNAMO_RL_READY_GATE_UNKNOWN:
        reason = "gate_unknown";
        message = "not ready: this worker process has not read the store's "
                  "gate yet";
        goto unready;

    default: /* NGX_HTTP_DYNAMO_RL_READY_GATE_STALE */
        reason = "gate_stale";
        message = "not ready: this worker process has not read the store's "
                  "gate within gate_stale";
        goto unready;
    }

    p = ngx_pnalloc(r->pool, sizeof("{\"ready\":true,\"store\":false,"
                                    "\"gate\":\"closed\",\"gate_age_ms\":}")
                             + NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    body.data = p;

    p = ngx_sprintf(p, "{\"ready\":true,\"store\":%s,\"gate\":\"%s\"",
                    store != NULL ? "true" : "false",
                    sh->gate_closed ? "closed" : "open");

    if (store != NULL) {
        p = ngx_sprintf(p, ",\"gate_age_ms\":%uL",
                        now > store->gate_read ? now - store->gate_read : 0);
    }

    *p++ = '}';

    body.len = p - body.data;

    return ngx_http_dynamo_rl_send_json(r, NGX_HTTP_OK, &body);

unready:

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl ready: %s", reason);

    if (ngx_http_dynamo_rl_retry_after(r, 1) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_dynamo_rl_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, reason,
                                    message);
}


char *
ngx_http_dynamo_rl_ready(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_dynamo_rl_content_handler(cf,
               ngx_http_dynamo_rl_ready_handler);
}
