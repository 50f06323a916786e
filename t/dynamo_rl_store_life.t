#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# An attempt through the lifecycle events of a real deployment (issue
# 24), with Debian's redis-server started by the test and two replicas:
# A runs in its own pid namespace (unshare --pid --fork), as in a
# container, so that a restarted A has the same master and worker pids
# (1 and 2) and the same first connection number as the A it replaces;
# B is an ordinary nginx.  Every replica runs with lease=4s.
#
# - A killed with -9 while it streams an attempt, then restarted: the
#   trainer's retry through the new A is refused (409), never forwarded a
#   second time, although the new worker process has the pid and the
#   connection number of the dead one (each worker process draws its own
#   identity as it starts); the dead process's attempt ends as failed,
#   reason replica_lost, within seconds, on both replicas, and its id
#   stays refused;
# - a stream of about 8 s on B, twice the lease: its record stays
#   "streaming" past the lease (the worker process renews it while the
#   attempt is alive), the same id is refused on A meanwhile, the record
#   ends succeeded and the attempt was forwarded once;
# - A stopped with SIGTERM (nginx's fast shutdown) while it streams: its
#   worker process ends the attempt before it exits, as failed, reason
#   worker_exited, and the id stays refused.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api forwarded read_until start time_limit /;
use Test::DynamoRL::PidNS;
use Test::DynamoRL::Redis qw/ gen replica_conf store_key wait_done
	wait_state /;

###############################################################################

time_limit(Test::DynamoRL::scale(180));

system('unshare --pid --fork true >/dev/null 2>&1') == 0
	or plan(skip_all => 'no pid namespaces here (unshare --pid)');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(32 + 2);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $STORE = 'redis://127.0.0.1:8379';
my $PARAMS = 'timeout=' . Test::DynamoRL::scale(1) . 's heartbeat=250ms'
	. ' gate_poll=100ms gate_stale=2s lease=4s';

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => $STORE, params => $PARAMS));
$t->run_fake_dynamo();

$tb->write_file_expand('nginx.conf', replica_conf(%B,
	store => $STORE, params => $PARAMS));
$tb->run();

# A's nginx processes die with the test in any case: unshare kills its
# child, nginx's master, the namespace's init, if it is killed itself

my $A = Test::DynamoRL::PidNS->new($t, 'nginx of A');

END {
	local $?;
	$A->stop('KILL') if $A;
}

###############################################################################

my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my ($r, $rec, $s);

# A in its own pid namespace; its first connection is the stream

ns_start(0);

$s = stream(\%A, 'life-1', 600, 100);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 .*data: \{/s,
	'kill: A streams');
is(wait_state(\%B, 'life-1', 'streaming')->{replica}, 'A',
	'kill: B sees the stream of A');

my $owner = $redis->hgetall(store_key('a:life-1'))->{ow} // '';
like($owner, qr{^A/2\.[0-9a-f]{16}/\d+\.1$},
	'kill: the owner is the replica, the worker pid 2 and its identity');

$A->stop('KILL');
close $s;

# the same A again: master pid 1, worker pid 2, the retry its first
# connection, as the stream was

ns_start($redis->time_ms());

$r = gen(\%A, 'life-1');
is($r->{status}, 409, 'restart: the retry through the new A is 409');
is(forwarded($t, 'life-1'), 1, 'restart: forwarded once');

$r = gen(\%B, 'life-1');
is($r->{status}, 409, 'restart: the retry through B is 409');

# the dead process's attempt ends within seconds, the id stays used

my $killed = time();
$rec = wait_done(\%B, 'life-1');
my $took = time() - $killed;

is($rec->{state}, 'failed', 'settled: failed on B');
is($rec->{reason}, 'replica_lost', 'settled: replica_lost on B');
cmp_ok($took, '<', 5, 'settled: within seconds (lease 4s: before it ran out)')
	or diag("took $took s");

$rec = wait_done(\%A, 'life-1');
is($rec->{state}, 'failed', 'settled: failed on A');
is($rec->{reason}, 'replica_lost', 'settled: replica_lost on A');

my $pttl = $redis->cmd('PTTL', store_key('a:life-1'));
cmp_ok($pttl, '>', 4000, 'settled: kept for the attempt ttl, not the lease')
	or diag("pttl $pttl");

