#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the order of the module's checks against nginx's access
# control: a client refused by allow/deny is refused before anything of
# the module acts for it: no attempt is recorded or consumed, no
# discovery refresh, no admin answer that describes the fleet.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_test /;

###############################################################################

my $t = rl_test(60, 12, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 5m%%

    server {
        listen 127.0.0.1:8080;

        location /v1/ {
            dynamo_rl_plane request;
            deny all;
            proxy_pass http://127.0.0.1:8081;
        }

        location /open/v1/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8081/v1/;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;
            deny all;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        %%RL_DISCOVERY_FETCH%%

        %%RL_APIS attempts%%
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $body = '{"model":"m","prompt":"p"}';

# the request plane: refused by deny, not recorded, the id stays free

my $r = parse_response(http_post('/v1/completions', $body,
	headers => "X-Dynamo-Attempt-Id: probe-1\r\n"));

is($r->{status}, 403, 'denied: 403 from deny');
is(status('/rl/attempts/probe-1'), 404, 'denied: attempt not recorded');

$r = parse_response(http_post('/v1/completions', $body,
	headers => "X-Dynamo-Attempt-Id: probe-1\r\n"));

is($r->{status}, 403, 'denied again: still 403, not 409');
is(scalar @{$t->fake_records('frontend')}, 0, 'denied: nothing forwarded');

$r = parse_response(http_post('/open/v1/completions', $body,
	headers => "X-Dynamo-Attempt-Id: probe-1\r\n"));

is($r->{status}, 200, 'the id is free for an allowed request');
is(json(http_get('/rl/attempts/probe-1'))->{state}, 'succeeded',
	'allowed: recorded');

# the admin plane: allow/deny first, no refresh, no fleet details

$r = parse_response(http_post('/v1/rl/workers/42/engine/liveness_probe',
	'{}'));

is($r->{status}, 403, 'admin denied: 403 from deny');
unlike($r->{body} // '', qr/unknown_worker|route_not_advertised/,
	'admin denied: no admin reason');
is(scalar @{$t->fake_records('listener')}, 0, 'admin denied: no refresh');

$r = parse_response(http_post(
	'/v1/rl/workers/7587888160958628117/engine/liveness_probe', '{}'));

is($r->{status}, 403, 'admin denied for a real worker: 403');
is(scalar @{$t->fake_records('worker-0')}
	+ scalar @{$t->fake_records('worker-1')}
	+ scalar @{$t->fake_records('worker-2')}, 0,
	'admin denied: nothing forwarded');
is(scalar @{$t->fake_records('listener')}, 0,
	'admin denied for a real worker: no refresh');

###############################################################################

sub status {
	return parse_response(http_get(shift))->{status};
}

sub json {
	my ($raw) = @_;
	my $r = parse_response($raw);
	return eval { JSON::PP->new->decode($r->{body}) } // {};
}

###############################################################################
