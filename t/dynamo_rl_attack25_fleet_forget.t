#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: the fleet forgets a silent replica after 60 s, unless it was
# alive when the gate closed.  Replica C (on_error=local) is cut off from
# the store; the gate is closed through A a moment later, while C is
# already "lost".  docs/operations.md ("What on_error=local can and
# cannot promise") says C, cut off, keeps admitting with the gate it last
# read, and that "the other replicas list it as lost ..., so the fleet is
# not drained while it is silent, and examples/rl-refresh waits".  After
# 60 s of C's silence the fleet forgets it: the gate API says drained
# while C still forwards generations past the closed gate.
#
# Expected: drained stays false while C is silent (it cannot be known to
# be gone); observed: drained true after 60 s, C still generating.

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

time_limit(Test::DynamoRL::scale(180));

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
	params => 'timeout=250ms on_error=local'));

$t->run_fake_dynamo()->run();
$tc->run();

###############################################################################

admit(\%A);
admit(\%C);

my $g = wait_gate(\%A, sub { ($_[0]{fleet}{replicas} // 0) == 2 });
is($g->{fleet}{replicas}, 2, 'A and C in the fleet');

# C is cut off from the store, then the gate closes through A

$t->write_file('proxy/mode', 'silent');

$g = wait_gate(\%A, sub { @{$_[0]{fleet}{lost} // []} == 1 });
is(join(',', @{$g->{fleet}{lost} // []}), 'C', 'C lost');

my $r = gate_post(\%A, { action => 'close', reason => 'refresh' });
is($r->{status}, 200, 'the gate closed through A');

# C goes on generating, with the gate it last read (documented)

my $n = 0;
my $c;

$t->wait_for(sub { $c = gen(\%C, 'fg-' . ++$n); $c->{status} == 200 }, 10);

# a minute of C's silence

my $until = time() + 65;

$t->wait_for(sub {
	$g = gate(\%A);
	return is_true_drained($g) || time() > $until;
}, 70);

ok(is_false($g->{fleet}{drained}),
	'C silent, still generating: the fleet is not drained');

$c = gen(\%C, 'fg-late');
is($c->{status} . ' ' . forwarded($t, 'fg-late'), '200 1',
	'C still forwards a generation past the closed gate');

$t->write_file('proxy/mode', 'pass');

sub is_true_drained {
	my ($j) = @_;
	return JSON::PP::is_bool($j->{fleet}{drained}) && $j->{fleet}{drained};
}

###############################################################################
