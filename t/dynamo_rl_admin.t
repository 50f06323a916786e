#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the admin plane, through nginx to the fake Dynamo's RL listener
# and worker system servers: allowed calls reach the right worker with the
# right method, path and body and come back unchanged; every deny reason
# with its status, JSON body, access-log variable and error-log line, and
# the workers' records proving that nothing was forwarded; a corpus of
# confusing request targets sent on raw sockets; the embedded variables;
# exact u64 instance ids; the body of a denied call; churn of the fleet,
# "valid=", single-flight refreshes in one and two worker processes, an
# abandoned refresh, and failed refreshes.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ admin_call concurrent doc err_since
	listener_fetches rl_conf vllm_routes worker worker_counts
	worker_records_since /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

$SIG{ALRM} = sub { die "test timed out\n" };
# durations of normal speed, scaled under valgrind (Test::DynamoRL::scale):
# the valid=1s snapshots and the listener's delays, so that a round of
# concurrent calls fits in one staleness period however slow nginx runs

alarm(Test::DynamoRL::scale(300));

my $VALID = Test::DynamoRL::scale(1);
my $DELAY = Test::DynamoRL::scale(300);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(295);

$t->write_file_expand('nginx.conf', nginx_conf(1));
$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;

my @VLLM = vllm_routes();

# the fake's default document: three workers whose ids do not survive a
# double, each advertising the vLLM routes

my $ID0 = '7587888160958628117';
my $ID1 = '9007199254740993';
my $ID2 = '18446744073709551615';

my $W = '/v1/rl/workers';

my ($r, $n, @recs);

###############################################################################

# an allowed call, with the default document

$t->fake_unset('discovery.json');

my $body = qq({"mode": "keep",\t"clear_cache" : false,)
	. qq( "pad": "a\\u00e9 \\"q\\""}\n);

$r = admin("$W/$ID0/engine/pause_generation", body => $body);
is($r->{status}, 200, 'allowed: status');
is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8',
	'allowed: text/plain from the worker passed on');
is_deeply(eval { decode_json($r->{body}) }, { status => 'ok',
	message => 'Engine paused', mode => 'keep',
	clear_cache => JSON::PP::false }, 'allowed: worker answer');
is(scalar @{$r->{fwd}}, 1, 'allowed: one call forwarded');
is($r->{fwd}[0]{worker}, 0, 'allowed: to the worker of the instance id');
is($r->{fwd}[0]{method}, 'POST', 'allowed: method');
is($r->{fwd}[0]{uri}, '/engine/pause_generation', 'allowed: path');
is($r->{fwd}[0]{body}, $body, 'allowed: body byte-identical');
is($r->{log}{deny}, '', 'allowed: no deny reason');

# the worker's bytes come back unchanged, whatever they are

$t->fake_set('worker-1.respond.json', $JS->encode({ status => 200,
	raw => qq({ "status" : "ok",  "odd":[1, 2.50, "\\u00e9"] }\n) }));

$r = admin("$W/$ID1/engine/get_weight_version", body => '');
is($r->{status}, 200, 'raw answer: status');
is($r->{body}, qq({ "status" : "ok",  "odd":[1, 2.50, "\\u00e9"] }\n),
	'raw answer: body unchanged');
is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8',
	'raw answer: content type');
is(join(' ', map { "$_->{worker} $_->{uri} '$_->{body}'" } @{$r->{fwd}}),
	"1 /engine/get_weight_version ''", 'raw answer: empty body forwarded');

$t->fake_set('worker-1.respond.json', $JS->encode({ status => 500,
	body => { error => 'Handler error', message => 'boom' } }));

$r = admin("$W/$ID1/engine/flush_cache");
is($r->{status}, 500, 'handler error: status passed on');
is($r->{body}, '{"error":"Handler error","message":"boom"}',
	'handler error: body passed on');

# a worker's own redirect: the headers that carry its URL never leave the
# gateway (a client would follow a 307 POST straight to the worker); the
# rest of the answer passes, not followed, and is an admin error

my $WURL = 'http://127.0.0.1:' . port(8092);

$t->fake_set('worker-1.respond.json', $JS->encode({ status => 307,
	body => { status => 'ok' },
	headers => [ [ 'Location', "$WURL/engine/flush_cache" ],
		[ 'content-location', "$WURL/engine/x" ],
		[ 'Refresh', "0; url=$WURL/" ],
		[ 'Link', "<$WURL/>; rel=preload" ],
		[ 'X-Other', 'kept' ] ] }));

