
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * dynamo_rl_zone state=path: the gate and the ledger's records within
 * their TTL, kept in a file so that a new zone starts from them (a
 * restart, a binary upgrade, a reload that renames or resizes the zone).
 *
 * Every write and every read is under an flock() of the file's directory
 * and is atomic (a temporary file, fsync(), rename(), fsync() of the
 * directory).  A writer first merges a file that another instance wrote
 * since this zone last saw it, so that the file is the union of what the
 * zones of two masters (a binary upgrade) or two cycles (a reload that
 * resizes the zone) know: the gate with the highest epoch, every attempt
 * id.  Worker 0 looks at the file every 200 ms and merges such a change,
 * which is how a gate changed through one master reaches the workers of
 * the other while both run.
 *
 * Times are kept as remaining time (and ages), never as clock readings:
 * the monotonic clock of a new master has another origin, and the wall
 * clock may step between two masters; a restart can only lengthen a TTL
 * or a lease by the time nginx was down, which keeps an id refused and a
 * gate closed longer, never shorter.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_ledger.h"
#include "ngx_http_dynamo_rl_state.h"

#include <sys/file.h>


#define NGX_HTTP_DYNAMO_RL_STATE_WATCH    200
#define NGX_HTTP_DYNAMO_RL_STATE_SAVE     25      /* every 5 s when dirty */
#define NGX_HTTP_DYNAMO_RL_STATE_SYNC     5       /* every 1 s with a peer */
#define NGX_HTTP_DYNAMO_RL_STATE_PEER     60000
#define NGX_HTTP_DYNAMO_RL_STATE_RECORD   256     /* a record line, at most */
#define NGX_HTTP_DYNAMO_RL_STATE_MAX      (512 * 1024 * 1024)
#define NGX_HTTP_DYNAMO_RL_STATE_TTL      600000


typedef struct {
    u_char                         *pos;
    u_char                         *last;
    uint64_t                        now;
    uint64_t                        wall;
    ngx_uint_t                      count;
} ngx_http_dynamo_rl_state_out_t;


typedef struct {
    ngx_http_dynamo_rl_zone_t      *zone;
    uint64_t                        now;
    ngx_uint_t                      taken;
} ngx_http_dynamo_rl_inherit_t;


static ngx_uid_t ngx_http_dynamo_rl_state_user(
    ngx_http_dynamo_rl_zone_t *zone);
static char *ngx_http_dynamo_rl_state_unsafe(ngx_file_info_t *fi,
    ngx_uid_t user, ngx_uint_t dir, u_char *buf, size_t size);
static void ngx_http_dynamo_rl_state_inherit(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log);
static ngx_int_t ngx_http_dynamo_rl_state_take(void *data,
    ngx_http_dynamo_rl_node_t *lr);
static ngx_err_t ngx_http_dynamo_rl_state_lock(
    ngx_http_dynamo_rl_zone_t *zone);
static void ngx_http_dynamo_rl_state_unlock(ngx_http_dynamo_rl_zone_t *zone);
static ngx_uint_t ngx_http_dynamo_rl_state_changed(
    ngx_http_dynamo_rl_zone_t *zone);
static ngx_int_t ngx_http_dynamo_rl_state_read(
    ngx_http_dynamo_rl_zone_t *zone, ngx_uint_t init, ngx_log_t *log);
static void ngx_http_dynamo_rl_state_apply(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_state_file_t *sf, ngx_uint_t cold, ngx_log_t *log);
static void ngx_http_dynamo_rl_state_fail(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t level, ngx_err_t err, char *why, ngx_log_t *log);
static void ngx_http_dynamo_rl_state_seen(ngx_http_dynamo_rl_zone_t *zone,
    ngx_file_info_t *fi);
static ngx_int_t ngx_http_dynamo_rl_state_write(
    ngx_http_dynamo_rl_zone_t *zone, ngx_log_t *log);
static u_char *ngx_http_dynamo_rl_state_encode(
    ngx_http_dynamo_rl_zone_t *zone, u_char *p, u_char *last, uint64_t now,
    ngx_uint_t *count);
static ngx_int_t ngx_http_dynamo_rl_state_record_out(void *data,
    ngx_http_dynamo_rl_node_t *lr);
static ngx_int_t ngx_http_dynamo_rl_state_flush(
    ngx_http_dynamo_rl_zone_t *zone, u_char *buf, size_t len,
    ngx_log_t *log);
static ngx_uint_t ngx_http_dynamo_rl_state_dirty(
    ngx_http_dynamo_rl_zone_t *zone, ngx_uint_t update);
static void ngx_http_dynamo_rl_state_timer(ngx_event_t *ev);
static void ngx_http_dynamo_rl_state_save(ngx_cycle_t *cycle);


/*
 * init_zone, in every cycle, nginx -t included: whoever can write the
 * state file's directory can replace the file, and a file that is not
 * nginx's own decides the gate; so the directory belongs to the user of
 * the worker processes (who write the file) and nobody else may write
 * it, and an existing file is root's or that user's and theirs alone.
 * A missing directory is created at start (not by nginx -t), mode 0700,
 * and given to that user: nothing that exists is ever chowned or
 * chmodded, unlike ngx_add_path()
 */

