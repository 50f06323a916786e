
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"
#include "tap.h"

#include <stdio.h>


/*
 * The state file parser (dynamo_rl_zone state=): a file written the way
 * the module writes it reads back field by field; a change of any byte
 * and a cut at any length are refused; a file that is well formed but
 * wrong (signed again after the change) is refused with its reason.
 */


typedef struct {
    const char  *body;      /* between the version line and "end" */
    ngx_uint_t   records;
    const char  *err;       /* NULL: valid */
    const char  *name;
} state_case_t;


static size_t sign(char *buf, size_t size, const char *version,
    const char *body, ngx_uint_t records);


#define GATE  "gate closed 7 120000 95000 1767225600 73746570203132\n"
#define A1    "a run-7.step_12:attempt-3 3 200 1 5321 4000 3000 597000\n"
#define A2    "a 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b 2 200 1 12 800 - -\n"


static state_case_t  cases[] = {
    { "written 1767225600000\n" GATE A1 A2, 2, NULL, "valid" },
    { "written 1767225600000\ngate open 0 0 - 0 -\n", 0, NULL,
      "valid, open, no records" },
    { "written 1767225600000\n" GATE A1, 2, "record count mismatch",
      "count says 2, one record" },
    { "written 1767225600000\ngate half 7 0 - 0 -\n", 0, "bad gate state",
      "gate state half" },
    { "written 1767225600000\ngate closed 7 0 - 0 abc\n", 0,
      "bad gate reason", "odd reason hex" },
    { "written 1767225600000\ngate closed 7 0 - 0 4G\n", 0,
      "bad gate reason", "reason not hex" },
    { "written 1767225600000\ngate closed 07 0 - 0 -\n", 0,
      "bad gate line", "epoch with a leading zero" },
    { "written 1767225600000\ngate closed 7 0 -  0 -\n", 0,
      "bad gate line", "two spaces" },
    { "written 1767225600000\ngate closed 7 0 - 0 -", 0,
      "truncated", "gate line without its newline" },
    { "written x\n" GATE, 0, "bad written line", "written not a number" },
    { GATE, 0, "bad written line", "no written line" },
    { "written 1\n" GATE "a bad id 3 200 0 1 1 1 1\n", 1,
      "bad attempt record", "id with a space" },
    { "written 1\n" GATE "a id 9 200 0 1 1 1 1\n", 1,
      "bad attempt record", "state 9" },
    { "written 1\n" GATE "a id 3 200 0 1 1 - 1\n", 1,
      "bad attempt record", "finished without an end" },
    { "written 1\n" GATE "a id 1 0 0 1 1 - 5\n", 1,
      "bad attempt record", "in flight with a ttl" },
    { "written 1\n" GATE "a id 3 200 2 1 1 1 1\n", 1,
      "bad attempt record", "stream 2" },
    { "written 1\n" GATE "b id 3 200 0 1 1 1 1\n", 1,
      "bad attempt record", "not an attempt line" },
    { "written 1\n" GATE "a id 3 200 0 1 1 1 18446744073709551615\n", 1,
      "bad attempt record", "ttl of 2^64 - 1" },
    { NULL, 0, NULL, NULL }
};


#define A2V2  "a 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b 2 200 1 12 800 - - " \
              "4242\n"


#define A1V2  "a run-7.step_12:attempt-3 3 200 1 5321 4000 3000 597000 1\n"