$r = gen(\%A, 'life-1');
is($r->{status}, 409, 'settled: the retry is still 409');
is(forwarded($t, 'life-1'), 1, 'settled: still forwarded once');

ok(!exists $redis->hgetall(store_key('live'))->{ns_identity($owner)},
	'settled: the dead process is no longer live');

like($t->read_file('error.log') . $tb->read_file('error.log'),
	qr/1[ ]attempt\(s\)[ ]in[ ]flight[ ]of[ ]worker[ ]process[ ]
	"A\/2\.[0-9a-f]{16}",[ ]silent[ ]for[ ]over[ ]\d+ms,[ ]ended[ ]as[ ]
	failed[ ]\(replica_lost\)/x,
	'settled: logged');

###############################################################################

# a stream of 8 s on B, twice the lease

$s = stream(\%B, 'long-1', 40, 200);
my $began = time();

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 /,
	'long: B streams');

Test::DynamoRL::wait_for(sub { time() - $began > 6 }, 10, 0.25);

$rec = api('long-1', port => $A{api});
is($rec->{json}{state}, 'streaming', 'long: streaming on A past the lease');

$pttl = $redis->cmd('PTTL', store_key('a:long-1'));
cmp_ok($pttl, '>', 0, 'long: the record is there past the lease')
	or diag("pttl $pttl");

$r = gen(\%A, 'long-1');
is($r->{status}, 409, 'long: the same id on A is 409 past the lease');

like(read_until($s, qr/data: \[DONE\]/, 20), qr/data: \[DONE\]/,
	'long: the stream ends');
close $s;

$rec = wait_done(\%A, 'long-1');
is($rec->{state}, 'succeeded', 'long: succeeded');
is(forwarded($t, 'long-1'), 1, 'long: forwarded once');

###############################################################################

# a fast shutdown of A while it streams: the worker ends its attempt

$s = stream(\%A, 'term-1', 600, 100);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 .*data: \{/s,
	'term: A streams');
is(wait_state(\%B, 'term-1', 'streaming')->{state}, 'streaming',
	'term: streaming on B');

my $owner2 = $redis->hgetall(store_key('a:term-1'))->{ow} // '';
isnt(ns_identity($owner2), ns_identity($owner),
	'term: the new worker process of A has an identity of its own');

my $term = time();
$A->stop('TERM');
close $s;

$rec = wait_done(\%B, 'term-1');
is($rec->{state}, 'failed', 'term: failed');
is($rec->{reason}, 'worker_exited', 'term: worker_exited, as A exited');
cmp_ok(time() - $term, '<', 2, 'term: at once, no silence waited for');

$r = gen(\%B, 'term-1');
is($r->{status}, 409, 'term: the retry through B is 409');
is(forwarded($t, 'term-1'), 1, 'term: forwarded once');

ok(!exists $redis->hgetall(store_key('live'))->{ns_identity($owner2)},
	'term: the identity of A is gone with it');

###############################################################################

# nginx of A in a pid namespace of its own: unshare's child is nginx's
# master, pid 1 there; ready once its worker process beats in the store
# (no connection to A before: the first one of the test is the first of
# the worker process)

sub ns_start {
	my ($after) = @_;

	my $beat;

	$A->start(sub {
		$beat = ns_beat();
		return $beat && $beat > $after;
	}) or die "A does not beat in the store\n";

	return $beat;
}

# the latest beat of A's worker process (pid 2), in store ms

sub ns_beat {
	my $live = $redis->hgetall(store_key('live'));
	my ($ts) = sort { $b <=> $a }
		map { $live->{$_} } grep { /^A\/2\./ } keys %$live;

	# before the fix: the fleet's report of A's master, pid 1

	if (!defined $ts) {
		my $v = $redis->hgetall(store_key('fleet'))->{'A/1'} // '';
		($ts) = $v =~ /:(\d+)$/;
	}

	return $ts;
}

sub ns_identity {
	my ($ow) = @_;
	return ($ow =~ m{^(.*)/[^/]*$})[0] // '';
}

sub stream {
	my ($rep, $id, $events, $interval) = @_;

	return start('POST', '/v1/chat/completions', port => $rep->{listen},
		body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => 'slow', 'x-fake-events' => $events,
			'x-fake-interval-ms' => $interval ]);
}

###############################################################################
