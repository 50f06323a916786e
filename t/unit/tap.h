
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_TAP_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_TAP_H_INCLUDED_


#include <stdio.h>


/*
 * The TAP output that the unit tests share: a test file includes this
 * once, after the umbrella header, calls ok() for each assertion and
 * ends main() with "return done_testing();", which prints the plan last
 * and fails the program when an assertion failed.
 */


static void ok(int cond, const char *name);
static int done_testing(void);


static int  tests;
static int  failed;


static void
ok(int cond, const char *name)
{
    tests++;

    if (!cond) {
        failed++;
    }

    printf("%sok %d - %s\n", cond ? "" : "not ", tests, name);
}


static int
done_testing(void)
{
    printf("1..%d\n", tests);

    return failed ? 1 : 0;
}


#endif /* _NGX_HTTP_DYNAMO_RL_TAP_H_INCLUDED_ */
