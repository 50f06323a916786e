
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * Unit tests of ngx_http_dynamo_rl_system_url_host(), the host that the
 * admin plane compares with the names of upstream{} groups, as TAP for
 * "prove -e ''".
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdio.h>
#include <string.h>


typedef struct {
    char                        *url;
    ngx_int_t                    rc;
    char                        *host;
} ngx_http_dynamo_rl_test_host_t;


static ngx_http_dynamo_rl_test_host_t  ngx_http_dynamo_rl_tests[] = {
    { "http://frontend", NGX_OK, "frontend" },
    { "http://FrontEnd/", NGX_OK, "FrontEnd" },
    { "http://frontend:8000", NGX_OK, "frontend" },
    { "https://frontend:8443/", NGX_OK, "frontend" },
    { "http://127.0.0.1:9090", NGX_OK, "127.0.0.1" },
    { "http://[::1]:9090", NGX_OK, "[::1]" },
    { "http://[::1", NGX_DECLINED, NULL },
    { "http://:80", NGX_DECLINED, NULL },
    { "http://", NGX_DECLINED, NULL },
    { "ftp://frontend", NGX_DECLINED, NULL },
    { "frontend", NGX_DECLINED, NULL },
    { NULL, 0, NULL }
};


int
main(void)
{
    size_t                           len;
    ngx_int_t                        rc;
    ngx_str_t                        host;
    ngx_uint_t                       n, failed, ok;
    ngx_http_dynamo_rl_test_host_t  *t;

    for (n = 0; ngx_http_dynamo_rl_tests[n].url != NULL; n++) {
        /* void */
    }

    printf("1..%u\n", (unsigned) n);

    failed = 0;

    for (n = 0, t = ngx_http_dynamo_rl_tests; t->url != NULL; t++) {
        n++;

        len = strlen(t->url);
        host.len = 0;
        host.data = NULL;

        rc = ngx_http_dynamo_rl_system_url_host((u_char *) t->url, len,
                                                &host);

        ok = (rc == t->rc);

        if (ok && rc == NGX_OK) {
            ok = (host.len == strlen(t->host)
                  && memcmp(host.data, t->host, host.len) == 0);
        }

        printf("%s %u - system_url_host \"%s\"\n", ok ? "ok" : "not ok",
               (unsigned) n, t->url);

        if (!ok) {
            failed++;
        }
    }

    return failed ? 1 : 0;
}
