
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>


/*
 * Body scanner micro-benchmark, without nginx (issue 14, "Speed"): on the
 * same bytes, interleaved rounds of
 *
 *   (a) ngx_http_dynamo_rl_body_scan(), the body policy's one pass;
 *   (b) jansson's json_loadb(JSON_REJECT_DUPLICATES) + json_decref;
 *
 * for a 200 KB token-array prompt (a completion request with nvext), a
 * small completion request, and a chat request of 200 KB of text.  It
 * prints, per body, the medians of each round's GB/s and of the per-round
 * ratio (b) / (a); the targets: the scanner at 1 GB/s or more and at
 * least 10 times jansson on the token array.
 *
 *     body-bench            9 rounds
 *     body-bench quick      3 short rounds (a smoke run)
 */


#define BENCH_ROUNDS  31


typedef struct {
    const char  *name;
    u_char      *p;
    size_t       len;
} bench_body_t;


typedef u_char *(*bench_item_pt)(u_char *p, ngx_uint_t i);


static double now(void);
static u_char *prompt(size_t target, size_t *len, const char *head,
    bench_item_pt item, const char *tail);
static u_char *token_item(u_char *p, ngx_uint_t i);
static u_char *word_item(u_char *p, ngx_uint_t i);
static double run_scan(bench_body_t *b, ngx_uint_t n);
static double run_jansson(bench_body_t *b, ngx_uint_t n);
static int cmp_double(const void *a, const void *b);
static double median(double *v, ngx_uint_t n);


static ngx_http_dynamo_rl_body_scan_t  bs;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/*
 * a request body of about "target" bytes: the head, items until the
 * target is reached, the tail
 */

static u_char *
prompt(size_t target, size_t *len, const char *head, bench_item_pt item,
    const char *tail)
{
    u_char      *p, *s;
    ngx_uint_t   i;

    s = malloc(target + 256);
    if (s == NULL) {
        exit(1);
    }

    p = s;
    p += sprintf((char *) p, "%s", head);

    for (i = 0; (size_t) (p - s) < target; i++) {
        p = item(p, i);
    }

    p += sprintf((char *) p, "%s", tail);

    *len = p - s;

    return s;
}


/* completion_token_ids: a prompt of token ids */

static u_char *
token_item(u_char *p, ngx_uint_t i)
{
    return p + sprintf((char *) p, "%s%u", i ? "," : "",
                       (unsigned) ((i * 2654435761u) % 151936));
}


/* a chat message of words */

static u_char *
word_item(u_char *p, ngx_uint_t i)
{
    return p + sprintf((char *) p, "word%u \\n ", (unsigned) i % 1000);
}


static double
run_scan(bench_body_t *b, ngx_uint_t n)
{
    double      t;
    ngx_uint_t  i;

    t = now();

    for (i = 0; i < n; i++) {
        if (ngx_http_dynamo_rl_body_scan(b->p, b->len, &bs) != NGX_OK) {
            fprintf(stderr, "%s: refused: %s\n", b->name, bs.err);
            exit(1);
        }
    }

    return (now() - t) / n;
}


static double
run_jansson(bench_body_t *b, ngx_uint_t n)
{
    double         t;
    json_t        *j;
    ngx_uint_t     i;
    json_error_t   e;

    t = now();

    for (i = 0; i < n; i++) {
        j = json_loadb((char *) b->p, b->len, JSON_REJECT_DUPLICATES, &e);
        if (j == NULL) {
            fprintf(stderr, "%s: jansson: %s\n", b->name, e.text);
            exit(1);
        }

        json_decref(j);
    }

    return (now() - t) / n;
}


static int
cmp_double(const void *a, const void *b)
{
    double  x, y;

    x = *(const double *) a;
    y = *(const double *) b;

    return (x > y) - (x < y);
}


static double
median(double *v, ngx_uint_t n)
{
    qsort(v, n, sizeof(double), cmp_double);

    return (n & 1) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}


int
main(int argc, char **argv)
{
    int            fails;
    double         ts, tj, gbs[BENCH_ROUNDS], jgbs[BENCH_ROUNDS];
    double         ratio[BENCH_ROUNDS], budget, g, x;
    ngx_uint_t     rounds, r, k, n, nj;
    bench_body_t  *b;

    static bench_body_t  bodies[] = {
        { "token array, 200 KB", NULL, 0 },
        { "small completion", NULL, 0 },
        { "chat text, 200 KB", NULL, 0 },
    };

    rounds = 9;
    budget = 0.2;

    if (argc > 1 && strcmp(argv[1], "quick") == 0) {
        rounds = 3;
        budget = 0.02;
    }

    bodies[0].p = prompt(200 * 1024, &bodies[0].len,
                         "{\"model\":\"Qwen/Qwen3-0.6B\",\"prompt\":[",
                         token_item,
                         "],\"max_tokens\":64,\"temperature\":1.0,"
                         "\"nvext\":{\"extra_fields\":"
                         "[\"completion_token_ids\"]}}");
    bodies[1].p = (u_char *) "{\"model\":\"m\",\"prompt\":\"Say hello\","
                             "\"max_tokens\":16,\"nvext\":{\"extra_fields\":"
                             "[\"completion_token_ids\"]}}";
    bodies[1].len = strlen((char *) bodies[1].p);
    bodies[2].p = prompt(200 * 1024, &bodies[2].len,
                         "{\"model\":\"m\",\"messages\":[{\"role\":"
                         "\"user\",\"content\":\"", word_item,
                         "\"}],\"stream\":true}");

    fails = 0;

    printf("| body | bytes | scanner GB/s | jansson GB/s | jansson / scanner "
           "|\n|---|---|---|---|---|\n");

    for (k = 0; k < sizeof(bodies) / sizeof(bodies[0]); k++) {
        b = &bodies[k];

        /* iterations for about "budget" seconds of each, after a warm-up */

        ts = run_scan(b, 3);
        tj = run_jansson(b, 3);

        n = (ngx_uint_t) (budget / ts) + 1;
        nj = (ngx_uint_t) (budget / tj) + 1;

        for (r = 0; r < rounds; r++) {
            ts = run_scan(b, n);
            tj = run_jansson(b, nj);

            gbs[r] = b->len / ts / 1e9;
            jgbs[r] = b->len / tj / 1e9;
            ratio[r] = tj / ts;
        }

        g = median(gbs, rounds);
        x = median(ratio, rounds);

        printf("| %s | %zu | %.2f | %.3f | %.1f |\n", b->name, b->len, g,
               median(jgbs, rounds), x);

        if (k == 0 && (g < 1.0 || x < 10.0)) {
            fails++;
        }
    }

    printf("\ntoken array: scanner >= 1 GB/s and >= 10x jansson: %s\n",
           fails ? "NO" : "yes");

    return 0;
}
