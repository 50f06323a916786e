
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>

#include "body_oracle.h"


/*
 * The request body scanner: the whole input is a body.  Its verdict must
 * agree with jansson's (body_oracle.h); an accepted body's members must lie
 * in order inside it; and the body without the members the rules remove
 * must be jansson's document without them, and scan again with none left
 * (body_oracle_cuts()).
 */


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static ngx_http_dynamo_rl_body_scan_t  bs;


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                       *buf, *p, *last;
    ngx_uint_t                    i, l;
    ngx_http_dynamo_rl_member_t  *m;

    buf = malloc(size + 1);
    if (buf == NULL) {
        return 0;
    }

    memcpy(buf, data, size);

    if (body_oracle(buf, size) == BODY_ORACLE_MISMATCH) {
        abort();
    }

    bs.alloc = body_oracle_alloc;
    body_oracle_used = 0;

    if (ngx_http_dynamo_rl_body_scan(buf, size, &bs) != NGX_OK) {
        free(buf);
        return 0;
    }

    for (l = 0; l < NGX_HTTP_DYNAMO_RL_BODY_LEVELS; l++) {
        last = buf;

        for (i = 0; i < bs.n[l]; i++) {
            m = &bs.members[l][i];

            if (m->name < last || m->name_end > m->value
                || m->value >= m->value_end || m->value_end > buf + size
                || *m->name != '"' || m->name_end[-1] != '"')
            {
                abort();
            }

            last = m->value_end;

            /* unescaping never grows a string */

            p = malloc(m->name_end - m->name);
            if (p == NULL) {
                abort();
            }

            if (ngx_http_dynamo_rl_json_unescape(p, m->name + 1,
                                                 m->name_end - 1)
                > p + (m->name_end - m->name - 2))
            {
                abort();
            }

            free(p);
        }
    }

    /* removals: body_oracle() compared them with jansson's deletions */

    free(buf);

    return 0;
}
