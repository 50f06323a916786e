
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The body scanner's accept/reject decisions, and what its removals
 * leave, against jansson's (t/fuzz/body_oracle.h says where they differ
 * by design), over the
 * corpus of t/fuzz/corpus/fuzz_body and a suite generated here: hand
 * written documents in the manner of JSONTestSuite's y_/n_/i_ files, then
 * every prefix of each, and every one with one byte replaced by, or with
 * one inserted from, a set of bytes that matter to a JSON parser.
 */


#include "ngx_http_dynamo_rl_module.h"

#include <dirent.h>
#include <stdio.h>

#include "../fuzz/body_oracle.h"


#define BODY_DIFF_MAX  4096


static void check(const u_char *p, size_t len, const char *what);


static int       classes[7];
static int       mismatches;
static unsigned  cases;


static const char  *seeds[] = {
    "{}",
    "{\"model\":\"m\",\"prompt\":[1,22,333],\"max_tokens\":16}",
    "{\"a\":[1,-2,3.5e+1,0.0,-0,1E-2,true,false,null,\"\\u00e9\\n\"]}",
    "{\"nvext\":{\"dp_rank\":1,\"extra_fields\":[\"worker_id\"]}}",
    "{\"nvext\":{\"metadata_upload\":{\"url\":\"s3://b/x\"}}}",
    "{\"rid\":\"r1\",\"input_ids\":[1,2],\"sampling_params\":{}}",
    "{\"x\":{\"y\":{\"z\":[[[]]]}},\"s\":\"\\ud83d\\ude00\xc3\xa9\"}",
    "{\"a\":1,\"a\":2}",
    "{\"x\":{\"a\":1,\"a\":2}}",
    "{\"n\\u0076ext\":{\"dp_rank\":0,\"d\\u0070_rank\":1}}",
    "{\"a\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}",
    "{\"a\":12345678901234567890123}",
    "{\"a\":1e999}",
    "{\"\":0,\" \":1}",
    "[1,2]",
    "{\"p\":[123,4567,89,1,2345678,10,99999999,12,3,45,6789,1,23,456,78,"
    "9,10,11,12345678,1,2,3]}",
    "{\"p\":[1,23,456,7890,12345,123456,1234567,12345678,0,10,1.5,2e3,"
    "3,45,678,9012,34567]}",
    /* long enough for the word loops of token arrays (8 and 32 bytes) */
    "{\"prompt\":[7,12,345,6789,10234,987654,1234567,5,0,61,702,8003,90004,"
    "100005,11,2,33,444,5555,66666,777777,8888888,9,10,21,3,40,500,6000,"
    "70000,800000,9000000,1,0,0,2],\"max_tokens\":8}",
    /* the members the rules remove: each first, last, alone, nested */
    "{\"nvext\":{\"cache_salt\":\"s\",\"x\":1,\"router\":{\"ttft_target\":1}}}",
    "{\"nvext\":{\"agent_hints\":{\"priority\":1,\"osl\":2,"
    "\"latency_sensitivity\":0.5,\"strict_priority\":3}}}",
    "{\"nvext\":{\"routing_constraints\":{\"required_taints\":[\"a\"]}}}",
    "{\"nvext\":{\"extra\":{\"deep\":{\"a\":[1],\"b\":2}},\"dp_rank\":0}}",
    "{\"n\\u0076ext\":{\"agent\\u005fhints\":{\"pr\\u0069ority\":1}},"
    "\"cache_salt\":1}",
    "{\"nvext\":{\"agent_hints\":[{\"priority\":1}],\"x\":{\"router\":1}}}",
    "{\"p\":[3,14,159,2653,58979,323846,2643383,2,7,95,288,4197,16939,"
    "937510,5820974,9,44,592,3078,16406,286208,9986280,3,48,253,4211,70679,"
    "821480,8651328,2,30,664,7093,84460,955058,2231725,3,59,408,1284,81117,"
    "450284,1027019,3,85,211,555,9644,62294,895493,0,3,8196]}",
    NULL
};


/* the bytes a mutation puts in: structure, literals, UTF-8 edges */