$r = admin("$W/$ID1/engine/flush_cache");
is($r->{status} . ' ' . $r->{body}, '307 {"status":"ok"}',
	'worker redirect: status and body passed on');
is(join(' ', map { $r->{headers}{$_} // '-' }
	qw/ location content-location refresh link x-other /),
	'- - - - kept', 'worker redirect: no header with its URL');
is(join(' ', map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'1 /engine/flush_cache', 'worker redirect: not followed');
is(scalar(grep { /answered \/engine\/flush_cache with an error, status 307/ } @{$r->{err}}),
	1, 'worker redirect: an admin error') or diag(@{$r->{err}});

$t->fake_unset('worker-1.respond.json');

# a logical failure with 200 is passed on too

$r = admin("$W/$ID2/engine/update_weights_from_tensor");
is($r->{status}, 200, 'logical failure: status');
like($r->{body}, qr/"status":"error"/, 'logical failure: body');
is(join(' ', map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'2 /engine/update_weights_from_tensor', 'logical failure: forwarded');

# routes with "/", advertised by a worker as the Rust sidecar does

$t->fake_set('discovery.json', doc(
	worker(id => '4242', w => 1,
		routes => [ 'control/pause_generation',
			'control/start_profile' ]),
	worker(id => $ID0, w => 0),
));

$r = admin("$W/4242/engine/control/start_profile", body => '{"x":1}');
is($r->{status}, 200, 'slash route: status');
is($r->{body}, '{"message":"Profiling started","status":"ok"}',
	'slash route: body');
is(join(' ', map { "$_->{worker} $_->{method} $_->{uri} $_->{body}" }
	@{$r->{fwd}}), '1 POST /engine/control/start_profile {"x":1}',
	'slash route: forwarded');

# the fake does not know this one: its 404 comes back as it is

$r = admin("$W/4242/engine/control/pause_generation");
is($r->{status}, 404, 'slash route unknown to worker: status passed on');
is($r->{body}, '{"error":"Route not found","message":'
	. '"Route /engine/control/pause_generation not found"}',
	'slash route unknown to worker: body passed on');
is(join(' ', map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'1 /engine/control/pause_generation',
	'slash route unknown to worker: forwarded');

###############################################################################

# the embedded variables of an allowed call

$t->fake_unset('discovery.json');

$r = admin("$W/$ID2/engine/liveness_probe");
is($r->{status}, 200, 'variables: allowed');
is($r->{log}{system_url}, 'http://127.0.0.1:' . port(8093),
	'variables: $dynamo_rl_system_url');
is($r->{log}{engine_path}, '/engine/liveness_probe',
	'variables: $dynamo_rl_engine_path');
is($r->{log}{instance_id}, $ID2, 'variables: $dynamo_rl_instance_id');
is($r->{log}{route}, 'liveness_probe', 'variables: $dynamo_rl_route');
like($r->{log}{generation}, qr/^[1-9]\d*$/,
	'variables: $dynamo_rl_snapshot_generation');
is($r->{log}{plane}, 'admin', 'variables: $dynamo_rl_plane');

my $gen = $r->{log}{generation};

$r = admin("$W/$ID2/engine/liveness_probe");
cmp_ok($r->{log}{generation}, '>', $gen,
	'variables: generation moves with a refresh (valid=0)');

###############################################################################

# u64 ids are matched exactly: neighbours that a double would confuse are
# unknown

for my $id ($ID2, $ID1) {
	$r = admin("$W/$id/engine/liveness_probe");
	my $w = $id eq $ID2 ? 2 : 1;
	is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" }
		@{$r->{fwd}}), "200 $w /engine/liveness_probe",
		"u64: $id exact");
}

for my $id ('9007199254740992', '18446744073709551614', '7587888160958628118',
	'7587888160958628116')
{
	$r = admin("$W/$id/engine/liveness_probe");
	is(join(' ', $r->{status}, $r->{json}{error} // '',
		scalar @{$r->{fwd}}), '404 unknown_worker 0',
		"u64: $id unknown");
}

###############################################################################

# each deny reason: status, JSON body, $dynamo_rl_deny_reason, one
# error-log line, and nothing forwarded

deny('method GET', "$W/$ID0/engine/liveness_probe", 405, 'method',
	method => 'GET', line => qr/dynamo rl: method "GET" not allowed/);

is($r->{headers}{allow}, 'POST', 'method: Allow');

deny('method PUT', "$W/$ID0/engine/liveness_probe", 405, 'method',
	method => 'PUT', line => qr/dynamo rl: method "PUT" not allowed/);

deny('bad_path grammar', "$W/abc/engine/liveness_probe", 400, 'bad_path');

deny('bad_path non-canonical', "$W/$ID0/engine/liveness%5Fprobe", 400,
	'bad_path', line => qr/dynamo rl: non-canonical request target/);

deny('bad_path without route', "$W/$ID0/engine/", 400, 'bad_path');

# discovery unavailable: listener 500, listener down, invalid document

$t->fake_set('discovery.status', '500');

deny('listener 500', "$W/$ID0/engine/liveness_probe", 503,
	'discovery_unavailable',
	also => qr/\[error\].*discovery refresh from "\/_rl_discovery" failed/);

$t->fake_unset('discovery.status');

deny('listener down', "$W/$ID0/engine/liveness_probe", 503,
	'discovery_unavailable', port => 8086,
	also => qr/\[error\].*discovery refresh from "\/_rl_down" failed/);

$t->fake_set('discovery.json', '{"protocol_version":1,"workers":[');

deny('invalid document', "$W/$ID0/engine/liveness_probe", 503,
	'discovery_unavailable',
	also => qr/\[error\].*discovery document from "\/_rl_discovery"/);

# worker-level problems, all in one document that stays valid; every
# entry that must not be called points at worker 2

$t->fake_set('discovery.json', doc(
	worker(id => '101', w => 0,
		routes => [ 'liveness_probe', 'flush_cache' ]),
	worker(id => '102', w => 1, routes => [ 'get_weight_version' ]),
	worker(id => '103', w => 2),
	worker(id => '103', w => 2, component => 'prefill'),
	worker(id => '104', w => 2, routes => 'liveness_probe'),
	worker(id => '105', w => 2, component => undef),
	worker(id => '106', w => 2, instance_id => '106'),
	worker(id => '107', w => 2, routes => [],
		error => 'worker discovery timed out after 30s'),
	worker(id => '108', w => 2, system_url => undef),
	worker(id => '109', w => 2,
		system_url => 'http://user:pw@127.0.0.1:' . port(8093)),
	worker(id => '110', w => 2,
		system_url => 'http://127.0.0.1:' . port(8093) . '/engine'),
	worker(id => '111', w => 2, routes => [ 'liveness_probe', '' ]),
	worker(id => '112', w => 2, instance_id => -112),
	worker(id => '113', w => 1, routes => [ 'liveness_probe' ],
		system_url => 'http://127.0.0.1:' . port(8092) . '/'),
	worker(id => '0', w => 1, routes => [ 'flush_cache' ]),
));

$r = admin("$W/101/engine/liveness_probe");
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 0 /engine/liveness_probe', 'fleet: a good worker stays usable');

$r = admin("$W/113/engine/liveness_probe");
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 1 /engine/liveness_probe',
	'fleet: system_url with a trailing slash');
is($r->{log}{system_url}, 'http://127.0.0.1:' . port(8092),
	'fleet: trailing slash not in $dynamo_rl_system_url');

$r = admin("$W/0/engine/flush_cache");
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 1 /engine/flush_cache', 'fleet: instance id 0');

deny(@$_) for (
	[ 'unknown id', "$W/100/engine/liveness_probe", 404, 'unknown_worker' ],
	[ 'string id', "$W/106/engine/liveness_probe", 404, 'unknown_worker' ],
	[ 'negative id', "$W/112/engine/liveness_probe", 404, 'unknown_worker' ],
	[ 'duplicate id', "$W/103/engine/liveness_probe", 409, 'ambiguous_worker' ],
	[ 'routes not an array', "$W/104/engine/liveness_probe", 503, 'worker_invalid' ],
	[ 'component missing', "$W/105/engine/liveness_probe", 503, 'worker_invalid' ],
	[ 'empty route entry', "$W/111/engine/liveness_probe", 503, 'worker_invalid' ],
	[ 'worker error', "$W/107/engine/liveness_probe", 503, 'worker_error' ],
	[ 'no system_url', "$W/108/engine/liveness_probe", 503, 'no_system_url' ],
	[ 'system_url userinfo', "$W/109/engine/liveness_probe", 503, 'no_system_url' ],
	[ 'system_url path', "$W/110/engine/liveness_probe", 503, 'no_system_url' ],

	[ 'callable, not advertised', "$W/101/engine/control/sleep", 403, 'route_not_advertised' ],
	[ 'another worker\'s route', "$W/101/engine/get_weight_version", 403, 'route_not_advertised' ],
	[ 'prefix of a route', "$W/101/engine/liveness", 403, 'route_not_advertised' ],
	[ 'extension of a route', "$W/101/engine/liveness_probe2", 403, 'route_not_advertised' ],
	[ 'route below a route', "$W/101/engine/liveness_probe/x", 403, 'route_not_advertised' ],
	[ 'case of a route', "$W/101/engine/Liveness_probe", 403, 'route_not_advertised' ],
	[ 'dynamo_rl_admin_routes', "$W/101/engine/liveness_probe", 403, 'route_not_advertised', port => 8084 ],
);

$r = admin("$W/101/engine/flush_cache", port => 8084);
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 0 /engine/flush_cache', 'dynamo_rl_admin_routes: listed route');

# the body of a denied call is read and dropped: a request hidden in it is
# never parsed as the next one on the connection

{
	my $hidden = "POST $W/101/engine/flush_cache HTTP/1.1\r\n"
		. "Host: localhost\r\nContent-Length: 2\r\n\r\n{}";

	my $before = worker_counts($t);

	my $raw = http("POST $W/101/engine/control/sleep HTTP/1.1\r\n"
		. "Host: localhost\r\nContent-Type: application/json\r\n"
		. 'Content-Length: ' . length($hidden) . "\r\n\r\n$hidden"
		. "POST $W/101/engine/liveness_probe HTTP/1.1\r\n"
		. "Host: localhost\r\nConnection: close\r\n"
		. "Content-Length: 2\r\n\r\n{}");

	is(join(' ', $raw =~ m!HTTP/1\.1 (\d{3}) !g), '403 200',
		'denied body: two responses on the connection');
	is(join(' ', map { "$_->{worker} $_->{uri}" } worker_records_since($t,
		$before)), '0 /engine/liveness_probe',
		'denied body: the hidden request never reached a worker');
}

###############################################################################

# the path-confusion corpus, on raw sockets: every target is denied, or
# reaches exactly an advertised route of the worker it names

my $A = $ID0;
my $B = $ID1;
my $C = $ID2;

my %ADV = (
	0 => { map { $_ => 1 } @VLLM },
	1 => { map { $_ => 1 } 'control/start_profile', 'flush_cache' },
	2 => { map { $_ => 1 } 'liveness_probe' },
);

$t->fake_set('discovery.json', doc(
	worker(id => $A, w => 0),
	worker(id => $B, w => 1, routes => [ sort keys %{$ADV{1}} ]),
	worker(id => $C, w => 2, routes => [ sort keys %{$ADV{2}} ]),
));

my %WORKER = ($A => 0, $B => 1, $C => 2);

my @corpus = (
	[ "$W/$A/engine/liveness_probe", 0, 'allow' ],
	[ "$W/$B/engine/control/start_profile", 1, 'allow' ],
	[ "$W/$A/engine/liveness_probe/", 0 ],
	[ "$W/$A/engine/liveness_probe?", 0 ],
	[ "$W/$A/engine/liveness_probe?x=1", 0 ],
	[ "$W/$A/engine/liveness_probe?/../../control/sleep", 0 ],
	[ "$W/$A/engine/liveness_probe#frag", 0 ],
	[ "$W/$A/engine%2Fliveness_probe", 0 ],
	[ "$W/$A%2Fengine%2Fliveness_probe", 0 ],
	[ "$W/$A/engine/liveness_probe%2F", 0 ],
	[ "$W/$B/engine/control%2Fstart_profile", 1 ],
	[ "$W/$B/engine/control%2fstart_profile", 1 ],
	[ "$W/$A/engine/%6civeness_probe", 0 ],
	[ "$W/$A/engine/liveness_probe%3Fx=1", 0 ],
	[ "$W/$A/engine/liveness_probe%23x", 0 ],
	[ "$W/$A/engine/liveness_probe%0D%0AX-Injected:%201", 0 ],
	[ "$W/$A/engine/liveness_probe%20HTTP/1.1%0D%0AX-Injected:%201", 0 ],
	[ "$W/$A/engine/%2e%2e/engine/liveness_probe", 0 ],
	[ "$W/$A/engine/%2e/liveness_probe", 0 ],
	[ "$W/$A/engine/./liveness_probe", 0 ],
	[ "$W/$A/engine/x/../liveness_probe", 0 ],
	[ "$W/$A/engine/control/../liveness_probe", 0 ],
	[ "$W/$A/./engine/liveness_probe", 0 ],
	[ "$W/x/../$A/engine/liveness_probe", 0 ],
	[ "/v1/rl/workers/../workers/$A/engine/liveness_probe", 0 ],
	[ "/v1/rl/x/../workers/$A/engine/liveness_probe", 0 ],
	[ "$W/$A/engine/liveness_probe/.", 0 ],
	[ "$W/$A/engine/liveness_probe/..", 0 ],
	[ "$W/$A/engine/%c0%af../liveness_probe", 0 ],
	[ "$W//$A/engine/liveness_probe", 0 ],
	[ "$W/$A//engine/liveness_probe", 0 ],
	[ "$W/$A/engine//liveness_probe", 0 ],
	[ "$W/$A/engine/liveness_probe//", 0 ],
	[ "/v1/rl//workers/$A/engine/liveness_probe", 0 ],
	[ "$W/$A/engine\\liveness_probe", 0 ],
	[ "$W/$A\\engine\\liveness_probe", 0 ],
	[ "$W/$A/engine/..\\liveness_probe", 0 ],
	[ "$W/$A/engine/liveness_probe%5C", 0 ],
	[ "$W/$A/engine/liveness_probe%00", 0 ],
	[ "$W/$A/engine/liveness_probe%00.json", 0 ],
	[ "$W/$A/engine/liveness_probe;x=1", 0 ],
	[ "$W/$A;x=1/engine/liveness_probe", 0 ],
	[ "$W/$A/engine;x=1/liveness_probe", 0 ],
	[ "$W/$A/Engine/liveness_probe", 0 ],
	[ "$W/$A/ENGINE/liveness_probe", 0 ],
	[ "$W/$A/engine/LIVENESS_PROBE", 0 ],
	[ "$W/$A/engines/liveness_probe", 0 ],
	[ "$W/$A/liveness_probe", 0 ],
	[ "$W/$A/engine/control/sleep", 0 ],
	[ "$W/$A/engine/control/start_profile", 0 ],
	[ "$W/$C/engine/flush_cache", 2 ],
	[ "$W/$A/engine/liveness", 0 ],
	[ "$W/$A/engine/liveness_probe2", 0 ],
	[ "$W/$A/engine/liveness_probe.json", 0 ],
	[ "$W/$A/engine/liveness_probe/x", 0 ],
	[ "$W/$B/engine/control", 1 ],
	[ "$W/$B/engine/control/start_profile/x", 1 ],
	[ "$W/$B/engine/control/start", 1 ],
	[ "$W/123456789012345678901/engine/liveness_probe", 0 ],
	[ "$W/18446744073709551616/engine/liveness_probe", 0 ],
	[ "$W/99999999999999999999/engine/liveness_probe", 0 ],
	[ "$W/+$A/engine/liveness_probe", 0 ],
	[ "$W/-1/engine/liveness_probe", 0 ],
	[ "$W/0$A/engine/liveness_probe", 0 ],
	[ "$W/00$C/engine/liveness_probe", 2 ],
	[ "$W/0x694d98147d54c115/engine/liveness_probe", 0 ],
	[ "$W/$A.0/engine/liveness_probe", 0 ],
	[ "$W/%37587888160958628117/engine/liveness_probe", 0 ],
	[ "$W/ $A/engine/liveness_probe", 0 ],
	[ "/V1/rl/workers/$A/engine/liveness_probe", 0 ],
	[ "/v1/rl/workers%2F$A/engine/liveness_probe", 0 ],
	[ "$W/$A/engine/liveness_probe%09", 0 ],
	[ 'http://127.0.0.1:' . port(8080) . "$W/$A/engine/liveness_probe", 0,
		'either' ],
	[ 'http://127.0.0.1:' . port(8080) . "$W/$A/engine/control/sleep", 0 ],
	[ 'http://127.0.0.1:' . port(8080) . "$W/$A/engine/../engine/x", 0 ],
	[ 'http://evil.example:80' . "$W/$A/engine/liveness_probe", 0,
		'either' ],
);

my $corpus_start = worker_counts($t);

for my $c (@corpus) {
	my ($target, $w, $want) = @$c;
	$want //= 'deny';

	my $before = worker_counts($t);

	my $raw = http("POST $target HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nContent-Type: application/json\r\n"
		. "Content-Length: 2\r\n\r\n{}");
	my $res = parse_response($raw);

	my @fwd = worker_records_since($t, $before);
	my $json = $res ? eval { decode_json($res->{body}) } : undef;

	my $denied = $res && $res->{status} >= 400 && !@fwd
		&& ref $json eq 'HASH' && defined $json->{error}
		&& !ref $json->{error};

	# nginx itself refuses some targets before any location is chosen:
	# its own page, not a JSON error, but nothing forwarded either

	my $refused = $res && $res->{status} == 400 && !@fwd
		&& $res->{body} =~ /<title>400 Bad Request<\/title>/;

	my $reached = $res && $res->{status} == 200 && @fwd == 1
		&& $fwd[0]{worker} == $w && $fwd[0]{method} eq 'POST'
		&& $fwd[0]{uri} =~ m!^/engine/(.+)\z!s && $ADV{$w}{$1}
		&& $fwd[0]{body} eq '{}';

	my $ok = $want eq 'allow' ? $reached
		: $want eq 'deny' ? ($denied || $refused)
		: ($denied || $refused || $reached);

	ok($ok, "corpus: $target " . ($reached ? 'reached'
		: $denied ? "denied $res->{status} $json->{error}"
		: $refused ? 'refused by nginx' : 'neither'))
		or diag(explain({ response => $raw, forwarded => \@fwd }));
}

# everything any worker saw during the corpus: an advertised route of its
# own, exactly, with the headers nginx and the client are expected to send

my %HDR = map { $_ => 1 } qw/ host connection content-length content-type
	x-test /;

for my $w (0 .. 2) {
	my @seen = worker_records_since($t, { $w => $corpus_start->{$w} });
	my @bad = grep { !($_->{uri} =~ m!^/engine/(.+)\z!s && $ADV{$w}{$1}
		&& $_->{method} eq 'POST') } @seen;
	my @hdr = grep { !$HDR{$_} } map { keys %{$_->{headers}} } @seen;

	ok(!@bad && !@hdr, "corpus: worker $w saw only advertised routes")
		or diag(explain({ bad => \@bad, headers => \@hdr }));
}

###############################################################################

# churn, with valid=0: a worker that left, a route withdrawn

my $doc_ab = doc(
	worker(id => $A, w => 0),
	worker(id => $B, w => 1),
);

$t->fake_set('discovery.json', $doc_ab);

$r = admin("$W/$B/engine/flush_cache");
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 1 /engine/flush_cache', 'churn: worker present');

$t->fake_set('discovery.json', doc(worker(id => $A, w => 0)));

$r = admin("$W/$B/engine/flush_cache");
is(join(' ', $r->{status}, $r->{json}{error} // '', scalar @{$r->{fwd}}),
	'404 unknown_worker 0', 'churn: worker gone');

$t->fake_set('discovery.json', doc(
	worker(id => $A, w => 0),
	worker(id => $B, w => 1,
		routes => [ grep { $_ ne 'flush_cache' } @VLLM ]),
));

$r = admin("$W/$B/engine/flush_cache");
is(join(' ', $r->{status}, $r->{json}{error} // '', scalar @{$r->{fwd}}),
	'403 route_not_advertised 0', 'churn: route withdrawn');

$r = admin("$W/$B/engine/liveness_probe");
is($r->{status}, 200, 'churn: other routes stay');

# valid=30s: a change of the document is not seen, and not fetched (a
# location of the valid=0 server's own source: $K)

my $K = '/v1/rl/kept';

$t->fake_set('discovery.json', $doc_ab);

$r = admin("$W/$B/engine/flush_cache");
is($r->{status}, 200, 'valid=30s: snapshot taken (valid=0 server)');

my $fetches = listener_fetches($t);

$r = admin("$K/$B/engine/flush_cache");
is($r->{status}, 200, 'valid=30s: allowed from the snapshot');

$t->fake_set('discovery.json', doc(worker(id => $A, w => 0)));

$r = admin("$K/$B/engine/flush_cache");
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 1 /engine/flush_cache', 'valid=30s: change not seen');
is(listener_fetches($t), $fetches, 'valid=30s: no fetch');

$r = admin("$W/$B/engine/flush_cache");
is($r->{status}, 404, 'valid=30s: the valid=0 server sees the change');
is(listener_fetches($t), $fetches + 1, 'valid=30s: one fetch');

# valid=30s again: the snapshot the valid=0 server just took is used

$r = admin("$K/$B/engine/flush_cache");
is($r->{status}, 404, 'valid=30s: the newer snapshot is used');
is(listener_fetches($t), $fetches + 1, 'valid=30s: still no fetch');

###############################################################################

# single flight: ten concurrent calls on a stale snapshot, one fetch

$t->fake_set('discovery.json', $doc_ab);

$r = admin("$W/$A/engine/liveness_probe", port => 8085);
is($r->{status}, 200, 'single flight: first call');

stale($VALID);

$t->fake_set('discovery.delay_ms', $DELAY);

$fetches = listener_fetches($t);

my @res = concurrent(8085, map { "$W/$A/engine/liveness_probe" } 1 .. 10);

is(join(' ', map { $_->{status} } @res), join(' ', (200) x 10),
	'single flight: all allowed');
is(listener_fetches($t), $fetches + 1, 'single flight: one fetch');

$t->fake_unset('discovery.delay_ms');

# the refresh of a POST is a bare GET

my $last = $t->fake_records('listener')->[-1];

is($last->{method}, 'GET', 'refresh: GET');
is($last->{uri}, '/v1/rl/workers', 'refresh: uri');
ok(!grep({ /^(?:content-length|transfer-encoding|content-type|x-test)$/ }
	keys %{$last->{headers}}), 'refresh: no body, no client headers')
	or diag(explain($last->{headers}));

# the client of the call that leads a refresh goes away: the calls waiting
# for that refresh are not denied for it, the listener is healthy

stale($VALID);

$t->fake_set('discovery.delay_ms', 5 * $DELAY);
$fetches = listener_fetches($t);

{
	my $off = -s $t->testdir() . '/error.log';
	my $call = "POST $W/$A/engine/liveness_probe HTTP/1.1\r\n"
		. "Host: localhost\r\nConnection: close\r\n"
		. "Content-Length: 2\r\n\r\n{}";
	my $peer = '127.0.0.1:' . port(8085);

	my $leader = http($call, PeerAddr => $peer, start => 1);
	$t->wait_for(sub { listener_fetches($t) > $fetches }, 5);

	my @waiters = map { http($call, PeerAddr => $peer, start => 1) } 1 .. 3;

	# nginx is built with debug logging for the tests (error.log at debug)

	$t->wait_for(sub {
		my %c = map { /\*(\d+) dynamo rl discovery: waiting for flight/
			? ($1 => 1) : () } err_since($t, $off);
		keys %c >= 3;
	}, 5);

	close $leader;

	@res = map { parse_response(http_end($_)) // { status => 0 } } @waiters;
}

is(join(' ', map { $_->{status} } @res), '200 200 200',
	'abandoned refresh: waiters allowed');

ok(listener_fetches($t) <= $fetches + 2, 'abandoned refresh: fetches bounded');

$t->fake_unset('discovery.delay_ms');

# a failed refresh is never replaced by the older snapshot

$r = admin("$W/$A/engine/liveness_probe", port => 8085);
is($r->{status}, 200, 'failed refresh: allowed before');

$t->fake_set('discovery.status', '500');

stale($VALID);

$fetches = listener_fetches($t);

$r = admin("$W/$A/engine/liveness_probe", port => 8085);
is(join(' ', $r->{status}, $r->{json}{error} // '', scalar @{$r->{fwd}}),
	'503 discovery_unavailable 0', 'failed refresh: denied');
is(listener_fetches($t), $fetches + 1, 'failed refresh: fetched');

$r = admin("$W/$A/engine/liveness_probe", port => 8085);
is($r->{json}{error}, 'discovery_unavailable', 'failed refresh: still denied');

$t->fake_unset('discovery.status');

$r = admin("$W/$A/engine/liveness_probe", port => 8085);
is($r->{status}, 200, 'failed refresh: allowed once the listener recovers');

###############################################################################

# two worker processes: one fetch per staleness period, and both agree

$t->write_file_expand('nginx.conf', nginx_conf(2));
$t->reload();

ok(!$t->reload_failed(), 'two processes: reloaded');

# rounds 1 and 2 allow worker B, round 3 follows it out of the fleet

my %pids;

for my $round (1 .. 3) {
	my $status = $round < 3 ? 200 : 404;

	$t->fake_set('discovery.json', doc(worker(id => $A, w => 0)))
		if $round == 3;

	stale($VALID);

	$t->fake_set('discovery.delay_ms', $DELAY);
	$fetches = listener_fetches($t);

	my $from = ($t->read_file('rl.log') =~ tr/\n//);

	@res = concurrent(8087, map { "$W/$B/engine/liveness_probe" } 1 .. 24);

	is(join(' ', map { $_->{status} } @res), join(' ', ($status) x 24),
		"two processes: round $round all $status");
	is(listener_fetches($t), $fetches + 1,
		"two processes: round $round one fetch");

	# a worker process logs a call after its client has the answer

	my @log = @{$t->wait_for(sub {
		my @l = access_log();
		@l = grep { $_->{port} eq port(8087) } @l[$from .. $#l];
		return @l >= 24 ? \@l : undef;
	}, 5) // []};

	$pids{$_->{pid}}++ for @log;
}

$t->fake_unset('discovery.delay_ms');

is(scalar keys %pids, 2, 'two processes: both served calls');

###############################################################################

# done: the harness's own checks are not timed

alarm(0);

###############################################################################

sub nginx_conf {
	my ($workers) = @_;

	return rl_conf(<<"EOF");

%%RL_MAIN workers=$workers%%

http {
    %%RL_HTTP 32m%%

    %%RL_ACCESS_LOG t status port pid plane deny system_url engine_path instance_id route generation uri%%

    %%RL_LISTENER%%

    %%RL_PROXY_KEEPALIVE%%

    # valid=0: every call refreshes

    server {
        %%RL_LISTEN 8080%%

        %%RL_CONTROL_PLANES valid=0%%

        # valid=30s on the same source (a source is its URI in its server)

        location /v1/rl/kept/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=30s;

            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        %%RL_NOT_FOUND error%%
    }

    # valid=30s

    %%RL_ADMIN_SERVER 8083 valid=30s%%

    # a static allowlist on top of what workers advertise

    server {
        %%RL_LISTEN 8084%%

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;
            dynamo_rl_admin_routes flush_cache control/start_profile;

            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        %%RL_DISCOVERY_FETCH rl_listener 1m%%
    }

    # valid=1s (scaled): single flight and failed refreshes

    %%RL_ADMIN_SERVER 8085 valid=${VALID}s%%

    # the listener is down: nothing listens on 8099

    server {
        %%RL_LISTEN 8086%%

        %%RL_ADMIN_DOWN%%
    }

    # valid=1s (scaled), spread over the worker processes

    server {
        %%RL_LISTEN 8087 reuseport%%

        %%RL_ADMIN_PLANE valid=${VALID}s%%
    }
}

EOF
}

###############################################################################

# one admin call (Test::DynamoRL::Fixture::admin_call)

sub admin {
	my ($path, %o) = @_;
	return admin_call($t, $o{method} // 'POST', $path, %o);
}

# a denial, checked in full: status, JSON body, access log, exactly one
# error-log line, nothing forwarded

sub deny {
	my ($name, $path, $status, $reason, %o) = @_;

	$r = admin($path, %o);

	my $line = $o{line} // qr/dynamo rl admin: denied, \Q$reason\E:/;

	is($r->{status}, $status, "$name: status");
	is(join(' ', $r->{headers}{'content-type'} // '',
		sort keys %{$r->{json}}) . ' ' . ($r->{json}{error} // '')
		. ' ' . (($r->{json}{message} // '') ne '' ? 'message' : ''),
		"application/json error message $reason message",
		"$name: JSON body");
	is($r->{log}{deny}, $reason, "$name: \$dynamo_rl_deny_reason");
	is(scalar(grep { $_ =~ $line } @{$r->{err}}), 1,
		"$name: one error-log line")
		or diag(join '', @{$r->{err}});
	is(scalar @{$r->{fwd}}, 0, "$name: nothing forwarded")
		or diag(explain($r->{fwd}));

	if ($o{also}) {
		ok(scalar(grep { $_ =~ $o{also} } @{$r->{err}}),
			"$name: cause logged") or diag(join '', @{$r->{err}});
	}

	return $r;
}

sub access_log {
	my $text = eval { $t->read_file('rl.log') } // '';
	return map { $JS->decode($_) } grep { /\S/ } split /\n/, $text;
}

# waits until the snapshot is older than "valid" seconds

sub stale {
	my ($valid) = @_;

	# the snapshot was stored at the latest when the last answer came,
	# which can be well after the listener saw the request (delay_ms)

	my $since = time();

	$t->wait_for(sub { time() > $since + $valid + 0.3 }, $valid + 5);
}

###############################################################################
