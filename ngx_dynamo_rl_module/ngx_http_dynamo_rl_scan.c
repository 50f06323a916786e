
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_scan.h"


/*
 * One pass over a request body: the grammar of RFC 8259 with the whole
 * body one object, strings checked as UTF-8 (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF) and their \u escapes paired.
 * Values the policy does not read are skipped, never copied; the members
 * of the three objects it reads are kept as byte positions, and a name
 * that repeats in one of them (compared after unescaping) refuses the
 * body, as does nesting deeper than NGX_HTTP_DYNAMO_RL_BODY_DEPTH.
 */


#define NGX_HTTP_DYNAMO_RL_KIND_OTHER  NGX_HTTP_DYNAMO_RL_BODY_LEVELS
#define NGX_HTTP_DYNAMO_RL_KIND_ARRAY  (NGX_HTTP_DYNAMO_RL_BODY_LEVELS + 1)


#if (__SSE2__ && (__GNUC__ >= 5 || __clang__))
typedef u_char  ngx_http_dynamo_rl_vec16_t __attribute__((vector_size(16)));
typedef char    ngx_http_dynamo_rl_vec16s_t __attribute__((vector_size(16)));

#define ngx_http_dynamo_rl_mask16(v)                                          \
    ((uint64_t) (unsigned)                                                    \
     __builtin_ia32_pmovmskb128((ngx_http_dynamo_rl_vec16s_t) (v)))
#endif


#define NGX_HTTP_DYNAMO_RL_CLASS_WS     0x01
#define NGX_HTTP_DYNAMO_RL_CLASS_PLAIN  0x02
#define NGX_HTTP_DYNAMO_RL_CLASS_DIGIT  0x04

#define ngx_http_dynamo_rl_is_ws(c)                                           \
    (ngx_http_dynamo_rl_class[c] & NGX_HTTP_DYNAMO_RL_CLASS_WS)
#define ngx_http_dynamo_rl_is_plain(c)                                        \
    (ngx_http_dynamo_rl_class[c] & NGX_HTTP_DYNAMO_RL_CLASS_PLAIN)
#define ngx_http_dynamo_rl_is_digit(c)                                        \
    (ngx_http_dynamo_rl_class[c] & NGX_HTTP_DYNAMO_RL_CLASS_DIGIT)


#define ngx_http_dynamo_rl_skip_ws(p, end)                                    \
    while (p < end && ngx_http_dynamo_rl_is_ws(*p)) { p++; }

/* ngx_http_dynamo_rl_name_hash() of an ASCII name: length, first, last */
#define ngx_http_dynamo_rl_hash3(len, first, last)                            \
    ((uint32_t) (len) << 16 | (uint32_t) (first) << 8 | (uint32_t) (last))


static u_char *ngx_http_dynamo_rl_scan_string(u_char *p, u_char *end,
    ngx_uint_t name, const char **err);
static u_char *ngx_http_dynamo_rl_scan_utf8(u_char *p, u_char *end);
static ngx_int_t ngx_http_dynamo_rl_scan_hex4(u_char *p, u_char *end,
    uint32_t *cp);
static u_char *ngx_http_dynamo_rl_scan_number(u_char *p, u_char *end);
static u_char *ngx_http_dynamo_rl_scan_fraction(u_char *p, u_char *end);
static ngx_inline u_char *ngx_http_dynamo_rl_integers(u_char *p,
    u_char *end);
static uint32_t ngx_http_dynamo_rl_next_cp(u_char **pp);
static uint32_t ngx_http_dynamo_rl_name_hash(ngx_http_dynamo_rl_member_t *m);
static ngx_int_t ngx_http_dynamo_rl_scan_member(
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_uint_t lvl,
    ngx_http_dynamo_rl_member_t *m);
static ngx_int_t ngx_http_dynamo_rl_scan_grow(
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_uint_t lvl);
static uint32_t ngx_http_dynamo_rl_name_seeded(ngx_http_dynamo_rl_member_t *m,
    uint32_t seed);
static ngx_uint_t ngx_http_dynamo_rl_is_cut(
    ngx_http_dynamo_rl_body_tree_t *tree, ngx_uint_t lvl, ngx_uint_t when,
    ngx_http_dynamo_rl_member_t *m);
static ngx_uint_t ngx_http_dynamo_rl_level_cuts(
    ngx_http_dynamo_rl_body_scan_t *bs, ngx_uint_t lvl, ngx_uint_t when,
    u_char **cut);
static ngx_int_t ngx_http_dynamo_rl_name_eq(ngx_http_dynamo_rl_member_t *a,
    ngx_http_dynamo_rl_member_t *b);


/*
 * the classes of a byte, one table for the three: 1 white space, 2 a byte
 * that a string's fast path passes over (printable ASCII but " and \),
 * 4 a digit (a digit is plain as well); the bytes from 0x80 up are in none
 */

static u_char  ngx_http_dynamo_rl_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    3, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2
};


/*
 * the built-in levels and rules: the routing pins, routing constraints
 * and router parameters with dynamo_rl_strip_routing_headers, the cache
 * salt while a tenant is assigned, the priorities of agent_hints always
 */

