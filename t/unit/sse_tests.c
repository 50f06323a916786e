
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"
#include "tap.h"

#include <stdio.h>


/*
 * SSE terminal detection: each stream is fed whole, byte by byte, and
 * split at every position; the verdict must not depend on the split.
 */


typedef struct {
    const char  *stream;
    ngx_uint_t   done;
    ngx_uint_t   error;
    const char  *name;
} sse_case_t;


static ngx_uint_t verdict(const char *s, size_t len, size_t step,
    size_t split);


static sse_case_t  cases[] = {
    { "data: {\"id\":\"1\"}\n\ndata: [DONE]\n\n", 1, 0, "plain end" },
    { "data: {\"id\":\"1\"}\r\n\r\ndata: [DONE]\r\n\r\n", 1, 0, "CRLF" },
    { "data: {\"id\":\"1\"}\r\rdata: [DONE]\r\r", 1, 0, "CR only" },
    { "data:[DONE]\n\n", 1, 0, "no space after the colon" },
    { "data: [DONE]", 1, 0, "no final newline" },
    { "data: {\"id\":\"1\"}\n\n", 0, 0, "no [DONE]" },
    { "data: [DONE] \n\n", 0, 0, "trailing space is not [DONE]" },
    { "data:  [DONE]\n\n", 0, 0, "two spaces is not [DONE]" },
    { "data: [DONE]x\n\n", 0, 0, "[DONE]x" },
    { "data: {\"text\":\"data: [DONE]\"}\n\n", 0, 0, "[DONE] in a value" },
    { ": data: [DONE]\n\n", 0, 0, "[DONE] in a comment" },
    { "data: {\"error\":{\"message\":\"m\",\"type\":\"t\",\"code\":500}}\n\n"
      "data: [DONE]\n\n", 1, 1, "in-stream error frame" },
    { "data:{\"error\":\"x\"}\n\n", 0, 1, "error frame without space" },
    { "event: error\n: backend failed\n\n", 0, 1, "older event: error" },
    { "event: errors\n\n", 0, 0, "event: errors is not an error" },
    { "data: {\"choices\":[{\"text\":\"{\\\"error\\\"\"}]}\n\n"
      "data: [DONE]\n\n", 1, 0, "\"error\" inside a chunk's text" },
    { "data: {\"id\":\"1\",\"error\":null}\n\ndata: [DONE]\n\n", 1, 0,
      "an error member later in a chunk is not a frame" },
    { "", 0, 0, "empty stream" },
    { NULL, 0, 0, NULL }
};


/* done | error << 1, feeding "step" bytes at a time, or two parts */

static ngx_uint_t
verdict(const char *s, size_t len, size_t step, size_t split)
{
    size_t                    i, n;
    ngx_http_dynamo_rl_sse_t  sse;

    ngx_memzero(&sse, sizeof(sse));

    if (split) {
        ngx_http_dynamo_rl_sse_scan(&sse, (u_char *) s, split, 0);
        ngx_http_dynamo_rl_sse_scan(&sse, (u_char *) s + split, len - split,
                                    1);

    } else {
        for (i = 0; i < len; i += n) {
            n = ngx_min(step, len - i);
            ngx_http_dynamo_rl_sse_scan(&sse, (u_char *) s + i, n, 0);
        }

        ngx_http_dynamo_rl_sse_scan(&sse, NULL, 0, 1);
    }

    return sse.done | (sse.error << 1);
}


int
main(void)
{
    char         name[160];
    size_t       len, split;
    ngx_uint_t   want, same;
    sse_case_t  *c;

    setvbuf(stdout, NULL, _IOLBF, 0);

    for (c = cases; c->stream; c++) {
        len = ngx_strlen(c->stream);
        want = c->done | (c->error << 1);

        snprintf(name, sizeof(name), "%s: whole", c->name);
        ok(verdict(c->stream, len, len ? len : 1, 0) == want, name);

        snprintf(name, sizeof(name), "%s: byte by byte", c->name);
        ok(verdict(c->stream, len, 1, 0) == want, name);

        same = 1;

        for (split = 1; split < len; split++) {
            if (verdict(c->stream, len, 0, split) != want) {
                same = 0;
            }
        }

        snprintf(name, sizeof(name), "%s: every split", c->name);
        ok(same, name);
    }

    return done_testing();
}
