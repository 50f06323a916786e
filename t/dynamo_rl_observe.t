#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Observability (issue 17): the metrics of a busy gateway.  After traffic
# on every plane (fast and delayed generations, a stream, a failed and a
# canceled one, a duplicate, a bad id, a closed gate; admin calls that
# succeed, fail or are refused, a cross-site one among them; a valid and
# an invalid discovery document; a slow refresh and a failed one):
#
# - "promtool check metrics" accepts the exposition;
# - dynamo_rl_denials_total has exactly the (plane, reason) series that
#   can occur, and no impossible one such as plane="request",
#   reason="unknown_worker";
# - every histogram (request duration by plane, time to the upstream's
#   header, attempt duration by outcome, admin call duration by result,
#   refresh duration by result) has the documented buckets, cumulative,
#   with +Inf equal to _count, and counts what the counters count;
# - delays land in the buckets they belong to;
# - durations run on the monotonic clock: nginx runs with libfaketime,
#   and a 2-hour step of its wall clock during a 1-second attempt leaves
#   it a 1-second attempt in every histogram;
# - the status JSON's "durations" has the same counts;
# - examples/: every Grafana query and every alerting rule names only
#   exported metrics, and "promtool test rules" passes the rules' cases;
#   the store's and the fleet's are those of a second nginx, S, whose
#   dynamo_rl_store is Debian's redis-server started by the test.

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Basename qw/ dirname /;
use JSON::PP;
use Time::HiRes qw/ time /;
use YAML::XS ();

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ attempt call clock_is duration_buckets faketime
	plane_reasons promtool_check raw read_until rl_test samples set_clock
	slurp /;
use Test::DynamoRL::Redis qw/ replica_conf /;

###############################################################################

my $EXAMPLES = dirname(__FILE__) . '/../examples';

my $t = rl_test(Test::DynamoRL::scale(180), 51 + 2, <<'EOF');

%%RL_MAIN faketime%%

http {
    %%RL_HTTP 10m%%

    %%RL_UPSTREAMS%%
    %%RL_PROXY_KEEPALIVE unbuffered%%

    %%RL_REQUEST_SERVER 8080%%

    server {
        %%RL_LISTEN 8070%%

        %%RL_CONTROL_PLANES valid=1h%%
        %%RL_APIS gate status metrics%%
    }

    # a snapshot that is never fresh: every admin call refreshes

    %%RL_ADMIN_SERVER 8071 valid=1ms%%
}

EOF

# nginx's wall clock only, as in dynamo_rl_clock.t

faketime($t);

$t->run_fake_dynamo()->run();

###############################################################################

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my $ID0 = '7587888160958628117';
my $ID1 = '9007199254740993';

my $W = '/v1/rl/workers';

my %PLANE_REASONS = plane_reasons();
my @LE = duration_buckets();

my $r;

###############################################################################

# the request plane: three answers delayed by 300 ms (their header too),
# a stream, a failed stream, a canceled one, a duplicate, a bad id, a
# closed gate

for my $i (1 .. 3) {
	$r = call('POST', '/v1/completions', body => $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => "slow-$i",
			'x-fake-events' => 3, 'x-fake-interval-ms' => 100 ]);
	is($r->{status}, 200, "delayed answer $i");
}

$r = call('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'X-Dynamo-Attempt-Id' => 'sse-1' ]);
is($r->{status}, 200, 'stream');

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'error-frame',
		'X-Dynamo-Attempt-Id' => 'fail-1' ]);
is($r->{status}, 200, 'failed stream: 200 with an error frame');

