
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_ZONE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_ZONE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_store.h"


/* bumped whenever the layout of the shared context changes */
#define NGX_HTTP_DYNAMO_RL_ZONE_VERSION  14

/* the discovery sources (dynamo_rl_discovery URIs) a zone holds apart */
#define NGX_HTTP_DYNAMO_RL_SOURCES       16
#define NGX_HTTP_DYNAMO_RL_SOURCE_NAME   128

#define NGX_HTTP_DYNAMO_RL_PLANES        3     /* request, discovery, admin */
#define NGX_HTTP_DYNAMO_RL_OUTCOMES      4
#define NGX_HTTP_DYNAMO_RL_RECENT        16
#define NGX_HTTP_DYNAMO_RL_GATE_REASON   128

/*
 * the histograms of durations beside the one of each plane: the request
 * plane's time to the upstream's header, its attempts by outcome
 * (succeeded, failed, canceled), admin calls by result (ok, error) and
 * snapshot refreshes by result (ok, failed)
 */
#define NGX_HTTP_DYNAMO_RL_HIST_HEADER   0
#define NGX_HTTP_DYNAMO_RL_HIST_ATTEMPT  1
#define NGX_HTTP_DYNAMO_RL_HIST_ADMIN    4
#define NGX_HTTP_DYNAMO_RL_HIST_REFRESH  6
#define NGX_HTTP_DYNAMO_RL_HISTOGRAMS    8

/* every process slot nginx has, each tracked on its own */
#define NGX_HTTP_DYNAMO_RL_SLOTS         NGX_MAX_PROCESSES

/*
 * room beside a snapshot of max_size that nginx -t asks of a zone: the
 * shared context, the ledger's hash index and a few pages of records,
 * plus 1/64 of max_size for the slab's page table
 */
#define NGX_HTTP_DYNAMO_RL_ZONE_BASE     65536


/* a denial, for the dashboard: fixed codes only, no request data */

typedef struct {
    time_t                          time;
    u_char                          plane;
    u_char                          reason;
    u_short                         status;
} ngx_http_dynamo_rl_recent_t;


/*
 * the snapshot of one discovery source: the listener's (or the file's)
 * bytes, never a parse of them; "raw" is NULL or "room", pages reserved
 * for the source's largest max_size, which the ledger never uses; the
 * source's URI and the key of the server it is resolved in name the slot,
 * so that a reload that changes the sources never hands one source's
 * workers to another
 */

typedef struct {
    size_t                          name_len;      /* 0: a free slot */
    uint32_t                        name_crc;
    uint32_t                        server;        /* the server's key */
    u_char                          name[NGX_HTTP_DYNAMO_RL_SOURCE_NAME];

    u_char                         *raw;
    size_t                          raw_len;
    u_char                         *room;
    size_t                          room_size;
    ngx_uint_t                      generation;
    ngx_msec_t                      fetched;       /* ngx_current_msec */
    time_t                          fetched_time;  /* wall clock */
    ngx_uint_t                      source;

    /* the single refresh in flight across all worker processes */
    ngx_uint_t                      updating;
    ngx_pid_t                       updater;
    ngx_msec_t                      deadline;
    ngx_uint_t                      flights;

    /* when the refresh flight in progress began, ngx_current_msec */
    ngx_msec_t                      refresh_begun;

    /* the hash of the (instance_id, system_url) set in "raw" */
    uint64_t                        members;
} ngx_http_dynamo_rl_snap_t;


