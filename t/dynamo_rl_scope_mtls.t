#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for examples/dynamo-rl-mtls.conf, the worked mutual-TLS example
# (issue 16): the test makes a CA, a server certificate and the clients'
# certificates with openssl in its own directory; two teams' certificates
# are mapped to two scopes over one snapshot (each allowed its own,
# refused the other's, nothing forwarded where refused); a certificate of
# the CA without a mapping has no scope (403 caller_scope); no certificate
# or one of another CA is refused by nginx; the monitor reads the gate and
# cannot change it; only the gate's owner closes it.  A team's subject in
# another case (OU=TEAM-A) has no scope: the example's identity map uses
# case-sensitive anchored regular expressions, as its string keys would
# match any case.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use POSIX ();

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ example_conf time_limit vllm_routes /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

plan(skip_all => 'no openssl or curl')
	unless system('openssl version >/dev/null 2>&1') == 0
	&& system('curl -V >/dev/null 2>&1') == 0;

my $t = Test::DynamoRL->new()->has(qw/http proxy map ssl rewrite/)
	->plan(26 + 6);

my $CERTS = $t->testdir() . '/certs';

make_certs();

$t->write_file('nginx.conf', example());
$t->run_fake_dynamo()->run();

###############################################################################

my $W = '/v1/rl/workers';

$t->fake_set('discovery.json', '{"protocol_version":1,"namespace":"team",'
	. '"workers":[' . join(',', worker(101, 0, 'team-a'),
		worker(102, 1, 'team-b'), worker(103, 2, 'team-a-x1')) . ']}');

my $r;

# the admin plane by scope: who calls, the call, and its status, the
# error of a JSON answer and what the fake workers received ("none")

for my $c (

	# team a: its own workers, not team b's

	[ 'team-a', "$W/101/engine/pause_generation",
		'200 0 /engine/pause_generation', 'team-a: its own worker' ],
	[ 'team-a', "$W/103/engine/flush_cache",
		'200 2 /engine/flush_cache', 'team-a: under its prefix' ],
	[ 'team-a', "$W/102/engine/liveness_probe", '404 unknown_worker none',
		'team-a: team b\'s worker unknown, not forwarded' ],

	# team b: its own, read-only routes

	[ 'team-b', "$W/102/engine/get_weight_version",
		'200 1 /engine/get_weight_version', 'team-b: its own worker' ],
	[ 'team-b', "$W/102/engine/pause_generation",
		'403 route_not_advertised none', 'team-b: a route not in its set' ],
	[ 'team-b', "$W/101/engine/liveness_probe", '404 unknown_worker none',
		'team-b: team a\'s worker' ],
	[ 'team-b', "$W/103/engine/liveness_probe", '404 unknown_worker none',
		'team-b: exact, not team-a-x1' ],
)
{
	my ($who, $path, $expect, $name) = @$c;

	is(admin_as($who, 'POST', $path, '{}'), $expect, $name);
}

# discovery in scope

is(ids(curl('team-a', 'GET', $W)), '101 103', 'team-a: discovery');
is(ids(curl('team-b', 'GET', $W)), '102', 'team-b: discovery');

is(admin_as('team-a', 'GET', "$W/103/health"), '200 2 /health',
	'team-a: health');

# a certificate of our CA without a scope; none; another CA's

is(admin_as('stranger', 'POST', "$W/101/engine/liveness_probe", '{}'),
	'403 caller_scope none', 'stranger: no scope');
is(scalar($t->log_lines('error.log',
	qr/caller scope denied: "dynamo_rl_namespace" is empty/)), 1,
	'stranger: one log line');

