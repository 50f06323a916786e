
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>


/*
 * SSE terminal detection must not depend on how the stream is cut into
 * buffers: the first byte chooses a split, the verdict over the two parts
 * must equal the verdict over the whole.
 */


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                    split;
    ngx_http_dynamo_rl_sse_t  whole, parts;

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

    if (whole.done != parts.done || whole.error != parts.error) {
        abort();
    }

    return 0;
}
