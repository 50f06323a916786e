
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
    ngx_uint_t   error;     /* 2: an error that is an abort */
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

    /* an error member however spaced, ordered or split (issue 29) */
    { "data: { \"error\": {\"message\":\"m\"}}\n\ndata: [DONE]\n\n", 1, 1,
      "error member after a space" },
    { "data:\t{\ndata:\t\"error\"\t:\t\"x\"}\n\n", 0, 1,
      "error member after tabs" },
    { "data: {\"id\":\"c-1\",\"object\":\"chunk\",\"error\":"
      "{\"message\":\"m\",\"code\":500}}\n\ndata: [DONE]\n\n", 1, 1,
      "error member after others" },
    { "data: {\"id\":\"c-1\",\n"
      "data: \"error\": {\"message\": \"m\"}}\n\ndata: [DONE]\n\n", 1, 1,
      "error member on a second data line" },
    { "data: {\"id\":\"c-1\",\"err\n"
      "data: or\":1}\n\n", 0, 0,
      "a name split by a data line is another name" },
    { "data: {\"choices\":[{\"error\":\"x\"}],\"e\":{\"error\":1}}\n\n"
      "data: [DONE]\n\n", 1, 0, "error members below the top level" },
    { "data: {\"id\":\"1\"}\n\ndata: {\"error\":{}}\n\ndata: [DONE]\n\n",
      1, 1, "error in a later event" },
    { "data: [\"error\"]\n\ndata: \"error\"\n\n", 0, 0,
      "data that is not an object" },

    /* /v1/responses */
    { "event: response.failed\ndata: {\"type\":\"response.failed\"}\n\n",
      0, 1, "response.failed" },
    { "data: {\"response\":{\"status\":\"failed\"},"
      "\"type\" : \"response.failed\"}\n\n", 0, 1,
      "response.failed by its type alone" },
    { "event: response.failed\n\n", 0, 1, "event: response.failed" },
    { "data: {\"type\":\"error\",\"code\":\"c\"}\n\n", 0, 1,
      "an event of type error" },
    { "data: {\"type\":\"response.completed\",\"response\":"
      "{\"type\":\"error\"}}\n\n", 0, 0, "a type below the top level" },

    /* aborts and cancellations */
    { "data: {\"choices\":[{\"index\":0,\"finish_reason\":\"abort\"}]}"
      "\n\ndata: [DONE]\n\n", 1, 2, "finish_reason abort" },
    { "data: {\"choices\":[{\"index\":0,\"finish_reason\":null},"
      "{\"index\":1,\"finish_reason\":\"abort\"}]}\n\n", 0, 2,
      "finish_reason abort of a second choice" },
    { "data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"nvext\":"
      "{\"detailed_finish_reason\":\"cancelled\"}}\n\ndata: [DONE]\n\n",
      1, 2, "nvext detailed_finish_reason cancelled" },
    { "data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"nvext\":"
      "{\"detailed_finish_reason\":\"stop\"}}\n\ndata: [DONE]\n\n",
      1, 0, "nvext detailed_finish_reason stop" },
    { "data: {\"text\":\"a\",\"output_ids\":[1],\"meta_info\":"
      "{\"id\":\"r\",\"finish_reason\":{\"type\":\"abort\","
      "\"message\":\"m\"}}}\n\ndata: [DONE]\n\n", 1, 2,
      "generate: meta_info finish_reason abort" },
    { "data: {\"text\":\"a\",\"meta_info\":{\"finish_reason\":"
      "{\"type\":\"length\",\"length\":2}}}\n\ndata: [DONE]\n\n", 1, 0,
      "generate: finish_reason length" },
    { "data: {\"choices\":[{\"text\":\"abort\",\"finish_reason\":"
      "\"stop\"}]}\n\ndata: [DONE]\n\n", 1, 0, "abort as text" },
    { "data: {\"finish_reason\":\"abort\"}\n\n", 0, 0,
      "finish_reason at the top level" },
    { NULL, 0, 0, NULL }
};


/*
 * done | error << 1 | aborted << 2, feeding "step" bytes at a time, or
 * two parts
 */

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

    return sse.done | (sse.error << 1) | (sse.aborted << 2);
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
        want = c->done | ((c->error != 0) << 1)
               | ((c->error == 2) << 2);

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