$r = curl('stranger', 'GET', $W);
is(join(' ', $r->{status}, $r->{json}{error} // ''), '403 caller_scope',
	'stranger: no discovery');

# a team's subject in another case: a map's string keys would match it

is(admin_as('team-a-upper', 'POST', "$W/101/engine/liveness_probe", '{}'),
	'403 caller_scope none', 'OU=TEAM-A: no scope');

$r = curl('team-a-upper', 'GET', $W);
is(join(' ', $r->{status}, $r->{json}{error} // ''), '403 caller_scope',
	'OU=TEAM-A: no discovery');

is(admin_as(undef, 'POST', "$W/101/engine/liveness_probe", '{}'),
	'400 none', 'no certificate: 400');
is(admin_as('rogue', 'POST', "$W/101/engine/liveness_probe", '{}'),
	'400 none', 'another CA: 400');

# the gate: the monitor reads, the owner changes

$r = curl('monitor', 'GET', '/rl/gate/view');
is(join(' ', $r->{status}, $r->{json}{state} // ''), '200 open',
	'monitor: reads the gate');

my $epoch = $r->{json}{epoch};

$r = curl('monitor', 'POST', '/rl/gate/view', '{"action":"close"}');
is(join(' ', $r->{status}, $r->{json}{error} // ''), '403 read_only',
	'monitor: cannot close it');

$r = curl('monitor', 'POST', '/rl/gate',
	'{"action":"close","reason":"x","lease":"60s"}');
is($r->{status}, 403, 'monitor: not the owner');

$r = curl('team-b', 'POST', '/rl/gate',
	'{"action":"close","reason":"x","lease":"60s"}');
is($r->{status}, 403, 'team-b: not the owner');

is(curl('monitor', 'GET', '/rl/gate/view')->{json}{epoch}, $epoch,
	'gate: unchanged by them');

$r = curl('team-a', 'POST', '/rl/gate',
	'{"action":"close","reason":"refresh","lease":"60s"}');
is(join(' ', $r->{status}, $r->{json}{state} // ''), '200 closed',
	'team-a: closes the gate');

$r = curl('monitor', 'GET', '/rl/gate/view');
is(join(' ', $r->{json}{state} // '', $r->{json}{reason} // '',
	JSON::PP::is_bool($r->{json}{members_changed})
	? ($r->{json}{members_changed} ? 'true' : 'false') : 'none'),
	'closed refresh false', 'monitor: sees it closed, same members');

$r = curl('team-a', 'POST', '/rl/gate', '{"action":"open"}');
is(join(' ', $r->{status}, $r->{json}{state} // ''), '200 open',
	'team-a: reopens it');

# every answer named the caller in the access log (a keep-alive
# connection's last line may be written after its answer was read)

my $team_a = sub {
	my @log = map { decode_json($_) } grep { /\S/ } split /\n/,
		$t->read_file('access.log');

	return scalar(grep { $_->{team} eq 'team-a'
		&& $_->{caller} eq 'CN=rl-orchestrator,OU=team-a,O=example' }
		@log);
};

$t->wait_for(sub { $team_a->() >= 7 }, 5);
is($team_a->(), 7, 'access log: team a\'s calls by its certificate');

# the request plane: each team's tenant and priority from its certificate
# (examples/dynamo-rl-mtls.conf), whatever the client sent

for my $c (
	[ 'team-a', 'x-dynamo-request-priority: 10|x-tenant-id: team-a' ],
	[ 'team-b', 'x-dynamo-request-priority: 0|x-tenant-id: team-b' ],
	[ 'stranger', '' ],
)
{
	my ($who, $expect) = @$c;

	$r = curl($who, 'POST', '/v1/completions',
		'{"prompt":"x","nvext":{"agent_hints":{"priority":99}}}',
		'X-Tenant-Id: team-a', 'X-Dynamo-Request-Priority: 99',
		"X-Dynamo-Attempt-Id: mtls-$who");

	my ($rec) = grep { ($_->{headers}{'x-dynamo-attempt-id'} // '')
		eq "mtls-$who" } @{$t->fake_records('frontend')};

	is(join('|', map { my $v = $rec->{headers}{$_};
			"$_: " . (ref $v ? join(',', @$v) : $v) }
		grep { /tenant|priority/ } sort keys %{$rec->{headers} // {}}),
		$expect, "request plane: $who\'s tenant and priority");
	is($rec && $rec->{body}, '{"prompt":"x","nvext":{"agent_hints":{}}}',
		"request plane: $who\'s body without a priority");
}

###############################################################################

sub make_certs {
	mkdir $CERTS or die "cannot create $CERTS: $!\n";

	my %subject = (
		'team-a' => '/O=example/OU=team-a/CN=rl-orchestrator',
		'team-b' => '/O=example/OU=team-b/CN=rl-orchestrator',
		'monitor' => '/O=example/OU=sre/CN=rl-monitor',
		'stranger' => '/O=example/OU=elsewhere/CN=someone',
		'team-a-upper' => '/O=example/OU=TEAM-A/CN=rl-orchestrator',
	);

	openssl(qw/ req -x509 -newkey rsa:2048 -nodes -days 2 -subj /,
		'/O=example/CN=dynamo-rl test CA', '-keyout', "$CERTS/ca.key",
		'-out', "$CERTS/ca.crt");
	openssl(qw/ req -x509 -newkey rsa:2048 -nodes -days 2 -subj /,
		'/O=rogue/CN=rogue CA', '-keyout', "$CERTS/rogue-ca.key",
		'-out', "$CERTS/rogue-ca.crt");

	$t->write_file('certs/server.ext',
		"subjectAltName=IP:127.0.0.1,DNS:localhost\n");

	sign('server', '/O=example/CN=localhost', 'ca', 'certs/server.ext');
	sign($_, $subject{$_}, 'ca') for sort keys %subject;
	sign('rogue', '/O=example/OU=team-a/CN=rl-orchestrator', 'rogue-ca');
}

sub sign {
	my ($name, $subj, $ca, $ext) = @_;

	openssl(qw/ req -newkey rsa:2048 -nodes -subj /, $subj,
		'-keyout', "$CERTS/$name.key", '-out', "$CERTS/$name.csr");
	openssl(qw/ x509 -req -days 2 -set_serial /, int(rand(1e9)) + 1,
		'-in', "$CERTS/$name.csr", '-CA', "$CERTS/$ca.crt",
		'-CAkey', "$CERTS/$ca.key", '-out', "$CERTS/$name.crt",
		$ext ? ('-extfile', $t->testdir() . "/$ext") : ());
}

sub openssl {
	my (@args) = @_;

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', '/dev/null';
		open STDERR, '>', '/dev/null';
		{ exec 'openssl', @args; }
		POSIX::_exit(127);
	}

	waitpid($pid, 0);
	die "openssl @args failed\n" if $?;
}

sub example {
	my $conf = example_conf($t, 'dynamo-rl-mtls.conf');

	$conf =~ s/\@CERTS\@/$CERTS/g;
	$conf =~ s/127\.0\.0\.1:9443\b/'127.0.0.1:' . port(8443)/ge;
	$conf =~ s/\@FRONTEND\@/'127.0.0.1:' . port(8081)/ge;

	return $conf;
}

sub worker {
	my ($id, $w, $ns) = @_;

	return '{"namespace":"' . $ns . '","component":"backend",'
		. '"endpoint":"rl","instance_id":' . $id . ','
		. '"transport":{"tcp":"127.0.0.1:9999/' . $id . '/rl"},'
		. '"request_plane_url":"dyn://' . $ns . '.backend.rl",'
		. '"system_url":"http://127.0.0.1:' . port(8091 + $w) . '",'
		. '"model":"Qwen/Qwen3-0.6B","routes":' . encode_json([ vllm_routes() ])
		. ',"world_size":1}';
}

sub mark {
	return { map { $_ => scalar @{$t->fake_records("worker-$_")} } 0 .. 2 };
}

sub fwd {
	my ($mk) = @_;

	my @f;

	for my $w (0 .. 2) {
		my $recs = $t->fake_records("worker-$w");
		push @f, map { "$w $_->{uri}" } @$recs[$mk->{$w} .. $#$recs];
	}

	return @f ? join(' ', @f) : 'none';
}

# a call as $who (the name of a client certificate, undef for none): its
# status, the error of a JSON answer, and what the fake workers received
# of it

sub admin_as {
	my ($who, $method, $uri, $body) = @_;

	my $m = mark();
	my $r = curl($who, $method, $uri, $body);

	return join(' ', $r->{status}, $r->{json}{error} // (), fwd($m));
}

sub ids {
	my ($res) = @_;

	return join(' ', sort map { "$_->{instance_id}" }
		@{$res->{json}{workers} // []});
}

sub curl {
	my ($who, $method, $uri, $body, @headers) = @_;

	my @cmd = ('curl', '-s', '-i', '--max-time', '10', '-X', $method,
		'--cacert', "$CERTS/ca.crt",
		defined $who ? ('--cert', "$CERTS/$who.crt",
			'--key', "$CERTS/$who.key") : (),
		defined $body ? ('-H', 'Content-Type: application/json',
			'--data-binary', $body) : (),
		(map { ('-H', $_) } @headers),
		'https://127.0.0.1:' . port(8443) . $uri);

	my $pid = open(my $fh, '-|') // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDERR, '>', '/dev/null';
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	local $/;
	my $out = <$fh>;
	close $fh;

	my $res = parse_response($out) // { status => 0, headers => {},
		body => '' };

	$res->{json} = eval { decode_json($res->{body}) } // {};
	$res->{json} = {} unless ref $res->{json} eq 'HASH';

	return $res;
}

###############################################################################