my $s = http(raw('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'cancel-1' ]), start => 1);
like(read_until($s, qr/data: \{/, 10), qr/data: \{/, 'canceled: streaming');
close $s;

is(attempt('slow-1', $BODY)->{status}, 409, 'duplicate: 409');
is(attempt('bad id', $BODY)->{status}, 400, 'bad id: 400');

call('POST', '/rl/gate', port => 8070,
	body => '{"action":"close","reason":"observe","lease":"5m"}');
is(attempt('gated-1', $BODY)->{status}, 503, 'closed gate: 503');
call('POST', '/rl/gate', port => 8070, body => '{"action":"open"}');

# a stream of about 1 s across a 2-hour step of nginx's wall clock

$s = http(raw('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 5,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'clock-1' ]), start => 1);
my $head = read_until($s, qr/data: \{/, 10);

set_clock($t, '+7200');
ok(clock_is(7200, port => 8070),
	'wall clock: 2 hours ahead during the stream');

my $rest = read_until($s, qr/data: \[DONE\]/, 10);
close $s;
like($head . $rest, qr/data: \[DONE\]/, 'stream across the step: complete');

set_clock($t, '+0');

# the admin plane: the first call refreshes the snapshot from a listener
# that takes 300 ms; a call a worker takes 200 ms over; an error; four
# refusals, one of them cross-site

$t->fake_set('discovery.delay_ms', '300');
$r = admin("$W/$ID0/engine/flush_cache");
is($r->{status}, 200, 'admin: ok after a slow refresh');
$t->fake_unset('discovery.delay_ms');

$t->fake_set('worker-1.respond.json',
	'{"status":200,"body":{"ok":true},"delay_ms":200}');
$r = admin("$W/$ID1/engine/flush_cache");
is($r->{status}, 200, 'admin: ok after 200 ms');
$t->fake_unset('worker-1.respond.json');

$t->fake_set('worker-0.respond.json', '{"status":500,"body":'
	. '{"error":"Handler error","message":"boom"}}');
$r = admin("$W/$ID0/engine/flush_cache");
is($r->{status}, 500, 'admin: error');
$t->fake_unset('worker-0.respond.json');

is(admin("$W/$ID0/engine/flush_cache", method => 'GET')->{status}, 405,
	'admin: method');
is(admin("$W/12345/engine/flush_cache")->{status}, 404,
	'admin: unknown worker');
is(admin("$W/$ID0/engine/control/sleep")->{status}, 403,
	'admin: route not advertised');
is(admin("$W/$ID0/engine/flush_cache",
	headers => [ 'Origin' => 'http://evil.example' ])->{status}, 403,
	'admin: cross-site');

# a refresh that fails: 503 discovery_unavailable

$t->fake_set('discovery.status', '500');
is(admin("$W/$ID0/engine/flush_cache", port => 8071)->{status}, 503,
	'admin: a failed refresh');
$t->fake_unset('discovery.status');

# the discovery plane: a valid document, an invalid one

is(call('GET', $W, port => 8070)->{status}, 200, 'discovery: ok');

$t->fake_set('discovery.json', '{"protocol_version":2,"workers":[]}');
is(call('GET', $W, port => 8070)->{status}, 502, 'discovery: invalid');
$t->fake_unset('discovery.json');

###############################################################################

my $text = settled(8 + 3, 7 + 1 + 1 + 4);
my $m = samples($text);

# promtool

my ($rc, $out) = promtool_check($t, $text);

is($rc, 0, 'promtool check metrics: passes') or diag($out);
is(join('', grep { !/dynamo_rl_gate_epoch counter metrics should have/ }
	split /^/, $out), '', 'promtool check metrics: nothing else to say');

# denials: the possible series, and only those

my @series = sort map { /^dynamo_rl_denials_total\{plane=(\w+),reason=(\w+)\}$/
	? "$1/$2" : () } keys %$m;
my @possible = sort map { my $p = $_; map { "$p/$_" } @{$PLANE_REASONS{$p}} }
	keys %PLANE_REASONS;

is(join(' ', @series), join(' ', @possible),
	'denials: the series that can occur, and no other');
ok(!exists $m->{'dynamo_rl_denials_total{plane=request,'
	. 'reason=unknown_worker}'}, 'denials: no request-plane unknown_worker');

is(join(' ', map { "$_=" . $m->{"dynamo_rl_denials_total{$_}"} } grep {
	$m->{"dynamo_rl_denials_total{$_}"} } map { "plane=$_->[0],reason=$_->[1]" }
	map { my $p = $_; map { [ $p, $_ ] } @{$PLANE_REASONS{$p}} }
	qw/ request discovery admin /),
	'plane=request,reason=bad_attempt_id=1 '
	. 'plane=request,reason=duplicate_attempt=1 '
	. 'plane=request,reason=gate_closed=1 '
	. 'plane=discovery,reason=discovery_invalid=1 '
	. 'plane=admin,reason=method=1 '
	. 'plane=admin,reason=discovery_unavailable=1 '
	. 'plane=admin,reason=unknown_worker=1 '
	. 'plane=admin,reason=route_not_advertised=1 '
	. 'plane=admin,reason=cross_origin=1',
	'denials: counted where they happened');

# every histogram well formed, and counting what the counters count

my %hist = (
	'dynamo_rl_request_duration_seconds' => [ map { "plane=$_" }
		qw/ request discovery admin / ],
	'dynamo_rl_upstream_header_seconds' => [ '' ],
	'dynamo_rl_attempt_duration_seconds' => [ map { "outcome=$_" }
		qw/ succeeded failed canceled / ],
	'dynamo_rl_admin_call_duration_seconds' => [ map { "result=$_" }
		qw/ ok error / ],
	'dynamo_rl_discovery_refresh_duration_seconds' => [ map { "result=$_" }
		qw/ ok failed / ],
);

is(join('; ', map { histogram_bad($m, $_, $hist{$_}) } sort keys %hist), '',
	'histograms: the documented buckets, cumulative, +Inf is _count');

is(join(' ', map { count($m, @$_) }
	[ 'dynamo_rl_attempt_duration_seconds', 'outcome=succeeded' ],
	[ 'dynamo_rl_attempt_duration_seconds', 'outcome=failed' ],
	[ 'dynamo_rl_attempt_duration_seconds', 'outcome=canceled' ]),
	join(' ', map { $m->{"dynamo_rl_requests_total{outcome=$_,"
		. 'plane=request}'} } qw/ succeeded failed canceled /),
	'attempt durations: one per attempt, by outcome');
is(join(' ', map { $m->{"dynamo_rl_requests_total{outcome=$_,"
	. 'plane=request}'} } qw/ succeeded failed canceled /), '5 1 1',
	'attempts: 5 succeeded, 1 failed, 1 canceled');

is(count($m, 'dynamo_rl_upstream_header_seconds', ''), 7,
	'time to the header: once per attempt the frontend answered');

is(join(' ', map { count($m, 'dynamo_rl_admin_call_duration_seconds',
	"result=$_") } qw/ ok error /),
	join(' ', map { $m->{"dynamo_rl_admin_calls_total{result=$_}"} }
	qw/ ok error /), 'admin call durations: one per call, by result');

is(join(' ', map { count($m, 'dynamo_rl_discovery_refresh_duration_seconds',
	"result=$_") } qw/ ok failed /), '1 1',
	'refresh durations: the slow refresh and the failed one');
is(join(' ', map { $m->{"dynamo_rl_discovery_refreshes_total{result=$_}"} }
	qw/ ok failed /), '1 1', 'refreshes: the same as counted');

# where the delays land

my $header = 'dynamo_rl_upstream_header_seconds';

cmp_ok(count($m, $header, '') - bucket($m, $header, '', '0.250'), '>=', 3,
	'time to the header: the 3 delayed answers above 250 ms');
cmp_ok($m->{"${header}_sum"}, '>=', 0.9,
	'time to the header: their 300 ms each in the sum');

my $refresh = 'dynamo_rl_discovery_refresh_duration_seconds';

is(bucket($m, $refresh, 'result=ok', '0.250'), 0,
	'refresh: the 300 ms one above 250 ms');

my $admin = 'dynamo_rl_admin_call_duration_seconds';

cmp_ok(count($m, $admin, 'result=ok')
	- bucket($m, $admin, 'result=ok', '0.100'), '>=', 1,
	'admin: the 200 ms call above 100 ms');

# the 2-hour step: nothing over a minute, anywhere

my $attempt = 'dynamo_rl_attempt_duration_seconds';

is(join(' ', map { count($m, @$_) - bucket($m, @$_, '60.000') }
	[ 'dynamo_rl_request_duration_seconds', 'plane=request' ],
	[ $attempt, 'outcome=succeeded' ], [ $header, '' ]), '0 0 0',
	'wall-clock step: no duration over a minute');
cmp_ok($m->{'dynamo_rl_request_duration_seconds_sum{plane=request}'}, '<',
	60, 'wall-clock step: the request plane\'s sum is seconds, not hours');
cmp_ok(count($m, $attempt, 'outcome=succeeded')
	- bucket($m, $attempt, 'outcome=succeeded', '0.500'), '>=', 1,
	'wall-clock step: the 1 s stream above 500 ms');

# the status JSON: the same counts

my $j = eval { decode_json(call('GET', '/rl/status', port => 8070)->{body}) }
	// {};
my $d = $j->{durations} // {};

is(join(',', @{$d->{le_ms} // []}), '5,10,25,50,100,250,500,1000,2500,5000,'
	. '10000,30000,60000,120000,300000,600000,1800000,3600000',
	'status: durations, the bounds in ms');
is(join(' ', map { $d->{$_}{count} // 'none' } qw/ upstream_header
	attempt_succeeded admin_ok refresh_ok refresh_failed /),
	join(' ', count($m, $header, ''), count($m, $attempt,
	'outcome=succeeded'), count($m, $admin, 'result=ok'),
	count($m, $refresh, 'result=ok'), count($m, $refresh, 'result=failed')),
	'status: durations, the same counts as the metrics');

###############################################################################

# examples/: every Grafana query and every alert names metrics exported
# above, and the alerting rules pass their promtool cases

my %exported = map { /^([a-z_]+)/ ? ($1 => 1) : () } keys %$m;

# and those of S, with a store: once its gate read the fleet

my $ts = Test::DynamoRL->new()->check_at_end();
my $redis = Test::DynamoRL::Redis->new($ts, port => 8379)->start();

$ts->write_file_expand('nginx.conf', replica_conf(name => 'S',
	listen => 8180, api => 8170, store => $redis->url(),
	params => 'heartbeat=500ms gate_poll=100ms'));

# S runs on the real clock: without the libfaketime of faketime($t)

{
	local $ENV{TEST_NGINX_PRELOAD} = join ' ', grep { !/faketime/ }
		split ' ', $ENV{TEST_NGINX_PRELOAD} // '';

	$ts->run();
}

my $ms = {};

Test::DynamoRL::wait_for(sub {
	$ms = samples(call('GET', '/metrics', port => 8170)->{body});
	return ($ms->{dynamo_rl_fleet_replicas} // 0) == 1;
}, 10);

is(join(' ', map { $ms->{"dynamo_rl_$_"} // '-' } qw/ store_up
	fleet_replicas fleet_acked fleet_lost fleet_drained /), '1 1 1 0 0',
	'store: S exports the store\'s and the fleet\'s series');

$exported{$_} = 1 for map { /^([a-z_]+)/ ? $1 : () } keys %$ms;

my $dash = eval { decode_json(slurp(
	"$EXAMPLES/grafana/dynamo-rl-dashboard.json")) } // {};
my @queries = map { $_->{expr} } grep { defined $_->{expr} }
	map { @{$_->{targets} // []} } @{$dash->{panels} // []};
push @queries, map { $_->{definition} // () }
	@{$dash->{templating}{list} // []};

my $rules = eval { YAML::XS::LoadFile(
	"$EXAMPLES/prometheus/dynamo-rl-alerts.yml") } // {};
my @alerts = map { $_->{expr} } map { @{$_->{rules} // []} }
	@{$rules->{groups} // []};

cmp_ok(scalar @queries, '>=', 15, 'grafana: the dashboard\'s queries');
cmp_ok(scalar @alerts, '>=', 10, 'prometheus: the alerting rules');

is(join("\n", unknown_metrics(@queries)), '',
	'grafana: every query names exported metrics only');
is(join("\n", unknown_metrics(@alerts)), '',
	'prometheus: every alert names exported metrics only');

my @panels = grep { $_->{type} ne 'row' } @{$dash->{panels} // []};

# the store's and the fleet's figures each in a panel

my $all = join "\n", @queries;

is(join(' ', grep { $all !~ /\bdynamo_rl_$_\b/ } qw/ store_up
	store_round_trip_seconds_bucket store_operations_total store_queue
	store_fallbacks_total store_conflicts_total fleet_replicas fleet_acked fleet_lost
	fleet_drained /), '', 'grafana: panels for the store and the fleet');
is(join(', ', map { $_->{title} } grep { !@{$_->{targets} // []} } @panels),
	'', 'grafana: every panel has a query');

{
	my ($bin) = grep { -x } map { "$_/promtool" }
		split /:/, $ENV{PATH} // '/usr/bin';
	my $dir = "$EXAMPLES/prometheus";

	my $o = $bin ? `cd $dir && $bin test rules dynamo-rl-alerts.test.yml 2>&1`
		: 'promtool is not installed (Debian package prometheus)';
	is($bin ? $? : -1, 0, 'prometheus: promtool test rules') or diag($o);
}

my %alerting = map { $_->{alert} => 1 } map { @{$_->{rules} // []} }
	@{$rules->{groups} // []};

is(join(' ', grep { !$alerting{$_} } qw/ DynamoRLStoreDown
	DynamoRLStoreFallback DynamoRLStoreConflict DynamoRLStoreDroppingWrites
	DynamoRLStoreSlow DynamoRLReplicaLost DynamoRLStoreRefusingClaims /), '',
	'prometheus: the store\'s alerts');

###############################################################################

# every name of a metric in the expressions is exported (a histogram's
# _bucket, _sum and _count are its own series in the exposition), and
# every expression has one

sub unknown_metrics {
	my (@exprs) = @_;

	my @bad;

	for my $e (@exprs) {
		my @names = $e =~ /\b(dynamo_rl_[a-z_]+)/g;

		push @bad, "no metric in: $e" unless @names;
		push @bad, map { "$_ in: $e" } grep { !$exported{$_} } @names;
	}

	return @bad;
}

sub admin {
	my ($path, %o) = @_;

	my $method = $o{method} // 'POST';

	return call($method, $path, port => $o{port} // 8070,
		$method eq 'POST' ? (body => '{}') : (),
		headers => $o{headers} // []);
}

# the exposition once the request plane and the admin plane have counted
# every request sent (the log phase may follow the answer) and nothing is
# in flight

sub settled {
	my ($request, $admin) = @_;

	my $text;

	Test::DynamoRL::wait_for(sub {
		$text = call('GET', '/metrics', port => 8070)->{body};
		my $m = samples($text);
		my %n;

		for my $k (keys %$m) {
			$n{$1} += $m->{$k}
				if $k =~ /^dynamo_rl_requests_total\{.*plane=(\w+)\}$/;
		}

		return ($n{request} // 0) >= $request
			&& ($n{admin} // 0) >= $admin
			&& ($m->{dynamo_rl_in_flight} // -1) == 0;
	}, 10);

	return $text;
}

sub labels {
	my (@l) = @_;

	my @s = sort grep { length } @l;
	return @s ? '{' . join(',', @s) . '}' : '';
}

sub count {
	my ($m, $name, $label) = @_;
	return $m->{"${name}_count" . labels($label)} // -1;
}

sub bucket {
	my ($m, $name, $label, $le) = @_;
	return $m->{"${name}_bucket" . labels($label, "le=$le")} // -1;
}

sub histogram_bad {
	my ($m, $name, $series) = @_;

	my @bad;

	for my $label (@$series) {
		my $prev = 0;

		for my $le (@LE) {
			my $v = bucket($m, $name, $label, $le);

			if ($v < $prev) {
				push @bad, "$name\{$label\} le=$le $v < $prev";
				next;
			}

			$prev = $v;
		}

		push @bad, "$name\{$label\} +Inf $prev != _count"
			if $prev != count($m, $name, $label);
		push @bad, "$name\{$label\} no _sum"
			unless defined $m->{"${name}_sum" . labels($label)};
	}

	my $buckets = grep { /^${name}_bucket/ } keys %$m;

	push @bad, "$name: $buckets buckets, not " . @LE * @$series
		if $buckets != @LE * @$series;

	return @bad;
}

###############################################################################
