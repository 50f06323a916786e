
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The request body scanner of ngx_http_dynamo_rl_scan.c: verdicts with
 * their reasons, the members the policy reads, the routing pins left out
 * byte for byte, unescaping and metadata_upload urls; printed as TAP.
 */


#include "ngx_http_dynamo_rl_module.h"

#include "tap.h"
#include "../fuzz/body_oracle.h"

#include <stdio.h>
#include <string.h>


typedef struct {
    const char  *body;
    const char  *err;        /* NULL: accepted */
    const char  *name;
} body_case_t;


typedef struct {
    const char  *body;
    const char  *stripped;
} pins_case_t;


typedef struct {
    const char  *url;
    ngx_int_t    rc;
} url_case_t;


/* a body, the policy's flags, the tree (0 built-in, 1 with paths), out */

typedef struct {
    const char  *body;
    ngx_uint_t   when;
    ngx_uint_t   paths;
    const char  *stripped;
} cuts_case_t;


typedef struct {
    const char  *path;
    const char  *err;
} path_case_t;


static ngx_http_dynamo_rl_body_scan_t  bs;


static size_t members(u_char *buf, const char *prefix, ngx_uint_t n,
    ngx_uint_t dup, ngx_uint_t of, const char *suffix);
static void many_members(void);
static void cuts_tests(void);


#define A  NGX_HTTP_DYNAMO_RL_CUT_ALWAYS
#define R  NGX_HTTP_DYNAMO_RL_CUT_ROUTING
#define T  NGX_HTTP_DYNAMO_RL_CUT_TENANT


static cuts_case_t  cuts[] = {

    /* the salt only with a tenant; routing only with the pins */

    { "{\"nvext\":{\"cache_salt\":\"s\"}}", A | R, 0,
      "{\"nvext\":{\"cache_salt\":\"s\"}}" },
    { "{\"nvext\":{\"cache_salt\":\"s\"}}", A | T, 0, "{\"nvext\":{}}" },
    { "{\"nvext\":{\"router\":{},\"routing_constraints\":{\"a\":[1]},"
      "\"x\":1}}", A, 0,
      "{\"nvext\":{\"router\":{},\"routing_constraints\":{\"a\":[1]},"
      "\"x\":1}}" },
    { "{\"nvext\":{\"router\":{},\"routing_constraints\":{\"a\":[1]},"
      "\"x\":1}}", A | R, 0, "{\"nvext\":{\"x\":1}}" },

    /* agent_hints: first, last, alone, the rest kept */

    { "{\"nvext\":{\"agent_hints\":{\"priority\":1, \"osl\":2}}}", A, 0,
      "{\"nvext\":{\"agent_hints\":{\"osl\":2}}}" },
    { "{\"nvext\":{\"agent_hints\":{\"osl\":2 ,\"strict_priority\":1}}}",
      A, 0, "{\"nvext\":{\"agent_hints\":{\"osl\":2}}}" },
    { "{\"nvext\":{\"agent_hints\":{ \"priority\":1 }}}", A, 0,
      "{\"nvext\":{\"agent_hints\":{  }}}" },
    { "{\"nvext\":{\"agent_hints\":{\"priority\":1}}}", 0, 0,
      "{\"nvext\":{\"agent_hints\":{\"priority\":1}}}" },
    { "{\"agent_hints\":{\"priority\":1},\"nvext\":{\"x\":{\"agent_hints\":"
      "{\"priority\":1}}}}", A | R | T, 0,
      "{\"agent_hints\":{\"priority\":1},\"nvext\":{\"x\":{\"agent_hints\":"
      "{\"priority\":1}}}}" },

    /* every level at once, escaped names, spans in order */

    { "{\"n\\u0076ext\":{\"dp_rank\":1,\"agent\\u005fhints\":{\"a\":1,"
      "\"priorit\\u0079\":2},\"cache_salt\":\"\",\"b\":[1,2]}}", A | R | T, 0,
      "{\"n\\u0076ext\":{\"agent\\u005fhints\":{\"a\":1},\"b\":[1,2]}}" },

    /* the paths: agent_hints whole (inner rules inside it), a.b.c.d */

    { "{\"nvext\":{\"x\":0,\"agent_hints\":{\"priority\":1,\"osl\":2}}}",
      A, 1, "{\"nvext\":{\"x\":0}}" },
    { "{\"nvext\":{\"agent_hints\":{\"priority\":1},\"dp_rank\":1}}",
      A | R, 1, "{\"nvext\":{}}" },
    { "{\"nvext\":{\"a\":{\"b\":{\"c\":{\"d\":1,\"e\":2},\"d\":3}}}}",
      A, 1, "{\"nvext\":{\"a\":{\"b\":{\"c\":{\"e\":2},\"d\":3}}}}" },
    { "{\"nvext\":{\"a\":{\"b\":[{\"c\":{\"d\":1}}]}}}", A, 1,
      "{\"nvext\":{\"a\":{\"b\":[{\"c\":{\"d\":1}}]}}}" },
    { "{\"a\":{\"b\":{\"c\":{\"d\":1}}}}", A, 1,
      "{\"a\":{\"b\":{\"c\":{\"d\":1}}}}" },

    { NULL, 0, 0, NULL }
};


