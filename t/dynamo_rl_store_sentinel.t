#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The store under Sentinel (issue 25), with Debian's redis-server and
# redis-sentinel started by the test on loopback: a primary P, its
# replica R, three sentinels watching "rl", and two gateway replicas,
# A (wait=1) and B (no wait), both on
# sentinel://S1,S2,S3/rl.  Under a little load (a request on A and one on
# B in turn), SENTINEL FAILOVER rl: the gateways follow R, the new
# primary, without a reload, within a bound (FOLLOW below); every id A
# claimed (wait=1) and forwarded is refused afterwards on B, never
# forwarded twice; the ids B claimed without wait that the failover lost
# (forwarded again on a retry through A) are counted and reported.
#
# Also: a sentinel that is down is skipped; a URL without a name, or with
# a bad one, is refused at configuration time.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ err_since forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen replica_conf /;

###############################################################################

time_limit(Test::DynamoRL::scale(180));

system('redis-sentinel --version >/dev/null 2>&1') == 0
	or plan(skip_all => 'no redis-sentinel');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(15);
my $tb = Test::DynamoRL->new()->check_at_end();

# the follow bounds, stated: see docs/operations.md, "Sentinel"; A
# (wait=1) sees the demoted primary without replicas at once; B only once
# the sentinels reconfigure it (their INFO to it: every 10 s)

my $FOLLOW_A = Test::DynamoRL::scale(5);
my $FOLLOW = Test::DynamoRL::scale(20);

my $p = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $r = Test::DynamoRL::Redis->new($t, port => 8380,
	args => [ '--replicaof', '127.0.0.1', $p->port() ])->start();

my @s;

for my $n (0 .. 2) {
	push @s, Test::DynamoRL::Redis->new($t, port => 8390 + $n,
		sentinel => [ 'monitor rl 127.0.0.1 ' . $p->port() . ' 2',
			'down-after-milliseconds rl 1000',
			'failover-timeout rl 10000',
			'parallel-syncs rl 1' ])->start();
}

my $URL = 'sentinel://'
	. join(',', map { '127.0.0.1:' . $_->port() } @s) . '/rl';
my $PARAMS = 'timeout=' . Test::DynamoRL::scale(1) . 's'
	. ' gate_poll=100ms gate_stale=2s heartbeat=250ms';

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

# the configuration's checks first

my ($code, $out) = $t->nginx_t(replica_conf(%A,
	store => 'sentinel://127.0.0.1:' . $s[0]->port()));
isnt($code, 0, 'no name: nginx -t fails');
like($out, qr/it must be "sentinel:\/\/host\[:port\]\[,host\[:port\]\.\.\.\]\/name"/,
	'no name: message');

# S1 down as the gateways start: skipped

$s[0]->stop();

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $URL,
	params => "wait=1 $PARAMS"));
$t->run_fake_dynamo()->run();

$tb->write_file_expand('nginx.conf', replica_conf(%B, store => $URL,
	params => $PARAMS));
$tb->run();

is(admit(\%A)->{status}, 200, 'A is up, S1 down: skipped');
is(admit(\%B)->{status}, 200, 'B is up');

$s[0]->start();

###############################################################################

# the sentinels close the clients of the servers they reconfigure: the
# test's connection too, once

sub replication {
	my ($server) = @_;

	my $info = eval { $server->cmd('INFO', 'replication') }
		// $server->cmd('INFO', 'replication');

	return $info // '';
}

sub info {
	my ($server, $key) = @_;

	my $info = replication($server);
	my @v = $info =~ /^\Q$key\E:(.*?)\r?$/mg;

	return $v[0];
}

sub online {
	my ($server) = @_;
	my $info = replication($server);
	return scalar(() = $info =~ /^slave\d+:.*state=online/mg);
}

sub master {
	my ($sentinel) = @_;
	my $m = eval { $sentinel->cmd('SENTINEL', 'MASTER', 'rl') };
	return ref $m eq 'ARRAY' ? { @$m } : {};
}

ok(Test::DynamoRL::wait_for(sub {
	online($p) == 1 && !grep {
		my $m = master($_);
		($m->{'num-other-sentinels'} // 0) < 2
			|| ($m->{'num-slaves'} // 0) < 1
	} @s }, 30), 'the sentinels see each other and R');

# the load: A and B in turn, fresh ids; the failover after a few

my (%status, @order);
my $seq = 0;

sub load {
	for my $rep (\%A, \%B) {
		my $id = "$rep->{name}-" . ++$seq;
		$status{$id} = gen($rep, $id)->{status};
		push @order, $id;
	}
}

load() for 1 .. 10;

my $rport = $r->port();
my ($offa, $offb) = map { -s $_->testdir() . '/error.log' } $t, $tb;

my $followed = qr/dynamo rl store: connected to "\Q$URL\E"/
	. qr/ \(127\.0\.0\.1:$rport\)/;
my %took;

my $start = time();
$s[1]->cmd('SENTINEL', 'FAILOVER', 'rl');

while (time() - $start < 3 * $FOLLOW && keys %took < 2) {
	load();

	$took{A} //= time() - $start
		if grep { /$followed/ } err_since($t, $offa);
	$took{B} //= time() - $start
		if grep { /$followed/ } err_since($tb, $offb);
}

load() for 1 .. 10;

ok(defined $took{A} && $took{A} < $FOLLOW_A,
	"A follows R within $FOLLOW_A s")
	or diag('A: ' . ($took{A} // 'never'));
ok(defined $took{B} && $took{B} < $FOLLOW, "B follows R within $FOLLOW s")
	or diag('B: ' . ($took{B} // 'never'));

diag(sprintf('followed the new primary in %.2f s (A), %.2f s (B)',
	$took{A} // -1, $took{B} // -1));

is(info($r, 'role'), 'master', 'R is the primary');
ok(Test::DynamoRL::wait_for(sub { online($r) == 1 }, 30),
	'P is a replica of R');

# after the failover: the ids claimed with wait=1 are refused on B

my @a = grep { /^A-/ && $status{$_} == 200 } @order;
my @b = grep { /^B-/ && $status{$_} == 200 } @order;
my @arefused = grep { /^A-/ && $status{$_} == 503 } @order;

cmp_ok(scalar(@a), '>=', 10, 'A forwarded claims (wait=1)');

my ($twice, $lost) = (0, 0);

for my $id (@a) {
	my $res = gen(\%B, $id);
	$twice++ if $res->{status} == 200 || forwarded($t, $id) != 1;
}

is($twice, 0, 'wait=1: no id forwarded twice');

for my $id (@b) {
	$lost++ if gen(\%A, $id)->{status} == 200;
}

diag(sprintf('A (wait=1): %d ids forwarded, %d refused 503 during the'
	. ' failover, 0 lost; B (no wait): %d ids forwarded, %d lost'
	. ' (forwarded again on a retry through A)',
	scalar(@a), scalar(@arefused), scalar(@b), $lost));

ok(!grep({ /\[(?:alert|crit)\]/ } err_since($t, 0), err_since($tb, 0)),
	'no alert or crit');

is(info($p, 'role'), 'slave', 'P is a replica');

###############################################################################