ngx_int_t
ngx_http_dynamo_rl_state_check(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log)
{
    char             *why;
    u_char           *dir;
    u_char            buf[NGX_HTTP_DYNAMO_RL_GATE_REASON];
    ngx_uid_t         user;
    ngx_err_t         err;
    ngx_file_info_t   fi;

    if (zone->state.len == 0) {
        return NGX_OK;
    }

    dir = zone->state_dir.data;
    user = ngx_http_dynamo_rl_state_user(zone);

    if (ngx_file_info(dir, &fi) == NGX_FILE_ERROR) {
        err = ngx_errno;

        if (err != NGX_ENOENT) {
            ngx_log_error(NGX_LOG_EMERG, log, err,
                          ngx_file_info_n " \"%s\" failed, state file "
                          "\"%V\"", dir, &zone->state);
            return NGX_ERROR;
        }

        if (ngx_test_config) {
            return NGX_OK;
        }

        if (ngx_create_dir(dir, 0700) == NGX_FILE_ERROR
            && ngx_errno != NGX_EEXIST)
        {
            ngx_log_error(NGX_LOG_EMERG, log, ngx_errno,
                          ngx_create_dir_n " \"%s\" failed, state file "
                          "\"%V\"", dir, &zone->state);
            return NGX_ERROR;
        }

        if (ngx_link_info(dir, &fi) == NGX_FILE_ERROR) {
            ngx_log_error(NGX_LOG_EMERG, log, ngx_errno,
                          ngx_link_info_n " \"%s\" failed", dir);
            return NGX_ERROR;
        }

        if (ngx_is_dir(&fi) && fi.st_uid != user
            && (chown((char *) dir, user, -1) == -1
                || ngx_link_info(dir, &fi) == NGX_FILE_ERROR))
        {
            ngx_log_error(NGX_LOG_EMERG, log, ngx_errno,
                          "chown(\"%s\", %d) failed", dir, (int) user);
            return NGX_ERROR;
        }
    }

    why = ngx_http_dynamo_rl_state_unsafe(&fi, user, 1, buf, sizeof(buf));

    if (why != NULL) {
        ngx_log_error(NGX_LOG_EMERG, log, 0,
                      "unsafe directory \"%s\" of state file \"%V\": %s",
                      dir, &zone->state, why);
        return NGX_ERROR;
    }

    /* a file that does not check out closes the gate at start */

    if (!ngx_test_config) {
        return NGX_OK;
    }

    if (ngx_link_info(zone->state.data, &fi) == NGX_FILE_ERROR) {
        err = ngx_errno;

        if (err == NGX_ENOENT) {
            return NGX_OK;
        }

        ngx_log_error(NGX_LOG_EMERG, log, err,
                      ngx_link_info_n " \"%V\" failed", &zone->state);
        return NGX_ERROR;
    }

    why = ngx_http_dynamo_rl_state_unsafe(&fi, user, 0, buf, sizeof(buf));

    if (why != NULL) {
        ngx_log_error(NGX_LOG_EMERG, log, 0,
                      "unsafe state file \"%V\": %s", &zone->state, why);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * the user of the worker processes, who write the file: nginx's "user"
 * when the master runs as root, otherwise the user nginx runs as
 */

static ngx_uid_t
ngx_http_dynamo_rl_state_user(ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(zone->state_cycle->conf_ctx,
                                           ngx_core_module);

    if (geteuid() == 0 && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT) {
        return ccf->user;
    }

    return geteuid();
}


/*
 * NULL, or why a directory (the user's alone) or a file (root's or the
 * user's, written by its owner alone, never a link) will not do
 */

static char *
ngx_http_dynamo_rl_state_unsafe(ngx_file_info_t *fi, ngx_uid_t user,
    ngx_uint_t dir, u_char *buf, size_t size)
{
    u_char  *p;

    p = NULL;

    if (dir && !ngx_is_dir(fi)) {
        p = ngx_snprintf(buf, size - 1, "not a directory");

    } else if (!dir && ngx_is_link(fi)) {
        p = ngx_snprintf(buf, size - 1, "a symbolic link");

    } else if (!dir && !ngx_is_file(fi)) {
        p = ngx_snprintf(buf, size - 1, "not a regular file");

    } else if (fi->st_uid != user && (dir || fi->st_uid != 0)) {
        p = ngx_snprintf(buf, size - 1,
                         "owned by uid %d, not by %snginx's user (uid %d)",
                         (int) fi->st_uid, dir ? "" : "root or ",
                         (int) user);

    } else if (fi->st_mode & (S_IWGRP|S_IWOTH)) {
        p = ngx_snprintf(buf, size - 1,
                         "writable by others than its owner "
                         "(mode %ui%ui%ui%ui)",
                         (ngx_uint_t) (fi->st_mode >> 9) & 7,
                         (ngx_uint_t) (fi->st_mode >> 6) & 7,
                         (ngx_uint_t) (fi->st_mode >> 3) & 7,
                         (ngx_uint_t) fi->st_mode & 7);
    }

    if (p == NULL) {
        return NULL;
    }

    *p = '\0';

    return (char *) buf;
}


/*
 * init_zone, in the master at configuration time, before any worker of
 * this cycle accepts: a state file that cannot be read closes the gate
 * (fail closed) but does not stop nginx, so that the status and the gate
 * API stay there to look at and to open it
 */

ngx_int_t
ngx_http_dynamo_rl_state_load(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log)
{
    ngx_err_t  err;

    if (zone->state.len == 0 || ngx_test_config) {
        /* nginx -t: the file is the running nginx's business */
        return NGX_OK;
    }

    err = ngx_http_dynamo_rl_state_lock(zone);

    if (err) {
        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_CRIT, err,
                                      "its directory cannot be opened", log);
        return NGX_OK;
    }

    (void) ngx_http_dynamo_rl_state_read(zone, 1, log);

    ngx_http_dynamo_rl_state_unlock(zone);

    ngx_http_dynamo_rl_state_inherit(zone, log);

    return NGX_OK;
}


/*
 * a reload that renamed or resized the zone: the old zone is still there,
 * its worker processes still use it, and it may hold what the file does
 * not yet (the ledger is written every few seconds); its gate, if newer,
 * and every id it knows are taken at once, before any new worker accepts
 */

static void
ngx_http_dynamo_rl_state_inherit(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log)
{
    ngx_list_t                      *list;
    ngx_shm_zone_t                  *shm_zone;
    ngx_http_dynamo_rl_zone_t       *old;
    ngx_http_dynamo_rl_inherit_t     in;
    ngx_http_dynamo_rl_list_iter_t   it;

    /* during a reload, ngx_cycle is still the cycle being replaced */

    list = (ngx_list_t *) &ngx_cycle->shared_memory;

    for (shm_zone = ngx_http_dynamo_rl_list_first(list, &it);
         shm_zone != NULL;
         shm_zone = ngx_http_dynamo_rl_list_next(&it))
    {
        if (shm_zone->tag == &ngx_http_dynamo_rl_module
            && shm_zone->data != NULL
            && shm_zone->data != zone)
        {
            break;
        }
    }

    if (shm_zone == NULL) {
        return;
    }

    old = shm_zone->data;

    if (old->sh == NULL || old->sh == zone->sh) {
        return;
    }

    in.zone = zone;
    in.now = ngx_http_dynamo_rl_now();
    in.taken = 0;

    ngx_shmtx_lock(&old->shpool->mutex);
    ngx_shmtx_lock(&zone->shpool->mutex);

    if (old->sh->gate_epoch > zone->sh->gate_epoch) {
        zone->sh->gate_closed = old->sh->gate_closed;
        zone->sh->gate_epoch = old->sh->gate_epoch;
        zone->sh->gate_lease = old->sh->gate_lease;
        zone->sh->gate_expires = old->sh->gate_expires;
        zone->sh->gate_expires_wall = old->sh->gate_expires_wall;
        zone->sh->gate_changed = old->sh->gate_changed;
        zone->sh->gate_reason_len = old->sh->gate_reason_len;
        ngx_memcpy(zone->sh->gate_reason, old->sh->gate_reason,
                   old->sh->gate_reason_len);
    }

    (void) ngx_http_dynamo_rl_ledger_walk(old,
                                          ngx_http_dynamo_rl_state_take, &in);

    ngx_shmtx_unlock(&zone->shpool->mutex);
    ngx_shmtx_unlock(&old->shpool->mutex);

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "dynamo_rl zone \"%V\" took %ui attempts and the gate at "
                  "epoch %ui from zone \"%V\" of the previous configuration",
                  &zone->name, in.taken, zone->sh->gate_epoch, &old->name);
}