static path_case_t  paths[] = {
    { "a", NULL },
    { "A_9.b.c.d", NULL },
    { "a.b.c.d.e", "has more than 4 member names" },
    { "", "has an empty member name" },
    { "a..b", "has an empty member name" },
    { ".a", "has an empty member name" },
    { "a.", "has an empty member name" },
    { "a-b", "is not member names of [A-Za-z0-9_] joined by \".\"" },
    { "a b", "is not member names of [A-Za-z0-9_] joined by \".\"" },
    { "a.\xc3\xa9", "is not member names of [A-Za-z0-9_] joined by \".\"" },
    { NULL, NULL }
};


static body_case_t  cases[] = {
    { "{}", NULL, "empty object" },
    { " \t\r\n{ } \n", NULL, "whitespace around" },
    { "{\"a\":[1,-2,3.5,1e9,-0.0e-1,true,false,null,\"x\",{},[]]}", NULL,
      "every kind of value" },
    { "{\"a\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"}", NULL,
      "every escape" },
    { "{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x7f\"}", NULL,
      "UTF-8 and DEL" },
    { "{\"a\":\"\\u0000\"}", NULL, "NUL escaped in a value" },
    { "{\"a\":1,\"a\":2}", "duplicate member name", "top-level duplicate" },
    { "{\"a\":1,\"\\u0061\":2}", "duplicate member name",
      "duplicate after unescaping" },
    { "{\"nvext\":{\"dp_rank\":1,\"dp\\u005frank\":2}}",
      "duplicate member name", "duplicate in nvext" },
    { "{\"nvext\":{\"metadata_upload\":{\"url\":\"a\",\"url\":\"b\"}}}",
      "duplicate member name", "duplicate in metadata_upload" },
    { "{\"nvext\":1,\"nv\\u0065xt\":{}}", "duplicate member name",
      "nvext twice, once escaped" },
    { "{\"x\":{\"a\":1,\"a\":2}}", NULL,
      "a duplicate the policy does not read" },
    { "{\"\\u0000\":1}", "NUL in a member name", "NUL in a name" },
    { "", "the body is not a JSON object", "empty body" },
    { "[]", "the body is not a JSON object", "an array" },
    { "\"x\"", "the body is not a JSON object", "a string" },
    { "{}{}", "data after the object", "two objects" },
    { "{} x", "data after the object", "trailing garbage" },
    { "{", "expected a member name", "unterminated object" },
    { "{\"a\"", "expected \":\" after a member name", "name only" },
    { "{\"a\":}", "invalid value", "no value" },
    { "{\"a\":1,}", "expected a member name", "trailing comma" },
    { "{\"a\":[1,]}", "invalid value", "trailing comma in an array" },
    { "{\"a\":[1 2]}", "expected \",\" or \"]\" in an array", "missing comma" },
    { "{\"a\":01}", "expected \",\" or \"}\" in an object", "leading zero" },
    { "{\"a\":1.}", "invalid value", "no fraction digits" },
    { "{\"a\":.5}", "invalid value", "no integer part" },
    { "{\"a\":+1}", "invalid value", "plus sign" },
    { "{\"a\":1e}", "invalid value", "empty exponent" },
    { "{\"a\":-}", "invalid value", "minus alone" },
    { "{\"a\":NaN}", "invalid value", "NaN" },
    { "{\"a\":Infinity}", "invalid value", "Infinity" },
    { "{\"a\":tru}", "invalid value", "truncated true" },
    { "{\"a\":nul}", "invalid value", "truncated null" },
    { "{'a':1}", "expected a member name", "single quotes" },
    { "{a:1}", "expected a member name", "bare name" },
    { "{\"a\":\"\t\"}", "control character in a string", "raw tab" },
    { "{\"a\":\"\\x\"}", "invalid escape", "\\x" },
    { "{\"a\":\"\\u12\"}", "invalid \\u escape", "short \\u" },
    { "{\"a\":\"\\ud800\"}", "unpaired surrogate escape", "lone high" },
    { "{\"a\":\"\\udc00\"}", "unpaired surrogate escape", "lone low" },
    { "{\"a\":\"\\ud800\\u0041\"}",
      "unpaired surrogate escape", "high then not low" },
    { "{\"a\":\"\xc0\xaf\"}", "invalid UTF-8", "overlong /" },
    { "{\"a\":\"\xe0\x80\xaf\"}", "invalid UTF-8", "overlong 3 bytes" },
    { "{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8", "UTF-8 surrogate" },
    { "{\"a\":\"\xf4\x90\x80\x80\"}", "invalid UTF-8", "above U+10FFFF" },
    { "{\"a\":\"\xf5\x80\x80\x80\"}", "invalid UTF-8", "F5" },
    { "{\"a\":\"\x80\"}", "invalid UTF-8", "lone continuation" },
    { "{\"a\":\"\xc3\"}", "invalid UTF-8", "truncated sequence" },
    { "{\"\xff\":1}", "invalid UTF-8", "invalid UTF-8 in a name" },
    { "{\"a\":\"x", "unterminated string", "unterminated string" },
    { "\xef\xbb\xbf{}", "the body is not a JSON object", "a BOM" },
    { NULL, NULL, NULL }
};


