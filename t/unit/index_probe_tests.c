
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>


/*
 * The snapshot index's lookup is bounded by its table (issue 12, defect
 * 3): a table without an empty slot, which the build never makes but a
 * lookup in freed or foreign memory could meet, ends the probe after one
 * round instead of spinning forever.  An alarm turns a hang into a
 * failure.  Output is TAP.
 */


static void test_full_table(void);


static void
test_full_table(void)
{
    uint64_t                       id;
    ngx_uint_t                     i, n, found;
    ngx_http_dynamo_rl_index_t     index;
    ngx_http_dynamo_rl_slot_t      slots[8];
    ngx_http_dynamo_rl_worker_t    workers[8], *sorted[8], **wp;

    ngx_memzero(&index, sizeof(ngx_http_dynamo_rl_index_t));
    ngx_memzero(slots, sizeof(slots));
    ngx_memzero(workers, sizeof(workers));

    /* every slot taken, whatever the hash: ids 1..8 at positions 1..8 */

    for (i = 0; i < 8; i++) {
        workers[i].id = i + 1;
        workers[i].has_id = 1;
        sorted[i] = &workers[i];

        slots[i].id = i + 1;
        slots[i].worker = &workers[i];
        slots[i].first = (uint32_t) (i + 1);
        slots[i].n = 1;
    }

    index.workers = workers;
    index.sorted = sorted;
    index.slots = slots;
    index.mask = 7;
    index.nworkers = 8;
    index.nsorted = 8;
    index.nelts = 8;

    found = 0;

    for (id = 1; id <= 8; id++) {
        wp = ngx_http_dynamo_rl_index_find(&index, id, &n);

        if (wp != NULL && n == 1 && (*wp)->id == id) {
            found++;
        }
    }

    ok(found == 8, "full table: every id found");

    n = 42;
    wp = ngx_http_dynamo_rl_index_find(&index, 9, &n);
    ok(wp == NULL && n == 0, "full table: an absent id ends the probe");

    n = 42;
    wp = ngx_http_dynamo_rl_index_find(&index, 0xffffffffffffffffULL, &n);
    ok(wp == NULL && n == 0, "full table: another absent id, another start");
}


int
main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* a probe that never ends is killed: a failure, not a hang */

    alarm(10);

    test_full_table();

    return done_testing();
}
