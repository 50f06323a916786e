
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The scanner's fast path of token arrays (integers and commas a word of
 * 8 or 32 bytes at a time) against jansson's verdicts
 * (t/fuzz/body_oracle.h): arrays long enough for many words, with tokens
 * of every length, and each with every byte in turn replaced by, or
 * preceded by, or removed for, a byte a word must refuse or accept, so
 * that each lands at every offset of a word and at its last byte.
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdio.h>
#include <stdlib.h>

#include "../fuzz/body_oracle.h"


#define WORDS_MAX  1024


static size_t token_array(u_char *buf, unsigned seed, unsigned tokens);
static void check(const u_char *p, size_t len, const char *what);


static int       mismatches;
static unsigned  cases;


static const u_char  bytes[] = {
    ',', '0', '1', '9', ' ', ']', '[', '-', '.', 'e', '"', ':', '/', 0x00,
    0x80
};


static size_t
token_array(u_char *buf, unsigned seed, unsigned tokens)
{
    u_char    *p;
    unsigned   i, v;

    p = buf;
    p += sprintf((char *) p, "{\"prompt\":[");

    for (i = 0; i < tokens; i++) {
        seed = seed * 1103515245 + 12345;

        /* 1 to 7 digits, a "0" now and then */

        v = (seed >> 8) % 7;
        v = (v == 6) ? 0 : (seed >> 12) % (v == 0 ? 10 : v == 1 ? 100
                                         : v == 2 ? 1000 : v == 3 ? 100000
                                         : v == 4 ? 1000000 : 10000000);

        p += sprintf((char *) p, i ? ",%u" : "%u", v);
    }

    p += sprintf((char *) p, "],\"max_tokens\":8}");

    return p - buf;
}


static void
check(const u_char *p, size_t len, const char *what)
{
    size_t  i;

    cases++;

    if (body_oracle(p, len) != BODY_ORACLE_MISMATCH) {
        return;
    }

    mismatches++;

    if (mismatches <= 10) {
        printf("# mismatch (%s): ", what);

        for (i = 0; i < len; i++) {
            printf(p[i] >= 0x20 && p[i] < 0x7f ? "%c" : "\\x%02x", p[i]);
        }

        printf("\n");
    }
}


int
main(void)
{
    size_t    len, k, s;
    u_char    buf[WORDS_MAX], out[WORDS_MAX + 1];
    unsigned  seed;

    setvbuf(stdout, NULL, _IOLBF, 0);

    for (seed = 1; seed <= 6; seed++) {
        len = token_array(buf, seed, 40 + seed * 7);

        check(buf, len, "as generated");

        for (k = 0; k < len; k++) {
            for (s = 0; s < sizeof(bytes); s++) {
                ngx_memcpy(out, buf, len);
                out[k] = bytes[s];
                check(out, len, "replaced");

                ngx_memcpy(out, buf, k);
                out[k] = bytes[s];
                ngx_memcpy(out + k + 1, buf + k, len - k);
                check(out, len + 1, "inserted");
            }

            ngx_memcpy(out, buf, k);
            ngx_memcpy(out + k, buf + k + 1, len - k - 1);
            check(out, len - 1, "removed");
        }
    }

    printf("# %u documents\n", cases);
    printf("%sok 1 - token arrays: the scanner agrees with jansson\n",
           mismatches ? "not " : "");
    printf("1..1\n");

    return mismatches ? 1 : 0;
}