static pins_case_t  pins[] = {
    { "{\"nvext\":{\"dp_rank\":1}}", "{\"nvext\":{}}" },
    { "{\"nvext\": { \"dp_rank\" : 1 , \"a\" : 2 } }",
      "{\"nvext\": { \"a\" : 2 } }" },
    { "{\"nvext\":{\"a\":2,\"dp_rank\":1}}", "{\"nvext\":{\"a\":2}}" },
    { "{\"nvext\":{\"dp_rank\":1,\"prefill_dp_rank\":2,\"a\":3}}",
      "{\"nvext\":{\"a\":3}}" },
    { "{\"nvext\":{\"a\":1,\"backend_instance_id\":2,"
      "\"decode_worker_id\":3,\"b\":4,\"prefill_worker_id\":[5]}}",
      "{\"nvext\":{\"a\":1,\"b\":4}}" },
    { "{\"nvext\":{\"dp_rank\":{\"x\":[1]},\"backend_instance_id\":2}, "
      "\"x\":1}", "{\"nvext\":{}, \"x\":1}" },
    { "{\"nvext\":{\"d\\u0070_rank\":1,\"extra_fields\":[\"a\"]}}",
      "{\"nvext\":{\"extra_fields\":[\"a\"]}}" },
    { "{\"dp_rank\":1,\"x\":{\"dp_rank\":1}}",
      "{\"dp_rank\":1,\"x\":{\"dp_rank\":1}}" },
    { NULL, NULL }
};


