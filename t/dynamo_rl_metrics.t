#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the Prometheus exposition, with two worker processes: after a
# known sequence of requests on every plane (successes, a failed stream,
# a canceled one, a duplicate, a bad id, a gate 503; admin calls that
# succeed, fail with {"status":"error"} or {"success":false} in HTTP 200,
# or with 500, and three kinds of denials; a valid and an invalid
# discovery document), every counter equals the expected value exactly;
# the text passes "promtool check metrics"; label values come from fixed
# sets only, and no attempt id, instance id or model name appears; the
# histogram counts every request of each plane; $dynamo_rl_admin_result
# in the access log; and concurrent requests spread over both worker
# processes are each counted exactly once.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ attempt call deny_reasons duration_buckets
	parse_labels plane_reasons promtool promtool_check raw read_until resp
	rl_test samples /;

###############################################################################

my $t = rl_test(300, 58, <<'EOF');

%%RL_MAIN workers=2 connections=1024%%

http {
    %%RL_HTTP 5m%%

    %%RL_ACCESS_LOG t status pid plane attempt deny outcome admin_result uri%%

    %%RL_UPSTREAMS 8%%
    %%RL_PROXY_KEEPALIVE unbuffered%%

    # rollout clients; on 8073 the kernel spreads the connections over
    # both worker processes

    server {
        %%RL_LISTEN 8080 8073 reuseport%%

        %%RL_REQUEST_PLANE%%
        %%RL_NOT_FOUND%%
    }

    # trusted network; 8074 spreads as 8073 does

    server {
        %%RL_LISTEN 8070 8074 reuseport%%

        # one refresh, then the snapshot stays fresh for the whole test;
        # the discovery plane names the admin plane's source, which its
        # answers refresh

        %%RL_CONTROL_PLANES valid=1h%%

        %%RL_APIS%%
    }
}

EOF

$t->run_fake_dynamo()->run();

my $ACCESS_LOG = $t->testdir() . '/rl.log';

###############################################################################

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my $ID0 = '7587888160958628117';
my $ID1 = '9007199254740993';
my $ID2 = '18446744073709551615';

my $W = '/v1/rl/workers';

my $MODEL = 'Qwen/Qwen3-0.6B';

my @PLANES = qw/ request discovery admin /;

my %OUTCOMES = (
	request => [ qw/ succeeded failed canceled rejected / ],
	discovery => [ qw/ ok invalid rejected / ],
	admin => [ qw/ ok error rejected / ],
);

my @REASONS = deny_reasons();

# the reasons each plane can give: no series for the others

my %PLANE_REASONS = plane_reasons();
my @LE = duration_buckets();

# what the sequence below must leave in the counters

my %expect = (
	requests => {
		request => { succeeded => 3, failed => 1, canceled => 1,
			rejected => 3 },
		discovery => { ok => 1, invalid => 1, rejected => 0 },
		admin => { ok => 1, error => 3, rejected => 3 },
	},
	denials => {
		request => { duplicate_attempt => 1, bad_attempt_id => 1,
			gate_closed => 1 },
		discovery => { discovery_invalid => 1 },
		admin => { method => 1, unknown_worker => 1,
			route_not_advertised => 1 },
	},
	admin_calls => { ok => 1, error => 3 },
	refreshes => { ok => 1, failed => 0 },
	gate_epoch => 2,
	ledger => { evictions => 0, expired => 0, duplicates => 1,
		exhausted => 0 },
);

my (@ids, $r, $s, $text);

###############################################################################

# the request plane: 3 successes (one of them SSE), a failed stream, a
# canceled stream, a duplicate, a bad id, a gate 503

for my $i (1 .. 3) {
	$r = call('POST', $i == 3 ? '/v1/chat/completions' : '/v1/completions',
		body => $i == 3 ? $CHAT : $BODY,
		headers => [ 'X-Dynamo-Attempt-Id' => "ok-$i" ]);
	is($r->{status}, 200, "success $i");
	push @ids, "ok-$i";
}

$r = call('POST', '/v1/completions', body => $BODY,
	headers => [ 'x-fake-scenario' => 'error-frame',
		'X-Dynamo-Attempt-Id' => 'fail-frame' ]);
is($r->{status}, 200, 'failed stream: 200 with an error frame');
is(wait_done('fail-frame'), 'failed', 'failed stream: failed');
push @ids, 'fail-frame';

