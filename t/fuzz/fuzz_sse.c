
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>


/*
 * SSE terminal detection must not depend on how the stream is cut into
 * buffers: the first byte chooses a split, the verdict (done, error,
 * aborted) over the two parts, and byte by byte, must equal the verdict
 * over the whole; an abort is always an error.
 */


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                    i, split;
    ngx_http_dynamo_rl_sse_t  whole, parts, bytes;

    if (size == 0) {
        return 0;
    }

    split = data[0] % size;
    data++;
    size--;

    if (split > size) {
        split = size;
    }

    ngx_memzero(&whole, sizeof(whole));
    ngx_memzero(&parts, sizeof(parts));

    ngx_http_dynamo_rl_sse_scan(&whole, (u_char *) data, size, 1);

    ngx_http_dynamo_rl_sse_scan(&parts, (u_char *) data, split, 0);
    ngx_http_dynamo_rl_sse_scan(&parts, (u_char *) data + split,
                                size - split, 1);

    if (whole.done != parts.done || whole.error != parts.error
        || whole.aborted != parts.aborted)
    {
        abort();
    }

    /* an abort is an error; and byte by byte, the same verdict again */

    if (whole.aborted && !whole.error) {
        abort();
    }

    ngx_memzero(&bytes, sizeof(bytes));

    for (i = 0; i < size; i++) {
        ngx_http_dynamo_rl_sse_scan(&bytes, (u_char *) data + i, 1, 0);
    }

    ngx_http_dynamo_rl_sse_scan(&bytes, NULL, 0, 1);

    if (whole.done != bytes.done || whole.error != bytes.error
        || whole.aborted != bytes.aborted)
    {
        abort();
    }

    return 0;
}
