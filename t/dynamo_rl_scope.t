#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the trusted listener's per-caller rules (issue 16): callers
# held to their own namespace scope and route set by variables in
# dynamo_rl_namespace and dynamo_rl_admin_routes (a map of a header here;
# t/dynamo_rl_scope_mtls.t maps client certificates); two callers over
# the same snapshot, each allowed its own and refused the other's with
# nothing forwarded; an empty or unparsable value (403 caller_scope, one
# log line, no refresh); variables in nested locations and in the
# two-argument form; the read-only gate API; GET {instance_id}/health;
# each kind of worker answer that counts as an admin error (status,
# $dynamo_rl_admin_result, metrics, one log line, body unchanged); the
# gate's "members_changed"; and HTTP/2 for one of each.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use POSIX ();

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ doc rl_test worker /;

###############################################################################

my $t = rl_test(Test::DynamoRL::scale(240), 150, <<'EOF', has => [qw/ http proxy map http_v2 /]);

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 10m%%

    %%RL_ACCESS_LOG t status deny result=dynamo_rl_admin_result engine_path uri%%

    %%RL_LISTENER%%

    # the caller, as auth_request or a client certificate would say it

    map $http_x_team $rl_ns {
        a         "prefix=team-a";
        b         "exact=team-b";
        tabs      "exact=team-b	 suffix=x1";
        any       any;
        bad       "prefix=team a";
        env       env;
        wide      "prefix=team-a exact=team-b";
        ctl       "exact=team\x01";
        default   "";
    }

    map $http_x_team $rl_routes {
        a         "liveness_probe flush_cache";
        b         "liveness_probe get_weight_version";
        tabs      liveness_probe;
        any       "liveness_probe get_weight_version flush_cache";
        badroute  "liveness_probe ../engine/x";
        default   "";
    }

    map $http_x_team $rl_ns2 {
        badroute  any;
        default   $rl_ns;
    }

    %%RL_PROXY_KEEPALIVE%%

    server {
        %%RL_LISTEN 8080 8085 http2%%

        # its reads are stored (members_changed below)

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_discovery;
            dynamo_rl_namespace $rl_ns;
            proxy_pass http://rl_listener;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;
            dynamo_rl_namespace $rl_ns2;
            dynamo_rl_admin_routes $rl_routes;

            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_APIS gate%%

        location = /rl/gate/view {
            dynamo_rl_gate_api read_only;
        }

        %%RL_APIS metrics%%
    }

    # inherited into a nested location; the two-argument form

    server {
        %%RL_LISTEN 8083%%

        dynamo_rl_namespace exact=$http_x_ns suffix=$http_x_sfx;

        location /v1/rl/ {
            dynamo_rl_admin_routes $http_x_routes;

            %%RL_ADMIN_LOCATION /_rl_discovery valid=0%%
        }

        %%RL_DISCOVERY_FETCH rl_listener%%

        # a caller's scope is per request: the status lists no worker

        %%RL_APIS status%%
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;

my $W = '/v1/rl/workers';

my ($r, @l);

# team a: 101 (team-a), 102 (team-a-x1, a sibling under the prefix);
# team b: 103 (team-b), 105 (team-b-x1); 104 (team-a, liveness_probe
# only); 106 (team-a, reports an error); 107 (team-ab: no team's)

my @FLEET = (
	worker(id => '101', w => 0, namespace => 'team-a'),
	worker(id => '102', w => 1, namespace => 'team-a-x1'),
	worker(id => '103', w => 2, namespace => 'team-b'),
	worker(id => '104', w => 0, namespace => 'team-a',
		routes => [ 'liveness_probe' ]),
	worker(id => '105', w => 1, namespace => 'team-b-x1'),
	worker(id => '106', w => 2, namespace => 'team-a', routes => [],
		error => 'worker discovery timed out after 30s'),
	worker(id => '107', w => 2, namespace => 'team-ab'),
);

$t->fake_set('discovery.json', doc(@FLEET));

###############################################################################

# two callers over one snapshot

$r = admin("$W/101/engine/liveness_probe", team => 'a');
is(fwd($r), '200 0 POST /engine/liveness_probe', 'a: its own worker');

$r = admin("$W/102/engine/flush_cache", team => 'a');
is(fwd($r), '200 1 POST /engine/flush_cache', 'a: a sibling namespace');

deny('a: team b\'s worker', "$W/103/engine/liveness_probe", 404,
	'unknown_worker', team => 'a');
deny('a: team-ab is not under team-a', "$W/107/engine/liveness_probe",
	404, 'unknown_worker', team => 'a');
deny('a: a route not in its set', "$W/101/engine/get_weight_version", 403,
	'route_not_advertised', team => 'a');

$r = admin("$W/103/engine/get_weight_version", team => 'b');
is(fwd($r), '200 2 POST /engine/get_weight_version', 'b: its own worker');

deny('b: team a\'s worker', "$W/101/engine/liveness_probe", 404,
	'unknown_worker', team => 'b');
deny('b: exact, not a sibling', "$W/105/engine/liveness_probe", 404,
	'unknown_worker', team => 'b');
deny('b: a route not in its set', "$W/103/engine/flush_cache", 403,
	'route_not_advertised', team => 'b');

$r = admin("$W/105/engine/liveness_probe", team => 'tabs');
is(fwd($r), '200 1 POST /engine/liveness_probe',
	'exact with suffix, tab-separated');

$r = admin("$W/107/engine/flush_cache", team => 'any');
is(fwd($r), '200 2 POST /engine/flush_cache', 'any: every namespace');

# the discovery plane shows each caller its own workers only

is(ids(discovery('a')), '101 102 104 106', 'discovery: a sees its own');
is(ids(discovery('b')), '103', 'discovery: b sees its own');
is(ids(discovery('any')), '101 102 103 104 105 106 107',
	'discovery: any sees all');

###############################################################################

# an empty or unparsable scope: 403 caller_scope, one log line, no
# refresh, nothing forwarded

for my $c ([ 'no team', undef, qr/"dynamo_rl_namespace" is empty/ ],
	[ 'unknown team', 'nobody', qr/"dynamo_rl_namespace" is empty/ ],
	[ 'two words', 'bad', qr/"dynamo_rl_namespace" is "prefix=team a"/ ],
	[ 'env', 'env', qr/"dynamo_rl_namespace" is "env"/ ],
	[ 'two scopes', 'wide', qr/is "prefix=team-a exact=team-b"/ ],
	[ 'a backslash', 'ctl', qr/is "exact=team\\x5cx01"/ ],
	[ 'a bad route', 'badroute',
		qr/"dynamo_rl_admin_routes" is "liveness_probe \.\.\/engine\/x"/ ])
{
	my ($name, $team, $line) = @$c;
	my $before = listener_fetches();

	deny("$name", "$W/101/engine/liveness_probe", 403, 'caller_scope',
		team => $team, line => $line);
	is(listener_fetches(), $before, "$name: no refresh");
}

# on the discovery plane too: the listener is not asked

{
	my $before = listener_fetches();
	my $res = discovery('nobody');

	is(join(' ', $res->{status}, $res->{json}{error} // ''),
		'403 caller_scope', 'discovery, no scope: 403 caller_scope');
	is(listener_fetches(), $before, 'discovery, no scope: listener not asked');
}

###############################################################################

# variables inherited by a nested location, in the two-argument form

$r = admin("$W/105/engine/flush_cache", port => 8083,
	headers => "X-Ns: team-b\r\nX-Sfx: x1\r\nX-Routes: flush_cache");
is(fwd($r), '200 1 POST /engine/flush_cache', 'nested: allowed');

deny('nested: another namespace', "$W/103/engine/flush_cache", 404,
	'unknown_worker', port => 8083,
	headers => "X-Ns: team-b\r\nX-Sfx: x1\r\nX-Routes: flush_cache");

deny('nested: no suffix', "$W/105/engine/flush_cache", 403, 'caller_scope',
	port => 8083, headers => "X-Ns: team-b\r\nX-Routes: flush_cache",
	line => qr/"dynamo_rl_namespace" is "exact=team-b suffix="/);

deny('nested: no routes', "$W/105/engine/flush_cache", 403, 'caller_scope',
	port => 8083, headers => "X-Ns: team-b\r\nX-Sfx: x1",
	line => qr/"dynamo_rl_admin_routes" is empty/);

{
	my $st = http_json('/rl/status',
		PeerAddr => '127.0.0.1:' . port(8083),
		headers => "X-Ns: team-b\r\nX-Sfx: x1");

	is(join(' ', $st->{status}, scalar @{$st->{json}{snapshot}{fleet} // [ 1 ]}),
		'200 0', 'status with a caller\'s scope: no worker listed')
		or diag(explain($st->{json}));
}

###############################################################################

# the read-only gate API

my $g = gate_post('/rl/gate', { action => 'open' });
my $epoch = $g->{epoch};

$r = http_json('/rl/gate/view');
is(join(' ', $r->{status}, $r->{json}{state} // '', $r->{json}{epoch} // ''),
	"200 open $epoch", 'read_only: GET answers');

$r = http_json('/rl/gate/view', json => { action => 'close',
	reason => 'monitor', lease => '60s' });
is(join(' ', $r->{status}, $r->{headers}{'content-type'},
	$r->{json}{error} // ''), '403 application/json read_only',
	'read_only: POST 403 read_only');
is(http_json('/rl/gate')->{json}{epoch}, $epoch,
	'read_only: the gate did not change');
is(scalar(grep { /gate: POST refused, this gate API is read_only/ }
	$t->log_lines('error.log', qr/\[warn\]/)), 1,
	'read_only: one log line, at warn');

$r = parse_response(http("PUT /rl/gate/view HTTP/1.1\r\nHost: localhost\r\n"
	. "Connection: close\r\nContent-Length: 0\r\n\r\n"));
is(join(' ', $r->{status}, $r->{headers}{allow}), '405 GET, HEAD',
	'read_only: PUT 405');

$r = parse_response(http_head('/rl/gate/view'));
is($r->{status}, 200, 'read_only: HEAD');

###############################################################################

# GET {instance_id}/health: the snapshot's checks without the route check

$r = admin("$W/104/health", team => 'a', method => 'GET');
is(fwd($r), '200 0 GET /health', 'health: forwarded to /health');
like($r->{body}, qr/"status":"ready"/, 'health: the worker\'s answer');
is($r->{log}{engine_path}, '/health', 'health: $dynamo_rl_engine_path');
is($r->{log}{result}, 'ok', 'health: $dynamo_rl_admin_result');

deny('health: POST', "$W/104/health", 405, 'method', team => 'a',
	line => qr/dynamo rl: method "POST" not allowed/);
is($r->{headers}{allow}, 'GET', 'health: POST Allow');
admin("$W/104/health", team => 'a', method => 'HEAD');
is(join(' ', $r->{status}, $r->{headers}{allow} // '', $r->{log}{deny},
	scalar @{$r->{fwd}}), '405 GET method 0', 'health: HEAD 405');
deny('health: another team\'s worker', "$W/103/health", 404,
	'unknown_worker', team => 'a', method => 'GET');
deny('health: a worker with an error', "$W/106/health", 503,
	'worker_error', team => 'a', method => 'GET');
deny('health: no scope', "$W/104/health", 403, 'caller_scope',
	method => 'GET', line => qr/"dynamo_rl_namespace" is empty/);
deny('engine: GET', "$W/104/engine/liveness_probe", 405, 'method',
	team => 'a', method => 'GET',
	line => qr/dynamo rl: method "GET" not allowed/);
is($r->{headers}{allow}, 'POST', 'engine: GET Allow');
deny('health: below it', "$W/104/health/x", 405, 'method', team => 'a',
	method => 'GET', line => qr/dynamo rl: method "GET" not allowed/);

###############################################################################

# a worker's answer judged as the backends answer: passed on unchanged,
# counted and logged as an admin error

my %before = metrics();

for my $c (
	[ 'empty 503', 503, '', 'error', qr/status 503 while/ ],
	[ 'status ERROR', 200, '{"status":"ERROR","message":"starting"}',
		'error', qr/status 200, "status" is "error" while/ ],
	[ 'status Error', 200, '{"status":"Error"}', 'error',
		qr/status 200, "status" is "error" while/ ],
	[ 'success false', 200, '{"success":false,"message":"no"}', 'error',
		qr/status 200, "success" is false while/ ],
	[ 'not JSON', 200, 'Engine paused', 'error',
		qr/status 200, the body is not JSON while/ ],
	[ 'empty 200', 200, '', 'error',
		qr/status 200, the body is empty, not JSON while/ ],
	[ 'status ok', 200, '{"status":"ok"}', 'ok', undef ],
	[ 'status errors', 200, '{"status":"errors"}', 'ok', undef ],
	[ 'success true', 200, '{"success":true}', 'ok', undef ],
)
{
	my ($name, $status, $raw, $result, $line) = @$c;

	$t->fake_set('worker-0.respond.json', $JS->encode({ status => $status,
		raw => $raw }));

	$r = admin("$W/101/engine/liveness_probe", team => 'a');

	is(join(' ', $r->{status}, $r->{body}), "$status $raw",
		"judged $name: passed on unchanged");
	is($r->{log}{result}, $result, "judged $name: \$dynamo_rl_admin_result");

	my @warn = grep { /answered \/engine\/liveness_probe with an error/ }
		@{$r->{err}};

	if (defined $line) {
		is(scalar(@warn), 1, "judged $name: one log line");
		like($warn[0] // '', $line, "judged $name: the cause logged");

	} else {
		is(scalar(@warn), 0, "judged $name: no log line");
	}
}

$t->fake_unset('worker-0.respond.json');

my %after = metrics();

is($after{error} - $before{error}, 6, 'judged: 6 errors in metrics');
is($after{ok} - $before{ok}, 3, 'judged: 3 ok in metrics');

###############################################################################

# members_changed: the set of (instance_id, system_url) against the one of
# when the gate closed

$t->fake_set('discovery.json', doc(@FLEET));
discovery('any');

$g = gate_post('/rl/gate', { action => 'close', reason => 'refresh',
	lease => '60s' });
is(ref $g->{members_changed} ? ($g->{members_changed} ? 'true' : 'false')
	: 'absent', 'false', 'members: false when closed');

$t->fake_set('discovery.json', doc(reverse @FLEET));
discovery('any');
is(members('/rl/gate'), 'false', 'members: another order is the same set');

$t->fake_set('discovery.json', doc(@FLEET,
	worker(id => '108', w => 1, namespace => 'team-a')));
discovery('any');
is(members('/rl/gate'), 'true', 'members: a worker joined');
is(members('/rl/gate/view'), 'true', 'members: the read-only view says so');

$t->fake_set('discovery.json', doc(@FLEET));
discovery('any');
is(members('/rl/gate'), 'false', 'members: back to the same set');

$t->fake_set('discovery.json', doc(@FLEET[1 .. $#FLEET]));
discovery('any');
is(members('/rl/gate'), 'true', 'members: a worker left');

$t->fake_set('discovery.json', doc(@FLEET[1 .. $#FLEET],
	worker(id => '101', w => 1, namespace => 'team-a')));
discovery('any');
is(members('/rl/gate'), 'true', 'members: a worker\'s system_url moved');

# a renew does not take a new reference; a close while closed neither

gate_post('/rl/gate', { action => 'renew' });
gate_post('/rl/gate', { action => 'close', reason => 'again',
	lease => '60s' });
is(members('/rl/gate'), 'true', 'members: kept over renew and close');

$g = gate_post('/rl/gate', { action => 'open' });
ok(exists $g->{members_changed} && !defined $g->{members_changed},
	'members: null when open');

$t->fake_set('discovery.json', doc(@FLEET));
discovery('any');

###############################################################################

# HTTP/2: one of each

SKIP: {
	skip 'no curl with HTTP/2', 8
		unless `curl -V 2>/dev/null` =~ /\bHTTP2\b/;

	# refusals go without a body: nginx answers a POST before reading
	# it with RST_STREAM NO_ERROR, which curl 7.88 often reports as
	# exit 92 without the answer (as in dynamo_rl_browser.t)

	my $h2 = curl('POST', "$W/101/engine/liveness_probe", undef);
	is($h2->{status}, 403, 'h2: no scope 403') or diag(explain($h2));
	is($h2->{json}{error}, 'caller_scope', 'h2: caller_scope');

	$h2 = curl('GET', "$W/101/health", undef, 'X-Team: a');
	is(join(' ', $h2->{version}, $h2->{status}), '2 200', 'h2: health');

	$h2 = curl('POST', '/rl/gate/view', undef);
	is(join(' ', $h2->{status}, $h2->{json}{error} // ''), '403 read_only',
		'h2: read_only') or diag(explain($h2));

	$t->fake_set('worker-0.respond.json', $JS->encode({ status => 503,
		raw => '' }));

	my $seq = 'h2-judged';
	$h2 = curl('POST', "$W/101/engine/liveness_probe", '{}', 'X-Team: a',
		"X-Test: $seq");
	is(join(' ', $h2->{status}, length $h2->{body}), '503 0',
		'h2: empty 503 passed on');

	my $log = $t->wait_for(sub {
		(grep { $_->{t} eq $seq } access_log())[0];
	}, 5) // {};
	is($log->{result}, 'error', 'h2: empty 503 judged an error');

	$t->fake_unset('worker-0.respond.json');

	$h2 = curl('GET', $W, undef, 'X-Team: b');
	is(ids($h2), '103', 'h2: discovery in scope');

	$h2 = curl('POST', "$W/103/engine/liveness_probe", undef, 'X-Team: a');
	is(join(' ', $h2->{status}, $h2->{json}{error} // ''),
		'404 unknown_worker', 'h2: another team\'s worker');
}

###############################################################################

my $SEQ;

sub admin {
	my ($path, %o) = @_;

	my $seq = ++$SEQ;
	my $method = $o{method} // 'POST';
	my $port = port($o{port} // 8080);

	my $before = { map { $_ => scalar @{$t->fake_records("worker-$_")} }
		0 .. 2 };
	my $off = -s $t->testdir() . '/error.log';

	my $req = "$method $path HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nX-Test: $seq\r\n";
	$req .= "X-Team: $o{team}\r\n" if defined $o{team};
	$req .= "$o{headers}\r\n" if defined $o{headers};

	$req .= $method eq 'POST' ? "Content-Type: application/json\r\n"
		. "Content-Length: 2\r\n\r\n{}" : "\r\n";

	my $res = parse_response(http($req, PeerAddr => "127.0.0.1:$port"))
		// { status => 0, headers => {}, body => '' };

	$res->{json} = eval { decode_json($res->{body}) } // {};
	$res->{json} = {} unless ref $res->{json} eq 'HASH';

	$res->{log} = $t->wait_for(sub {
		(grep { $_->{t} eq $seq } access_log())[0];
	}, 5) // {};

	$res->{err} = [ grep { !/\[debug\]/ } err_since($off) ];

	my @fwd;

	for my $w (0 .. 2) {
		my $recs = $t->fake_records("worker-$w");
		push @fwd, map { { %$_, worker => $w } }
			@$recs[$before->{$w} .. $#$recs];
	}

	$res->{fwd} = \@fwd;

	return $r = $res;
}

sub fwd {
	my ($res) = @_;

	return join(' ', $res->{status},
		map { "$_->{worker} $_->{method} $_->{uri}" } @{$res->{fwd}});
}

sub deny {
	my ($name, $path, $status, $reason, %o) = @_;

	admin($path, %o);

	my $line = $o{line} // qr/dynamo rl admin: denied, \Q$reason\E:/;

	is(join(' ', $r->{status}, $r->{headers}{'content-type'} // '',
		$r->{json}{error} // '', $r->{log}{deny} // ''),
		"$status application/json $reason $reason", "$name: denied");
	is(scalar(grep { $_ =~ $line } @{$r->{err}}), 1,
		"$name: one log line") or diag(join '', @{$r->{err}});
	is(scalar @{$r->{fwd}}, 0, "$name: nothing forwarded");

	return $r;
}

sub discovery {
	my ($team) = @_;

	my $res = http_json($W, defined $team
		? (headers => "X-Team: $team") : ());
	$res->{json} = {} unless ref $res->{json} eq 'HASH';

	return $res;
}

sub ids {
	my ($res) = @_;

	return join(' ', sort map { "$_->{instance_id}" }
		@{$res->{json}{workers} // []});
}

sub listener_fetches {
	return scalar @{$t->fake_records('listener')};
}

sub access_log {
	my $text = eval { $t->read_file('rl.log') } // '';
	return map { $JS->decode($_) } grep { /\S/ } split /\n/, $text;
}

sub err_since {
	my ($off) = @_;

	open my $fh, '<', $t->testdir() . '/error.log' or return ();
	seek($fh, $off // 0, 0);
	return <$fh>;
}

sub gate_post {
	my ($uri, $data) = @_;

	my $res = http_json($uri, json => $data);
	return ref $res->{json} eq 'HASH' ? $res->{json} : {};
}

sub members {
	my ($uri) = @_;

	my $v = http_json($uri)->{json}{members_changed};

	return !defined $v ? 'null' : $v ? 'true' : 'false';
}

sub metrics {
	my $text = http_get('/metrics');
	my %m;

	$m{$1} = $2 while $text =~ /^dynamo_rl_admin_calls_total\{result="(\w+)"\} (\d+)$/mg;

	return %m;
}

sub curl {
	my ($method, $uri, $body, @headers) = @_;

	my $hfile = $t->testdir() . '/curl.headers';
	unlink $hfile;

	my @cmd = ('curl', '-sS', '--http2-prior-knowledge', '--max-time', '10',
		'-X', $method, '-D', $hfile, '-w', '\n%{http_version}',
		(map { ('-H', $_) } @headers),
		defined $body ? ('-H', 'Content-Type: application/json',
			'--data-binary', $body) : (),
		'http://127.0.0.1:' . port(8085) . $uri);

	my $pid = open(my $fh, '-|') // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	my $out = join '', <$fh>;
	close $fh;

	my %res = (headers => {}, out => $out);

	($res{body}, $res{version}) = $out =~ /\A(.*)\n(\S*)\z/s
		? ($1, $2) : ($out, '');

	open my $hh, '<', $hfile;
	my $head = $hh ? join('', <$hh>) : '';

	($res{status}) = $head =~ m{^HTTP/\S+ (\d{3})};
	$res{status} //= 0;
	$res{json} = eval { decode_json($res{body}) } // {};
	$res{json} = {} unless ref $res{json} eq 'HASH';

	return \%res;
}

###############################################################################