/*
 * one record of the old zone: an id in flight there stays in flight here,
 * owned by the old zone's process, which ends it there; the end reaches
 * this zone through the file, which that process writes as it exits
 */

static ngx_int_t
ngx_http_dynamo_rl_state_take(void *data, ngx_http_dynamo_rl_node_t *lr)
{
    ngx_http_dynamo_rl_inherit_t *in = data;

    ngx_str_t                  id;
    ngx_http_dynamo_rl_node_t  node;

    if (lr->state >= NGX_HTTP_DYNAMO_RL_SUCCEEDED && lr->expires <= in->now) {
        return NGX_OK;
    }

    node = *lr;

    id.data = lr->id;
    id.len = lr->len;

    if (ngx_http_dynamo_rl_ledger_restore(in->zone, &node, &id) == NGX_OK) {
        in->taken++;
    }

    return NGX_OK;
}


/*
 * a gate change: made under the file's lock, after what another master
 * wrote, and written before the gate API answers
 */

void
ngx_http_dynamo_rl_state_begin(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log)
{
    ngx_err_t  err;

    if (zone->state.len == 0) {
        return;
    }

    err = ngx_http_dynamo_rl_state_lock(zone);

    if (err) {
        ngx_log_error(NGX_LOG_CRIT, log, err,
                      "cannot lock the directory of state file \"%V\" "
                      "of dynamo_rl zone \"%V\"", &zone->state, &zone->name);
        return;
    }

    (void) ngx_http_dynamo_rl_state_read(zone, 0, log);
}


ngx_int_t
ngx_http_dynamo_rl_state_end(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t save, ngx_log_t *log)
{
    ngx_int_t  rc;

    if (zone->state.len == 0) {
        return NGX_OK;
    }

    rc = save ? ngx_http_dynamo_rl_state_write(zone, log) : NGX_OK;

    ngx_http_dynamo_rl_state_unlock(zone);

    return rc;
}