static state_case_t  cases_v2[] = {
    { "written 1\n" GATE A2, 1, "bad attempt record",
      "in flight without an owner" },
    { "written 1\n" GATE A1, 1, "bad attempt record",
      "finished without a reason" },
    { "written 1\n" GATE "a id 3 200 0 1 1 1 1 4242\n", 1,
      "bad attempt record", "reason 4242" },
    { "written 1\n" GATE "a id 4 200 0 1 1 1 1 10\n", 1, NULL,
      "reason 10" },
    { "written 1\n" GATE "a id 2 200 0 1 1 - - 0\n", 1,
      "bad attempt record", "owner 0" },
    { "written 1\n" GATE "a id 2 200 0 1 1 - - 2147483648\n", 1,
      "bad attempt record", "owner of 2^31" },
    { "written 1\n" GATE "a id 2 200 0 1 1 - - 042\n", 1,
      "bad attempt record", "owner with a leading zero" },
    { "written 1\n" GATE "a id 2 200 0 1 1 - - -\n", 1,
      "bad attempt record", "owner -" },
    { "written 1\n" GATE "a id 1 0 0 1 1 - - 2147483647\n", 1, NULL,
      "owner 2^31 - 1" },
    { NULL, 0, NULL, NULL }
};


static size_t
sign(char *buf, size_t size, const char *version, const char *body,
    ngx_uint_t records)
{
    int       n;
    uint64_t  sum;

    n = snprintf(buf, size, "dynamo_rl_state %s\n%s", version, body);
    sum = ngx_http_dynamo_rl_state_checksum((u_char *) buf, n);
    n += snprintf(buf + n, size - n, "end %lu %016llx\n",
                  (unsigned long) records, (unsigned long long) sum);

    return n;
}


