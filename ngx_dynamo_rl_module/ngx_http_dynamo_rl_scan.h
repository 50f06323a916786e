
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_SCAN_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_SCAN_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/*
 * The request body scanner: one pass over a whole body, strict RFC 8259
 * and UTF-8, that keeps only the members of the objects the body policy
 * reads or removes members from (the top-level object, its "nvext",
 * nvext's "metadata_upload" and "agent_hints", and the objects of the
 * paths of dynamo_rl_strip_nvext).  Pure: no nginx runtime, no
 * allocation, no logging.
 */


#define NGX_HTTP_DYNAMO_RL_BODY_DEPTH    64
#define NGX_HTTP_DYNAMO_RL_BODY_MEMBERS  128   /* in place */
#define NGX_HTTP_DYNAMO_RL_BODY_MEMBERS_MAX  16384

#define NGX_HTTP_DYNAMO_RL_BODY_TOP      0
#define NGX_HTTP_DYNAMO_RL_BODY_NVEXT    1
#define NGX_HTTP_DYNAMO_RL_BODY_UPLOAD   2
#define NGX_HTTP_DYNAMO_RL_BODY_HINTS    3
#define NGX_HTTP_DYNAMO_RL_BODY_BUILTIN  4
#define NGX_HTTP_DYNAMO_RL_BODY_LEVELS   8    /* 4 for configured paths */

/* the removal rules of a tree, at most; a path has at most 4 members */
#define NGX_HTTP_DYNAMO_RL_BODY_RULES    64
#define NGX_HTTP_DYNAMO_RL_BODY_PATH     4

/* when a rule removes a member: a body policy's flags, any of them */
#define NGX_HTTP_DYNAMO_RL_CUT_ALWAYS    0x01
#define NGX_HTTP_DYNAMO_RL_CUT_ROUTING   0x02   /* routing pins stripped */
#define NGX_HTTP_DYNAMO_RL_CUT_TENANT    0x04   /* a tenant assigned */


/*
 * a level: the object that is the value of member "name" of the level
 * "level"; a rule: member "name" of the level "level" is removed when
 * the policy's flags have one of "when"
 */

typedef struct {
    char                           *name;
    uint32_t                        hash;
    u_char                          level;
    u_char                          when;
} ngx_http_dynamo_rl_body_path_t;


/* the objects the scanner keeps, and the members removed from them */

typedef struct {
    ngx_uint_t                      nlevels;
    ngx_uint_t                      nrules;
    ngx_http_dynamo_rl_body_path_t  levels[NGX_HTTP_DYNAMO_RL_BODY_LEVELS];
    ngx_http_dynamo_rl_body_path_t  rules[NGX_HTTP_DYNAMO_RL_BODY_RULES];
} ngx_http_dynamo_rl_body_tree_t;


/* a member of an object the policy reads, as byte positions in the body */

typedef struct {
    u_char                         *name;        /* the opening quote */
    u_char                         *name_end;    /* past the closing quote */
    u_char                         *value;
    u_char                         *value_end;
    uint32_t                        hash;
    unsigned                        plain:1;     /* printable ASCII, no \ */
} ngx_http_dynamo_rl_member_t;


typedef struct {
    ngx_http_dynamo_rl_member_t    *members[NGX_HTTP_DYNAMO_RL_BODY_LEVELS];
    ngx_uint_t                      n[NGX_HTTP_DYNAMO_RL_BODY_LEVELS];
    ngx_uint_t                      cap[NGX_HTTP_DYNAMO_RL_BODY_LEVELS];

    /*
     * past the members that fit in place: room from the caller's
     * allocator (none: a body with more is refused), up to
     * NGX_HTTP_DYNAMO_RL_BODY_MEMBERS_MAX, and a hash index of the names,
     * seeded by the caller
     */
    uint32_t                       *index[NGX_HTTP_DYNAMO_RL_BODY_LEVELS];
    void                         *(*alloc)(void *data, size_t size);
    void                           *alloc_data;
    uint32_t                        seed;

    /* the levels and rules: NULL for the built-in ones */
    ngx_http_dynamo_rl_body_tree_t *tree;

    /* where a level's object is, NULL when the body has none */
    ngx_http_dynamo_rl_member_t    *obj[NGX_HTTP_DYNAMO_RL_BODY_LEVELS];
    ngx_http_dynamo_rl_member_t    *nvext;
    ngx_http_dynamo_rl_member_t    *upload;

    /* room for ngx_http_dynamo_rl_body_cuts() */
    u_char                         *cut[2 * NGX_HTTP_DYNAMO_RL_BODY_MEMBERS];

    /* why a body was refused and where */
    const char                     *err;
    u_char                         *err_pos;
    unsigned                        too_deep:1;

    ngx_http_dynamo_rl_member_t     room[NGX_HTTP_DYNAMO_RL_BODY_LEVELS]
                                        [NGX_HTTP_DYNAMO_RL_BODY_MEMBERS];
} ngx_http_dynamo_rl_body_scan_t;


ngx_int_t ngx_http_dynamo_rl_body_scan(u_char *p, size_t len,
    ngx_http_dynamo_rl_body_scan_t *bs);
ngx_http_dynamo_rl_member_t *ngx_http_dynamo_rl_body_member(
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_uint_t level, char *name);
ngx_int_t ngx_http_dynamo_rl_body_name_is(ngx_http_dynamo_rl_member_t *m,
    char *name);
u_char *ngx_http_dynamo_rl_json_unescape(u_char *dst, u_char *src,
    u_char *end);
ngx_uint_t ngx_http_dynamo_rl_body_pins(ngx_http_dynamo_rl_body_scan_t *bs,
    u_char **cut);
ngx_uint_t ngx_http_dynamo_rl_body_cuts(ngx_http_dynamo_rl_body_scan_t *bs,
    ngx_uint_t when, u_char **cut);
void ngx_http_dynamo_rl_body_tree_init(ngx_http_dynamo_rl_body_tree_t *tree);
const char *ngx_http_dynamo_rl_body_tree_add(
    ngx_http_dynamo_rl_body_tree_t *tree, u_char *path, size_t len,
    ngx_uint_t when);
ngx_int_t ngx_http_dynamo_rl_upload_url_valid(u_char *p, size_t len,
    ngx_str_t *prefixes, ngx_uint_t n);


#endif /* _NGX_HTTP_DYNAMO_RL_SCAN_H_INCLUDED_ */
