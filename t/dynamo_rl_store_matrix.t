#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The store's fault matrix (issue 24): an attempt at each moment of its
# life (before its claim, claimed, streaming, at its end) meets a fault,
# with two replicas on Debian's redis-server (persistence on: the append
# only file, fsync always): A in its own pid namespace (unshare), behind
# the fake RESP server of the test's own, B directly; lease=6s.  For each
# row: how many times the upstream saw the attempt (never more than
# once), what the client saw, what the attempts API says on A and on B
# afterwards (the same, once settled), and a retry of the id on both: 409
# when the attempt was forwarded, usable once when it was not.  "Claimed"
# is claimed and forwarded, before the upstream's response header.  The rows
# are printed at the end (prove -v).
#
# Faults: A killed with -9 and restarted; A stopped with SIGTERM and with
# SIGQUIT; a stream longer than the lease; a reload of A while the store
# does not answer it; Redis killed and restarted (from its append-only
# file); CLIENT PAUSE past the timeout; the connection cut before the
# answer; a reply of the wrong shape, one of 2e9 bytes trickled, one
# dripped a byte at a time; a claim that reaches Redis after its release.
# Not here: Redis restarted without persistence, which forgets every id
# (docs/operations.md, "Failover: what it can lose"), and on_error=local
# through an outage (dynamo_rl_store_local.t).

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api forwarded is_false read_until start
	time_limit /;
use Test::DynamoRL::PidNS;
use Test::DynamoRL::Redis qw/ gen replica_conf resp_proxy store_key
	wait_state wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(300));

system('unshare --pid --fork true >/dev/null 2>&1') == 0
	or plan(skip_all => 'no pid namespaces here (unshare --pid)');

my @ROWS = (
	[ 'kill -9, restart', 'before the claim' ],
	[ 'kill -9, restart', 'claimed' ],
	[ 'kill -9, restart', 'streaming' ],
	[ 'kill -9, restart', 'at its end' ],
	[ 'SIGTERM', 'claimed' ],
	[ 'SIGTERM', 'streaming' ],
	[ 'SIGQUIT', 'streaming' ],
	[ 'stream longer than the lease', 'streaming' ],
	[ 'reload, store down', 'at its end' ],
	[ 'Redis killed, restarted (AOF)', 'streaming' ],
	[ 'CLIENT PAUSE past the timeout', 'before the claim' ],
	[ 'connection cut', 'claimed' ],
	[ 'reply of the wrong shape', 'claimed' ],
	[ 'reply of 2e9 bytes', 'claimed' ],
	[ 'reply dripped', 'claimed' ],
	[ 'claim after its release', 'claimed' ],
);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5 * @ROWS + 2);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379,
	args => [ '--appendonly', 'yes', '--appendfsync', 'always' ])->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my $PARAMS = 'timeout=250ms heartbeat=250ms gate_poll=100ms gate_stale=2s'
	. ' lease=6s';

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => 'redis://127.0.0.1:8390', params => $PARAMS));
$t->run_fake_dynamo();

$tb->write_file_expand('nginx.conf', replica_conf(%B,
	store => 'redis://127.0.0.1:8379', params => $PARAMS));
$tb->run();

# A in its own pid namespace (see dynamo_rl_store_life.t)

my $A = Test::DynamoRL::PidNS->new($t, 'nginx of A', seconds => 15);

END {
	local $?;
	$A->stop('KILL') if $A;
}

###############################################################################

my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

my (@TABLE, $s, $r, $h);

ns_start();

# A killed with -9 and restarted

$A->stop('KILL');
$r = gen(\%A, 'mx-kill-0');
ns_start();
row(0, 'mx-kill-0', $r);

$s = hang(\%A, 'mx-kill-1');
wait_state(\%B, 'mx-kill-1', 'accepted');
Test::DynamoRL::wait_for(sub { forwarded($t, 'mx-kill-1') }, 10);
$A->stop('KILL');
ns_start();
row(1, 'mx-kill-1', client($s, 0));

$s = stream(\%A, 'mx-kill-2', 600, 100);
$h = head($s);
$A->stop('KILL');
ns_start();
row(2, 'mx-kill-2', client($s, $h));

$r = gen(\%A, 'mx-kill-3');
$A->stop('KILL');
ns_start();
row(3, 'mx-kill-3', $r);

# A stopped with SIGTERM (fast) and SIGQUIT (graceful)

$s = hang(\%A, 'mx-term-1');
wait_state(\%B, 'mx-term-1', 'accepted');
Test::DynamoRL::wait_for(sub { forwarded($t, 'mx-term-1') }, 10);
$A->stop('TERM');
ns_start();
row(4, 'mx-term-1', client($s, 0));

$s = stream(\%A, 'mx-term-2', 600, 100);
$h = head($s);
$A->stop('TERM');
ns_start();
row(5, 'mx-term-2', client($s, $h));

$s = stream(\%A, 'mx-quit-2', 10, 200);
$h = head($s);
$A->stop('QUIT');
$r = client($s, $h);
ns_start();
row(6, 'mx-quit-2', $r);

# a stream of 12 s, twice the lease

$s = stream(\%A, 'mx-lease-2', 40, 300);
row(7, 'mx-lease-2', client($s, head($s)));

