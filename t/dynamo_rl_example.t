#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for examples/dynamo-rl.conf itself, the configuration "make run"
# starts: filled in as util/run-gateway fills it (the module, a prefix, the
# fake Dynamo's frontend and RL listener) with its two listeners moved to
# free ports, then driven end to end: generation with minted and named
# attempts and a re-used one, discovery, an admin call and a refused one,
# the gate, status, metrics and the attempts API; and nginx's own errors
# that come before a location is chosen (a space or %00 in the target, a
# bad header line, a target too long), which the example's error_page
# recipe answers in each listener's JSON shape.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit /;

###############################################################################

time_limit(120);

my $REPO = abs_path(dirname(__FILE__) . '/..');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(40);

$t->write_file('nginx.conf', example());
$t->run_fake_dynamo();
$t->run();

my $ROLLOUT = '127.0.0.1:' . port(8080);
my $TRUSTED = '127.0.0.1:' . port(8090);

###############################################################################

# generation: a minted attempt, a named one, the named one again

my $r = post($ROLLOUT, '/v1/completions', '{"model":"m","prompt":"Hi"}');

is($r->{status}, 200, 'generation: 200');
like($r->{headers}{'x-dynamo-attempt-id'} // '',
	qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
	'generation: a minted UUIDv7');

$r = post($ROLLOUT, '/v1/completions', '{"model":"m","prompt":"Hi"}',
	'X-Dynamo-Attempt-Id: example-1');

is($r->{status}, 200, 'named: 200');
is($r->{headers}{'x-dynamo-attempt-id'}, 'example-1', 'named: echoed');

$r = post($ROLLOUT, '/v1/completions', '{"model":"m","prompt":"Hi"}',
	'X-Dynamo-Attempt-Id: example-1');

is($r->{status}, 409, 'again: 409');
is($r->{headers}{'x-dynamo-rl-reason'}, 'duplicate_attempt',
	'again: duplicate_attempt');
is($r->{headers}{'x-should-retry'}, 'false', 'again: not to retry');

# nginx's own errors before a location is chosen: flat JSON