typedef struct {
    ngx_uint_t                      version;

    /* one snapshot per discovery source */
    ngx_http_dynamo_rl_snap_t       snaps[NGX_HTTP_DYNAMO_RL_SOURCES];

    ngx_atomic_uint_t               refresh_ok;
    ngx_atomic_uint_t               refresh_failed;

    /* the attempt ledger: a hash index, finished records newest first */
    void                          **buckets;
    ngx_uint_t                      mask;
    u_char                          key[16];       /* SipHash's, secret */
    /*
     * drawn with the zone, kept across reloads: tells this instance from
     * another replica of the same name (its fleet report's field)
     */
    uint32_t                        instance;
    ngx_queue_t                     finished;
    ngx_queue_t                     active;        /* in flight */
    ngx_uint_t                      records;
    ngx_uint_t                      in_flight;
    ngx_uint_t                      evictions;
    ngx_uint_t                      expired;
    ngx_uint_t                      duplicates;
    ngx_uint_t                      exhausted;
    ngx_uint_t                      adopted;       /* in flight elsewhere */

    /* the gate */
    ngx_uint_t                      gate_closed;
    ngx_uint_t                      gate_epoch;
    ngx_msec_t                      gate_lease;
    uint64_t                        gate_expires;   /* monotonic ms */
    uint64_t                        gate_expires_wall;  /* for display */
    time_t                          gate_changed;
    size_t                          gate_reason_len;
    u_char                          gate_reason[NGX_HTTP_DYNAMO_RL_GATE_REASON];

    /*
     * request-plane requests in progress, per worker process slot, so
     * that a process that died does not hold the drain forever
     */
    ngx_atomic_t                    slot_requests[NGX_HTTP_DYNAMO_RL_SLOTS];
    ngx_pid_t                       slot_pid[NGX_HTTP_DYNAMO_RL_SLOTS];
    /*
     * with a store: the identity each process drew as it started, one
     * for each slot, allocated by the first process that needs it
     */
    uint64_t                       *slot_boot;

    /* counters, updated without the mutex */
    ngx_atomic_t                    requests[NGX_HTTP_DYNAMO_RL_PLANES]
                                            [NGX_HTTP_DYNAMO_RL_OUTCOMES];
    ngx_atomic_t                    denials[NGX_HTTP_DYNAMO_RL_PLANES]
                                           [NGX_HTTP_DYNAMO_RL_REASONS];
    ngx_atomic_t                    admin_results[2];
    ngx_atomic_t                    duration[NGX_HTTP_DYNAMO_RL_PLANES]
                                            [NGX_HTTP_DYNAMO_RL_BUCKETS];
    ngx_atomic_t                    duration_ms[NGX_HTTP_DYNAMO_RL_PLANES];

    /* the latest denials, under the mutex */
    ngx_uint_t                      recent_next;
    ngx_http_dynamo_rl_recent_t     recent[NGX_HTTP_DYNAMO_RL_RECENT];

    /* the state file (state=) as this zone last read or wrote it */
    uint64_t                        state_ino;
    uint64_t                        state_size;
    uint64_t                        state_mtime;    /* ns */

    /*
     * the snapshot's set of (instance_id, system_url) when the gate
     * closed: its hash, and whether there was a snapshot at all
     */
    uint64_t                        gate_members;
    ngx_uint_t                      gate_members_known;

    /* durations on the monotonic clock, in ms, without the mutex */
    ngx_atomic_t                    hist[NGX_HTTP_DYNAMO_RL_HISTOGRAMS]
                                        [NGX_HTTP_DYNAMO_RL_BUCKETS];
    ngx_atomic_t                    hist_sum[NGX_HTTP_DYNAMO_RL_HISTOGRAMS];

    /*
     * with dynamo_rl_store, the gate fields above mirror the store's gate
     * as last read: when (ngx_http_dynamo_rl_now()), whether ever, and
     * whether this instance falls back to the zone (on_error=local)
     */
    uint64_t                        store_read;
    uint64_t                        store_changed;  /* the store's ms */
    /* the store's clock less the monotonic one, as last read, at most */
    uint64_t                        store_skew;
    ngx_uint_t                      store_skew_known;
    ngx_uint_t                      store_known;
    ngx_atomic_t                    store_fallback;
    /* records forwarded under on_error=local, not in the store yet */
    ngx_uint_t                      store_local;
    ngx_atomic_t                    store_failing;
    ngx_http_dynamo_rl_store_stats_t  store;

    /*
     * the fleet of replicas as the gate read last had it, under the
     * mutex; fresh as long as store_read is
     */
    ngx_uint_t                      fleet_known;
    ngx_uint_t                      fleet_replicas;
    ngx_uint_t                      fleet_acked;
    uint64_t                        fleet_in_flight;
    ngx_uint_t                      fleet_lost;
    ngx_uint_t                      fleet_drained;
} ngx_http_dynamo_rl_shctx_t;


typedef struct ngx_http_dynamo_rl_zone_s  ngx_http_dynamo_rl_zone_t;

struct ngx_http_dynamo_rl_zone_s {
    ngx_http_dynamo_rl_shctx_t     *sh;
    ngx_slab_pool_t                *shpool;
    ngx_str_t                       name;

    /*
     * the configuration's discovery sources: their URIs and the keys of
     * the servers they are resolved in, the room each snapshot needs
     * (from the largest max_size of its locations), and the slot of the
     * zone that holds it
     */
    ngx_uint_t                      nsources;
    ngx_str_t                       source_names[NGX_HTTP_DYNAMO_RL_SOURCES];
    uint32_t                        source_keys[NGX_HTTP_DYNAMO_RL_SOURCES];
    size_t                          reserve[NGX_HTTP_DYNAMO_RL_SOURCES];
    ngx_uint_t                      slot[NGX_HTTP_DYNAMO_RL_SOURCES];

    /* where the directive is, for the checks after the http block */
    u_char                         *file;
    ngx_uint_t                      line;
    ngx_uint_t                      stateless;

    /* the worker process's look for processes that died */
    ngx_event_t                     reaper;

    /* state=: the file, its directory, the file written then renamed */
    ngx_str_t                       state;
    ngx_str_t                       state_dir;
    ngx_str_t                       state_temp;
    ngx_msec_t                     *state_ttl;
    ngx_fd_t                        state_fd;
    ngx_event_t                     state_event;
    ngx_uint_t                      state_ticks;
    ngx_msec_t                      state_peer;
    ngx_uint_t                      state_sig[5];

    /* the cycle the zone was configured in: nginx's user */
    ngx_cycle_t                    *state_cycle;

    /* the state file's directory and file, checked in every cycle */
    ngx_int_t                     (*state_check)(
                                        ngx_http_dynamo_rl_zone_t *zone,
                                        ngx_log_t *log);

    /* the state file's reader, called when a zone is created */
    ngx_int_t                     (*state_load)(
                                        ngx_http_dynamo_rl_zone_t *zone,
                                        ngx_log_t *log);
};


/* the shared memory zones' tag, and the configuration's key */
extern ngx_module_t  ngx_http_dynamo_rl_module;


char *ngx_http_dynamo_rl_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_dynamo_rl_zone_reserve(ngx_conf_t *cf,
    ngx_shm_zone_t *shm_zone, ngx_uint_t n, ngx_str_t *names,
    uint32_t *keys, size_t *max_size);
uint64_t ngx_http_dynamo_rl_zone_members(ngx_http_dynamo_rl_shctx_t *sh,
    ngx_uint_t *known);
void ngx_http_dynamo_rl_zone_observe(ngx_http_dynamo_rl_shctx_t *sh,
    ngx_uint_t hist, ngx_msec_t ms);


#endif /* _NGX_HTTP_DYNAMO_RL_ZONE_H_INCLUDED_ */