#define ngx_http_dynamo_rl_rule(name, first, last, level, when)              \
    { (char *) name, ngx_http_dynamo_rl_hash3(sizeof(name) - 1, first, last), \
      NGX_HTTP_DYNAMO_RL_BODY_##level, NGX_HTTP_DYNAMO_RL_CUT_##when }

static ngx_http_dynamo_rl_body_tree_t  ngx_http_dynamo_rl_builtin = {
    NGX_HTTP_DYNAMO_RL_BODY_BUILTIN, 10,
    {
        { NULL, 0, 0, 0 },
        ngx_http_dynamo_rl_rule("nvext", 'n', 't', TOP, ALWAYS),
        ngx_http_dynamo_rl_rule("metadata_upload", 'm', 'd', NVEXT, ALWAYS),
        ngx_http_dynamo_rl_rule("agent_hints", 'a', 's', NVEXT, ALWAYS),
        { NULL, 0, 0, 0 }, { NULL, 0, 0, 0 }, { NULL, 0, 0, 0 },
        { NULL, 0, 0, 0 }
    },
    {
        ngx_http_dynamo_rl_rule("backend_instance_id", 'b', 'd', NVEXT,
                                ROUTING),
        ngx_http_dynamo_rl_rule("prefill_worker_id", 'p', 'd', NVEXT,
                                ROUTING),
        ngx_http_dynamo_rl_rule("decode_worker_id", 'd', 'd', NVEXT, ROUTING),
        ngx_http_dynamo_rl_rule("dp_rank", 'd', 'k', NVEXT, ROUTING),
        ngx_http_dynamo_rl_rule("prefill_dp_rank", 'p', 'k', NVEXT, ROUTING),
        ngx_http_dynamo_rl_rule("routing_constraints", 'r', 's', NVEXT,
                                ROUTING),
        ngx_http_dynamo_rl_rule("router", 'r', 'r', NVEXT, ROUTING),
        ngx_http_dynamo_rl_rule("cache_salt", 'c', 't', NVEXT, TENANT),
        ngx_http_dynamo_rl_rule("priority", 'p', 'y', HINTS, ALWAYS),
        ngx_http_dynamo_rl_rule("strict_priority", 's', 'y', HINTS, ALWAYS)
    }
};


ngx_int_t
ngx_http_dynamo_rl_body_scan(u_char *p, size_t len,
    ngx_http_dynamo_rl_body_scan_t *bs)
{
    u_char                           closing, *end, *q, *start;
    size_t                           n;
    ngx_uint_t                       depth, lvl, next, i, plain;
    const char                      *err, *lit;
    ngx_http_dynamo_rl_member_t     *m;
    ngx_http_dynamo_rl_body_path_t  *lv;
    ngx_http_dynamo_rl_body_tree_t  *tree;
    u_char                           kind[NGX_HTTP_DYNAMO_RL_BODY_DEPTH];

    end = p + len;
    depth = 0;
    err = NULL;
    m = NULL;

    tree = (bs->tree != NULL) ? bs->tree : &ngx_http_dynamo_rl_builtin;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_BODY_LEVELS; i++) {
        bs->members[i] = bs->room[i];
        bs->n[i] = 0;
        bs->cap[i] = NGX_HTTP_DYNAMO_RL_BODY_MEMBERS;
        bs->index[i] = NULL;
        bs->obj[i] = NULL;
    }

    bs->nvext = NULL;
    bs->upload = NULL;
    bs->err = NULL;
    bs->err_pos = NULL;
    bs->too_deep = 0;

    ngx_http_dynamo_rl_skip_ws(p, end);

    if (p == end || *p != '{') {
        err = "the body is not a JSON object";
        goto failed;
    }

    next = NGX_HTTP_DYNAMO_RL_BODY_TOP;

value:

    if (p == end) {
        err = "unexpected end of the body";
        goto failed;
    }

    if (depth && kind[depth - 1] < NGX_HTTP_DYNAMO_RL_KIND_OTHER) {
        lvl = kind[depth - 1];
        bs->members[lvl][bs->n[lvl] - 1].value = p;
    }

    switch (*p) {

    case '{':
    case '[':
        if (depth == NGX_HTTP_DYNAMO_RL_BODY_DEPTH) {
            bs->too_deep = 1;
            err = "nesting deeper than 64";
            goto failed;
        }

        if (*p == '[') {
            kind[depth++] = NGX_HTTP_DYNAMO_RL_KIND_ARRAY;
            next = NGX_HTTP_DYNAMO_RL_KIND_OTHER;
            closing = ']';

        } else {
            if (next < NGX_HTTP_DYNAMO_RL_KIND_OTHER) {
                bs->obj[next] = m;
            }

            kind[depth++] = (u_char) next;
            closing = '}';
        }

        p++;

        ngx_http_dynamo_rl_skip_ws(p, end);

        if (p < end && *p == closing) {
            p++;
            depth--;
            goto after_value;
        }

        if (closing == ']') {
            goto value;
        }

        goto name;

    case '"':
        p = ngx_http_dynamo_rl_scan_string(p + 1, end, 0, &err);
        if (p == NULL) {
            goto failed;
        }

        goto after_value;

    case 'f':
    case 'n':
    case 't':
        lit = (*p == 'f') ? "false" : (*p == 'n') ? "null" : "true";
        n = ngx_strlen(lit);

        if ((size_t) (end - p) < n || ngx_strncmp(p, lit, n) != 0) {
            goto invalid;
        }

        p += n;
        goto after_value;

    default:
        p = ngx_http_dynamo_rl_scan_number(p, end);
        if (p == NULL) {
            goto invalid;
        }

        goto after_value;
    }

after_value:

    if (depth == 0) {
        ngx_http_dynamo_rl_skip_ws(p, end);

        if (p != end) {
            err = "data after the object";
            goto failed;
        }

        bs->nvext = bs->obj[NGX_HTTP_DYNAMO_RL_BODY_NVEXT];
        bs->upload = bs->obj[NGX_HTTP_DYNAMO_RL_BODY_UPLOAD];

        return NGX_OK;
    }

    lvl = kind[depth - 1];

    if (lvl < NGX_HTTP_DYNAMO_RL_KIND_OTHER) {
        bs->members[lvl][bs->n[lvl] - 1].value_end = p;
    }

    if (lvl == NGX_HTTP_DYNAMO_RL_KIND_ARRAY) {

        /* the fast path of token arrays: numbers one after the other */

        for ( ;; ) {

            if (p < end && *p == ',' && end - p > 1
                && p[1] >= '1' && p[1] <= '9')
            {
                /* integers and commas eight bytes at a time, then bytes */

                p = ngx_http_dynamo_rl_integers(p + 1, end);

                while (p < end && ngx_http_dynamo_rl_is_digit(*p)) {
                    p++;
                }

                q = p;

                p = ngx_http_dynamo_rl_scan_fraction(p, end);
                if (p == NULL) {
                    p = q;
                    goto invalid;
                }

                continue;
            }

            ngx_http_dynamo_rl_skip_ws(p, end);

            if (p == end || *p != ',') {
                break;
            }

            p++;

            ngx_http_dynamo_rl_skip_ws(p, end);

            if (p == end
                || !(ngx_http_dynamo_rl_is_digit(*p) || *p == '-'))
            {
                goto value;
            }

            p = ngx_http_dynamo_rl_scan_number(p, end);
            if (p == NULL) {
                goto invalid;
            }
        }

        if (p == end || *p != ']') {
            err = "expected \",\" or \"]\" in an array";
            goto failed;
        }

        p++;
        depth--;
        goto after_value;
    }

    ngx_http_dynamo_rl_skip_ws(p, end);

    if (p < end && *p == ',') {
        p++;
        ngx_http_dynamo_rl_skip_ws(p, end);
        goto name;
    }

    if (p < end && *p == '}') {
        p++;
        depth--;
        goto after_value;
    }

    err = "expected \",\" or \"}\" in an object";
    goto failed;

name:

    if (p == end || *p != '"') {
        err = "expected a member name";
        goto failed;
    }

    start = p;

    /* most names are printable ASCII without escapes: their bytes are all */

    for (q = p + 1; q < end && ngx_http_dynamo_rl_is_plain(*q); q++) {
        /* void */
    }

    if (q < end && *q == '"') {
        q++;
        plain = 1;

    } else {
        q = ngx_http_dynamo_rl_scan_string(p + 1, end, 1, &err);
        if (q == NULL) {
            goto failed;
        }

        plain = 0;
    }

    lvl = kind[depth - 1];
    next = NGX_HTTP_DYNAMO_RL_KIND_OTHER;

    if (lvl < NGX_HTTP_DYNAMO_RL_KIND_OTHER) {

        if (bs->n[lvl] == bs->cap[lvl]
            && ngx_http_dynamo_rl_scan_grow(bs, lvl) != NGX_OK)
        {
            err = "too many members in an object the policy reads";
            goto failed;
        }

        m = &bs->members[lvl][bs->n[lvl]];
        m->name = start;
        m->name_end = q;
        m->value = NULL;
        m->value_end = NULL;
        m->plain = plain;
        m->hash = ngx_http_dynamo_rl_name_hash(m);

        if (ngx_http_dynamo_rl_scan_member(bs, lvl, m) != NGX_OK) {
            err = "duplicate member name";
            goto failed;
        }

        bs->n[lvl]++;

        /* the hash, of length and end bytes, rules out most names */

        for (i = 1; i < tree->nlevels; i++) {
            lv = &tree->levels[i];

            if (lv->level == lvl && m->hash == lv->hash
                && ngx_http_dynamo_rl_body_name_is(m, lv->name) == NGX_OK)
            {
                next = i;
                break;
            }
        }
    }

    p = q;

    ngx_http_dynamo_rl_skip_ws(p, end);

    if (p == end || *p != ':') {
        err = "expected \":\" after a member name";
        goto failed;
    }

    p++;

    ngx_http_dynamo_rl_skip_ws(p, end);

    goto value;

invalid:

    err = "invalid value";

failed:

    bs->err = err;
    bs->err_pos = p;

    return NGX_ERROR;
}