static ngx_err_t
ngx_http_dynamo_rl_state_lock(ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_fd_t   fd;
    ngx_err_t  err;

    fd = ngx_open_file(zone->state_dir.data, NGX_FILE_RDONLY, NGX_FILE_OPEN,
                       0);

    if (fd == NGX_INVALID_FILE) {
        return ngx_errno;
    }

    if (flock(fd, LOCK_EX) == -1) {
        err = ngx_errno;
        (void) ngx_close_file(fd);
        return err;
    }

    zone->state_fd = fd;

    return 0;
}


static void
ngx_http_dynamo_rl_state_unlock(ngx_http_dynamo_rl_zone_t *zone)
{
    if (zone->state_fd != NGX_INVALID_FILE) {
        /* closing the descriptor releases the lock */
        (void) ngx_close_file(zone->state_fd);
        zone->state_fd = NGX_INVALID_FILE;
    }
}


/* the file is not the one this zone last read or wrote */

static ngx_uint_t
ngx_http_dynamo_rl_state_changed(ngx_http_dynamo_rl_zone_t *zone)
{
    uint64_t                     ino, size, mtime;
    ngx_uint_t                   changed;
    ngx_file_info_t              fi;
    ngx_http_dynamo_rl_shctx_t  *sh;

    if (ngx_link_info(zone->state.data, &fi) == NGX_FILE_ERROR) {
        if (ngx_errno != NGX_ENOENT) {
            return 1;
        }

        ino = 0;
        size = 0;
        mtime = 0;

    } else {
        ino = (uint64_t) fi.st_ino;
        size = (uint64_t) fi.st_size;
        mtime = (uint64_t) fi.st_mtim.tv_sec * 1000000000
                + fi.st_mtim.tv_nsec;
    }

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    changed = (ino != sh->state_ino || size != sh->state_size
               || mtime != sh->state_mtime);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return changed;
}


static void
ngx_http_dynamo_rl_state_seen(ngx_http_dynamo_rl_zone_t *zone,
    ngx_file_info_t *fi)
{
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (fi == NULL) {
        sh->state_ino = 0;
        sh->state_size = 0;
        sh->state_mtime = 0;

    } else {
        sh->state_ino = (uint64_t) fi->st_ino;
        sh->state_size = (uint64_t) fi->st_size;
        sh->state_mtime = (uint64_t) fi->st_mtim.tv_sec * 1000000000
                          + fi->st_mtim.tv_nsec;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * under the file's lock: merges the file into the zone, at init always,
 * otherwise only when another writer changed it; NGX_DECLINED: no file
 */

static ngx_int_t
ngx_http_dynamo_rl_state_read(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t init, ngx_log_t *log)
{
    char                             *why;
    u_char                           *buf;
    u_char                            unsafe[NGX_HTTP_DYNAMO_RL_GATE_REASON];
    off_t                             size;
    size_t                            got;
    ssize_t                           n;
    ngx_fd_t                          fd;
    ngx_err_t                         err;
    ngx_file_info_t                   fi;
    ngx_http_dynamo_rl_state_file_t   sf;

    if (!init && !ngx_http_dynamo_rl_state_changed(zone)) {
        return NGX_OK;
    }

    /* never through a link, and a FIFO does not hang the open() */

    fd = ngx_open_file(zone->state.data,
                       NGX_FILE_RDONLY|NGX_FILE_NOFOLLOW|NGX_FILE_NONBLOCK,
                       NGX_FILE_OPEN, 0);

    if (fd == NGX_INVALID_FILE) {
        err = ngx_errno;

        if (err == NGX_ELOOP) {
            ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_ERR, 0,
                                          "a symbolic link", log);
            return NGX_ERROR;
        }

        if (err == NGX_ENOENT) {
            ngx_http_dynamo_rl_state_seen(zone, NULL);

            if (init) {
                ngx_log_error(NGX_LOG_NOTICE, log, 0,
                              "no state file \"%V\" yet, dynamo_rl zone "
                              "\"%V\" starts empty", &zone->state,
                              &zone->name);
            }

            return NGX_DECLINED;
        }

        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_CRIT, err,
                                      ngx_open_file_n " failed", log);
        return NGX_ERROR;
    }

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        err = ngx_errno;
        (void) ngx_close_file(fd);
        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_CRIT, err,
                                      ngx_fd_info_n " failed", log);
        return NGX_ERROR;
    }

    ngx_http_dynamo_rl_state_seen(zone, &fi);

    why = ngx_http_dynamo_rl_state_unsafe(&fi,
                                          ngx_http_dynamo_rl_state_user(zone),
                                          0, unsafe, sizeof(unsafe));

    if (why != NULL) {
        (void) ngx_close_file(fd);
        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_ERR, 0, why, log);
        return NGX_ERROR;
    }

    size = ngx_file_size(&fi);

    if (size > NGX_HTTP_DYNAMO_RL_STATE_MAX) {
        (void) ngx_close_file(fd);
        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_ERR, 0, "too large", log);
        return NGX_ERROR;
    }

    buf = ngx_alloc((size_t) size + 1, log);
    if (buf == NULL) {
        (void) ngx_close_file(fd);
        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_CRIT, 0,
                                      "out of memory", log);
        return NGX_ERROR;
    }

    for (got = 0; got < (size_t) size; got += n) {
        n = ngx_read_fd(fd, buf + got, (size_t) size - got);

        if (n == -1) {
            err = ngx_errno;
            ngx_free(buf);
            (void) ngx_close_file(fd);
            ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_CRIT, err,
                                          ngx_read_fd_n " failed", log);
            return NGX_ERROR;
        }

        if (n == 0) {
            break;
        }
    }

    (void) ngx_close_file(fd);

    if (ngx_http_dynamo_rl_state_parse(buf, got, &sf, &why) != NGX_OK) {
        ngx_free(buf);
        ngx_http_dynamo_rl_state_fail(zone, NGX_LOG_ERR, 0, why, log);
        return NGX_ERROR;
    }

    /*
     * a start that is neither a reload nor a binary upgrade: no process
     * that wrote the file runs any more, whatever its pid is now
     */

    ngx_http_dynamo_rl_state_apply(zone, &sf,
                                   init && !ngx_inherited
                                   && ngx_is_init_cycle(
                                          (ngx_cycle_t *) ngx_cycle),
                                   log);

    ngx_free(buf);

    return NGX_OK;
}


