#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The shared store failing under a gateway replica (issue 13), with
# Debian's redis-server started by the test and one replica A:
#
# - status and metrics with a store (the "store" object, every series
#   of the contract) and, on a second nginx Z without one, none of them;
# - Redis killed by its pid under load: from then on every request is
#   503 store_unavailable with Retry-After: 1 and nothing is forwarded;
#   a gate-only location serves its cached view for gate_stale, then 503
#   gate_unknown; the attempts API answers 503, never 404; a gate POST
#   answers 503 and changes nothing;
# - Redis restarted on the same port: requests pass again without a
#   reload, the gate record is created again, open;
# - CLIENT PAUSE past the timeout: 503 store_unavailable at the timeout,
#   and the claim is released, so that the same id passes afterwards;
# - FLUSHALL while the gate is closed: 503 gate_lost (or gate_closed, if
#   a gate poll saw the loss first), the gate is created again closed with
#   the reason "gate record lost" and the next epoch, and stays closed.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call err_since flat forwarded
	frontend_records is_false is_true json metrics time_limit /;
use Test::DynamoRL::Redis qw/ admit gate gate_post gen reason replica_conf
	status store_key store_lines wait_gate wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(240));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(77 + 2);
my $tz = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my %A = (name => 'A', listen => 8080, api => 8070);
my %Z = (name => 'Z', listen => 8580, api => 8570);

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => 'redis://127.0.0.1:8379',
	params => 'timeout=250ms heartbeat=500ms gate_poll=100ms gate_stale=2s'));

$t->run_fake_dynamo()->run();

$tz->write_file_expand('nginx.conf', replica_conf(%Z));
$tz->run();

###############################################################################

my $URL = 'redis://127.0.0.1:' . port(8379);

my $STORE_SERIES = qr/^dynamo_rl_store_(?:info|up|queue|fallbacks_total
	|dropped_total|reconnects_total|conflicts_total|operations_total
	|round_trip_seconds_(?:bucket|sum|count))$/x;

my @OPS = qw/ claim move gate beat get connect /;
my @RESULTS = qw/ ok error unavailable timeout /;
my @LE = qw/ 0.0001 0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1
	0.25 0.5 1 +Inf /;

my ($r, $g, $st, $m, $off, $SEQ, %LOADS);

###############################################################################

# the store answers: the "store" object of the status and its series

$r = admit(\%A);
is($r->{status}, 200, 'up: A admits');