/* p is past the opening quote; returns past the closing one */

static u_char *
ngx_http_dynamo_rl_scan_string(u_char *p, u_char *end, ngx_uint_t name,
    const char **err)
{
    u_char    c;
    uint32_t  cp, lo;

    for ( ;; ) {

        while (p < end && ngx_http_dynamo_rl_is_plain(*p)) {
            p++;
        }

        if (p == end) {
            *err = "unterminated string";
            return NULL;
        }

        c = *p;

        if (c == '"') {
            return p + 1;
        }

        if (c == '\\') {
            if (end - p < 2) {
                *err = "unterminated string";
                return NULL;
            }

            switch (p[1]) {

            case '"':
            case '\\':
            case '/':
            case 'b':
            case 'f':
            case 'n':
            case 'r':
            case 't':
                p += 2;
                continue;

            case 'u':
                if (ngx_http_dynamo_rl_scan_hex4(p + 2, end, &cp) != NGX_OK) {
                    *err = "invalid \\u escape";
                    return NULL;
                }

                p += 6;

                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u'
                        || ngx_http_dynamo_rl_scan_hex4(p + 2, end, &lo)
                           != NGX_OK
                        || lo < 0xdc00 || lo > 0xdfff)
                    {
                        *err = "unpaired surrogate escape";
                        return NULL;
                    }

                    p += 6;

                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    *err = "unpaired surrogate escape";
                    return NULL;

                } else if (cp == 0 && name) {

                    /* a name a C string would cut short */

                    *err = "NUL in a member name";
                    return NULL;
                }

                continue;

            default:
                *err = "invalid escape";
                return NULL;
            }
        }

        if (c < 0x20) {
            *err = "control character in a string";
            return NULL;
        }

        p = ngx_http_dynamo_rl_scan_utf8(p, end);
        if (p == NULL) {
            *err = "invalid UTF-8";
            return NULL;
        }
    }
}


