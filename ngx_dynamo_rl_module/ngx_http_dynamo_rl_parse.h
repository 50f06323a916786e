
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_PARSE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_PARSE_H_INCLUDED_


/*
 * Pure parsers: no nginx runtime, no allocation, no logging, so that the
 * unit tests and the libFuzzer harnesses drive them directly.
 */


#define NGX_HTTP_DYNAMO_RL_NS_ANY     0
#define NGX_HTTP_DYNAMO_RL_NS_EXACT   1
#define NGX_HTTP_DYNAMO_RL_NS_PREFIX  2


ngx_int_t ngx_http_dynamo_rl_attempt_id_valid(u_char *p, size_t len);
u_char *ngx_http_dynamo_rl_uuid7(u_char *dst, uint64_t ms, u_char *rnd);
ngx_int_t ngx_http_dynamo_rl_target_canonical(u_char *raw, size_t raw_len,
    u_char *uri, size_t uri_len);
ngx_int_t ngx_http_dynamo_rl_parse_u64(u_char *p, size_t len, uint64_t *n);
ngx_int_t ngx_http_dynamo_rl_route_valid(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_parse_admin_path(u_char *p, size_t len,
    uint64_t *id, ngx_str_t *route);
ngx_int_t ngx_http_dynamo_rl_system_url_valid(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_namespace_match(ngx_uint_t mode,
    ngx_str_t *scope, u_char *ns, size_t len);


#endif /* _NGX_HTTP_DYNAMO_RL_PARSE_H_INCLUDED_ */