/*
 * the gate of the file if it is newer (every change raises the epoch,
 * and a change is made only after the file was merged), and every record
 * whose id the zone does not know
 */

static void
ngx_http_dynamo_rl_state_apply(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_state_file_t *sf, ngx_uint_t cold, ngx_log_t *log)
{
    u_char                             *pos;
    uint64_t                            now, wall, ttl;
    ngx_str_t                           id;
    ngx_uint_t                          adopted, restored, known, lost;
    ngx_uint_t                          ended;
    ngx_http_dynamo_rl_node_t           node;
    ngx_http_dynamo_rl_shctx_t         *sh;
    ngx_http_dynamo_rl_state_record_t   rec;

    sh = zone->sh;
    now = ngx_http_dynamo_rl_now();
    wall = ngx_http_dynamo_rl_wall();

    ttl = (*zone->state_ttl == NGX_CONF_UNSET_MSEC)
          ? NGX_HTTP_DYNAMO_RL_STATE_TTL : *zone->state_ttl;

    adopted = 0;
    restored = 0;
    known = 0;
    ended = 0;
    lost = 0;

    ngx_memzero(&node, sizeof(ngx_http_dynamo_rl_node_t));

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (sf->epoch > sh->gate_epoch) {
        sh->gate_closed = sf->closed;
        sh->gate_epoch = sf->epoch;
        sh->gate_lease = (ngx_msec_t) sf->lease;
        sh->gate_expires = sf->leased ? now + sf->remaining : 0;
        sh->gate_expires_wall = sf->leased ? wall + sf->remaining : 0;
        sh->gate_changed = (time_t) sf->changed;
        sh->gate_reason_len = ngx_min(sf->reason_len,
                                      NGX_HTTP_DYNAMO_RL_GATE_REASON);
        ngx_memcpy(sh->gate_reason, sf->reason, sh->gate_reason_len);

        adopted = 1;
    }

    pos = sf->records;

    while (ngx_http_dynamo_rl_state_record(&pos, sf->end, &rec) == NGX_OK) {

        if (lost) {
            lost++;
            continue;
        }

        id.data = rec.id;
        id.len = rec.len;

        node.state = (u_char) rec.state;
        node.reason = (u_char) rec.reason;
        node.status = (u_short) rec.status;
        node.stream = (u_char) rec.stream;
        node.bytes = rec.bytes;
        node.pid = (ngx_pid_t) rec.owner;

        /* wall-clock times to show, elapsed time on the monotonic clock */

        node.started = wall - ngx_min(rec.started_ago, wall);
        node.ended = rec.in_flight ? 0 : wall - ngx_min(rec.ended_ago, wall);
        node.begun = now - ngx_min(rec.started_ago, now);
        node.expires = rec.in_flight ? ttl : now + rec.remaining;

        /*
         * in flight then: it stays in flight, its owner's until the
         * owner's end of it comes through the file; with no owner (a
         * version 1 file) or an owner that is gone (a cold start, or no
         * such process), it never ends: failed
         */

        if (rec.in_flight
            && (rec.owner == 0 || cold
                || (kill(node.pid, 0) == -1 && ngx_errno == NGX_ESRCH)))
        {
            node.state = NGX_HTTP_DYNAMO_RL_FAILED;
            node.reason = rec.owner ? NGX_HTTP_DYNAMO_RL_WORKER_EXITED : 0;
            node.ended = wall;
            node.expires = now + ttl;
        }

        switch (ngx_http_dynamo_rl_ledger_restore(zone, &node, &id)) {

        case NGX_OK:
            restored++;
            break;

        case NGX_DONE:
            ended++;
            break;

        case NGX_DECLINED:
            known++;
            break;

        default:
            lost++;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "state file \"%V\" read into dynamo_rl zone \"%V\": "
                  "gate %s at epoch %ui%s, %ui attempts restored, "
                  "%ui ended, %ui known", &zone->state, &zone->name,
                  sf->closed ? "closed" : "open", sf->epoch,
                  adopted ? "" : " (not newer)", restored, ended, known);

    if (lost) {
        ngx_log_error(NGX_LOG_CRIT, log, 0,
                      "%ui attempts of state file \"%V\" do not fit%s",
                      lost, &zone->state, zone->shpool->log_ctx);
    }
}


static void
ngx_http_dynamo_rl_state_fail(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t level, ngx_err_t err, char *why, ngx_log_t *log)
{
    u_char                      *p, *last;
    u_char                       reason[NGX_HTTP_DYNAMO_RL_GATE_REASON];
    ngx_http_dynamo_rl_shctx_t  *sh;

    last = reason + sizeof(reason);

    p = ngx_snprintf(reason, sizeof(reason), "state file unreadable: %s",
                     why);

    if (err && last - p > 4) {
        p = ngx_snprintf(p, last - p, " (%d: ", err);
        p = ngx_strerror(err, p, last - p);

        if (p < last) {
            *p++ = ')';
        }
    }

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    sh->gate_closed = 1;
    sh->gate_epoch++;
    sh->gate_lease = 0;
    sh->gate_expires = 0;
    sh->gate_changed = ngx_time();
    sh->gate_reason_len = p - reason;
    ngx_memcpy(sh->gate_reason, reason, p - reason);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_error(level, log, err,
                  "state file \"%V\" is unreadable (%s), the gate is "
                  "closed in dynamo_rl zone \"%V\"", &zone->state, why,
                  &zone->name);
}


/* under the file's lock */

static ngx_int_t
ngx_http_dynamo_rl_state_write(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log)
{
    u_char      *buf, *p;
    size_t       size;
    uint64_t     now;
    ngx_int_t    rc;
    ngx_uint_t   n, count;

    n = zone->sh->records;

    for ( ;; ) {
        size = 1024 + 2 * NGX_HTTP_DYNAMO_RL_GATE_REASON
               + (n + 64) * NGX_HTTP_DYNAMO_RL_STATE_RECORD;

        buf = ngx_alloc(size, log);
        if (buf == NULL) {
            return NGX_ERROR;
        }

        now = ngx_http_dynamo_rl_now();

        ngx_shmtx_lock(&zone->shpool->mutex);

        p = ngx_http_dynamo_rl_state_encode(zone, buf, buf + size - 64, now,
                                            &count);

        n = zone->sh->records;

        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (p != NULL) {
            break;
        }

        /* more records than when the buffer was sized */

        ngx_free(buf);
        n *= 2;
    }

    p = ngx_sprintf(p, "end %ui %016xL\n", count,
                    ngx_http_dynamo_rl_state_checksum(buf, p - buf));

    rc = ngx_http_dynamo_rl_state_flush(zone, buf, p - buf, log);

    ngx_free(buf);

    if (rc == NGX_OK) {
        (void) ngx_http_dynamo_rl_state_dirty(zone, 1);
    }

    return rc;
}


/* under the mutex; NULL when the records do not fit */

static u_char *
ngx_http_dynamo_rl_state_encode(ngx_http_dynamo_rl_zone_t *zone, u_char *p,
    u_char *last, uint64_t now, ngx_uint_t *count)
{
    ngx_time_t                      *tp;
    ngx_http_dynamo_rl_shctx_t      *sh;
    ngx_http_dynamo_rl_state_out_t   out;

    sh = zone->sh;
    tp = ngx_timeofday();

    p = ngx_sprintf(p, "dynamo_rl_state %d\nwritten %uL\n",
                    NGX_HTTP_DYNAMO_RL_STATE_VERSION,
                    (uint64_t) tp->sec * 1000 + tp->msec);

    p = ngx_sprintf(p, "gate %s %ui %M ",
                    sh->gate_closed ? "closed" : "open", sh->gate_epoch,
                    sh->gate_lease);

    if (sh->gate_expires) {
        p = ngx_sprintf(p, "%uL ", sh->gate_expires > now
                                   ? sh->gate_expires - now : 0);

    } else {
        p = ngx_cpymem(p, "- ", 2);
    }

    p = ngx_sprintf(p, "%T ", sh->gate_changed);

    if (sh->gate_reason_len) {
        p = ngx_hex_dump(p, sh->gate_reason, sh->gate_reason_len);

    } else {
        *p++ = '-';
    }

    *p++ = '\n';

    out.pos = p;
    out.last = last;
    out.now = now;
    out.wall = ngx_http_dynamo_rl_wall();
    out.count = 0;

    if (ngx_http_dynamo_rl_ledger_walk(zone,
                                       ngx_http_dynamo_rl_state_record_out,
                                       &out)
        != NGX_OK)
    {
        return NULL;
    }

    *count = out.count;

    return out.pos;
}


static ngx_int_t
ngx_http_dynamo_rl_state_record_out(void *data, ngx_http_dynamo_rl_node_t *lr)
{
    ngx_http_dynamo_rl_state_out_t *out = data;

    u_char      *p;
    uint64_t     now;
    ngx_uint_t   finished;

    now = out->now;
    finished = (lr->state >= NGX_HTTP_DYNAMO_RL_SUCCEEDED);

    if (finished && lr->expires <= now) {
        /* past its TTL: the id is free again */
        return NGX_OK;
    }

    if (out->last - out->pos < NGX_HTTP_DYNAMO_RL_STATE_RECORD) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(out->pos, "a %*s %ui %ui %ui %uL %uL ",
                    (size_t) lr->len, lr->id, (ngx_uint_t) lr->state,
                    (ngx_uint_t) lr->status, (ngx_uint_t) lr->stream,
                    lr->bytes, out->wall - ngx_min(lr->started, out->wall));

    if (finished) {
        p = ngx_sprintf(p, "%uL %uL %ui\n",
                        out->wall - ngx_min(lr->ended, out->wall),
                        lr->expires - now, (ngx_uint_t) lr->reason);

    } else {
        /* in flight: its owner, which ends it */
        p = ngx_sprintf(p, "- - %P\n", lr->pid);
    }

    out->pos = p;
    out->count++;

    return NGX_OK;
}


/* a temporary file, fsync(), rename(), fsync() of the directory */

static ngx_int_t
ngx_http_dynamo_rl_state_flush(ngx_http_dynamo_rl_zone_t *zone, u_char *buf,
    size_t len, ngx_log_t *log)
{
    char             *failed;
    size_t            done;
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_err_t         err;
    ngx_core_conf_t  *ccf;
    ngx_file_info_t   fi;

    /*
     * created afresh, mode 0600, never through a link; one that is there
     * (left by a writer that died, or planted) is removed first: a link
     * itself, never what it names
     */

    fd = ngx_open_file(zone->state_temp.data,
                       NGX_FILE_WRONLY|NGX_FILE_NOFOLLOW,
                       NGX_FILE_CREATE_OR_OPEN|O_EXCL, 0600);

    if (fd == NGX_INVALID_FILE && ngx_errno == NGX_EEXIST
        && (ngx_delete_file(zone->state_temp.data) != NGX_FILE_ERROR
            || ngx_errno == NGX_ENOENT))
    {
        fd = ngx_open_file(zone->state_temp.data,
                           NGX_FILE_WRONLY|NGX_FILE_NOFOLLOW,
                           NGX_FILE_CREATE_OR_OPEN|O_EXCL, 0600);
    }

    if (fd == NGX_INVALID_FILE) {
        ngx_log_error(NGX_LOG_CRIT, log, ngx_errno,
                      ngx_open_file_n " \"%V\" failed, state of dynamo_rl "
                      "zone \"%V\" not written", &zone->state_temp,
                      &zone->name);
        return NGX_ERROR;
    }

    failed = NULL;

    /* the master writes as root: the file stays the workers' */

    ccf = (ngx_core_conf_t *) ngx_get_conf(ngx_cycle->conf_ctx,
                                           ngx_core_module);

    if (ngx_process == NGX_PROCESS_MASTER && geteuid() == 0
        && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT
        && fchown(fd, ccf->user, ccf->group) == -1)
    {
        failed = "fchown()";
    }

    for (done = 0; failed == NULL && done < len; done += n) {
        n = ngx_write_fd(fd, buf + done, len - done);

        if (n == -1) {
            failed = ngx_write_fd_n;
        }
    }

    if (failed == NULL && fsync(fd) == -1) {
        failed = "fsync()";
    }

    if (failed == NULL && ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        failed = ngx_fd_info_n;
    }

    err = ngx_errno;

    (void) ngx_close_file(fd);

    if (failed == NULL
        && ngx_rename_file(zone->state_temp.data, zone->state.data)
           == NGX_FILE_ERROR)
    {
        err = ngx_errno;
        failed = ngx_rename_file_n;
    }

    if (failed != NULL) {
        ngx_log_error(NGX_LOG_CRIT, log, err,
                      "%s of \"%V\" failed, state of dynamo_rl zone \"%V\" "
                      "not written", failed, &zone->state_temp,
                      &zone->name);

        (void) ngx_delete_file(zone->state_temp.data);

        return NGX_ERROR;
    }

    ngx_http_dynamo_rl_state_seen(zone, &fi);

    /* the rename itself is durable once the directory is */

    if (zone->state_fd != NGX_INVALID_FILE && fsync(zone->state_fd) == -1) {
        ngx_log_error(NGX_LOG_CRIT, log, ngx_errno,
                      "fsync() of \"%V\" failed", &zone->state_dir);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the ledger or the gate changed since this process last wrote them */

static ngx_uint_t
ngx_http_dynamo_rl_state_dirty(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t update)
{
    ngx_uint_t                   i, sig[5];
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;

    sig[0] = sh->records;
    sig[1] = sh->in_flight;
    sig[2] = sh->expired;
    sig[3] = sh->evictions;
    sig[4] = sh->gate_epoch;

    for (i = 0; i < 5; i++) {
        if (sig[i] != zone->state_sig[i]) {
            break;
        }
    }

    if (update) {
        ngx_memcpy(zone->state_sig, sig, sizeof(sig));
    }

    return i < 5;
}


ngx_int_t
ngx_http_dynamo_rl_state_init_process(ngx_cycle_t *cycle,
    ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_event_t  *ev;

    /*
     * every worker process: worker 0 watches and writes the file, the
     * others only once they are on their way out (see the timer)
     */

    if (zone->state.len == 0
        || (ngx_process != NGX_PROCESS_WORKER
            && ngx_process != NGX_PROCESS_SINGLE))
    {
        return NGX_OK;
    }

    /*
     * a binary upgrade (the listening sockets came from the old master):
     * the old master runs too for now, and its workers learn of the ids
     * used here only through the file
     */

    if (ngx_inherited) {
        zone->state_peer = ngx_current_msec + NGX_HTTP_DYNAMO_RL_STATE_PEER;
    }

    ev = &zone->state_event;

    ev->handler = ngx_http_dynamo_rl_state_timer;
    ev->data = zone;
    ev->log = cycle->log;
    ev->cancelable = 1;

    ngx_add_timer(ev, NGX_HTTP_DYNAMO_RL_STATE_WATCH);

    return NGX_OK;
}


/*
 * worker 0: a file that another master changed is merged within 200 ms;
 * the ledger is written every 5 s when it changed, and every second for
 * a minute after another master wrote the file (a binary upgrade, a
 * reload that resized the zone), so that ids pass between the two
 */

static void
ngx_http_dynamo_rl_state_timer(ngx_event_t *ev)
{
    ngx_err_t                   err;
    ngx_uint_t                  due, changed, every, exiting, orphans;
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = ev->data;

    if (ngx_terminate) {
        /* exit_process writes the state */
        return;
    }

    /*
     * on its way out after a reload, while its requests finish: the zone
     * of the new cycle, if the reload made one, was read from the file
     * before this process saw the reload, so the ids used since go to the
     * file at once, and then at every tick, for the new zone to merge
     */

    exiting = (ngx_exiting || ngx_quit);

    /*
     * the other worker processes, on their way out, write the ends of
     * their attempts as they come: the new zone of a reload that resized
     * the zone, or the other master, holds them in flight until then,
     * and worker 0 may have exited already
     */

    if (ngx_worker != 0 && !exiting) {
        ngx_add_timer(ev, NGX_HTTP_DYNAMO_RL_STATE_WATCH);
        return;
    }

    changed = ngx_http_dynamo_rl_state_changed(zone);

    if (changed) {
        zone->state_peer = ngx_current_msec + NGX_HTTP_DYNAMO_RL_STATE_PEER;
    }

    every = ((ngx_msec_int_t) (zone->state_peer - ngx_current_msec) > 0)
            ? NGX_HTTP_DYNAMO_RL_STATE_SYNC : NGX_HTTP_DYNAMO_RL_STATE_SAVE;

    due = (exiting || ++zone->state_ticks % every == 0)
          && ngx_http_dynamo_rl_state_dirty(zone, 0);

    /*
     * attempts adopted from another zone whose owner is gone: the file,
     * which the owner wrote as it exited, is merged first, and only those
     * that it did not end are settled
     */

    orphans = zone->sh->adopted ? ngx_http_dynamo_rl_ledger_orphans(zone, 0)
                                : 0;

    if (due || changed || orphans) {
        err = ngx_http_dynamo_rl_state_lock(zone);

        if (err) {
            ngx_log_error(NGX_LOG_CRIT, ev->log, err,
                          "cannot lock the directory of state file \"%V\" "
                          "of dynamo_rl zone \"%V\"", &zone->state,
                          &zone->name);

        } else {
            (void) ngx_http_dynamo_rl_state_read(zone, 0, ev->log);

            if (orphans && ngx_http_dynamo_rl_ledger_orphans(zone, 1)) {
                due = 1;
            }

            (void) ngx_http_dynamo_rl_state_end(zone, due, ev->log);
        }
    }

    ngx_add_timer(ev, NGX_HTTP_DYNAMO_RL_STATE_WATCH);
}


/*
 * every worker process on its way out, and the master last: whichever
 * exits last has seen every attempt finish
 */

void
ngx_http_dynamo_rl_state_exit_process(ngx_cycle_t *cycle)
{
    if (ngx_process == NGX_PROCESS_WORKER
        || ngx_process == NGX_PROCESS_SINGLE)
    {
        ngx_http_dynamo_rl_state_save(cycle);
    }
}


void
ngx_http_dynamo_rl_state_exit_master(ngx_cycle_t *cycle)
{
    ngx_http_dynamo_rl_state_save(cycle);
}


static void
ngx_http_dynamo_rl_state_save(ngx_cycle_t *cycle)
{
    ngx_err_t                        err;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    if (cycle->conf_ctx == NULL
        || cycle->conf_ctx[ngx_http_module.index] == NULL)
    {
        return;
    }

    drmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                                ngx_http_dynamo_rl_module);

    if (drmcf == NULL || drmcf->shm_zone == NULL) {
        return;
    }

    zone = drmcf->shm_zone->data;

    if (zone->state.len == 0 || zone->sh == NULL) {
        return;
    }

    err = ngx_http_dynamo_rl_state_lock(zone);

    if (err) {
        ngx_log_error(NGX_LOG_CRIT, cycle->log, err,
                      "cannot lock the directory of state file \"%V\" "
                      "of dynamo_rl zone \"%V\"", &zone->state, &zone->name);
        return;
    }

    (void) ngx_http_dynamo_rl_state_read(zone, 0, cycle->log);
    (void) ngx_http_dynamo_rl_state_end(zone, 1, cycle->log);
}
