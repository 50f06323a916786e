#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The shared store across gateway replicas (issue 13): Debian's
# redis-server on a free loopback port, and two nginx instances as
# replicas A and B (then a third, C) that name it, in front of one fake
# Dynamo that counts what is forwarded.  Replica B's wall clock runs ten
# minutes ahead (libfaketime), so that a lease judged on a replica's
# clock instead of the store's would show.
#
# - single use across replicas: an id used through A is refused with 409
#   on B and on A, and the other way round; the store's record of it;
# - 300 ids, each sent to A and to B at the same instant: exactly one
#   forward per id, one 200 and one 409;
# - the attempts API on B answers for an attempt through A, with
#   "replica": "A", while it streams and once it ended; unknown ids 404;
# - one gate: closed through A, B refuses (503 gate_closed, Retry-After,
#   nothing forwarded or recorded); the epoch compared across replicas;
#   a lease judged on the store's clock, which stays closed when it runs
#   out;
# - the fleet drain: with an SSE stream in flight on A, "drained" stays
#   false on B until the stream ends, then true; B's nginx stopped, B
#   shows as "lost" after three heartbeats; the same figures in the
#   metrics (dynamo_rl_fleet_*) and the status's "store" (issue 25);
# - a replica started while the gate is closed, its first gate read held
#   back by CLIENT PAUSE, admits nothing.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;
use JSON::PP;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call flat forwarded frontend_records
	is_false is_true iso_ms metrics raw read_until start time_limit /;
use Test::DynamoRL::Redis qw/ gate gate_post gen reason replica_conf
	store_key wait_done wait_gate wait_state wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(300));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(129 + 6 + 4);

# replicas B and C: their logs and sanitizer reports are checked too

my $tb = Test::DynamoRL->new()->check_at_end();
my $tc = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $STORE = 'redis://127.0.0.1:8379';
# a timeout that the race's 600 requests at once fit in, under valgrind
# too: a claim answered late is refused (fail closed), not forwarded

my $PARAMS = 'timeout=' . Test::DynamoRL::scale(1) . 's heartbeat=500ms'
	. ' gate_poll=100ms gate_stale=2s';

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);
my %C = (name => 'C', listen => 8280, api => 8270);

$t->write_file_expand('nginx.conf', replica_conf(%A, workers => 2,
	store => $STORE, params => $PARAMS));

$t->run_fake_dynamo()->run();

# B's wall clock ten minutes ahead, its monotonic clock left alone

my ($FAKETIME) = grep { -f }
	glob('/usr/lib/*/faketime/libfaketime.so.1'),
	'/usr/lib/faketime/libfaketime.so.1';

my @SKEW_ENV = qw/ FAKETIME FAKETIME_DONT_FAKE_MONOTONIC /;

$tb->write_file_expand('nginx.conf', replica_conf(%B, workers => 2,
	store => $STORE, params => $PARAMS, env => \@SKEW_ENV));

{
	local $ENV{FAKETIME} = '+600';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;

	# under make asan, libfaketime goes first (see dynamo_rl_clock.t)

	local $ENV{TEST_NGINX_PRELOAD} = join ' ', grep { defined && length }
		$FAKETIME, $ENV{TEST_NGINX_PRELOAD};

	$tb->asan_options('verify_asan_link_order=0')
		if $ENV{TEST_NGINX_PRELOAD};

	chmod(01777, $tb->testdir()) or die "cannot chmod: $!\n";

	$tb->run();
}

###############################################################################

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';
my $HB = 0.5;

my ($r, $g, $e, $s, $rec, $SEQ);

###############################################################################

# both replicas read one gate, created open; both heartbeats arrive