# a reload while the store does not answer A, the attempt ending then

$s = stream(\%A, 'mx-reload-3', 600, 100);
$h = head($s);
$t->write_file('proxy/mode', "silent\n");
wait_status(\%A, sub { is_false($_[0]{store}{up}) });
close $s;
kill 'HUP', $A->master();
Test::DynamoRL::wait_for(sub {
	$t->read_file('error.log') =~ /queued write \(end\) is dropped/ }, 15);
$t->write_file('proxy/mode', "pass\n");
row(8, 'mx-reload-3', { status => $h, what => 'gone before the end' });

# Redis killed and restarted from its append-only file while A streams

$s = stream(\%A, 'mx-redis-2', 30, 100);
$h = head($s);
$redis->crash();
$redis->start();
row(9, 'mx-redis-2', client($s, $h));

# CLIENT PAUSE past the timeout, before the claim

$redis->pause(1000);
$r = gen(\%A, 'mx-pause-0');
row(10, 'mx-pause-0', $r);

# faults of the connection and the replies, at the claim

my $n = 11;

for my $kind (qw/ close shape huge drip late /) {
	my $id = "fault-$kind-mx";
	$r = gen(\%A, $id);

	Test::DynamoRL::wait_for(sub { -e "$PROXY/late-$id" }, 10)
		if $kind eq 'late';

	row($n++, $id, $r);
}

diag(join "\n", 'fault | moment | upstream saw | client | A | B',
	map { join ' | ', @$_ } @TABLE);

###############################################################################

# after the fault: the attempt settled on both replicas, the same there;
# forwarded at most once; a retry refused when it was forwarded, else
# usable exactly once

sub row {
	my ($i, $id, $client) = @_;

	my $what = "$ROWS[$i][0], $ROWS[$i][1]";
	my ($a, $b);

	Test::DynamoRL::wait_for(sub {
		$a = view(\%A, $id);
		$b = view(\%B, $id);
		return $a eq $b && $a !~ /^(?:accepted|streaming|http 503)/;
	}, 15);

	my $sent = forwarded($t, $id);

	push @TABLE, [ @{$ROWS[$i]}, $sent, join(' ', grep { defined }
		$client->{status} // 0, $client->{what}), $a, $b ];

	cmp_ok($sent, '<=', 1, "$what: the upstream saw it at most once");
	is($a, $b, "$what: A and B say the same ($a)");
	unlike($a, qr/^(?:accepted|streaming)/, "$what: settled");

	# A answers once it is up and connected to the store

	my $ra = Test::DynamoRL::wait_for(sub {
		my $x = gen(\%A, $id)->{status};
		return $x == 503 || $x == 0 ? undef : $x;
	}, 10) // 503;
	my $rb = gen(\%B, $id)->{status};

	if ($sent) {
		is("$ra $rb", '409 409', "$what: the id refused on A and B");

	} else {
		is("$ra $rb", '200 409', "$what: the id usable, once")
			or diag(explain([ $redis->time_ms(),
				$redis->hgetall(store_key("a:$id")),
				$redis->hgetall(store_key('live')) ]));
	}

	cmp_ok(forwarded($t, $id), '<=', 1, "$what: still at most once");
}

# the attempts API on a replica, in a word or two

sub view {
	my ($rep, $id) = @_;

	my $r = api($id, port => $rep->{api});
	return "http $r->{status}" if $r->{status} != 200;

	return join ' ', grep { defined } $r->{json}{state}, $r->{json}{reason};
}

# the status of a stream, once its first event came

sub head {
	my ($s) = @_;

	my ($status) = read_until($s, qr/data: \{/, 10) =~ /^HTTP\/1\.1 (\d+)/;
	return $status // 0;
}

# what the client saw of a stream (its status given) or a request held
# open: whole, or cut

sub client {
	my ($s, $status) = @_;

	my $buf = read_until($s, qr/data: \[DONE\]|0\r\n\r\n/, 15);
	close $s;

	($status) = $buf =~ /^HTTP\/1\.1 (\d+)/ unless $status;

	return { status => $status // 0,
		what => $buf =~ /data: \[DONE\]/ ? 'whole' : 'cut' };
}

sub stream {
	my ($rep, $id, $events, $interval) = @_;

	return start('POST', '/v1/chat/completions', port => $rep->{listen},
		body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => 'slow', 'x-fake-events' => $events,
			'x-fake-interval-ms' => $interval ]);
}

sub hang {
	my ($rep, $id) = @_;

	return start('POST', '/v1/chat/completions', port => $rep->{listen},
		body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => 'hang' ]);
}

# nginx of A in a pid namespace of its own (see dynamo_rl_store_life.t)

sub ns_start {
	my $since = $redis->time_ms();

	$A->start(sub {
		my $live = $redis->hgetall(store_key('live'));
		my ($fleet) = ($redis->hgetall(store_key('fleet'))->{'A/1'}
			// '') =~ /:(\d+)$/;

		# the fleet's report: for a build before the processes beat

		return (grep { /^A\// && $live->{$_} > $since } keys %$live)
			|| ($fleet && $fleet > $since);
	}) or die "A does not beat in the store\n";
}

###############################################################################