static url_case_t  urls[] = {
    { "s3://bucket/rl/run1/x", NGX_OK },
    { "s3://bucket/rl/", NGX_OK },
    { "s3://bucket/rl/../secret", NGX_DECLINED },
    { "s3://bucket/rl/a/..", NGX_DECLINED },
    { "s3://bucket/rl/a..b/..c", NGX_OK },
    { "s3://bucket/rl/..?x=1", NGX_DECLINED },
    { "s3://bucket/rl/..#f", NGX_DECLINED },
    { "s3://bucket/rl/a/..?x", NGX_DECLINED },
    { "s3://bucket/rl/..;x", NGX_DECLINED },
    { "s3://bucket/rl/x?y=..", NGX_OK },
    { "s3://bucket/rl/%2e%2e/x", NGX_DECLINED },
    { "s3://bucket/rl\\..\\x", NGX_DECLINED },
    { "s3://bucket/rl/a\nb", NGX_DECLINED },
    { "s3://bucket/r", NGX_DECLINED },
    { "s3://other/rl/x", NGX_DECLINED },
    { "file:///tmp/rl/x", NGX_DECLINED },
    { "file:///var/rl/x", NGX_OK },
    { "", NGX_DECLINED },
    { NULL, 0 }
};


int
main(void)
{
    char                         name[256];
    u_char                      *cut[2 * NGX_HTTP_DYNAMO_RL_BODY_MEMBERS];
    u_char                       buf[4096], out[4096], *p, *last;
    size_t                       len;
    ngx_int_t                    rc;
    ngx_str_t                    prefixes[2];
    ngx_uint_t                   i, n;
    url_case_t                  *u;
    body_case_t                 *c;
    pins_case_t                 *pc;
    ngx_http_dynamo_rl_member_t *m;

    setvbuf(stdout, NULL, _IOLBF, 0);

    for (c = cases; c->body; c++) {
        len = strlen(c->body);
        memcpy(buf, c->body, len);

        rc = ngx_http_dynamo_rl_body_scan(buf, len, &bs);

        snprintf(name, sizeof(name), "%s: %s", c->name,
                 c->err ? c->err : "accepted");

        if (c->err == NULL) {
            ok(rc == NGX_OK, name);

        } else {
            ok(rc == NGX_ERROR && bs.err && strcmp(bs.err, c->err) == 0,
               name);
        }

        if (bs.err && (c->err == NULL || strcmp(bs.err, c->err) != 0)) {
            printf("# got \"%s\" at %d\n", bs.err,
                   (int) (bs.err_pos - buf));
        }
    }

    /* depth: 64 nested containers pass, 65 do not */

    for (n = 64; n <= 65; n++) {
        p = buf;
        *p++ = '{';
        *p++ = '"';
        *p++ = 'a';
        *p++ = '"';
        *p++ = ':';

        for (i = 1; i < n; i++) {
            *p++ = '[';
        }

        for (i = 1; i < n; i++) {
            *p++ = ']';
        }

        *p++ = '}';

        rc = ngx_http_dynamo_rl_body_scan(buf, p - buf, &bs);

        snprintf(name, sizeof(name), "depth %d %s", (int) n,
                 n == 64 ? "accepted" : "refused");
        ok(n == 64 ? rc == NGX_OK : (rc == NGX_ERROR && bs.too_deep), name);
    }

    /* too many members at a level the policy reads */

    p = buf;
    *p++ = '{';

    for (i = 0; i <= NGX_HTTP_DYNAMO_RL_BODY_MEMBERS; i++) {
        p += sprintf((char *) p, "%s\"k%d\":0", i ? "," : "", (int) i);
    }

    *p++ = '}';

    rc = ngx_http_dynamo_rl_body_scan(buf, p - buf, &bs);
    ok(rc == NGX_ERROR && strcmp(bs.err, "too many members in an object "
                                 "the policy reads") == 0,
       "129 top-level members refused");

    /* the members the policy reads */

    len = sizeof("{\"rid\":\"r\\u002d1\",\"nv\\u0065xt\":{\"metadata_upload\":"
                 "{\"url\":\"s3:\\/\\/b\\/x\"},\"a\":[1]}}") - 1;
    memcpy(buf, "{\"rid\":\"r\\u002d1\",\"nv\\u0065xt\":{\"metadata_upload\":"
                "{\"url\":\"s3:\\/\\/b\\/x\"},\"a\":[1]}}", len);

    rc = ngx_http_dynamo_rl_body_scan(buf, len, &bs);
    ok(rc == NGX_OK, "members: scanned");

    m = ngx_http_dynamo_rl_body_member(&bs, NGX_HTTP_DYNAMO_RL_BODY_TOP,
                                       "rid");
    ok(m != NULL && m->value_end - m->value == 10, "members: rid found");

    if (m) {
        last = ngx_http_dynamo_rl_json_unescape(out, m->value + 1,
                                                m->value_end - 1);
        ok(last - out == 3 && memcmp(out, "r-1", 3) == 0,
           "members: rid unescaped");
    }

    ok(bs.nvext != NULL && bs.nvext->value[0] == '{'
       && bs.n[NGX_HTTP_DYNAMO_RL_BODY_NVEXT] == 2,
       "members: escaped nvext is nvext");
    ok(bs.upload != NULL && bs.n[NGX_HTTP_DYNAMO_RL_BODY_UPLOAD] == 1,
       "members: metadata_upload");

    m = ngx_http_dynamo_rl_body_member(&bs, NGX_HTTP_DYNAMO_RL_BODY_UPLOAD,
                                       "url");

    if (m) {
        last = ngx_http_dynamo_rl_json_unescape(out, m->value + 1,
                                                m->value_end - 1);
        ok(last - out == 8 && memcmp(out, "s3://b/x", 8) == 0,
           "members: url unescaped");

    } else {
        ok(0, "members: url found");
    }

    /* routing pins: every other byte kept */

    for (pc = pins; pc->body; pc++) {
        len = strlen(pc->body);
        memcpy(buf, pc->body, len);

        rc = ngx_http_dynamo_rl_body_scan(buf, len, &bs);
        n = (rc == NGX_OK) ? ngx_http_dynamo_rl_body_pins(&bs, cut) : 0;

        p = out;
        last = buf;

        for (i = 0; i < n; i++) {
            p = ngx_cpymem(p, last, cut[2 * i] - last);
            last = cut[2 * i + 1];
        }

        p = ngx_cpymem(p, last, buf + len - last);

        snprintf(name, sizeof(name), "pins: %s", pc->body);
        ok(rc == NGX_OK && (size_t) (p - out) == strlen(pc->stripped)
           && memcmp(out, pc->stripped, p - out) == 0, name);

        if (rc == NGX_OK && memcmp(out, pc->stripped, p - out) != 0) {
            printf("# got %.*s\n", (int) (p - out), out);
        }
    }

    /* metadata_upload urls */

    ngx_str_set(&prefixes[0], "s3://bucket/rl/");
    ngx_str_set(&prefixes[1], "file:///var/rl/");

    for (u = urls; u->url; u++) {
        snprintf(name, sizeof(name), "url \"%s\" %s", u->url,
                 u->rc == NGX_OK ? "allowed" : "denied");
        ok(ngx_http_dynamo_rl_upload_url_valid((u_char *) u->url,
                                               strlen(u->url), prefixes, 2)
           == u->rc, name);
    }

    many_members();
    cuts_tests();

    return done_testing();
}


