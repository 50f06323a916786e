#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Findings of a review that had not read the tests.  A listener that
# answers the refresh with X-Accel-Redirect into a request-plane location
# (no proxy_ignore_headers in the internal location): nothing reaches the
# frontend.  "dynamo_rl_namespace env" keeps its scope across a binary
# upgrade, whose new master has only the variables "env" names.  A reload
# that resizes the zone while an old worker process still streams: an id
# used just before it, and the streaming one, are refused by the new zone,
# which takes them from the old one.  nginx -t refuses
# "satisfy any" where a caller's scope comes from variables on the
# discovery plane.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ attempt call time_limit /;

###############################################################################

time_limit(Test::DynamoRL::scale(300));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(11);

# the scope the master reads at start, and that USR2 must keep

local $ENV{DYN_NAMESPACE_PREFIX} = 'team-a';

my $CONF = <<'EOF';

%%TEST_GLOBALS%%

env LD_PRELOAD;
env ASAN_OPTIONS;
env LSAN_OPTIONS;

worker_processes 1;

events {
}

http {
    %%TEST_GLOBALS_HTTP%% dynamo_rl_zone zone=rl:%%ZONE%% state=%%TESTDIR%%/state/rl.state;

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8081;
            proxy_buffering off;
        }

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_namespace env;
            proxy_pass http://127.0.0.1:8082;
        }

        location /evil/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_evil valid=1ms;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        location = /_evil {
            internal;
            proxy_pass http://127.0.0.1:8087/redirect;
        }

        location = /rl/gate {
            dynamo_rl_gate_api;
        }

        location /rl/attempts/ {
            dynamo_rl_attempts_api;
        }
    }

    # a listener that redirects its answer into the request plane

    server {
        listen       127.0.0.1:8087;
        server_name  localhost;

        location / {
            add_header X-Accel-Redirect /v1/completions always;
            return 200 "{}";
        }
    }
}

EOF

(my $conf = $CONF) =~ s/%%ZONE%%/6m/;
$t->write_file_expand('nginx.conf', $conf);

$t->run_fake_dynamo();

my $JS = JSON::PP->new->canonical;

$t->fake_set('discovery.json', $JS->encode({ protocol_version => 1,
	namespace => 'team-a', workers => [
		worker('team-a', 11), worker('team-a-x', 12), worker('dynamo', 13),
	] }));

$t->run();

###############################################################################

my $r;

# the refresh, redirected by the listener into the request plane, with the
# gate closed: nothing reaches the frontend

gate({ action => 'close', reason => 'review', lease => '60s' });

my $n = frontend_count();

$r = call('POST', '/evil/11/engine/flush_cache', body => '{}');
is($r->{status}, 503, 'redirected refresh: 503 discovery_unavailable');
is(frontend_count(), $n, 'redirected refresh: nothing at the frontend');
ok($t->wait_for(sub { $t->log_lines('error.log',
	qr/\[error\].*subrequest "\/v1\/completions" into a plane location/
	. qr/ not sent/) }), 'redirected refresh: one error line');

gate({ action => 'open' });

# the namespace of "env", before and after a binary upgrade

is(namespaces(), 'team-a team-a-x', 'env scope');

$t->upgrade(1);

is(namespaces(), 'team-a team-a-x', 'env scope after a binary upgrade');

$t->upgrade_finish();

is(namespaces(), 'team-a team-a-x', 'env scope, the old master gone');

# an id used just before a reload that resizes the zone, while the old
# worker process still streams

my $s = stream('review-long');

is(attempt('review-id', '{"prompt":"x"}')->{status}, 200,
	'before the reload: forwarded');

($conf = $CONF) =~ s/%%ZONE%%/7m/;
$t->write_file_expand('nginx.conf', $conf);
$t->reload();

$n = frontend_count();

is(attempt('review-id', '{"prompt":"x"}')->{status}, 409,
	'after the resize: a used id refused');
is(attempt('review-long', '{"prompt":"x"}')->{status}, 409,
	'after the resize: the streaming id refused');
is(frontend_count(), $n, 'after the resize: nothing forwarded again');

close $s;

# nginx -t: a caller's scope from variables on the discovery plane is
# checked in the access phase, which "satisfy any" may skip

my ($code, $out) = $t->nginx_t(<<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%% dynamo_rl_zone zone=rl:5m;

    server {
        listen 127.0.0.1:8088;

        location = /v1/rl/workers {
            satisfy any;
            allow 127.0.0.1;
            deny all;
            dynamo_rl_plane discovery;
            dynamo_rl_namespace $http_x_scope;
            proxy_pass http://127.0.0.1:8082;
        }
    }
}
EOF

my $re = '"dynamo_rl_plane discovery" with a caller\'s scope from'
	. ' variables cannot be used with "satisfy any"';
like($out, qr/$re/, 'nginx -t: satisfy any with a variable scope refused');

###############################################################################

sub worker {
	my ($ns, $id) = @_;

	return {
		namespace => $ns, component => 'backend', endpoint => 'rl',
		instance_id => $id,
		transport => { tcp => "127.0.0.1:9999/$id/rl" },
		request_plane_url => "dyn://$ns.backend.rl",
		system_url => 'http://127.0.0.1:' . port(8091),
		routes => [ 'flush_cache' ],
	};
}

sub namespaces {
	my $res = call('GET', '/v1/rl/workers');
	my $doc = eval { decode_json($res->{body}) } // {};
	return join ' ', sort map { $_->{namespace} } @{$doc->{workers} // []};
}

sub frontend_count {
	return scalar grep { ($_->{method} // '') ne '' }
		@{$t->fake_records('frontend')};
}

sub gate {
	my ($data) = @_;
	return call('POST', '/rl/gate', body => encode_json($data));
}

# a slow stream held open: its worker process stays after a reload

sub stream {
	my ($id) = @_;

	my $body = '{"prompt":"x","stream":true}';
	my $s = http("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\nx-fake-scenario: slow\r\n"
		. "x-fake-events: 60\r\nx-fake-interval-ms: 500\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n",
		body => $body, start => 1);

	$t->wait_for(sub { grep { ($_->{headers}{'x-dynamo-attempt-id'} // '')
		eq $id } @{$t->fake_records('frontend')} })
		or diag("the stream $id did not reach the frontend");

	return $s;
}

###############################################################################
