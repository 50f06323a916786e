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
# recipe answers in each listener's JSON shape.  Then "make run
# REPLICAS=2" itself (util/run-gateway): a redis-server and two gateway
# replicas that share it, on free ports; the calls it prints show a retry
# refused on the other replica and one gate for both, the same checked
# again here with ids of the test's own, and Ctrl-C stops everything it
# started.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ example_conf run_gateway time_limit /;

###############################################################################

time_limit(120);

my $REPO = abs_path(dirname(__FILE__) . '/..');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(84);

$t->write_file('nginx.conf', example());
$t->run_fake_dynamo()->run();

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

# SGLang's /generate: its rid is the attempt id, used once

$r = post($ROLLOUT, '/generate', '{"text":"Hi","rid":"example-gen-1"}');

is($r->{status}, 200, 'generate: 200');
is($r->{headers}{'x-dynamo-attempt-id'}, 'example-gen-1',
	'generate: the rid is the attempt id');

$r = post($ROLLOUT, '/generate', '{"text":"Hi","rid":"example-gen-1"}');

is($r->{status}, 409, 'generate again: 409');
is(ref json($r)->{error} eq 'HASH' && json($r)->{error}{code}, 409,
	'generate again: nested as SGLang nests its errors');

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

# dynamo_rl_admin_url: every system_url names this admin plane, and a
# trainer's concatenation reaches the worker through it