$s = http(raw('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 100,
		'x-fake-interval-ms' => 200,
		'X-Dynamo-Attempt-Id' => 'cancel-1' ]), start => 1);
like(read_until($s, qr/data: \{/, 10), qr/data: \{/, 'canceled: streaming');
close $s;
is(wait_done('cancel-1'), 'canceled', 'canceled: canceled');
push @ids, 'cancel-1';

is(attempt('ok-1', $BODY)->{status}, 409, 'duplicate: 409');

$r = attempt('bad id', $BODY);
is($r->{status}, 400, 'bad id: 400');
push @ids, $r->{headers}{'x-dynamo-attempt-id'} // ();

$r = call('POST', '/rl/gate', port => 8070,
	body => '{"action":"close","reason":"metrics-gate-reason",'
	. '"lease":"5m"}');
is($r->{status}, 200, 'gate: closed');

is(attempt('gated-1', $BODY)->{status}, 503, 'gate: 503');
push @ids, 'gated-1';

$r = call('POST', '/rl/gate', port => 8070, body => '{"action":"open"}');
is($r->{status}, 200, 'gate: open');

# the admin plane: ok, three errors, three denials; the discovery plane:
# a valid document, then an invalid one (checked below, see crashes)

my %got;

$got{'admin-ok'} = admin("$W/$ID0/engine/flush_cache", 'admin-ok');

$t->fake_set('worker-1.respond.json', '{"status":200,"body":'
	. '{"status":"error","message":"Worker must be paused"}}');
$got{'admin-status-error'} = admin("$W/$ID1/engine/flush_cache",
	'admin-status-error');
$t->fake_unset('worker-1.respond.json');

$t->fake_set('worker-2.respond.json', '{"status":200,"body":'
	. '{"success":false,"message":"Failed to update weights"}}');
$got{'admin-success-false'} = admin("$W/$ID2/engine/flush_cache",
	'admin-success-false');
$t->fake_unset('worker-2.respond.json');

$t->fake_set('worker-0.respond.json', '{"status":500,"body":'
	. '{"error":"Handler error","message":"boom"}}');
$got{'admin-500'} = admin("$W/$ID0/engine/flush_cache", 'admin-500');
$t->fake_unset('worker-0.respond.json');

$got{'deny-method'} = admin("$W/$ID0/engine/flush_cache", 'deny-method',
	method => 'GET');
$got{'deny-unknown'} = admin("$W/12345/engine/flush_cache", 'deny-unknown');
$got{'deny-route'} = admin("$W/$ID0/engine/control/sleep", 'deny-route');

$got{'disc-ok'} = call('GET', $W, port => 8070,
	headers => [ 'X-Test' => 'disc-ok' ]);

$t->fake_set('discovery.json', '{"protocol_version":2,"workers":[]}');
$got{'disc-bad'} = call('GET', $W, port => 8070,
	headers => [ 'X-Test' => 'disc-bad' ]);
$t->fake_unset('discovery.json');

###############################################################################

# every counter, exactly

$text = settled(\%expect);

my $m = samples($text);

is(join(' ', map { "$_=" . ($got{$_}{status} // 0) } qw/ admin-ok
	admin-status-error admin-success-false admin-500 deny-method
	deny-unknown deny-route disc-ok disc-bad /),
	'admin-ok=200 admin-status-error=200 admin-success-false=200 '
	. 'admin-500=500 deny-method=405 deny-unknown=404 '
	. 'deny-route=403 disc-ok=200 disc-bad=502',
	'admin and discovery: statuses');
like($got{'admin-status-error'}{body}, qr/"status":"error"/,
	'admin {"status":"error"}: body passed on');
like($got{'admin-success-false'}{body}, qr/"success":false/,
	'admin {"success":false}: body passed on');

is_deeply(counters($text), expected(\%expect), 'counters: exact')
	or diag(explain(counters($text)));

is(epoch($m), 2, 'gate epoch: 2 (close, open)');
is($m->{'dynamo_rl_in_flight'}, 0, 'gauge: in_flight 0');
is($m->{'dynamo_rl_gate_closed'}, 0, 'gauge: gate open');
is(join(' ', map { $m->{"dynamo_rl_gate_state{state=$_}"} // '-' }
	qw/ open closed expired /), '1 0 0', 'gauge: gate state open');
is($m->{'dynamo_rl_gate_lease_expired'}, 0, 'gauge: lease not expired');
is($m->{'dynamo_rl_gate_lease_expiry_seconds'}, 0, 'gauge: no lease');
is($m->{'dynamo_rl_ledger_records'}, 5, 'gauge: 5 attempts recorded');
is($m->{'dynamo_rl_ledger_in_flight'}, 0, 'gauge: none in flight');
is($m->{'dynamo_rl_snapshot_generation'}, 2,
	'gauge: snapshot generation 2 (a refresh, then a discovery'
	. ' response)');
cmp_ok($m->{'dynamo_rl_snapshot_age_seconds'} // -1, '>=', 0,
	'gauge: snapshot age');

histogram_ok($text, 'sequence');

# the status JSON tells the same

$r = call('GET', '/rl/status', port => 8070);
my $st = eval { decode_json($r->{body}) } // {};

is_deeply($st->{counters}{requests}, $expect{requests},
	'status: the same request counters');
is_deeply($st->{counters}{admin_results}, $expect{admin_calls},
	'status: the same admin results');

###############################################################################

# promtool

my $promtool = promtool();
ok($promtool, 'promtool installed (Debian package prometheus)')
	or diag('apt-get install -y prometheus');

my ($rc, $out) = promtool_check($t, $text);

is($rc, 0, 'promtool check metrics: passes') or diag($out);

is(join('', grep { !/dynamo_rl_gate_epoch counter metrics should have/ }
	split /^/, $out), '', 'promtool check metrics: nothing else to say');

###############################################################################

# label names and values from fixed sets only

my %outcome_ok = map { $_ => { map { $_ => 1 } @{$OUTCOMES{$_}} } } @PLANES;
my %reason_ok = map { $_ => 1 } @REASONS;
my %le_ok = map { $_ => 1 } @LE;
my %result_ok = map { $_ => 1 } qw/ ok error failed /;
my %state_ok = map { $_ => 1 } qw/ open closed expired /;

my @bad;

for my $line (grep { !/^#/ && /\S/ } split /\n/, $text) {
	my ($name, $labels) = $line =~ /^([a-z_]+)(?:\{(.*)\})? \S+$/
		or do { push @bad, "unparsed: $line"; next };

	my %l = parse_labels($labels // '');

	for my $k (keys %l) {
		my $v = $l{$k};
		my $good = $k eq 'plane' ? grep { $_ eq $v } @PLANES
			: $k eq 'outcome' ? $outcome_ok{$l{plane} // 'request'}{$v}
			: $k eq 'reason' ? $reason_ok{$v}
			: $k eq 'le' ? $le_ok{$v}
			: $k eq 'result' ? $result_ok{$v}
			: $k eq 'state' ? $state_ok{$v}
			: 0;

		push @bad, "$k=\"$v\" in $line" unless $good;
	}
}

is(join("\n", @bad), '', 'labels: names and values from the fixed sets');

my @leaks = grep { index($text, $_) >= 0 } @ids, $ID0, $ID1, $ID2, '12345',
	$MODEL, 'Qwen', 'metrics-gate-reason', 'flush_cache', 'control/sleep',
	'127.0.0.1';

is("@leaks", '', 'no attempt id, instance id, model or other free text');

###############################################################################

# $dynamo_rl_admin_result in the access log

my %log = map { $_->{t} => $_ } grep { $_->{t} ne "" } wait_log(9);

is($log{'admin-ok'}{admin_result}, 'ok', 'log: admin ok');
is($log{'admin-status-error'}{admin_result}, 'error',
	'log: admin {"status":"error"} is an error');
is($log{'admin-success-false'}{admin_result}, 'error',
	'log: admin {"success":false} is an error');
is($log{'admin-500'}{admin_result}, 'error',
	'log: admin 500 is an error');
is(join(',', map { $log{$_}{admin_result} // 'none' }
	qw/ deny-method deny-unknown deny-route /), ',,',
	'log: denials are not admin results');
is(join(',', map { $log{$_}{outcome} // 'none' } qw/ admin-ok
	admin-status-error admin-success-false admin-500 deny-route /),
	'ok,error,error,error,rejected', 'log: admin outcomes');
is(join(',', map { $log{$_}{outcome} // 'none' }
	qw/ disc-ok disc-bad /), 'ok,invalid',
	'log: discovery outcomes');
is(scalar(grep { $_->{plane} eq 'request' && $_->{admin_result} ne '' }
	access_log()), 0, 'log: no admin result on the request plane');

###############################################################################

# exact across two worker processes: 40 concurrent generations and 20
# concurrent admin calls, each counted once

my (@conc, @conc_admin);

{
	my @s = map { http(raw('POST', '/v1/completions', body => $BODY,
		headers => [ 'X-Test' => "conc-$_" ]), start => 1,
		PeerAddr => '127.0.0.1:' . port(8073)) } 1 .. 40;
	@conc = map { (resp(http_end($_)))->{status} // 0 } @s;

	@s = map { http(raw('POST', "$W/$ID1/engine/liveness_probe",
		body => '{}', headers => [ 'X-Test' => "conc-admin-$_" ]),
		start => 1, PeerAddr => '127.0.0.1:' . port(8074)) } 1 .. 20;
	@conc_admin = map { (resp(http_end($_)))->{status} // 0 } @s;
}

$expect{requests}{request}{succeeded} += 40;
$expect{requests}{admin}{ok} += 20;
$expect{admin_calls}{ok} += 20;

$text = settled(\%expect);

is(scalar(grep { $_ == 200 } @conc), 40, 'concurrent: 40 generations');

{
	my @lines = grep { $_->{t} =~ /^conc-\d+$/ } wait_log(49);
	my %pids = map { $_->{pid} => 1 } @lines;

	is(scalar @lines, 40, 'concurrent: 40 generations logged');
	cmp_ok(scalar keys %pids, '>=', 2, 'concurrent: both processes served');
}

is(scalar(grep { $_ == 200 } @conc_admin), 20,
	'concurrent: 20 admin calls');

is_deeply(counters($text), expected(\%expect),
	'concurrent: counters exact') or diag(explain(counters($text)));

$m = samples($text);
is($m->{'dynamo_rl_ledger_records'}, 45, 'concurrent: 45 records');
is($m->{'dynamo_rl_in_flight'}, 0, 'concurrent: in_flight 0');

histogram_ok($text, 'concurrent');

my @lines = grep { $_->{t} =~ /^conc-admin-\d+$/ } wait_log(69);
my %pids = map { $_->{pid} => 1 } @lines;

is(scalar(grep { $_->{admin_result} eq 'ok' } @lines), 20,
	'concurrent: 20 admin results ok');
cmp_ok(scalar keys %pids, '>=', 2,
	'concurrent: both processes called workers');

($rc, $out) = promtool_check($t, $text);

is($rc, 0, 'concurrent: promtool check metrics passes') or diag($out);

# HEAD and other methods

$r = call('HEAD', '/metrics', port => 8070);
is($r->{status}, 200, 'HEAD: 200');
is($r->{body}, '', 'HEAD: no body');

$r = call('POST', '/metrics', port => 8070, body => '{}');
is($r->{status}, 405, 'POST: 405');
is($r->{headers}{allow}, 'GET, HEAD', 'POST: Allow');

# no worker process crashed; a crash is reported here, where it is a
# known bug, and no other "exited on signal" line is let through

{
	my @crashed = crashes();

	is(scalar @crashed, 0, 'no worker process crashed')
		or diag(join "\n", @crashed);

}

###############################################################################

# no worker process may crash while it replaces its index of the snapshot
# (the index pool once kept the log of a connection that was gone)

sub crashes {
	my @lines = $t->log_lines('error.log', qr/exited on signal 11/);
	chomp @lines;
	return @lines;
}




sub admin {
	my ($path, $tag, %o) = @_;

	my $method = $o{method} // 'POST';

	return call($method, $path, port => 8070,
		$method eq 'POST' ? (body => '{}') : (),
		headers => [ 'X-Test' => $tag ]);
}

# polls the attempts API until the attempt is finished; returns its state

sub wait_done {
	my ($id) = @_;

	my $state = '';

	Test::DynamoRL::wait_for(sub {
		my $r = call('GET', "/rl/attempts/$id", port => 8070);
		my $j = eval { decode_json($r->{body}) } // {};
		$state = $j->{state} // '';
		return $state !~ /^(?:|accepted|streaming)$/;
	}, 10);

	return $state;
}

sub metrics_text {
	my $r = call('GET', '/metrics', port => 8070);
	return $r->{body};
}

# the exposition once every expected request is counted: the log phase
# of a request may run after its client saw the response

sub settled {
	my ($e) = @_;

	my $want = 0;
	$want += $_ for map { values %$_ } values %{$e->{requests}};

	my $text;

	Test::DynamoRL::wait_for(sub {
		$text = metrics_text();
		my $c = counters($text);
		my $n = 0;

		$n += $c->{$_}
			for grep { /^dynamo_rl_requests_total/ } keys %$c;

		return $n >= $want
			&& (samples($text)->{dynamo_rl_in_flight} // -1) == 0;
	}, 10);

	return $text;
}

# every sample of a series declared a counter, and the histogram counts

sub counters {
	my ($text) = @_;

	my %type = ($text // '') =~ /^# TYPE (\S+) (\S+)$/mg;
	my $m = samples($text);

	my %c;

	for my $key (keys %$m) {
		my ($name) = $key =~ /^([a-z_]+)/;

		# the gate's epoch is checked on its own: see epoch()

		next if $name =~ /^dynamo_rl_gate_epoch/;

		if (($type{$name} // '') eq 'counter'
			|| $name eq 'dynamo_rl_request_duration_seconds_count')
		{
			$c{$key} = $m->{$key};
		}
	}

	return \%c;
}

# the gate's epoch, whether it is exposed as a gauge, or as a counter
# with or without the _total suffix

sub epoch {
	my ($m) = @_;

	my @v = map { $m->{$_} } grep { /^dynamo_rl_gate_epoch(?:_total)?$/ }
		keys %$m;

	return @v == 1 ? $v[0] : 'none';
}

sub expected {
	my ($e) = @_;

	my %c;

	for my $p (@PLANES) {
		my $sum = 0;

		for my $o (@{$OUTCOMES{$p}}) {
			my $n = $e->{requests}{$p}{$o} // 0;
			$c{"dynamo_rl_requests_total{outcome=$o,plane=$p}"}
				= $n;
			$sum += $n;
		}

		for my $reason (@{$PLANE_REASONS{$p}}) {
			$c{"dynamo_rl_denials_total{plane=$p,reason=$reason}"} =
				$e->{denials}{$p}{$reason} // 0;
		}

		$c{"dynamo_rl_request_duration_seconds_count{plane=$p}"} = $sum;
	}

	for my $res (qw/ ok error /) {
		$c{"dynamo_rl_admin_calls_total{result=$res}"} =
			$e->{admin_calls}{$res};
	}

	for my $res (qw/ ok failed /) {
		$c{"dynamo_rl_discovery_refreshes_total{result=$res}"} =
			$e->{refreshes}{$res};
	}

	for my $k (qw/ evictions expired duplicates exhausted /) {
		$c{"dynamo_rl_ledger_${k}_total"} = $e->{ledger}{$k};
	}

	return \%c;
}

# per plane: cumulative buckets, +Inf equals _count equals the requests

sub histogram_ok {
	my ($text, $name) = @_;

	my $m = samples($text);
	my $h = 'dynamo_rl_request_duration_seconds';
	my @bad;

	for my $p (@PLANES) {
		my $requests = 0;

		for my $o (@{$OUTCOMES{$p}}) {
			$requests += $m->{"dynamo_rl_requests_total"
				. "{outcome=$o,plane=$p}"} // 0;
		}

		my $count = $m->{"${h}_count{plane=$p}"} // 'none';
		my $prev = 0;

		for my $le (@LE) {
			my $v = $m->{"${h}_bucket{le=$le,plane=$p}"} // 'none';

			if ($v eq 'none' || $v < $prev) {
				push @bad, "$p le=$le $v < $prev";
				next;
			}

			$prev = $v;
		}

		push @bad, "$p +Inf $prev != count $count" if $prev ne $count;
		push @bad, "$p count $count != requests $requests"
			if $count ne $requests;
		push @bad, "$p no _sum"
			unless defined $m->{"${h}_sum{plane=$p}"};
	}

	is(join('; ', @bad), '', "$name: histogram _count is the requests"
		. ' of each plane');
}

sub access_log {
	open my $fh, '<', $ACCESS_LOG or return ();
	return map { decode_json($_) } grep { /\S/ } <$fh>;
}

# the access log once it has at least $n tagged lines

sub wait_log {
	my ($n) = @_;

	my @lines;

	Test::DynamoRL::wait_for(sub {
		@lines = access_log();
		return scalar(grep { $_->{t} ne '' } @lines) >= $n;
	}, 10);

	return @lines;
}

###############################################################################
