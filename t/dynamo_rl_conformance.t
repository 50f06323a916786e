#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A conformance client for dynamo_rl_admin_url (issue 26): a trainer that
# follows Dynamo's reference literally.  It reads GET /v1/rl/workers
# through the gateway, checks protocol_version, and drives a whole weight
# refresh by concatenation: system_url + "/health", then
# system_url + "/engine/" + route for pause, update from disk, flush,
# resume and the weight version, on every worker that has a system_url.
# Every connection it opens goes to the gateway's trusted port, every
# call reaches the right fake worker exactly once, a route the worker
# does not advertise is 403 route_not_advertised, and a worker that left
# the snapshot is 404 unknown_worker.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use IO::Socket::INET;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ doc refresh_args refresh_finish
	refresh_python refresh_start rl_test vllm_routes worker /;

###############################################################################

my $t = rl_test(Test::DynamoRL::scale(120), 24, <<'EOF');

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 8m%%

    %%RL_UPSTREAMS%%

    server {
        %%RL_LISTEN 8080%%

        location = /v1/rl/workers {
            dynamo_rl_plane     discovery;
            dynamo_rl_admin_url http://127.0.0.1:8080/v1/rl/workers/;
            proxy_pass          http://rl_listener;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane     admin;
            dynamo_rl_discovery /_rl_discovery valid=0;
            proxy_pass          $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_APIS gate%%

        # rl-refresh's check that generation works, the gate still closed:
        # examples/dynamo-rl.conf's /verify/v1/, rl-refresh's default

        location /verify/v1/ {
            dynamo_rl_plane request;
            dynamo_rl_gate off;
            proxy_pass http://frontend/v1/;
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;

my $GATEWAY = '127.0.0.1:' . port(8080);
my $DISCOVERY = "http://$GATEWAY/v1/rl/workers";

my %ID = (
	0 => '7587888160958628117',
	1 => '9007199254740993',
	2 => '18446744073709551615',
);

# worker 2 does not advertise abort_request; a fourth entry reports an
# error and has no system_url, so the client leaves it alone

my @FLEET = (
	worker(id => $ID{0}, w => 0),
	worker(id => $ID{1}, w => 1),
	worker(id => $ID{2}, w => 2,
		routes => [ grep { $_ ne 'abort_request' } vllm_routes() ]),
	worker(id => '42', w => 0, system_url => undef, routes => [],
		error => 'probe timed out'),
);

$t->fake_set('discovery.json', doc(@FLEET));

###############################################################################

# the client: discovery, then system_url + path for everything

my @CONNECTED;

my $d = request('GET', $DISCOVERY);
is($d->{status}, 200, 'discovery: status');

my $doc = eval { $JS->decode($d->{body}) } // {};
is($doc->{protocol_version}, 1, 'discovery: protocol_version 1');

my @workers = grep { defined $_->{system_url} } @{$doc->{workers} // []};
is(scalar @workers, 3, 'discovery: three workers with a system_url');

my %by_id = map { ("$_->{instance_id}" => $_) } @workers;

my $before = counts();
my (@statuses, @bodies);

my @ROUTES = qw/ pause_generation update_weights_from_disk flush_cache
	resume_generation get_weight_version /;

my %BODY = (
	pause_generation => '{"mode":"keep","clear_cache":false}',
	update_weights_from_disk => '{"model_path":"/models/policy-2",'
		. '"weight_version":"2"}',
);

for my $w (@workers) {
	my $r = request('GET', $w->{system_url} . '/health');
	push @statuses, "$w->{instance_id} health $r->{status}";

	for my $route (@ROUTES) {
		$r = request('POST', $w->{system_url} . '/engine/' . $route,
			$BODY{$route} // '{}');
		push @statuses, "$w->{instance_id} $route $r->{status}";
		push @bodies, $r->{body};
	}
}

is(scalar(grep { !/ 200$/ } @statuses), 0, 'refresh: every call 200')
	or diag(explain(\@statuses));
is(scalar(grep { !/"status"\s*:\s*"ok"/ } @bodies), 0,
	'refresh: every engine answer ok');

# where the client connected: the gateway's trusted port, and only there

my %hosts = map { $_ => 1 } @CONNECTED;
is(join(' ', keys %hosts), $GATEWAY, 'connections: the gateway only');
is(scalar @CONNECTED, 1 + 3 * (1 + @ROUTES),
	'connections: one per call');

# what each fake worker received: its own calls, once each, in order

my $calls = calls($before);

for my $n (0 .. 2) {
	is(join(', ', @{$calls->{$n} // []}),
		join(', ', 'GET /health', map { "POST /engine/$_" } @ROUTES),
		"worker $n: each call once, to the right worker");
}

my @sent = map { $_->{body} }
	grep { $_->{uri} eq '/engine/pause_generation' }
	@{$t->fake_records('worker-0')};
is($sent[-1], $BODY{pause_generation}, 'worker 0: the body unchanged');

###############################################################################

# examples/rl-refresh, unchanged, against the rewritten answer: it keeps
# its own path scheme and never needs the workers' addresses

SKIP: {
	skip 'no python3 (or TEST_PYTHON)', 3 unless refresh_python();

	$before = counts();

	my $res = refresh_finish(refresh_start($t, '--gateway', "http://$GATEWAY",
		refresh_args(3), '--skip-broken-workers'));

	is($res->{rc}, 0, 'rl-refresh: exit 0') or diag($res->{out});
	my $url0 = "http://$GATEWAY/v1/rl/workers/$ID{0}";

	like($res->{out}, qr!dynamo/backend/rl at \Q$url0\E, routes!,
		'rl-refresh: it saw the gateway\'s system_url') or diag($res->{out});

	$calls = calls($before);
	is(scalar(grep { $_ eq 'POST /engine/update_weights_from_disk' }
		map { @{$calls->{$_}} } 0 .. 2), 3,
		'rl-refresh: every worker updated, through the gateway');
}

###############################################################################

# a route the worker does not advertise

$before = counts();

my $r = request('POST', $by_id{$ID{2}}{system_url} . '/engine/abort_request',
	'{}');
is($r->{status}, 403, 'unadvertised: 403');
is(error($r), 'route_not_advertised', 'unadvertised: route_not_advertised');
is(total(calls($before)), 0, 'unadvertised: nothing forwarded');

# the same route on a worker that advertises it

$r = request('POST', $by_id{$ID{0}}{system_url} . '/engine/abort_request',
	'{}');
is($r->{status}, 200, 'advertised elsewhere: allowed');

# a worker that left the snapshot

$t->fake_set('discovery.json', doc(@FLEET[0, 2, 3]));

$before = counts();

$r = request('POST',
	$by_id{$ID{1}}{system_url} . '/engine/pause_generation', '{}');
is($r->{status}, 404, 'departed: 404');
is(error($r), 'unknown_worker', 'departed: unknown_worker');

$r = request('GET', $by_id{$ID{1}}{system_url} . '/health');
is($r->{status}, 404, 'departed: health 404');
is(total(calls($before)), 0, 'departed: nothing forwarded');

# the next discovery no longer lists it

$d = request('GET', $DISCOVERY);
$doc = eval { $JS->decode($d->{body}) } // {};
is(join(' ', map { $_->{instance_id} } @{$doc->{workers}}),
	"$ID{0} $ID{2} 42", 'departed: gone from discovery');

%hosts = map { $_ => 1 } @CONNECTED;
is(join(' ', keys %hosts), $GATEWAY, 'connections: still the gateway only');

###############################################################################

# a minimal HTTP/1.1 client: one connection per call, to the host and port
# of the URL it is given, recorded

sub request {
	my ($method, $url, $body) = @_;

	my ($host, $port, $path) = $url =~ m!^http://([^/:]+):(\d+)(/.*)?$!
		or return { status => 0, body => "not a URL: $url" };

	$path //= '/';
	push @CONNECTED, "$host:$port";

	my $s = IO::Socket::INET->new(PeerAddr => "$host:$port",
		Timeout => 5) or return { status => 0, body => '' };

	my $req = "$method $path HTTP/1.1\r\nHost: $host:$port\r\n"
		. "Connection: close\r\n";
	$req .= "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($body) . "\r\n" if defined $body;

	print $s "$req\r\n" . ($body // '');

	local $/;
	my $raw = <$s> // '';

	return parse_response($raw) // { status => 0, body => '' };
}

sub error {
	my ($r) = @_;
	my $j = eval { decode_json($r->{body}) };
	return ref $j eq 'HASH' ? $j->{error} // '' : '';
}

sub counts {
	return { map { $_ => scalar @{$t->fake_records("worker-$_")} } 0 .. 2 };
}

sub calls {
	my ($before) = @_;

	my %c;

	for my $n (0 .. 2) {
		my $recs = $t->fake_records("worker-$n");
		$c{$n} = [ map { "$_->{method} $_->{uri}" }
			@$recs[$before->{$n} .. $#$recs] ];
	}

	return \%c;
}

sub total {
	my ($c) = @_;
	my $n = 0;
	$n += @{$c->{$_}} for keys %$c;
	return $n;
}

###############################################################################