my @urls = get($TRUSTED, '/v1/rl/workers')->{body} =~ /"system_url":"([^"]*)"/g;
is(scalar(grep { !m{^http://\Q$TRUSTED\E/v1/rl/workers/\d+$} } @urls), 0,
	'discovery: every system_url names the admin plane') or diag("@urls");

my ($url) = grep { m{/\Q$id\E$} } @urls;
$r = post($TRUSTED, ($url // '') =~ s{^http://[^/]+}{}r . "/engine/$route",
	'{}');
is($r->{status}, 200, "admin $route through system_url: 200");

$r = post($TRUSTED, "/v1/rl/workers/$id/engine/not_advertised", '{}');
is($r->{status}, 403, 'admin, a route not advertised: 403');
is(json($r)->{error}, 'route_not_advertised',
	'admin, a route not advertised: reason');

# a refusal is the module at work, not a failure: below nginx's "error"

is(join(' ', map { /\[(\w+)\]/ } $t->log_lines('error.log',
	qr/dynamo rl admin: denied, route_not_advertised/)), 'warn',
	'admin, a route not advertised: one line at warn');

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

# every JSON answer of the module's own ends with a newline, so that a
# shell prompt or the next answer starts on a line of its own

my @nl;

for my $c (
	[ 'a refusal', post($ROLLOUT, '/v1/completions', '{}',
		'X-Dynamo-Attempt-Id: example-1') ],
	[ 'a /generate refusal', post($ROLLOUT, '/generate',
		'{"text":"Hi","rid":"example-gen-1"}') ],
	[ 'an admin refusal', post($TRUSTED,
		"/v1/rl/workers/$id/engine/not_advertised", '{}') ],
	[ 'the gate', get($TRUSTED, '/rl/gate') ],
	[ 'a gate change', post($TRUSTED, '/rl/gate', '{"action":"renew"}') ],
	[ 'the attempts API', get($TRUSTED, '/rl/attempts/example-1') ],
	[ 'status', get($TRUSTED, '/rl/status') ])
{
	my ($name, $r) = @$c;

	push @nl, $name unless ($r->{headers}{'content-type'} // '')
		eq 'application/json' && $r->{body} =~ /\}
\z/
		&& eval { decode_json($r->{body}) };
}

is(join(', ', @nl), '', 'JSON answers end with a newline');

# the rollout listener serves generation only

$r = get($ROLLOUT, '/rl/status');
is($r->{status}, 404, 'rollout: no status');

###############################################################################

# make run REPLICAS=2, on free ports, its scratch directory in ours:
# util/run-gateway in the background, as "make run REPLICAS=n" starts it

my @RUN = map { port($_) } 8070 .. 8073;
my $transcript = $t->testdir() . '/run-gateway.out';
my $run = run_gateway($t, $transcript, [ "$REPO/util/run-gateway" ],
	env => { REPLICAS => 2,
		RUN_PORTS => "$RUN[0]:$RUN[1] $RUN[2]:$RUN[3]" });

my $up = Test::DynamoRL::wait_for(sub {
	if (waitpid($run, WNOHANG) == $run) {
		$run = 0;
		return 1;
	}

	return slurp($transcript) =~ /^running; press Ctrl-C to stop$/m;
}, 60);

my $text = slurp($transcript);

ok($up && $run, 'replicas: make run REPLICAS=2 started') or diag($text);

my ($prefix) = $text =~ m{(\Q${\$t->testdir()}\E/dynamo-rl-run\.\w+)/};
my ($redis, $redis_pid) = $text
	=~ /^store: .* at redis:\/\/127\.0\.0\.1:(\d+) \(pid\s+(\d+)\)/m;

ok($prefix && $redis && $redis != 6379, 'replicas: a store on a free port')
	or diag($text);
like($text, qr/^  a  rollout http:\/\/127\.0\.0\.1:$RUN[0]\/v1\/\.\.\.  trusted http:\/\/127\.0\.0\.1:$RUN[1]\/\.\.\./m,
	'replicas: a on its ports');
like($text, qr/^  b  rollout http:\/\/127\.0\.0\.1:$RUN[2]\/v1\/\.\.\.  trusted http:\/\/127\.0\.0\.1:$RUN[3]\/\.\.\./m,
	'replicas: b on its ports');

# the calls it printed, and their answers

my @shown = map { [ split /\n/, $_, 2 ] } grep { length }
	split /^\$ /m, ($text =~ /^(\$ curl .*)\z/ms)[0] // '';

is(scalar @shown, 8, 'replicas: eight calls shown') or diag($text);

my @r = map { parse_response(($_->[1] // '') =~ s/\r?\n/\r\n/gr) // {} }
	@shown[0, 1, 4, 7];
my @j = map { eval { decode_json(($_->[1] // '') =~ s/\s*#.*\z//sr) } // {} }
	@shown[2, 3, 5, 6];

like($shown[0][0] // '', qr/^curl .*:$RUN[0]\/v1\/completions .*X-Dynamo-Attempt-Id: rollout-42\.attempt-1/,
	'replicas, shown: an attempt through a');
is($r[0]{status}, 200, 'replicas, shown: 200');
like($shown[1][0] // '', qr/^curl .*:$RUN[2]\/v1\/completions .*X-Dynamo-Attempt-Id: rollout-42\.attempt-1/,
	'replicas, shown: its retry through b');
is($r[1]{status}, 409, 'replicas, shown: 409');
is($r[1]{headers}{'x-dynamo-rl-reason'}, 'duplicate_attempt',
	'replicas, shown: duplicate_attempt');
is($r[1]{headers}{'x-should-retry'}, 'false',
	'replicas, shown: not to retry');
like($shown[2][0] // '', qr/:$RUN[3]\/rl\/attempts\/rollout-42\.attempt-1$/,
	'replicas, shown: the attempt through b');
is(join(' ', map { $j[0]{$_} // '' } qw/ attempt_id state replica /),
	'rollout-42.attempt-1 succeeded a', 'replicas, shown: recorded by a');
like($shown[3][0] // '', qr/:$RUN[1]\/rl\/gate -d .*"close"/,
	'replicas, shown: the gate closed through a');
is($j[1]{state}, 'closed', 'replicas, shown: closed');
like($shown[4][0] // '', qr/:$RUN[2]\/v1\/completions/,
	'replicas, shown: generation through b');
is($r[2]{status}, 503, 'replicas, shown: 503');
is($r[2]{headers}{'x-dynamo-rl-reason'}, 'gate_closed',
	'replicas, shown: gate_closed');
is(join(' ', map { $j[2]{$_} // '' } qw/ state epoch replica /),
	"closed " . ($j[1]{epoch} // '-') . ' b',
	'replicas, shown: b answers the same gate');
is($j[2]{fleet} && $j[2]{fleet}{replicas}, 2, 'replicas, shown: two in the fleet');
like($shown[6][0] // '', qr/:$RUN[3]\/rl\/gate -d '\{"action":"open","epoch":(\d+)\}'$/,
	'replicas, shown: opened through b with the epoch');
is(join(' ', map { $j[3]{$_} // '' } qw/ state epoch /),
	'open ' . (($j[1]{epoch} // 0) + 1), 'replicas, shown: open');
is($r[3]{status}, 200, 'replicas, shown: generation through b again');

# the same with ids of our own: the retry on the other replica, the
# attempts API on both, and the gate

my ($ra, $ta, $rb, $tb) = map { "127.0.0.1:$_" } @RUN;

$r = post($rb, '/v1/completions', '{"model":"m","prompt":"Hi"}',
	'X-Dynamo-Attempt-Id: example-2');
is($r->{status}, 200, 'replicas: through b');

$r = post($ra, '/v1/completions', '{"model":"m","prompt":"Hi"}',
	'X-Dynamo-Attempt-Id: example-2');
is($r->{status}, 409, 'replicas: the retry through a refused');

is(json(get($ta, '/rl/attempts/example-2'))->{replica}, 'b',
	'replicas: a answers for the attempt of b');

$r = post($tb, '/rl/gate', '{"action":"close","reason":"t","lease":"60s"}');
is(json($r)->{state}, 'closed', 'replicas: closed through b');
is(post($ra, '/v1/completions', '{}')->{status}, 503,
	'replicas: a refuses');
$r = post($ta, '/rl/gate', '{"action":"open","epoch":'
	. (json($r)->{epoch} // 0) . '}');
is(json($r)->{state}, 'open', 'replicas: opened through a');

# Ctrl-C stops everything it started

my @pids = map { slurp("$prefix/$_/nginx.pid") =~ /(\d+)/ } qw/ a b /;

is(scalar @pids, 2, 'replicas: two nginx masters');

kill 'INT', $run if $run;

my $status;

ok(Test::DynamoRL::wait_for(sub {
	$run && waitpid($run, WNOHANG) == $run or return;
	$status = $? >> 8;
	return 1;
}, 30), 'replicas: Ctrl-C ends it');

$run = 0;

is($status, 130, 'replicas: exit status of an interrupt');
is(scalar(grep { kill 0, $_ } @pids, $redis_pid // ()), 0,
	'replicas: the nginx masters and the store stopped');
is(join(' ', grep { IO::Socket::INET->new("127.0.0.1:$_") } @RUN,
	$redis // ()), '', 'replicas: nothing listens on their ports');
like(slurp($transcript),
	qr/^stopped; logs were in \Q$prefix\E$/m, 'replicas: said so');

my $logs = join '', map { slurp("$prefix/$_/error.log") } qw/ a b /;

is(join('', grep { /\[(?:alert|emerg|crit)\]|Sanitizer/ } split /^/m, $logs),
	'', 'replicas: no alerts in their logs');

###############################################################################

sub slurp {
	return Test::DynamoRL::Fixture::slurp($_[0]) // '';
}

END {
	if ($run) {
		kill 'INT', $run;
		waitpid($run, 0);
	}
}

###############################################################################

# the example as util/run-gateway fills it in, its listeners on free ports

sub example {
	my $conf = example_conf($t, 'dynamo-rl.conf');

	$conf =~ s/\@FRONTEND\@/'127.0.0.1:' . port(8081)/ge;
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