static const u_char  bytes[] = {
    '{', '}', '[', ']', ',', ':', '"', '\\', '0', '1', '-', '+', '.', 'e',
    'E', 't', 'f', 'n', 'u', 'a', ' ', '\t', '\n', 0x00, 0x1f, 0x7f, 0x80,
    0xbf, 0xc0, 0xc3, 0xe0, 0xed, 0xf0, 0xf4, 0xf5, 0xff
};


static void
check(const u_char *p, size_t len, const char *what)
{
    int     c;
    size_t  i;

    cases++;

    c = body_oracle(p, len);
    classes[c]++;

    if (c == BODY_ORACLE_MISMATCH) {
        mismatches++;

        if (mismatches <= 10) {
            printf("# mismatch (%s): ", what);

            for (i = 0; i < len; i++) {
                printf(p[i] >= 0x20 && p[i] < 0x7f ? "%c" : "\\x%02x",
                       p[i]);
            }

            printf("\n");
        }
    }
}


int
main(void)
{
    int             n;
    char            path[512];
    FILE           *f;
    DIR            *dir;
    size_t          len, i, k, s;
    u_char          buf[BODY_DIFF_MAX + 1], out[BODY_DIFF_MAX + 2];
    const char    **seed;
    struct dirent  *de;

    setvbuf(stdout, NULL, _IOLBF, 0);

    n = 0;

    /* the fuzz corpus */

    dir = opendir("t/fuzz/corpus/fuzz_body");
    printf("%sok %d - the corpus is there\n", dir ? "" : "not ", ++n);

    if (dir == NULL) {
        return 1;
    }

    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.') {
            continue;
        }

        snprintf(path, sizeof(path), "t/fuzz/corpus/fuzz_body/%s",
                 de->d_name);

        f = fopen(path, "rb");
        if (f == NULL) {
            continue;
        }

        len = fread(buf, 1, BODY_DIFF_MAX, f);
        fclose(f);

        check(buf, len, de->d_name);
    }

    closedir(dir);

    /* the generated suite */

    for (seed = seeds; *seed; seed++) {
        len = strlen(*seed);
        memcpy(buf, *seed, len);

        for (k = 0; k <= len; k++) {
            check(buf, k, "prefix");
        }

        for (k = 0; k < len; k++) {
            for (s = 0; s < sizeof(bytes); s++) {
                memcpy(out, buf, len);
                out[k] = bytes[s];
                check(out, len, "replaced");

                memcpy(out, buf, k);
                out[k] = bytes[s];
                memcpy(out + k + 1, buf + k, len - k);
                check(out, len + 1, "inserted");
            }
        }

        /* every pair of adjacent bytes swapped */

        for (k = 0; k + 1 < len; k++) {
            memcpy(out, buf, len);
            i = out[k];
            out[k] = out[k + 1];
            out[k + 1] = (u_char) i;
            check(out, len, "swapped");
        }
    }

    /* nesting around the limit: jansson allows deeper */

    for (k = 60; k < 70; k++) {
        i = 0;
        buf[i++] = '{';
        buf[i++] = '"';
        buf[i++] = 'a';
        buf[i++] = '"';
        buf[i++] = ':';

        for (s = 1; s < k; s++) {
            buf[i++] = '[';
        }

        for (s = 1; s < k; s++) {
            buf[i++] = ']';
        }

        buf[i++] = '}';
        check(buf, i, "depth");
    }

    printf("# %u documents: %d same verdict, %d non-object roots, %d too "
           "deep, %d duplicates below the policy's levels, %d numbers out "
           "of jansson's range, %d raw NULs after a number or literal\n",
           cases, classes[BODY_ORACLE_SAME],
           classes[BODY_ORACLE_NOT_OBJECT], classes[BODY_ORACLE_DEEP],
           classes[BODY_ORACLE_DUP_BELOW], classes[BODY_ORACLE_RANGE],
           classes[BODY_ORACLE_RAW_NUL]);

    printf("%sok %d - removals in %u documents, each jansson's deletion\n",
           body_oracle_removed > 5000 ? "" : "not ", ++n,
           body_oracle_removed);

    printf("%sok %d - no verdict differs from jansson's (%d differ)\n",
           mismatches ? "not " : "", ++n, mismatches);
    printf("%sok %d - the suite is not trivial\n",
           cases > 20000 && classes[BODY_ORACLE_SAME] > 20000 ? "" : "not ",
           ++n);
    printf("1..%d\n", n);

    return mismatches ? 1 : 0;
}
