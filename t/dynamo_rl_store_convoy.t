#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The WAIT convoy (attack 25, issue 25): wait=1 and the store's replica
# gone.  Each claim was followed by "WAIT 1 <ms>" on the worker process's
# one connection; Redis blocks that connection for each WAIT in turn, so
# under load the worker process's own heartbeat ("live") waited behind a
# convoy of WAITs for longer than six heartbeats.  Replica B, whose
# connection is fine, judged A's live worker process silent and ended its
# attempt in flight as failed ("replica_lost") while A still streamed it:
# the attempts API said failed for a live attempt, and the record lived
# only for dynamo_rl_attempt_ttl from then on.  Once the ttl had run, the
# same id sent to B was forwarded a second time while the first
# generation still ran on A.
#
# Expected: a worker process that is alive and connected is not judged
# silent because of its own WAITs (its heartbeat is not held behind
# them, or the judgement allows for them), its record stays in flight,
# and the retry is 409 and never forwarded.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit forwarded start /;
use Test::DynamoRL::Redis qw/ replica_conf gen admit store_key /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(7 + 2);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $replica = Test::DynamoRL::Redis->new($t, port => 8389,
	args => [ '--replicaof', '127.0.0.1', $redis->port() ])->start();

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

sub conf {
	my ($rep) = @_;

	my $c = replica_conf(%$rep, store => $redis->url(),
		params => 'timeout=250ms wait=1');

	# a short ttl, so that the test need not wait 10 minutes

	$c =~ s/(dynamo_rl_zone )/dynamo_rl_attempt_ttl 3s;\n    $1/;

	return $c;
}

$t->write_file_expand('nginx.conf', conf(\%A));
$tb->write_file_expand('nginx.conf', conf(\%B));

$t->run_fake_dynamo()->run();
$tb->run();

###############################################################################

admit(\%A);
admit(\%B);

# an attempt in flight on A: a stream of 200 events, 100 ms apart

my $held = start('POST', '/v1/completions', port => $A{listen},
	body => '{"model":"m","prompt":"p","stream":true}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'convoy-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 200,
		'x-fake-interval-ms' => 100 ]);
my $key = store_key('a:convoy-1');

$t->wait_for(sub { ($redis->hgetall($key)->{st} // '') eq 's' }, 5);
is($redis->hgetall($key)->{st}, 's', 'the attempt streams on A');

# the replica goes; A keeps claiming (each 503), B stays idle

$replica->stop();

my $end = time() + Test::DynamoRL::scale(10);
my @pids;

$t->write_file('load', '');

for my $i (1 .. 30) {
	my $pid = fork() // die "fork: $!\n";

	if ($pid == 0) {
		my $n = 0;

		while (time() < $end && -e $t->testdir() . '/load') {
			gen(\%A, "convoy-load-$i-" . $n++);
		}

		POSIX::_exit(0);
	}

	push @pids, $pid;
}

# meanwhile, the age of the last beat of A's worker process, on the
# store's clock

my ($st, $gap);
$gap = 0;

$t->wait_for(sub {
	$st = $redis->hgetall($key)->{st} // '-';

	my $live = $redis->hgetall(store_key('live'));
	my $now = $redis->time_ms();

	for my $id (grep { m{^A/} } keys %$live) {
		my $g = $now - $live->{$id};
		$gap = $g if $g > $gap;
	}

	return $st ne 's';
}, 10);

unlink($t->testdir() . '/load');
waitpid($_, 0) for @pids;

is($st, 's', 'the attempt A still streams stays in flight in the store');

# one WAIT at a time: two beats at most 2 * 250ms + 500ms apart, and well
# under half the 3 s silence (before, 3 s and more behind a queue of WAITs)

cmp_ok($gap, '<', 1500, "A's beats behind one WAIT at most")
	or diag("gap $gap ms");
note("the oldest beat of A seen: $gap ms");

# the replica back: the store admits again on both

$replica->start();

ok(admit(\%A)->{status} == 200 && admit(\%B)->{status} == 200,
	'the replica back: both admit');

# the record's ttl runs out while A's generation goes on

$t->wait_for(sub { !$redis->has_key($key) }, 8);

my $r = gen(\%B, 'convoy-1');
is($r->{status}, 409, 'a retry through B while A still streams: 409');
is(forwarded($t, 'convoy-1'), 1, 'forwarded once');

# the first stream was still running: it ends now, whole

my $body = '';
$held->blocking(1);
local $SIG{ALRM} = sub { die "the stream did not end\n" };
alarm(Test::DynamoRL::scale(40));
1 while sysread($held, $body, 65536, length $body);
alarm(0);

ok($body =~ /\[DONE\]/ && forwarded($t, 'convoy-1') >= 1,
	'the first generation ran to its end meanwhile');

###############################################################################