$g = wait_gate(\%A, sub { $_[0]{state} && $_[0]{fleet}
	&& ($_[0]{fleet}{replicas} // 0) == 2 });

is($g->{state}, 'open', 'start: the gate is open');
is($g->{replica}, 'A', 'start: A names itself');
is(join(',', sort keys %$g), 'changed,epoch,expired,fleet,in_flight,'
	. 'lease_expires,lease_remaining_ms,members_changed,reason,replica,state',
	'start: the gate document, with replica and fleet');
is(join(',', sort keys %{$g->{fleet} // {}}),
	'acked,drained,in_flight,lost,replicas', 'start: the fleet object');
is($g->{fleet}{replicas}, 2, 'start: two replicas in the fleet');
is(scalar(lost($g)), 0, 'start: none lost');

$e = $g->{epoch};

$g = gate(\%B);
is($g->{replica}, 'B', 'start: B names itself');
is("$g->{state} $g->{epoch}", "open $e", 'start: B reads the same gate');

is($redis->hgetall(store_key('gate'))->{state}, 'open',
	'start: the gate record in the store');
my $fleet = $redis->hgetall(store_key('fleet'));

# a field per instance: the replica's name, its master's pid and the
# number drawn with its zone

my ($IA) = grep { /^A\/\Q${\ $t->master()}\E\.[0-9a-f]{8}$/ } keys %$fleet;
my ($IB) = grep { /^B\/\Q${\ $tb->master()}\E\.[0-9a-f]{8}$/ } keys %$fleet;

is_deeply([ sort keys %$fleet ], [ grep { defined } $IA, $IB ],
	'start: the fleet record names both instances')
	or diag(explain([ keys %$fleet ]));
$IA //= 'A';
$IB //= 'B';
like($fleet->{$IA} // '', qr/^$e:0:\d{13}$/,
	'start: A\'s heartbeat, seen_epoch:in_flight:ts_ms');

# B's clock is ahead, when libfaketime is there

SKIP: {
	skip 'no libfaketime', 1 unless $FAKETIME;

	$r = call('GET', '/rl/gate', port => $B{api});
	my $date = $r->{headers}{date} // '';
	my $ahead = date_s($date) - time();

	ok(abs($ahead - 600) < 60, 'start: B\'s wall clock is 10 min ahead')
		or diag("Date: $date");
}

###############################################################################

# single use across replicas, sequentially

$r = gen(\%A, 'seq-1');
is($r->{status}, 200, 'seq-1 on A: 200');

$r = gen(\%B, 'seq-1');
is($r->{status}, 409, 'seq-1 on B: 409');
is(reason($r), 'duplicate_attempt', 'seq-1 on B: duplicate_attempt');
is($r->{headers}{'x-should-retry'}, 'false', 'seq-1 on B: not to retry');
ok(flat($r, 409, 'Conflict'), 'seq-1 on B: flat body') or diag($r->{body});
is($r->{headers}{'x-dynamo-attempt-id'}, 'seq-1', 'seq-1 on B: id echoed');

$r = gen(\%A, 'seq-1');
is($r->{status}, 409, 'seq-1 on A again: 409');

$r = gen(\%B, 'seq-2');
is($r->{status}, 200, 'seq-2 on B: 200');
$r = gen(\%A, 'seq-2');
is($r->{status}, 409, 'seq-2 on A: 409');
is(reason($r), 'duplicate_attempt', 'seq-2 on A: duplicate_attempt');

is(forwarded($t, 'seq-1') . ' ' . forwarded($t, 'seq-2'), '1 1',
	'seq: each forwarded once');

# the store's record: st, owner, times, replica, status

$rec = wait_done(\%A, 'seq-1');
my $h = $redis->hgetall(store_key('a:seq-1'));

is($h->{st}, 'u', 'record: st u (succeeded)');
is($h->{rp}, 'A', 'record: rp A');
is($h->{code}, 200, 'record: code 200');
ok(length($h->{ow} // '') && ($h->{t0} // '') =~ /^\d{13}$/
	&& ($h->{t1} // '') =~ /^\d{13}$/ && $h->{t1} >= $h->{t0},
	'record: ow, t0, t1') or diag(explain($h));

my $pttl = $redis->cmd('PTTL', store_key('a:seq-1'));
ok($pttl > 9 * 60 * 1000 && $pttl <= 10 * 60 * 1000,
	'record: attempt ttl (10m) once ended') or diag("pttl $pttl");

###############################################################################

# the attempts API on either replica, for an attempt through either

$rec = wait_done(\%B, 'seq-1');

is($rec->{state}, 'succeeded', 'api on B, via A: succeeded');
is($rec->{replica}, 'A', 'api on B, via A: replica A');
is($rec->{attempt_id}, 'seq-1', 'api on B, via A: attempt_id');
is($rec->{status}, 200, 'api on B, via A: status');
ok(is_false($rec->{stream}), 'api on B, via A: not a stream');

is(wait_done(\%A, 'seq-2')->{replica}, 'B', 'api on A, via B: replica B');

$r = api('never-seen', port => $B{api});
is($r->{status}, 404, 'api unknown on B: 404');
is($r->{json}{error}, 'unknown_attempt', 'api unknown on B: unknown_attempt');

$r = api('never-seen', port => $A{api});
is($r->{status}, 404, 'api unknown on A: 404');

# a stream through A, seen from B while it streams and once it ended

$s = start('POST', '/v1/chat/completions', port => $A{listen}, body => $CHAT,
	headers => [ 'X-Dynamo-Attempt-Id' => 'stream-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 600,
		'x-fake-interval-ms' => 100 ]);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 .*data: \{/s,
	'stream on A: streaming');

$rec = wait_state(\%B, 'stream-1', 'streaming');
is($rec->{state}, 'streaming', 'stream on A, api on B: streaming');
is($rec->{replica}, 'A', 'stream on A, api on B: replica A');
ok(is_true($rec->{stream}), 'stream on A, api on B: a stream');
is($redis->hgetall(store_key('a:stream-1'))->{st}, 's', 'stream: st s in the store');

$pttl = $redis->cmd('PTTL', store_key('a:stream-1'));
ok($pttl > 59 * 60 * 1000 && $pttl <= 3600 * 1000,
	'stream: in flight, the ttl is the lease (1h)') or diag("pttl $pttl");

$r = gen(\%B, 'stream-1');
is($r->{status}, 409, 'stream on A, same id on B: 409 while in flight');

close $s;

$rec = wait_done(\%B, 'stream-1');
is($rec->{state}, 'canceled', 'stream on A canceled: api on B');
is(forwarded($t, 'stream-1'), 1, 'stream: forwarded once');

###############################################################################

# a barrier race: each id sent to A and to B at the same instant

my $N = 300;
my %race = race($N, \%A, \%B);

my (%pair, %won);

for my $id (keys %race) {
	my $v = $race{$id};
	$pair{join ' ', sort map { $_->[1] } @$v}++;
	$won{$_->[0]}++ for grep { $_->[1] == 200 } @$v;
}

is($pair{'200 409'} // 0, $N, "race: one 200 and one 409 for each of $N ids")
	or diag(explain(\%pair));
is(scalar(grep { $_->[1] != 409 || $_->[2] eq 'duplicate_attempt' }
	map { @$_ } values %race), 2 * $N, 'race: every 409 duplicate_attempt');
ok(($won{A} // 0) > 0 && ($won{B} // 0) > 0, 'race: both replicas won some')
	or diag(explain(\%won));

my %fwd;

Test::DynamoRL::wait_for(sub {
	%fwd = ();

	for my $rec (@{frontend_records($t)}) {
		my $id = $rec->{headers}{'x-request-id'} // next;
		$fwd{$id}++ if $id =~ /^race-/;
	}

	return keys %fwd >= $N;
}, 10);

is(scalar(keys %fwd), $N, "race: $N ids forwarded");
is(scalar(grep { $_ != 1 } values %fwd), 0, 'race: none forwarded twice')
	or diag(explain({ map { $_ => $fwd{$_} } grep { $fwd{$_} != 1 }
		keys %fwd }));

# the race's ends, many in one turn of the event loop, go to the store
# joined in few script runs: each record succeeded, kept for the attempt
# ttl (10m), not the lease

my %ended;

Test::DynamoRL::wait_for(sub {
	%ended = ();
	$ended{$redis->hgetall(store_key("a:race-$_"))->{st} // 'none'}++
		for 1 .. $N;
	return ($ended{u} // 0) == $N;
}, 10);

is($ended{u} // 0, $N, "race: $N records ended succeeded in the store")
	or diag(explain(\%ended));
is(scalar(grep { $redis->cmd('PTTL', store_key("a:race-$_")) > 600000 } 1 .. $N),
	0, 'race: every record kept for the attempt ttl');

###############################################################################

# one gate: closed through A, B refuses

$e = gate(\%A)->{epoch};

$r = gate_post(\%A, { action => 'close', reason => 'weights v2',
	lease => '30s' });
$g = $r->{json};

is($r->{status}, 200, 'close on A: 200');
is("$g->{state} $g->{epoch}", 'closed ' . ($e + 1), 'close on A: epoch + 1');
is($g->{replica}, 'A', 'close on A: the answer names A');

$e++;

$g = gate(\%B);
is("$g->{state} $g->{epoch}", "closed $e", 'closed: B reads it at once');
is($g->{reason}, 'weights v2', 'closed: B reads the reason');
like($g->{lease_expires} // '', qr/^\d{4}-.*Z$/, 'closed: B reads the lease');
is($redis->hgetall(store_key('gate'))->{state}, 'closed',
	'closed: the store\'s record');

$r = gen(\%B, 'gated-1');
is($r->{status}, 503, 'closed, B: 503');
is(reason($r), 'gate_closed', 'closed, B: gate_closed');
ok(flat($r, 503, 'Service Unavailable'), 'closed, B: flat body');
like($r->{headers}{'retry-after'} // '', qr/^[1-9]\d*$/,
	'closed, B: Retry-After');
ok(($r->{headers}{'retry-after'} // 0) >= 20
	&& $r->{headers}{'retry-after'} <= 30,
	'closed, B: Retry-After, the lease left on the store\'s clock');
is(api('gated-1', port => $A{api})->{status}, 404, 'closed, B: not recorded');

# the gate-only location of B (ledger off) reads its cached view

# (until its next poll, it may still forward: ids of their own)

$r = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%B, 'gated-poll-' . ++$SEQ, '/gate');
	return $x->{status} == 503 ? $x : undef;
}, 10) // {};

is(reason($r), 'gate_closed', 'closed, B gate-only: gate_closed');

$r = gen(\%B, 'gated-3', '/zone');
is($r->{status}, 200, 'closed, B without gate: 200');

is(forwarded($t, 'gated-1'), 0, 'closed: nothing forwarded');

###############################################################################

# the epoch compared across replicas

$r = gate_post(\%B, { action => 'open', epoch => $e - 1 });
is($r->{status}, 409, 'stale epoch on B: 409');
is($r->{json}{error}, 'epoch_mismatch', 'stale epoch on B: epoch_mismatch');
is(gate(\%A)->{state}, 'closed', 'stale epoch on B: A still closed');

$r = gate_post(\%B, { action => 'open', epoch => $e });
is($r->{status}, 200, 'current epoch on B: 200');
is("$r->{json}{state} $r->{json}{epoch}", 'open ' . ($e + 1),
	'current epoch on B: open, epoch + 1');

$g = gate(\%A);
is("$g->{state} $g->{epoch}", 'open ' . ($e + 1), 'opened on B: A reads it');

$r = gate_post(\%A, { action => 'close', reason => 'late', epoch => $e });
is($r->{status}, 409, 'A with the epoch before B\'s open: 409');
is(gate(\%B)->{state}, 'open', 'A with an old epoch: B still open');

$e++;

$r = gen(\%B, 'reopened-1');
is($r->{status}, 200, 'opened: B admits');

###############################################################################

# the lease on the store's clock: B's clock is 10 minutes ahead

my $now = $redis->time_ms();

$r = gate_post(\%A, { action => 'close', reason => 'lease', lease => '60s' });
is($r->{status}, 200, 'lease 60s on A: closed');
$e++;

$g = gate(\%B);
ok(is_false($g->{expired}), 'lease 60s, B: not expired');
ok(abs((iso_ms($g->{lease_expires}) // 0) - ($now + 60000)) < 3000,
	'lease 60s, B: lease_expires on the store\'s clock')
	or diag(($g->{lease_expires} // '-') . ", store $now");
ok(($g->{lease_remaining_ms} // 0) > 50000
	&& $g->{lease_remaining_ms} <= 60000,
	'lease 60s, B: lease_remaining_ms') or diag($g->{lease_remaining_ms});

# a lease of one second runs out: closed, "expired": true on both

my $before = $redis->time_ms();
$r = gate_post(\%B, { action => 'renew', lease => '1s' });
my $after = $redis->time_ms();

is($r->{status}, 200, 'renew 1s on B: 200');
$e++;

my $expires = iso_ms($r->{json}{lease_expires}) // 0;
ok($expires >= $before + 1000 && $expires <= $after + 1000,
	'renew 1s: lease_expires 1 s after the renew, store\'s clock')
	or diag("$r->{json}{lease_expires}: $expires, store $before..$after");

$g = wait_gate(\%A, sub { is_true($_[0]{expired}) });
my $store_now = $redis->time_ms();

ok(is_true($g->{expired}), 'lease over: A says expired');
cmp_ok($store_now, '>=', $expires, 'lease over: on the store\'s clock');
is("$g->{state} $g->{epoch}", "closed $e",
	'lease over: still closed, the epoch unchanged');
is($g->{lease_remaining_ms}, 0, 'lease over: lease_remaining_ms 0');

$g = gate(\%B);
ok(is_true($g->{expired}) && $g->{state} eq 'closed',
	'lease over: B says closed, expired');

# it stays closed: observed until the store's clock is 1.5 s past

my $open_seen = 0;

Test::DynamoRL::wait_for(sub {
	$open_seen++ if gate(\%B)->{state} ne 'closed';
	return $redis->time_ms() > $expires + 1500;
}, 10);

is($open_seen, 0, 'lease over: stays closed');

for my $rep (\%A, \%B) {
	$r = gen($rep, "expired-$rep->{name}");
	is($r->{status} . ' ' . (reason($r) // '-'), '503 gate_closed',
		"lease over, $rep->{name}: 503 gate_closed");
	is($r->{headers}{'retry-after'}, 5, "lease over, $rep->{name}:"
		. ' Retry-After 5');
}

is(forwarded($t, 'expired-A') + forwarded($t, 'expired-B'), 0,
	'lease over: nothing forwarded');

$r = gate_post(\%B, { action => 'renew', lease => '1h' });
$e++;
ok(is_false(gate(\%A)->{expired}), 'renewed on B: A not expired');

$r = gate_post(\%A, { action => 'open', epoch => $e });
is($r->{status}, 200, 'open on A with the epoch');
$e++;

###############################################################################

# the fleet drain, with an SSE stream in flight on A

$s = start('POST', '/v1/chat/completions', port => $A{listen}, body => $CHAT,
	headers => [ 'X-Dynamo-Attempt-Id' => 'drain-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 600,
		'x-fake-interval-ms' => 100 ]);

like(read_until($s, qr/data: \{/, 10), qr/data: \{/, 'drain: streaming on A');

$r = gate_post(\%B, { action => 'close', reason => 'drain' });
is($r->{status}, 200, 'drain: closed on B');
$e++;

$g = wait_gate(\%B, sub { ($_[0]{fleet}{acked} // 0) == 2 });
is($g->{fleet}{acked}, 2, 'drain: both replicas saw the close');
is($g->{fleet}{replicas}, 2, 'drain: two replicas');
cmp_ok($g->{fleet}{in_flight}, '>=', 1, 'drain: the stream in flight');
ok(is_false($g->{fleet}{drained}), 'drain: not drained');

# not drained for as long as the stream runs: three heartbeats and more

my $drained_seen = 0;
my $until = $redis->time_ms() + 4 * $HB * 1000;

Test::DynamoRL::wait_for(sub {
	$drained_seen++ unless is_false(gate(\%B)->{fleet}{drained});
	return $redis->time_ms() > $until;
}, 10);

is($drained_seen, 0, 'drain: never drained while the stream runs');
ok(is_false(gate(\%A)->{fleet}{drained}), 'drain: A agrees');

# the same in the metrics and the status: replicas acked in_flight lost
# drained

is(wait_fleet(\%B, qr/^2 2 [1-9]\d* 0 0$/), '2 2 1 0 0',
	'drain: metrics, 2 replicas acked, 1 in flight, not drained');
is(fleet_json(wait_status(\%B, sub { $_[0]{store}{fleet} })), '2 2 1 0 0',
	'drain: status, the same');

close $s;

$g = wait_gate(\%B, sub { is_true($_[0]{fleet}{drained}) });
ok(is_true($g->{fleet}{drained}), 'drain: drained once the stream ended');
is($g->{fleet}{in_flight}, 0, 'drain: in_flight 0');
is(wait_fleet(\%A, qr/ 1$/), '2 2 0 0 1', 'drain: metrics, drained');
is(fleet_json(wait_status(\%A, sub { is_true($_[0]{store}{fleet}{drained}) })),
	'2 2 0 0 1', 'drain: status, drained');
is($g->{state}, 'closed', 'drain: still closed');
is(wait_done(\%B, 'drain-1')->{state}, 'canceled', 'drain: the stream ended');

###############################################################################

# a heartbeat lost: B's nginx stopped by its pid

my @bw = $tb->worker_pids();
is(scalar @bw, 2, 'lost: B has two worker processes');

my $stopped = time();
$tb->stop_nginx();

ok(Test::DynamoRL::wait_for(sub { !grep { kill 0, $_ } @bw }, 10),
	'lost: no worker process of B left');

$g = wait_gate(\%A, sub { grep { $_ eq 'B' } lost($_[0]) });

# B's last report against the store's clock, the one "lost" is judged by
# (the test's own clock cannot see when B last beat before it stopped)

my $seen = $redis->time_ms();
my ($beat) = ($redis->hgetall(store_key('fleet'))->{$IB} // '') =~ /:(\d+)$/;

is(join(' ', lost($g)), 'B', 'lost: B is lost');
cmp_ok($seen - ($beat // $seen), '>=', 1500,
	'lost: three heartbeats (1.5 s) after B\'s last report')
	or diag(sprintf('%.2f s after the stop', time() - $stopped));
is($g->{fleet}{replicas}, 1, 'lost: one live replica');
ok(is_false($g->{fleet}{drained}), 'lost: not drained with B lost');
is(wait_fleet(\%A, qr/^1 1 0 1 0$/), '1 1 0 1 0',
	'lost: metrics, one replica, one lost, not drained');
is(fleet_json(wait_status(\%A, sub { ($_[0]{store}{fleet}{lost} // 0) == 1 })),
	'1 1 0 1 0', 'lost: status, the same');

###############################################################################

# a third replica started while the gate is closed admits nothing, even
# before it could read the gate: the store pauses for 2 s meanwhile

$tc->write_file_expand('nginx.conf', replica_conf(%C, store => $STORE,
	params => $PARAMS));

$redis->pause(2000);
$tc->run();

my @early = map { gen(\%C, "early-$_", $_ % 2 ? '/gate' : '') } 1 .. 10;

is(scalar(grep { $_->{status} == 503 } @early), 10,
	'C starting: every request 503');
is(scalar(grep { (reason($_) // '')
	=~ /^(?:gate_unknown|store_unavailable|gate_closed)$/ } @early), 10,
	'C starting: gate_unknown, store_unavailable or gate_closed')
	or diag(join ' ', map { reason($_) // '-' } @early);
is(scalar(grep { forwarded($t, "early-$_") } 1 .. 10), 0,
	'C starting: nothing forwarded');

$g = wait_gate(\%C, sub { $_[0]{state} });
is("$g->{state} $g->{epoch}", "closed $e", 'C: reads the closed gate');
is($g->{replica}, 'C', 'C: names itself');

$g = wait_gate(\%C, sub { ($_[0]{fleet}{replicas} // 0) == 2 });
is(join(' ', $g->{fleet}{replicas} // '-', lost($g)), '2 B',
	'C: two live replicas, B lost');

$r = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%C, 'late-' . ++$SEQ, '/gate');
	return (reason($x) // '') eq 'gate_closed' ? $x : undef;
}, 10) // {};

is($r->{status}, 503, 'C, its view read: 503 gate_closed');
is(gen(\%C, 'late-ledger')->{status}, 503, 'C, ledger on: 503');
is(scalar(grep { !exists $_->{event}
	&& ($_->{headers}{'x-request-id'} // '') =~ /^(?:late|early)-/ }
	@{frontend_records($t)}), 0, 'C: nothing forwarded');

# opened through C with the epoch: A and C admit

$r = gate_post(\%C, { action => 'open', epoch => $e });
is($r->{status}, 200, 'open on C: 200');

$r = gen(\%C, 'open-c');
is($r->{status}, 200, 'open: C admits');
is(forwarded($t, 'open-c'), 1, 'open: forwarded once');
is(gen(\%A, 'open-c')->{status}, 409, 'open: C\'s id refused on A');

$r = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%A, 'open-a-' . ++$SEQ, '/gate');
	return $x->{status} == 200 ? $x : undef;
}, 10) // {};

is($r->{status}, 200, 'open: A admits');

###############################################################################

# the fleet's series of a replica's metrics, polled until they match
# $re (10 s): "replicas acked in_flight lost drained", in_flight 0 or 1;
# and the same of a status's "store"

sub wait_fleet {
	my ($rep, $re) = @_;

	my $f = '';

	Test::DynamoRL::wait_for(sub {
		my $m = metrics($rep->{api});
		$f = join ' ', map { $m->{"dynamo_rl_fleet_$_"} // '-' }
			qw/ replicas acked in_flight lost drained /;
		return $f =~ $re;
	}, 10);

	$f =~ s/^(\d+ \d+) [1-9]\d*/$1 1/;

	return $f;
}

sub fleet_json {
	my ($st) = @_;

	my $f = ref $st->{store}{fleet} eq 'HASH' ? $st->{store}{fleet} : {};

	return join ' ', (map { $f->{$_} // '-' }
		qw/ replicas acked /), ($f->{in_flight} // 0) ? 1 : 0,
		$f->{lost} // '-', is_true($f->{drained}) ? 1 : 0;
}

sub lost {
	my ($g) = @_;

	my $l = ref $g->{fleet} eq 'HASH' ? $g->{fleet}{lost} : undef;
	return ref $l eq 'ARRAY' ? @$l : ();
}

# a generation request with an attempt id to a replica's request plane,
# under /v1/ (ledger and gate), /gate/v1/ (gate only), /zone/v1/ (neither)

# an RFC 7231 Date header, in seconds since the epoch

sub date_s {
	my ($date) = @_;

	my %mon = (Jan => 0, Feb => 1, Mar => 2, Apr => 3, May => 4, Jun => 5,
		Jul => 6, Aug => 7, Sep => 8, Oct => 9, Nov => 10, Dec => 11);

	my ($d, $m, $y, $hh, $mm, $ss) = $date
		=~ /^\w{3}, (\d\d) (\w{3}) (\d{4}) (\d\d):(\d\d):(\d\d) GMT$/
		or return 0;

	require Time::Local;
	return Time::Local::timegm($ss, $mm, $hh, $d, $mon{$m}, $y);
}

# ids race-1 .. race-$n, each sent to every replica at one instant: for
# each replica, 4 processes open their connections, wait at a barrier (a
# pipe that the test closes), then write all their requests at once and
# read the answers; returns id => [ [ replica, status, reason ], ... ]

sub race {
	my ($n, @reps) = @_;

	my $procs = 4;
	my $dir = $t->testdir() . '/race';
	mkdir $dir;

	pipe(my $rd, my $wr) or die "cannot pipe: $!\n";

	my @kids;

	# the second replica's racers send their ids last first: however
	# unevenly the machine schedules the racers, each replica is first
	# at one end of the ids, and they meet in the middle

	for my $i (0 .. $#reps) {
		my $rep = $reps[$i];

		for my $k (0 .. $procs - 1) {
			my $pid = fork() // die "cannot fork: $!\n";

			if ($pid == 0) {
				close $wr;
				eval { racer($rep, $k, $procs, $n, $rd, $dir, $i % 2) };
				POSIX::_exit(0);
			}

			push @kids, $pid;
		}
	}

	close $rd;

	my $ready = Test::DynamoRL::wait_for(sub {
		my @f = glob("$dir/ready-*");
		return @f == @kids;
	}, 30);

	diag('race: not every racer got ready') unless $ready;

	close $wr;

	Test::DynamoRL::wait_for(sub {
		@kids = grep { waitpid($_, WNOHANG) == 0 } @kids;
		return !@kids;
	}, 60);

	for my $pid (@kids) {
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}

	my %res;

	for my $path (glob("$dir/result-*")) {
		open my $fh, '<', $path or next;

		while (my $line = <$fh>) {
			my ($id, $rep, $status, $why) = split ' ', $line;
			push @{$res{$id}}, [ $rep, $status, $why ];
		}
	}

	return %res;
}

sub racer {
	my ($rep, $k, $procs, $n, $barrier, $dir, $reverse) = @_;

	my @ids = map { "race-$_" } grep { $_ % $procs == $k } 1 .. $n;
	@ids = reverse @ids if $reverse;
	my $addr = '127.0.0.1:' . port($rep->{listen});

	my @conns = map {
		[ $_, IO::Socket::INET->new(PeerAddr => $addr, Proto => 'tcp') ]
	} @ids;

	my $tag = "$rep->{name}-$k";

	open my $ready, '>', "$dir/ready-$tag" or die;
	close $ready;

	# the barrier: EOF when the test closes the pipe's other end

	sysread($barrier, my $byte, 1);

	for my $c (@conns) {
		my ($id, $sock) = @$c;
		next unless $sock;
		syswrite($sock, raw('POST', '/v1/completions', body => $BODY,
			headers => [ 'X-Dynamo-Attempt-Id' => $id ]));
	}

	open my $out, '>', "$dir/result-$tag.tmp" or die;

	for my $c (@conns) {
		my ($id, $sock) = @$c;

		my $resp = $sock ? Test::DynamoRL::Fixture::resp(
			read_until($sock, undef, 30)) : { status => 0 };

		printf $out "%s %s %s %s\n", $id, $rep->{name}, $resp->{status},
			reason($resp) // '-';
	}

	close $out;
	rename("$dir/result-$tag.tmp", "$dir/result-$tag");
}

###############################################################################
