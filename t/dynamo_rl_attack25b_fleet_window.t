#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25b: each instance declares its own alive window (3 of its own
# heartbeats, "{prefix}:fleet:q"), and the docs promise that "the fleet
# never forgets a replica alive or lost at the gate's close while it stays
# closed".  But what is held at the close is a fixed 60 s before it
# ("since" - 60 s, in the beat script and ngx_http_dynamo_rl_resp_fleet()),
# not the window the instance declared.  Replica C with heartbeat=30s (a
# legitimate setting: its window is 90 s) is cut off from the store; the
# gate closes through A when C's last report is 61+ s old: C is alive at
# the close (age < 90 s), listed as a replica that has not acknowledged.
# When its report passes 90 s, C is neither alive, nor within 60 s, nor
# within 60 s before the close: the fleet forgets it, and the gate API says
# drained while C (on_error=local) still forwards past the closed gate.
#
# Expected: drained stays false while C is silent; observed: drained true
# about 30 s after the close, C still generating.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ time_limit forwarded is_false /;
use Test::DynamoRL::Redis qw/ replica_conf gen admit gate gate_post
	wait_gate resp_proxy /;

###############################################################################

time_limit(Test::DynamoRL::scale(240));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5 + 2);
my $tc = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

# C reaches the store through a proxy the test can make silent

my $pdir = $t->testdir() . '/proxy';
mkdir $pdir;

$t->run_daemon(\&resp_proxy, port(8479), $redis->port(), $pdir);
$t->wait_for(sub {
	IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8479))
}, 5);

my %A = (name => 'A', listen => 8080, api => 8070);
my %C = (name => 'C', listen => 8280, api => 8270);

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $redis->url(),
	params => 'timeout=250ms'));
$tc->write_file_expand('nginx.conf', replica_conf(%C,
	store => 'redis://127.0.0.1:' . port(8479),
	params => 'timeout=250ms on_error=local heartbeat=30s'));

$t->run_fake_dynamo()->run();
$tc->run();

###############################################################################

admit(\%A);
admit(\%C);

my $g = wait_gate(\%A, sub { ($_[0]{fleet}{replicas} // 0) == 2 });
is($g->{fleet}{replicas}, 2, 'A and C in the fleet');

# C is cut off from the store

$t->write_file('proxy/mode', 'silent');

# C's last report 61 s old (C alive by its own 90 s window), then the close

ok($t->wait_for(sub { c_age() > 61000 }, 70), 'C silent for 61 s');

$g = gate(\%A);
my $r = gate_post(\%A, { action => 'close', reason => 'refresh' });
is($r->{status} . ' ' . ($g->{fleet}{replicas} // 0), '200 2',
	'the gate closed through A, C alive at the close');

# C goes on generating, with the gate it last read (documented)

my $n = 0;
$t->wait_for(sub { gen(\%C, 'fw-' . ++$n)->{status} == 200 }, 10);

# C's report passes its window, 90 s

$t->wait_for(sub {
	$g = gate(\%A);
	return is_true_drained($g) || c_age() > 95000;
}, 45);

ok(is_false($g->{fleet}{drained}),
	'C alive at the close, silent since: the fleet is not drained')
	or diag(explain($g->{fleet}));

my $c = gen(\%C, 'fw-late');
is($c->{status} . ' ' . forwarded($t, 'fw-late'), '200 1',
	'C still forwards a generation past the closed gate');

$t->write_file('proxy/mode', 'pass');

###############################################################################

# the age of C's report in the store, by the store's clock

sub c_age {
	my $f = $redis->cmd('HGETALL', '{dynamo-rl}:fleet') || [];
	my %f = @$f;
	my ($k) = grep { m!^C(/|$)! } keys %f;
	return 0 unless defined $k && $f{$k} =~ /:(\d+)$/;
	return $redis->time_ms() - $1;
}

sub is_true_drained {
	my ($j) = @_;
	return JSON::PP::is_bool($j->{fleet}{drained}) && $j->{fleet}{drained};
}

###############################################################################