/* one multi-byte sequence, the well-formed table of Unicode 15, 3-7 */

static u_char *
ngx_http_dynamo_rl_scan_utf8(u_char *p, u_char *end)
{
    u_char      c, lo, hi;
    ngx_uint_t  n, i;

    c = *p;

    if (c >= 0xc2 && c <= 0xdf) {
        n = 1; lo = 0x80; hi = 0xbf;

    } else if (c == 0xe0) {
        n = 2; lo = 0xa0; hi = 0xbf;

    } else if (c == 0xed) {
        n = 2; lo = 0x80; hi = 0x9f;

    } else if (c >= 0xe1 && c <= 0xef) {
        n = 2; lo = 0x80; hi = 0xbf;

    } else if (c == 0xf0) {
        n = 3; lo = 0x90; hi = 0xbf;

    } else if (c >= 0xf1 && c <= 0xf3) {
        n = 3; lo = 0x80; hi = 0xbf;

    } else if (c == 0xf4) {
        n = 3; lo = 0x80; hi = 0x8f;

    } else {
        return NULL;
    }

    if ((size_t) (end - p) <= n) {
        return NULL;
    }

    if (p[1] < lo || p[1] > hi) {
        return NULL;
    }

    for (i = 2; i <= n; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf) {
            return NULL;
        }
    }

    return p + n + 1;
}


static ngx_int_t
ngx_http_dynamo_rl_scan_hex4(u_char *p, u_char *end, uint32_t *cp)
{
    u_char      c;
    uint32_t    v;
    ngx_uint_t  i;

    if (end - p < 4) {
        return NGX_ERROR;
    }

    v = 0;

    for (i = 0; i < 4; i++) {
        c = p[i];

        if (c >= '0' && c <= '9') {
            v = v * 16 + (c - '0');

        } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
            v = v * 16 + ((c | 0x20) - 'a' + 10);

        } else {
            return NGX_ERROR;
        }
    }

    *cp = v;

    return NGX_OK;
}


static u_char *
ngx_http_dynamo_rl_scan_number(u_char *p, u_char *end)
{
    if (p < end && *p == '-') {
        p++;
    }

    if (p == end) {
        return NULL;
    }

    if (*p == '0') {
        p++;

    } else if (*p >= '1' && *p <= '9') {
        p++;

        while (p < end && ngx_http_dynamo_rl_is_digit(*p)) {
            p++;
        }

    } else {
        return NULL;
    }

    return ngx_http_dynamo_rl_scan_fraction(p, end);
}


/* the optional fraction and exponent of a number, p past its integer */

static u_char *
ngx_http_dynamo_rl_scan_fraction(u_char *p, u_char *end)
{
    if (p < end && *p == '.') {
        p++;

        if (p == end || !ngx_http_dynamo_rl_is_digit(*p)) {
            return NULL;
        }

        while (p < end && ngx_http_dynamo_rl_is_digit(*p)) {
            p++;
        }
    }

    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;

        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }

        if (p == end || !ngx_http_dynamo_rl_is_digit(*p)) {
            return NULL;
        }

        while (p < end && ngx_http_dynamo_rl_is_digit(*p)) {
            p++;
        }
    }

    return p;
}


/*
 * p is in the digits of an integer of an array (its first digit is 1-9):
 * past every following word of eight bytes that holds only digits and
 * commas, each comma followed by 1-9; returns where such words end, in
 * the digits of an integer or at a comma after one.  A byte is a digit
 * when its high nibble is 3 and its low one is below 10 (adding 6 to
 * each low nibble alone never carries into the next byte).
 */