for my $case (
	[ 'a space in the target', "GET /v1/a b HTTP/1.1\r\nHost: x\r\n\r\n" ],
	[ '%00 in the target', "GET /v1/%00 HTTP/1.1\r\nHost: x\r\n\r\n" ],
	[ 'a bad header line',
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Line\r\n\r\n" ],
	[ 'no Host', "GET /v1/models HTTP/1.1\r\n\r\n" ])
{
	my ($name, $raw) = @$case;

	$r = parse_response(http($raw, PeerAddr => $ROLLOUT));

	is($r && $r->{status}, 400, "rollout, $name: 400");
	is_deeply(json($r), { message => 'Bad Request', type => 'Bad Request',
		code => 400 }, "rollout, $name: flat JSON");
}

$r = parse_response(http('GET /v1/' . ('a' x 9000) . " HTTP/1.1\r\n"
	. "Host: x\r\n\r\n", PeerAddr => $ROLLOUT));

is($r && $r->{status}, 414, 'rollout, a target too long: 414');
is_deeply(json($r), { message => 'URI Too Long', type => 'URI Too Long',
	code => 414 }, 'rollout, a target too long: flat JSON');

# the module's own 400 is unchanged by the recipe

$r = post($ROLLOUT, '/v1/completions', '{}', 'X-Dynamo-Attempt-Id: bad id!');

is($r->{status}, 400, 'bad attempt id: 400');
is($r->{headers}{'x-dynamo-rl-reason'}, 'bad_attempt_id',
	'bad attempt id: the module answered');

# the recipe's locations are internal

$r = get($ROLLOUT, '/.dynamo-rl/400');
is($r->{status}, 404, 'rollout: the error location is internal');

$r = parse_response(http("GET /v1/rl/a b HTTP/1.1\r\nHost: x\r\n\r\n",
	PeerAddr => $TRUSTED));

is($r && $r->{status}, 400, 'trusted, a space in the target: 400');
is(json($r)->{error}, 'bad_request', 'trusted, a space: the trusted shape');

###############################################################################

# discovery, then an admin call that is allowed and one that is not

$r = get($TRUSTED, '/v1/rl/workers');

is($r->{status}, 200, 'discovery: 200');

my ($id) = $r->{body} =~ /"instance_id":\s*(\d+)/;
my ($routes) = $r->{body} =~ /"routes":\s*\[([^\]]*)\]/;
my @routes = ($routes // '') =~ /"([^"]+)"/g;

ok(defined $id && @routes, 'discovery: a worker with routes');

$id //= 0;
my ($route) = grep { m{^[a-z_]+$} } @routes;
$route //= 'none';

$r = post($TRUSTED, "/v1/rl/workers/$id/engine/$route", '{}');
is($r->{status}, 200, "admin $route: 200");

$r = post($TRUSTED, "/v1/rl/workers/$id/engine/not_advertised", '{}');
is($r->{status}, 403, 'admin, a route not advertised: 403');
is(json($r)->{error}, 'route_not_advertised',
	'admin, a route not advertised: reason');

$r = post($TRUSTED, '/v1/rl/workers/1/engine/' . $route, '{}');
is($r->{status}, 404, 'admin, an unknown worker: 404');

# the gate: closed, generation refused, open again

$r = post($TRUSTED, '/rl/gate',
	'{"action":"close","reason":"example","lease":"60s"}');
is($r->{status}, 200, 'gate: closed');

$r = post($ROLLOUT, '/v1/completions', '{}');
is($r->{status}, 503, 'gate closed: 503');
is($r->{headers}{'x-dynamo-rl-reason'}, 'gate_closed', 'gate closed: reason');

$r = post($TRUSTED, '/rl/gate', '{"action":"open"}');
is($r->{status}, 200, 'gate: open');

$r = post($ROLLOUT, '/v1/completions', '{}');
is($r->{status}, 200, 'gate open: 200');

# status, metrics, attempts

$r = get($TRUSTED, '/rl/status');
is($r->{status}, 200, 'status: 200');
is(json($r)->{gate}{state}, 'open', 'status: the gate open');

$r = get($TRUSTED, '/metrics');
is($r->{status}, 200, 'metrics: 200');
like($r->{body}, qr/^dynamo_rl_gate_state\{state="open"\} 1$/m,
	'metrics: the gate open');

$r = get($TRUSTED, '/rl/attempts/example-1');
is($r->{status}, 200, 'attempts: 200');
is(json($r)->{state}, 'succeeded', 'attempts: example-1 succeeded');

# the rollout listener serves generation only

$r = get($ROLLOUT, '/rl/status');
is($r->{status}, 404, 'rollout: no status');

###############################################################################

# the example as util/run-gateway fills it in, its listeners on free ports

sub example {
	my $d = $t->testdir();

	my $dir = $ENV{TEST_NGINX_MODULES} // "$REPO/build";
	my $so = (abs_path($dir) // $dir) . '/ngx_http_dynamo_rl_module.so';

	open my $fh, '<', "$REPO/examples/dynamo-rl.conf"
		or die "examples/dynamo-rl.conf: $!\n";
	my $conf = do { local $/; <$fh> };
	close $fh;

	$conf =~ s/\@MODULE\@/$so/g;
	$conf =~ s/\@PREFIX\@/$d/g;
	$conf =~ s/\@FRONTEND\@/'127.0.0.1:' . port(8081)/ge;
	$conf =~ s/\@RL_LISTENER\@/'127.0.0.1:' . port(8082)/ge;
	$conf =~ s/127\.0\.0\.1:8080\b/'127.0.0.1:' . port(8080)/ge;
	$conf =~ s/127\.0\.0\.1:9090\b/'127.0.0.1:' . port(8090)/ge;

	return $conf;
}

sub get {
	my ($addr, $uri) = @_;
	return parse_response(http_get($uri, PeerAddr => $addr)) // {};
}

sub post {
	my ($addr, $uri, $body, $headers) = @_;

	return parse_response(http_post($uri, $body, PeerAddr => $addr,
		headers => $headers // '')) // {};
}

sub json {
	my ($r) = @_;
	return (eval { decode_json($r->{body}) } // {});
}

###############################################################################
