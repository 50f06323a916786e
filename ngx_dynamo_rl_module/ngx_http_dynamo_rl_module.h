
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The module's whole interface, for _module.c at the top of the stack and
 * for what stands outside it (unit tests, fuzzers, benchmarks).  A file
 * below _module.c never includes it: it includes its own header and the
 * headers of the files below it that it uses, and each header includes
 * the headers its types come from (docs/development.md, "Layers").
 */

#ifndef _NGX_HTTP_DYNAMO_RL_MODULE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_scan.h"
#include "ngx_http_dynamo_rl_resp.h"
#include "ngx_http_dynamo_rl_json.h"
#include "ngx_http_dynamo_rl_store.h"
#include "ngx_http_dynamo_rl_store_resolve.h"
#include "ngx_http_dynamo_rl_zone.h"
#include "ngx_http_dynamo_rl_common.h"
#include "ngx_http_dynamo_rl_scope.h"
#include "ngx_http_dynamo_rl_ledger.h"
#include "ngx_http_dynamo_rl_gate.h"
#include "ngx_http_dynamo_rl_discovery.h"
#include "ngx_http_dynamo_rl_body.h"
#include "ngx_http_dynamo_rl_admin.h"
#include "ngx_http_dynamo_rl_request.h"
#include "ngx_http_dynamo_rl_status.h"
#include "ngx_http_dynamo_rl_state.h"


#endif /* _NGX_HTTP_DYNAMO_RL_MODULE_H_INCLUDED_ */