/* "{" prefix, then n members "k<i>":<i> (the i-th named by name(i)), "}" */

static size_t
members(u_char *buf, const char *prefix, ngx_uint_t n, ngx_uint_t dup,
    ngx_uint_t of, const char *suffix)
{
    u_char      *p;
    ngx_uint_t   i;

    p = (u_char *) stpcpy((char *) buf, prefix);

    for (i = 0; i < n; i++) {
        p += sprintf((char *) p, "%s\"k%u\":%u", i ? "," : "",
                     (unsigned) (i == dup ? of : i), (unsigned) i);
    }

    p = (u_char *) stpcpy((char *) p, suffix);

    return p - buf;
}


static void
many_members(void)
{
    size_t                        len;
    ngx_int_t                     rc;
    ngx_uint_t                    n;
    ngx_http_dynamo_rl_member_t  *m;
    static u_char                 big[512 * 1024];
    u_char                       *cut[2 * NGX_HTTP_DYNAMO_RL_BODY_MEMBERS];

    len = members(big, "{", 129, (ngx_uint_t) -1, 0, "}");
    ok(ngx_http_dynamo_rl_body_scan(big, len, &bs) == NGX_ERROR,
       "129 members without an allocator: refused");

    bs.alloc = body_oracle_alloc;
    bs.seed = 12345;

    len = members(big, "{", 129, (ngx_uint_t) -1, 0, "}");
    body_oracle_used = 0;
    ok(ngx_http_dynamo_rl_body_scan(big, len, &bs) == NGX_OK
       && bs.n[NGX_HTTP_DYNAMO_RL_BODY_TOP] == 129, "129 members accepted");
    ok(body_oracle(big, len) == BODY_ORACLE_SAME,
       "129 members: the verdict is jansson's");

    len = members(big, "{", NGX_HTTP_DYNAMO_RL_BODY_MEMBERS_MAX,
                  (ngx_uint_t) -1, 0, "}");
    body_oracle_used = 0;
    ok(ngx_http_dynamo_rl_body_scan(big, len, &bs) == NGX_OK,
       "16384 members accepted");

    len = members(big, "{", NGX_HTTP_DYNAMO_RL_BODY_MEMBERS_MAX + 1,
                  (ngx_uint_t) -1, 0, "}");
    body_oracle_used = 0;
    rc = ngx_http_dynamo_rl_body_scan(big, len, &bs);
    ok(rc == NGX_ERROR && bs.err
       && strcmp(bs.err, "too many members in an object the policy reads")
          == 0, "16385 members refused");

    /* duplicates past the room: of a first member, of a later one */

    for (n = 0; n < 3; n++) {
        static const ngx_uint_t  dup[][2] = {
            { 300, 5 }, { 3000, 200 }, { 129, 128 }
        };

        len = members(big, "{", 4000, dup[n][0], dup[n][1], "}");
        body_oracle_used = 0;
        rc = ngx_http_dynamo_rl_body_scan(big, len, &bs);
        ok(rc == NGX_ERROR && bs.err
           && strcmp(bs.err, "duplicate member name") == 0,
           n == 0 ? "past the room: a duplicate of member 5"
           : n == 1 ? "past the room: a duplicate of member 200"
           : "past the room: a duplicate of the last in place");
    }

    len = members(big, "{", 200, (ngx_uint_t) -1, 0,
                  ",\"\\u006b150\":1}");
    body_oracle_used = 0;
    ok(ngx_http_dynamo_rl_body_scan(big, len, &bs) == NGX_ERROR,
       "past the room: an escaped duplicate");

    /* nvext and metadata_upload found after their levels grew */

    len = members(big, "{\"nvext\":{\"metadata_upload\":{\"url\":\"u\"},",
                  300, (ngx_uint_t) -1, 0, ",\"dp_rank\":1}");
    len += members(big + len, ",", 500, (ngx_uint_t) -1, 0, "}") - 1;
    big[len - 1] = '}';
    body_oracle_used = 0;
    rc = ngx_http_dynamo_rl_body_scan(big, len, &bs);
    m = (rc == NGX_OK) ? ngx_http_dynamo_rl_body_member(&bs,
                             NGX_HTTP_DYNAMO_RL_BODY_UPLOAD, "url") : NULL;
    ok(rc == NGX_OK && bs.nvext != NULL && bs.upload != NULL
       && bs.nvext->value_end != NULL && *bs.nvext->value_end == ','
       && m != NULL && m->value_end - m->value == 3,
       "grown levels: nvext and metadata_upload where they are");

    n = (rc == NGX_OK) ? ngx_http_dynamo_rl_body_pins(&bs, cut) : 0;
    ok(n == 1 && cut[1] - cut[0] == (ssize_t) sizeof(",\"dp_rank\":1") - 1,
       "grown levels: the pin after 300 members cut");

    bs.alloc = NULL;
}