int
main(void)
{
    char                               *err, name[160], buf[4096];
    u_char                             *pos, copy[4096];
    size_t                              len, i;
    ngx_int_t                           rc;
    ngx_uint_t                          all;
    state_case_t                       *c;
    ngx_http_dynamo_rl_state_file_t     sf;
    ngx_http_dynamo_rl_state_record_t   rec;

    setvbuf(stdout, NULL, _IOLBF, 0);

    for (c = cases; c->body; c++) {
        len = sign(buf, sizeof(buf), "1", c->body, c->records);
        err = NULL;

        rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);

        snprintf(name, sizeof(name), "%s: %s", c->name,
                 c->err ? c->err : "parses");

        if (c->err == NULL) {
            ok(rc == NGX_OK, name);

        } else {
            ok(rc == NGX_ERROR && err && strcmp(err, c->err) == 0, name);

            if (err && strcmp(err, c->err) != 0) {
                printf("# got \"%s\"\n", err);
            }
        }
    }

    /* the valid file, field by field */

    len = sign(buf, sizeof(buf), "1", "written 1767225600000\n" GATE A1 A2,
               2);

    rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);

    ok(rc == NGX_OK && sf.written == 1767225600000ULL && sf.closed
       && sf.epoch == 7 && sf.lease == 120000 && sf.leased
       && sf.remaining == 95000 && sf.changed == 1767225600
       && sf.reason_len == 7 && ngx_memcmp(sf.reason, "step 12", 7) == 0
       && sf.nrecords == 2, "valid: gate fields");

    pos = sf.records;

    rc = ngx_http_dynamo_rl_state_record(&pos, sf.end, &rec);

    ok(rc == NGX_OK && rec.len == 23
       && ngx_memcmp(rec.id, "run-7.step_12:attempt-3", 23) == 0
       && rec.state == 3 && rec.status == 200 && rec.stream == 1
       && rec.bytes == 5321 && rec.started_ago == 4000
       && rec.ended_ago == 3000 && rec.remaining == 597000
       && !rec.in_flight, "valid: a finished record");

    rc = ngx_http_dynamo_rl_state_record(&pos, sf.end, &rec);

    ok(rc == NGX_OK && rec.len == 36 && rec.state == 2 && rec.in_flight,
       "valid: a record in flight");

    ok(ngx_http_dynamo_rl_state_record(&pos, sf.end, &rec) == NGX_DONE,
       "valid: two records");

    /* a lease-less gate: "-" */

    len = sign(buf, sizeof(buf), "1",
               "written 1\ngate closed 1 0 - 5 -\n", 0);

    rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);

    ok(rc == NGX_OK && !sf.leased && sf.remaining == 0 && sf.reason_len == 0,
       "no lease, no reason");

    ok(sf.version == 1 && rec.owner == 0, "version 1: no owner");

    /* version 2: a record in flight names its owner, a finished one not */

    len = sign(buf, sizeof(buf), "2",
               "written 1767225600000\n" GATE A1V2 A2V2, 2);

    rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);

    ok(rc == NGX_OK && sf.version == 2, "version 2: parses");

    pos = sf.records;

    rc = ngx_http_dynamo_rl_state_record(&pos, sf.end, &rec);

    ok(rc == NGX_OK && !rec.in_flight && rec.owner == 0
       && rec.remaining == 597000 && rec.reason == 1,
       "version 2: a finished record, reason 1");

    rc = ngx_http_dynamo_rl_state_record(&pos, sf.end, &rec);

    ok(rc == NGX_OK && rec.in_flight && rec.state == 2 && rec.owner == 4242,
       "version 2: a record in flight, owner 4242");

    for (c = cases_v2; c->body; c++) {
        len = sign(buf, sizeof(buf), "2", c->body, c->records);
        err = NULL;

        rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);

        snprintf(name, sizeof(name), "version 2, %s: %s", c->name,
                 c->err ? c->err : "parses");

        if (c->err == NULL) {
            ok(rc == NGX_OK, name);

        } else {
            ok(rc == NGX_ERROR && err && strcmp(err, c->err) == 0, name);
        }
    }

    /* versions */

    len = sign(buf, sizeof(buf), "3", "written 1\n" GATE, 0);
    rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);
    ok(rc == NGX_ERROR && strcmp(err, "unsupported version") == 0,
       "version 3: unsupported version");

    len = sign(buf, sizeof(buf), "01", "written 1\n" GATE, 0);
    rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);
    ok(rc == NGX_ERROR && strcmp(err, "bad version line") == 0,
       "version 01: bad version line");

    rc = ngx_http_dynamo_rl_state_parse((u_char *) "", 0, &sf, &err);
    ok(rc == NGX_ERROR && strcmp(err, "empty") == 0, "empty");

    rc = ngx_http_dynamo_rl_state_parse((u_char *) "{}\n", 3, &sf, &err);
    ok(rc == NGX_ERROR && strcmp(err, "not a state file") == 0,
       "JSON: not a state file");

    /* a reason of 128 bytes is the most the gate holds */

    {
        char  body[1024], *p;

        p = body + snprintf(body, sizeof(body),
                            "written 1\ngate closed 1 0 - 5 ");

        for (i = 0; i < 129; i++) {
            p += snprintf(p, body + sizeof(body) - p, "41");
        }

        snprintf(p, body + sizeof(body) - p, "\n");

        len = sign(buf, sizeof(buf), "1", body, 0);
        rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);
        ok(rc == NGX_ERROR && strcmp(err, "bad gate reason") == 0,
           "reason of 129 bytes: bad gate reason");

        p -= 2;
        snprintf(p, body + sizeof(body) - p, "\n");

        len = sign(buf, sizeof(buf), "1", body, 0);
        rc = ngx_http_dynamo_rl_state_parse((u_char *) buf, len, &sf, &err);
        ok(rc == NGX_OK && sf.reason_len == 128, "reason of 128 bytes");
    }

    /* any byte changed, any cut: refused */

    len = sign(buf, sizeof(buf), "1", "written 1767225600000\n" GATE A1 A2,
               2);

    all = 1;

    for (i = 0; i < len; i++) {
        ngx_memcpy(copy, buf, len);
        copy[i] ^= 0x01;

        if (ngx_http_dynamo_rl_state_parse(copy, len, &sf, &err) != NGX_ERROR)
        {
            printf("# byte %lu changed: accepted\n", (unsigned long) i);
            all = 0;
        }
    }

    ok(all, "every byte changed: refused");

    all = 1;

    for (i = 0; i < len; i++) {
        ngx_memcpy(copy, buf, len);

        if (ngx_http_dynamo_rl_state_parse(copy, i, &sf, &err) != NGX_ERROR) {
            printf("# cut at %lu: accepted\n", (unsigned long) i);
            all = 0;
        }
    }

    ok(all, "every cut: refused");

    return done_testing();
}