$st = wait_status(\%A, sub { ($_[0]{store}{queue} // -1) == 0 });

is($st->{store}{url}, $URL, 'status: store url');
is($st->{store}{replica}, 'A', 'status: replica');
ok(is_true($st->{store}{up}), 'status: up');
is(join(' ', map { $st->{store}{$_} // '-' } qw/ queue fallbacks dropped /),
	'0 0 0', 'status: queue, fallbacks, dropped 0');
like($st->{store}{reconnects} // '', qr/^\d+$/, 'status: reconnects');

# a gate poll (every 100ms here) or a heartbeat in flight is in the queue:
# the series are read at a moment without one, as the status was

Test::DynamoRL::wait_for(sub {
	$m = metrics($A{api});
	return ($m->{dynamo_rl_store_queue} // -1) == 0;
}, 10);

is($m->{dynamo_rl_store_up}, 1, 'metrics: store up');
is($m->{'dynamo_rl_store_info{replica="A"}'}, 1, 'metrics: info, replica');
is(join(' ', map { $m->{"dynamo_rl_store_$_"} // '-' }
	qw/ queue fallbacks_total dropped_total conflicts_total /), '0 0 0 0',
	'metrics: queue, fallbacks, dropped, conflicts');
like($m->{dynamo_rl_store_reconnects_total} // '', qr/^\d+$/,
	'metrics: reconnects');
is(scalar(grep { !defined $m->{op($_->[0], $_->[1])} }
	map { my $o = $_; map { [ $o, $_ ] } @RESULTS } @OPS), 0,
	'metrics: every operation and result');
is(scalar(grep { /^dynamo_rl_store_operations_total/ } keys %$m), 24,
	'metrics: no other operation series');
cmp_ok($m->{op('claim', 'ok')} // 0, '>=', 1, 'metrics: claims ok');
cmp_ok($m->{op('gate', 'ok')} // 0, '>=', 1, 'metrics: gate polls ok');
cmp_ok($m->{op('beat', 'ok')} // 0, '>=', 1, 'metrics: heartbeats ok');

my @buckets = map {
	$m->{qq/dynamo_rl_store_round_trip_seconds_bucket{le="$_"}/}
} @LE;

is(scalar(grep { defined } @buckets), 14, 'metrics: 14 round-trip buckets');
is(scalar(grep { ($buckets[$_] // 0) < ($buckets[$_ - 1] // 0) } 1 .. 13), 0,
	'metrics: buckets cumulative');
is($buckets[13], $m->{dynamo_rl_store_round_trip_seconds_count},
	'metrics: +Inf is the count');
cmp_ok($m->{dynamo_rl_store_round_trip_seconds_count} // 0, '>', 0,
	'metrics: round trips counted');
is(join(' ', grep { /^dynamo_rl_store_/ && !/$STORE_SERIES/ }
	map { /^([^{]+)/ } keys %$m), '', 'metrics: only the contract\'s names');

# one claim per admitted request

my $claims = $m->{op('claim', 'ok')};
$r = gen(\%A, 'count-1');
is($r->{status}, 200, 'count: 200');
is(metrics($A{api})->{op('claim', 'ok')}, $claims + 1, 'count: one claim');

# without a store: no "store" object, no store series

$r = gen(\%Z, 'zone-1');
is($r->{status}, 200, 'no store: Z admits');

$st = json(call('GET', '/rl/status', port => $Z{api}));
ok(ref $st eq 'HASH' && $st->{gate} && !exists $st->{store},
	'no store: no "store" in the status');

$m = metrics($Z{api});
ok(keys %$m, 'no store: metrics answered');
is(join(' ', grep { /^dynamo_rl_store/ } keys %$m), '',
	'no store: no store series');

$g = gate(\%Z);
ok(!exists $g->{replica} && !exists $g->{fleet},
	'no store: no replica nor fleet in the gate API');

###############################################################################

# Redis killed by its pid while a client sends requests

my $pid0 = join ' ', $t->worker_pids();
my $load = load(\%A, 'load');

ok(Test::DynamoRL::wait_for(sub {
	(grep { $_->{status} == 200 } results('load')) >= 10 }, 10),
	'load: requests pass');

$off = -s $t->testdir() . '/error.log';
$redis->crash();
my $killed = time();

my $gate_unknown = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%A, 'gate-only-' . ++$SEQ, '/gate');
	return $x->{status} == 503 ? [ $x, time() ] : undef;
}, 10) // [ {}, 0 ];

ok(Test::DynamoRL::wait_for(sub {
	(grep { $_->{sent} > $killed } results('load')) >= 20 }, 10),
	'killed: requests keep coming');

stop_load($load);

my @before = grep { $_->{done} < $killed } results('load');
my @after = grep { $_->{sent} > $killed } results('load');

cmp_ok(scalar(grep { $_->{status} == 200 } @before), '>=', 10,
	'killed: 200 before');
is(scalar(grep { $_->{status} == 503 && $_->{reason} eq 'store_unavailable' }
	@after), scalar(@after), 'killed: every request after 503'
	. ' store_unavailable') or diag(explain([ @after[0 .. 4] ]));
is(scalar(grep { $_->{retry} ne '1' } @after), 0,
	'killed: Retry-After: 1');
my %fwd = map { ($_->{headers}{'x-request-id'} // '') => 1 }
	grep { !exists $_->{event} } @{frontend_records($t)};

is(scalar(grep { $fwd{$_->{id}} } @after), 0,
	'killed: nothing forwarded after the kill');
is(scalar(grep { $_->{status} == 200 } results('load')),
	scalar(grep { /^load-/ } keys %fwd), 'killed: forwarded only what passed');

# the gate-only location: the cached view for gate_stale, then 503

is(reason($gate_unknown->[0]), 'gate_unknown', 'killed, gate only:'
	. ' gate_unknown');
cmp_ok($gate_unknown->[1] - $killed, '>=', 1.5,
	'killed, gate only: after gate_stale (2s)');

# the attempts API answers 503, never 404

my ($known) = map { $_->{id} } grep { $_->{status} == 200 } @before;
$known //= 'load-1';

for my $id ($known, 'never-seen') {
	$r = api($id, port => $A{api});
	is($r->{status}, 503, "killed, api $id: 503");
	is($r->{json}{error}, 'store_unavailable',
		"killed, api $id: store_unavailable");
}

# a gate POST answers 503 and changes nothing

$r = gate_post(\%A, { action => 'close', reason => 'while down' });
is($r->{status}, 503, 'killed, gate POST: 503');
is($r->{json}{error}, 'store_unavailable', 'killed, gate POST: reason');

$st = status(\%A);
ok(is_false($st->{store}{up}), 'killed: status says down');
is(metrics($A{api})->{dynamo_rl_store_up}, 0, 'killed: metrics say down');

my @errors = store_lines($t, $off, 'error');
is(scalar @errors, 1, 'killed: one error line') or diag(@errors);

###############################################################################

# Redis started again on the same port: no reload needed

my $reconnects = metrics($A{api})->{dynamo_rl_store_reconnects_total} // 0;

$off = -s $t->testdir() . '/error.log';
$redis->start();

$r = admit(\%A);
is($r->{status}, 200, 'restarted: A admits again');

is(join(' ', $t->worker_pids()), $pid0, 'restarted: the same worker process');
is(scalar(grep { /reconfiguring|\[alert\]|exited on signal/ }
	err_since($t, $off)), 0, 'restarted: no reload, no crash');
cmp_ok(scalar(store_lines($t, $off, 'notice')), '>=', 1,
	'restarted: a notice line');

$st = wait_status(\%A, sub { is_true($_[0]{store}{up}) });
ok(is_true($st->{store}{up}), 'restarted: status says up');
cmp_ok(metrics($A{api})->{dynamo_rl_store_reconnects_total} // 0, '>',
	$reconnects, 'restarted: a reconnect counted');
is($redis->hgetall(store_key('gate'))->{state}, 'open',
	'restarted: the gate record created again, open');

###############################################################################

# CLIENT PAUSE past the timeout (250ms): the timeout path, then the
# release lets the same id pass

my $timeouts = metrics($A{api})->{op('claim', 'timeout')} // 0;

my $PAUSE = Test::DynamoRL::scale(1.5);

$redis->pause(int($PAUSE * 1000));

my $t0 = time();
$r = gen(\%A, 'paused-1');
my $took = time() - $t0;

is($r->{status}, 503, 'paused: 503');
is(reason($r), 'store_unavailable', 'paused: store_unavailable');
ok(flat($r, 503, 'Service Unavailable'), 'paused: flat body');
is($r->{headers}{'retry-after'}, 1, 'paused: Retry-After: 1');
cmp_ok($took, '<', $PAUSE - 0.3, 'paused: answered at the timeout,'
	. ' not after the pause');
is(forwarded($t, 'paused-1'), 0, 'paused: not forwarded');

# the pause ends, A connects again (it gave up the connection at the
# timeout), and the id is not burnt: the release queued at the timeout
# frees it if the store ran the claim

is($redis->ping(), 'PONG', 'paused: the pause ends');

$st = wait_status(\%A, sub { is_true($_[0]{store}{up}) });
ok(is_true($st->{store}{up}), 'paused: A connected again');

# (the release's mark "r" stays if the claim, given up with its
# connection, never ran: a late claim of the same owner records nothing)

ok(Test::DynamoRL::wait_for(sub { !$redis->has_key(store_key('a:paused-1'))
	|| ($redis->hgetall(store_key('a:paused-1'))->{st} // '') eq 'r' },
	10), 'paused: no claim left in the store');

$r = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%A, 'paused-1');
	return $x->{status} != 503 ? $x : undef;
}, 10) // {};

is($r->{status}, 200, 'paused: the same id passes afterwards');
is(forwarded($t, 'paused-1'), 1, 'paused: forwarded once');
is(metrics($A{api})->{op('claim', 'timeout')}, $timeouts + 1,
	'paused: one claim timeout counted');

###############################################################################

# FLUSHALL while the gate is closed

$r = gate_post(\%A, { action => 'close', reason => 'maintenance' });
is($r->{status}, 200, 'flush: closed');
my $epoch = $r->{json}{epoch} // 0;

# the gate-only location refuses once A's cached view saw the close

$r = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%A, 'seen-' . ++$SEQ, '/gate');
	return $x->{status} == 503 ? $x : undef;
}, 10) // {};

is(reason($r), 'gate_closed', 'flush: A saw the gate closed');

$off = -s $t->testdir() . '/error.log';
$redis->flushall();

$r = gen(\%A, 'lost-1');
is($r->{status}, 503, 'flushed: 503');
like(reason($r) // '', qr/^gate_(?:lost|closed)$/,
	'flushed: gate_lost (or gate_closed, once re-created)');

$g = wait_gate(\%A, sub { ($_[0]{reason} // '') eq 'gate record lost' });
is($g->{state}, 'closed', 'flushed: the gate reads closed');
is($g->{reason}, 'gate record lost', 'flushed: reason "gate record lost"');
is($g->{epoch}, $epoch + 1, 'flushed: the next epoch');

$g = $redis->hgetall(store_key('gate'));
is("$g->{state} $g->{epoch}", 'closed ' . ($epoch + 1),
	'flushed: the record in the store');

my @crit = store_lines($t, $off, 'crit');
is(scalar @crit, 1, 'flushed: one crit line') or diag(@crit);

$r = gen(\%A, 'lost-2');
is($r->{status} . ' ' . (reason($r) // '-'), '503 gate_closed',
	'flushed: closed afterwards');
is(forwarded($t, 'lost-1') + forwarded($t, 'lost-2'), 0,
	'flushed: nothing forwarded');

$r = gate_post(\%A, { action => 'open', epoch => $epoch + 1 });
is($r->{status}, 200, 'flushed: opened with the epoch');
is(gen(\%A, 'lost-3')->{status}, 200, 'flushed: admits once opened');

###############################################################################

sub op {
	my ($op, $result) = @_;
	return qq/dynamo_rl_store_operations_total{op="$op",result="$result"}/;
}

# polls with fresh ids until the replica admits one

# "dynamo rl store:" lines of error.log at one level, from byte $off

# a client process sending requests with ids <name>-1, <name>-2, ... one
# after the other until stop_load(); each answer is a line of
# <testdir>/<name>.load: id, time sent, time answered, status, reason,
# Retry-After

sub load {
	my ($rep, $name) = @_;

	my $path = $t->testdir() . "/$name.load";
	my $stop = "$path.stop";

	my $parent = $$;
	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open my $out, '>>', $path or POSIX::_exit(1);
		my $end = time() + Test::DynamoRL::scale(60);

		for (my $i = 1; !-e $stop && time() < $end
			&& getppid() == $parent; $i++)
		{
			my $sent = time();
			my $x = gen($rep, "$name-$i");

			syswrite($out, join(' ', "$name-$i", $sent, time(),
				$x->{status}, reason($x) // '-',
				$x->{headers}{'retry-after'} // '-') . "\n");

			# a steady load, not a flood: the machine is shared

			Time::HiRes::sleep(0.01);
		}

		POSIX::_exit(0);
	}

	$LOADS{$pid} = 1;

	return { pid => $pid, stop => $stop };
}

sub stop_load {
	my ($l) = @_;

	open my $fh, '>', $l->{stop} or die "cannot create $l->{stop}: $!\n";
	close $fh;

	Test::DynamoRL::wait_for(sub {
		waitpid($l->{pid}, WNOHANG) != 0 }, 10)
		or do { kill 'KILL', $l->{pid}; waitpid($l->{pid}, 0) };

	delete $LOADS{$l->{pid}};
}

# a client process left by a failure is stopped by its pid

END {
	for my $pid (keys %LOADS) {
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
}

sub results {
	my ($name) = @_;

	open my $fh, '<', $t->testdir() . "/$name.load" or return ();

	return map {
		my @f = split ' ';
		+{ id => $f[0], sent => $f[1], done => $f[2], status => $f[3],
			reason => $f[4], retry => $f[5] }
	} grep { /\n\z/ } <$fh>;
}

###############################################################################