static ngx_inline u_char *
ngx_http_dynamo_rl_integers(u_char *p, u_char *end)
{
#if (NGX_HAVE_LITTLE_ENDIAN)
    uint64_t                     v, nd, cm, z0, t;
#if (__SSE2__ && (__GNUC__ >= 5 || __clang__))
    uint64_t                     md, mc, mz, next;
    ngx_http_dynamo_rl_vec16_t   w0, w1;

    /*
     * the same, 32 bytes at a time with SSE2 (GCC's and clang's vector
     * extensions, no intrinsics header): pmovmskb gives a bit per byte in
     * memory order, bit 32 stands for the byte after the words
     */

    while (end - p >= 33) {
        ngx_memcpy(&w0, p, 16);
        ngx_memcpy(&w1, p + 16, 16);

        md = ngx_http_dynamo_rl_mask16((w0 - (u_char) '0') <= 9)
             | ngx_http_dynamo_rl_mask16((w1 - (u_char) '0') <= 9) << 16;
        mc = ngx_http_dynamo_rl_mask16(w0 == (u_char) ',')
             | ngx_http_dynamo_rl_mask16(w1 == (u_char) ',') << 16;
        mz = ngx_http_dynamo_rl_mask16(w0 == (u_char) '0')
             | ngx_http_dynamo_rl_mask16(w1 == (u_char) '0') << 16;

        next = (uint64_t) ((u_char) (p[32] - '1') > 8) << 32;

        /* not a digit nor a comma; a comma before a comma, "0" or worse */

        if ((((md | mc) ^ 0xffffffff) | ((mc << 1) & (mc | mz | next)))
            != 0)
        {
            break;
        }

        p += 32;
    }
#endif

    while (end - p >= 9) {
        ngx_memcpy(&v, p, 8);

        t = ((v & 0xf0f0f0f0f0f0f0f0ULL) ^ 0x3030303030303030ULL)
            | (((v & 0x0f0f0f0f0f0f0f0fULL) + 0x0606060606060606ULL)
               & 0xf0f0f0f0f0f0f0f0ULL);

        /* high bits: not a digit, a comma, a "0" */

        nd = (((t & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL) | t)
             & 0x8080808080808080ULL;

        t = v ^ 0x2c2c2c2c2c2c2c2cULL;
        cm = ~((((t & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL) | t))
             & 0x8080808080808080ULL;

        t = v ^ 0x3030303030303030ULL;
        z0 = ~((((t & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL) | t))
             & 0x8080808080808080ULL;

        if (nd != cm
            || ((cm << 8) & (cm | z0))
            || ((cm >> 56) && (p[8] < '1' || p[8] > '9')))
        {
            break;
        }

        p += 8;
    }
#endif

    return p;
}


/* the next code point of string content that the scanner accepted */

static uint32_t
ngx_http_dynamo_rl_next_cp(u_char **pp)
{
    u_char    *p;
    uint32_t   cp, lo;

    p = *pp;

    if (*p == '\\') {
        switch (p[1]) {
        case 'b':
            cp = '\b';
            break;
        case 'f':
            cp = '\f';
            break;
        case 'n':
            cp = '\n';
            break;
        case 'r':
            cp = '\r';
            break;
        case 't':
            cp = '\t';
            break;
        case 'u':
            (void) ngx_http_dynamo_rl_scan_hex4(p + 2, p + 6, &cp);

            if (cp >= 0xd800 && cp <= 0xdbff) {
                (void) ngx_http_dynamo_rl_scan_hex4(p + 8, p + 12, &lo);
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                *pp = p + 12;
                return cp;
            }

            *pp = p + 6;
            return cp;
        default:
            cp = p[1];
            break;
        }

        *pp = p + 2;
        return cp;
    }

    if (*p < 0x80) {
        *pp = p + 1;
        return *p;
    }

    if (*p < 0xe0) {
        cp = ((uint32_t) (p[0] & 0x1f) << 6) | (p[1] & 0x3f);
        *pp = p + 2;

    } else if (*p < 0xf0) {
        cp = ((uint32_t) (p[0] & 0x0f) << 12)
             | ((uint32_t) (p[1] & 0x3f) << 6) | (p[2] & 0x3f);
        *pp = p + 3;

    } else {
        cp = ((uint32_t) (p[0] & 0x07) << 18)
             | ((uint32_t) (p[1] & 0x3f) << 12)
             | ((uint32_t) (p[2] & 0x3f) << 6) | (p[3] & 0x3f);
        *pp = p + 4;
    }

    return cp;
}


/*
 * the length of the unescaped name in UTF-8 with its first and last
 * bytes: no walk at all for a plain name, and an escaped spelling of the
 * same name has the same hash
 */

static uint32_t
ngx_http_dynamo_rl_name_hash(ngx_http_dynamo_rl_member_t *m)
{
    u_char    *p, *end;
    uint32_t   len, cp, first, last;

    p = m->name + 1;
    end = m->name_end - 1;

    if (p == end) {
        return 0;
    }

    if (m->plain) {
        return ((uint32_t) (end - p) << 16) | (p[0] << 8) | end[-1];
    }

    len = 0;
    first = 0;
    last = 0;

    while (p < end) {
        cp = ngx_http_dynamo_rl_next_cp(&p);

        if (cp < 0x80) {
            len += 1;
            last = cp;

            if (len == 1) {
                first = cp;
            }

            continue;
        }

        if (len == 0) {
            first = (cp < 0x800) ? 0xc0 | (cp >> 6)
                    : (cp < 0x10000) ? 0xe0 | (cp >> 12)
                    : 0xf0 | (cp >> 18);
        }

        len += (cp < 0x800) ? 2 : (cp < 0x10000) ? 3 : 4;
        last = 0x80 | (cp & 0x3f);
    }

    return (len << 16) | (first << 8) | last;
}


/*
 * a new member of a level: NGX_DECLINED when its name is taken; the first
 * members are compared one by one, past them the level's index is probed
 * and the member goes into it
 */

static ngx_int_t
ngx_http_dynamo_rl_scan_member(ngx_http_dynamo_rl_body_scan_t *bs,
    ngx_uint_t lvl, ngx_http_dynamo_rl_member_t *m)
{
    uint32_t                     *index;
    ngx_uint_t                    i, mask;
    ngx_http_dynamo_rl_member_t  *o;

    o = bs->members[lvl];
    index = bs->index[lvl];

    if (index == NULL) {
        for (i = 0; i < bs->n[lvl]; i++) {
            if (o[i].hash == m->hash
                && ngx_http_dynamo_rl_name_eq(&o[i], m) == NGX_OK)
            {
                return NGX_DECLINED;
            }
        }

        return NGX_OK;
    }

    mask = 2 * bs->cap[lvl] - 1;

    for (i = ngx_http_dynamo_rl_name_seeded(m, bs->seed) & mask;
         index[i];
         i = (i + 1) & mask)
    {
        if (o[index[i] - 1].hash == m->hash
            && ngx_http_dynamo_rl_name_eq(&o[index[i] - 1], m) == NGX_OK)
        {
            return NGX_DECLINED;
        }
    }

    index[i] = (uint32_t) (m - o) + 1;

    return NGX_OK;
}


/*
 * a level past its room: four times the room from the caller, the
 * members copied, and an index of their names at most half full
 */

static ngx_int_t
ngx_http_dynamo_rl_scan_grow(ngx_http_dynamo_rl_body_scan_t *bs,
    ngx_uint_t lvl)
{
    uint32_t                     *index;
    ngx_uint_t                    i, cap;
    ngx_http_dynamo_rl_member_t  *m, *old;

    if (bs->alloc == NULL
        || bs->cap[lvl] >= NGX_HTTP_DYNAMO_RL_BODY_MEMBERS_MAX)
    {
        return NGX_ERROR;
    }

    cap = ngx_min(4 * bs->cap[lvl], NGX_HTTP_DYNAMO_RL_BODY_MEMBERS_MAX);

    m = bs->alloc(bs->alloc_data, cap * sizeof(ngx_http_dynamo_rl_member_t));
    index = bs->alloc(bs->alloc_data, 2 * cap * sizeof(uint32_t));

    if (m == NULL || index == NULL) {
        return NGX_ERROR;
    }

    old = bs->members[lvl];

    ngx_memcpy(m, old, bs->n[lvl] * sizeof(ngx_http_dynamo_rl_member_t));
    ngx_memzero(index, 2 * cap * sizeof(uint32_t));

    /* the members whose values are the levels below */

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_BODY_LEVELS; i++) {
        if (bs->obj[i] >= old && bs->obj[i] < old + bs->n[lvl]) {
            bs->obj[i] = m + (bs->obj[i] - old);
        }
    }

    bs->members[lvl] = m;
    bs->cap[lvl] = cap;
    bs->index[lvl] = index;

    /* the names are distinct already: each goes into the index */

    for (i = 0; i < bs->n[lvl]; i++) {
        (void) ngx_http_dynamo_rl_scan_member(bs, lvl, &m[i]);
    }

    return NGX_OK;
}


/* FNV-1a of a name's code points, unescaped, with the caller's seed */

static uint32_t
ngx_http_dynamo_rl_name_seeded(ngx_http_dynamo_rl_member_t *m, uint32_t seed)
{
    u_char    *p, *end;
    uint32_t   h;

    p = m->name + 1;
    end = m->name_end - 1;
    h = 2166136261u ^ seed;

    while (p < end) {
        h ^= m->plain ? *p++ : ngx_http_dynamo_rl_next_cp(&p);
        h *= 16777619u;
    }

    return h;
}


static ngx_int_t
ngx_http_dynamo_rl_name_eq(ngx_http_dynamo_rl_member_t *a,
    ngx_http_dynamo_rl_member_t *b)
{
    u_char  *p, *q, *pe, *qe;

    p = a->name + 1;
    pe = a->name_end - 1;
    q = b->name + 1;
    qe = b->name_end - 1;

    if (a->plain && b->plain) {
        return (pe - p == qe - q && ngx_memcmp(p, q, pe - p) == 0)
               ? NGX_OK : NGX_DECLINED;
    }

    while (p < pe && q < qe) {
        if (ngx_http_dynamo_rl_next_cp(&p) != ngx_http_dynamo_rl_next_cp(&q)) {
            return NGX_DECLINED;
        }
    }

    return (p == pe && q == qe) ? NGX_OK : NGX_DECLINED;
}


/* the member name, unescaped, equals an ASCII name */

ngx_int_t
ngx_http_dynamo_rl_body_name_is(ngx_http_dynamo_rl_member_t *m, char *name)
{
    u_char  *p, *end;

    p = m->name + 1;
    end = m->name_end - 1;

    if (m->plain) {
        while (p < end && *p == (u_char) *name) {
            p++;
            name++;
        }

        return (p == end && *name == '\0') ? NGX_OK : NGX_DECLINED;
    }

    while (p < end && *name) {

        if (*p < 0x80 && *p != '\\') {
            if (*p++ != (u_char) *name++) {
                return NGX_DECLINED;
            }

            continue;
        }

        if (ngx_http_dynamo_rl_next_cp(&p) != (u_char) *name++) {
            return NGX_DECLINED;
        }
    }

    return (p == end && *name == '\0') ? NGX_OK : NGX_DECLINED;
}


ngx_http_dynamo_rl_member_t *
ngx_http_dynamo_rl_body_member(ngx_http_dynamo_rl_body_scan_t *bs,
    ngx_uint_t level, char *name)
{
    ngx_uint_t  i;

    for (i = 0; i < bs->n[level]; i++) {
        if (ngx_http_dynamo_rl_body_name_is(&bs->members[level][i], name)
            == NGX_OK)
        {
            return &bs->members[level][i];
        }
    }

    return NULL;
}


/*
 * the content of a string the scanner accepted, between src and end (the
 * quotes excluded), unescaped into dst, which needs end - src bytes
 */

u_char *
ngx_http_dynamo_rl_json_unescape(u_char *dst, u_char *src, u_char *end)
{
    uint32_t  cp;

    while (src < end) {

        if (*src != '\\') {
            *dst++ = *src++;
            continue;
        }

        cp = ngx_http_dynamo_rl_next_cp(&src);

        if (cp < 0x80) {
            *dst++ = (u_char) cp;

        } else if (cp < 0x800) {
            *dst++ = (u_char) (0xc0 | (cp >> 6));
            *dst++ = (u_char) (0x80 | (cp & 0x3f));

        } else if (cp < 0x10000) {
            *dst++ = (u_char) (0xe0 | (cp >> 12));
            *dst++ = (u_char) (0x80 | ((cp >> 6) & 0x3f));
            *dst++ = (u_char) (0x80 | (cp & 0x3f));

        } else {
            *dst++ = (u_char) (0xf0 | (cp >> 18));
            *dst++ = (u_char) (0x80 | ((cp >> 12) & 0x3f));
            *dst++ = (u_char) (0x80 | ((cp >> 6) & 0x3f));
            *dst++ = (u_char) (0x80 | (cp & 0x3f));
        }
    }

    return dst;
}


/*
 * an unescaped metadata_upload url: it starts with one of the prefixes
 * (scheme and host included), and has no "%" (nothing decodes later), no
 * backslash, no control byte and no ".." path segment
 */

ngx_int_t
ngx_http_dynamo_rl_upload_url_valid(u_char *p, size_t len,
    ngx_str_t *prefixes, ngx_uint_t n)
{
    u_char      *end, *seg;
    ngx_uint_t   i;

    end = p + len;

    for (seg = p; p < end; p++) {

        if (*p == '%' || *p == '\\' || *p < 0x20 || *p == 0x7f) {
            return NGX_DECLINED;
        }

        if (*p == '/') {
            seg = p + 1;
            continue;
        }

        /*
         * a ".." segment ends the path too where the query or the fragment
         * begins, and ";" ends it for servlet containers
         */

        if (*p == '.' && p - seg == 1 && seg[0] == '.'
            && (p + 1 == end || p[1] == '/' || p[1] == '?' || p[1] == '#'
                || p[1] == ';'))
        {
            return NGX_DECLINED;
        }
    }

    p = end - len;

    for (i = 0; i < n; i++) {
        if (prefixes[i].len <= len
            && ngx_memcmp(p, prefixes[i].data, prefixes[i].len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/*
 * the members that the rules remove under the policy's flags "when", as
 * spans [cut[2i], cut[2i + 1]) to leave out, in order: with each member
 * goes one comma and the whitespace around it, so that what remains is
 * the same objects without them, byte for byte; a member inside one
 * removed whole goes with it
 */

ngx_uint_t
ngx_http_dynamo_rl_body_cuts(ngx_http_dynamo_rl_body_scan_t *bs,
    ngx_uint_t when, u_char **cut)
{
    u_char                          *a, *b, *last;
    ngx_uint_t                       lvl, n, i, j, k;
    ngx_http_dynamo_rl_body_tree_t  *tree;

    tree = (bs->tree != NULL) ? bs->tree : &ngx_http_dynamo_rl_builtin;

    n = 0;

    for (lvl = 1; lvl < tree->nlevels; lvl++) {
        if (bs->obj[lvl] != NULL) {
            n += ngx_http_dynamo_rl_level_cuts(bs, lvl, when, &cut[2 * n]);
        }
    }

    /* a few spans, each level's in order: by their start, then nested out */

    for (i = 1; i < n; i++) {
        a = cut[2 * i];
        b = cut[2 * i + 1];

        for (j = i; j > 0 && cut[2 * (j - 1)] > a; j--) {
            cut[2 * j] = cut[2 * (j - 1)];
            cut[2 * j + 1] = cut[2 * (j - 1) + 1];
        }

        cut[2 * j] = a;
        cut[2 * j + 1] = b;
    }

    k = 0;
    last = NULL;

    for (i = 0; i < n; i++) {
        if (last != NULL && cut[2 * i] < last) {
            continue;
        }

        cut[2 * k] = cut[2 * i];
        cut[2 * k + 1] = cut[2 * i + 1];
        last = cut[2 * k + 1];
        k++;
    }

    return k;
}


/* the routing pins of nvext, and what dynamo_rl_strip_routing_headers adds */

ngx_uint_t
ngx_http_dynamo_rl_body_pins(ngx_http_dynamo_rl_body_scan_t *bs,
    u_char **cut)
{
    return ngx_http_dynamo_rl_body_cuts(bs, NGX_HTTP_DYNAMO_RL_CUT_ROUTING,
                                        cut);
}


static ngx_uint_t
ngx_http_dynamo_rl_level_cuts(ngx_http_dynamo_rl_body_scan_t *bs,
    ngx_uint_t lvl, ngx_uint_t when, u_char **cut)
{
    ngx_uint_t                       i, k, n, nm, removed;
    ngx_http_dynamo_rl_member_t     *m;
    ngx_http_dynamo_rl_body_tree_t  *tree;

    tree = (bs->tree != NULL) ? bs->tree : &ngx_http_dynamo_rl_builtin;

    m = bs->members[lvl];
    nm = bs->n[lvl];

    removed = 0;
    k = nm;

    for (i = 0; i < nm; i++) {
        if (ngx_http_dynamo_rl_is_cut(tree, lvl, when, &m[i])) {
            removed++;

        } else if (k == nm) {
            k = i;
        }
    }

    if (removed == 0) {
        return 0;
    }

    if (k == nm) {
        cut[0] = m[0].name;
        cut[1] = m[nm - 1].value_end;
        return 1;
    }

    n = 0;

    for (i = 0; i < nm; i++) {
        if (!ngx_http_dynamo_rl_is_cut(tree, lvl, when, &m[i])) {
            continue;
        }

        if (i < k) {
            cut[n++] = m[i].name;
            cut[n++] = m[i + 1].name;

        } else {
            cut[n++] = m[i - 1].value_end;
            cut[n++] = m[i].value_end;
        }
    }

    return n / 2;
}


static ngx_uint_t
ngx_http_dynamo_rl_is_cut(ngx_http_dynamo_rl_body_tree_t *tree,
    ngx_uint_t lvl, ngx_uint_t when, ngx_http_dynamo_rl_member_t *m)
{
    ngx_uint_t                       i;
    ngx_http_dynamo_rl_body_path_t  *r;

    for (i = 0; i < tree->nrules; i++) {
        r = &tree->rules[i];

        if (r->level == lvl && (r->when & when) && r->hash == m->hash
            && ngx_http_dynamo_rl_body_name_is(m, r->name) == NGX_OK)
        {
            return 1;
        }
    }

    return 0;
}


void
ngx_http_dynamo_rl_body_tree_init(ngx_http_dynamo_rl_body_tree_t *tree)
{
    *tree = ngx_http_dynamo_rl_builtin;
}


/*
 * a rule for "path", member names of [A-Za-z0-9_] joined by ".", below
 * nvext: the objects on its way become levels; NULL, or why it cannot be
 * added (the name is NUL-terminated, as configuration strings are)
 */

const char *
ngx_http_dynamo_rl_body_tree_add(ngx_http_dynamo_rl_body_tree_t *tree,
    u_char *path, size_t len, ngx_uint_t when)
{
    u_char                          *p, *end, *seg;
    uint32_t                         hash;
    ngx_uint_t                       lvl, i, depth;
    ngx_http_dynamo_rl_body_path_t  *r;

    end = path + len;
    lvl = NGX_HTTP_DYNAMO_RL_BODY_NVEXT;
    depth = 0;

    for (p = path; p < end; p++) {
        if (*p != '.' && *p != '_'
            && !(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z')
            && !(*p >= '0' && *p <= '9'))
        {
            return "is not member names of [A-Za-z0-9_] joined by \".\"";
        }
    }

    for (seg = path; /* void */ ; seg = p + 1) {

        p = ngx_strlchr(seg, end, '.');
        if (p == NULL) {
            p = end;
        }

        if (p == seg) {
            return "has an empty member name";
        }

        if (++depth > NGX_HTTP_DYNAMO_RL_BODY_PATH) {
            return "has more than 4 member names";
        }

        hash = ngx_http_dynamo_rl_hash3(p - seg, seg[0], p[-1]);

        if (p == end) {
            break;
        }

        /* an object on the way: a level, the one there is or a new one */

        for (i = 1; i < tree->nlevels; i++) {
            r = &tree->levels[i];

            if (r->level == lvl && r->hash == hash
                && ngx_strlen(r->name) == (size_t) (p - seg)
                && ngx_strncmp(r->name, seg, p - seg) == 0)
            {
                break;
            }
        }

        if (i == tree->nlevels) {
            if (i == NGX_HTTP_DYNAMO_RL_BODY_LEVELS) {
                return "names more than 4 objects beside the built-in ones";
            }

            r = &tree->levels[i];
            r->name = (char *) seg;
            r->hash = hash;
            r->level = (u_char) lvl;
            r->when = NGX_HTTP_DYNAMO_RL_CUT_ALWAYS;
            tree->nlevels++;

            /* the name ends at the ".": it is NUL-terminated */
            *p = '\0';
        }

        lvl = i;
    }

    if (tree->nrules == NGX_HTTP_DYNAMO_RL_BODY_RULES) {
        return "is past the 64 rules a location may have";
    }

    r = &tree->rules[tree->nrules++];
    r->name = (char *) seg;
    r->hash = hash;
    r->level = (u_char) lvl;
    r->when = (u_char) when;

    return NULL;
}