/* the rules of a tree, with and without configured paths */

static void
cuts_tests(void)
{
    char                            name[512], copy[64];
    u_char                         *cut[2 * NGX_HTTP_DYNAMO_RL_BODY_MEMBERS];
    u_char                          buf[1024], out[1024], *p, *last;
    size_t                          len;
    ngx_int_t                       rc;
    ngx_uint_t                      i, n, k;
    const char                     *err;
    cuts_case_t                    *cc;
    path_case_t                    *pc;
    ngx_http_dynamo_rl_body_tree_t  tree;

    static char  hints[] = "agent_hints";
    static char  abcd[] = "a.b.c.d";

    ngx_http_dynamo_rl_body_tree_init(&tree);

    ok(ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) hints,
                                        sizeof(hints) - 1, A) == NULL
       && ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) abcd,
                                           sizeof(abcd) - 1, A) == NULL,
       "tree: agent_hints and a.b.c.d added");

    for (cc = cuts; cc->body; cc++) {
        len = strlen(cc->body);
        memcpy(buf, cc->body, len);

        bs.tree = cc->paths ? &tree : NULL;

        rc = ngx_http_dynamo_rl_body_scan(buf, len, &bs);
        n = (rc == NGX_OK) ? ngx_http_dynamo_rl_body_cuts(&bs, cc->when, cut)
                           : 0;

        p = out;
        last = buf;

        for (i = 0; i < n; i++) {
            p = ngx_cpymem(p, last, cut[2 * i] - last);
            last = cut[2 * i + 1];
        }

        p = ngx_cpymem(p, last, buf + len - last);

        snprintf(name, sizeof(name), "cuts %lu%s: %s",
                 (unsigned long) cc->when, cc->paths ? " paths" : "",
                 cc->body);
        ok(rc == NGX_OK && (size_t) (p - out) == strlen(cc->stripped)
           && memcmp(out, cc->stripped, p - out) == 0, name);

        if (rc == NGX_OK && memcmp(out, cc->stripped, p - out) != 0) {
            printf("# got %.*s\n", (int) (p - out), out);
        }
    }

    bs.tree = NULL;

    for (pc = paths; pc->path; pc++) {
        ngx_http_dynamo_rl_body_tree_init(&tree);

        len = strlen(pc->path);
        memcpy(copy, pc->path, len + 1);

        err = ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) copy, len,
                                               A);

        snprintf(name, sizeof(name), "path \"%s\": %s", pc->path,
                 pc->err ? pc->err : "added");
        ok(pc->err ? err != NULL && strcmp(err, pc->err) == 0 : err == NULL,
           name);
    }

    /* 4 objects of paths at most; 64 rules */

    ngx_http_dynamo_rl_body_tree_init(&tree);

    memcpy(copy, "a.b.c.d", sizeof("a.b.c.d"));
    (void) ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) copy, 7, A);
    memcpy(copy + 8, "x.y", sizeof("x.y"));
    err = ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) copy + 8, 3, A);
    ok(err == NULL, "tree: the 4th object of paths");
    memcpy(copy + 12, "z.y", sizeof("z.y"));
    err = ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) copy + 12, 3, A);
    ok(err != NULL && strcmp(err, "names more than 4 objects beside the "
                             "built-in ones") == 0, "tree: a 5th refused");

    k = 0;

    for (i = tree.nrules; i < NGX_HTTP_DYNAMO_RL_BODY_RULES + 1; i++) {
        memcpy(copy + 16, "r", 2);
        err = ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) copy + 16,
                                               1, A);
        k += (err != NULL);
    }

    ok(k == 1 && tree.nrules == NGX_HTTP_DYNAMO_RL_BODY_RULES,
       "tree: 64 rules at most");
}
