#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A replica whose declared window ("{prefix}:fleet:q", 3 of its
# heartbeats) is longer than a minute is lost, while the gate is open,
# for a minute past its window, not forgotten as soon as it leaves it;
# the beat script keeps its report that long, even past 10 minutes.  The
# reports of the silent instances are written into the store by the
# test; the gate API of replica A judges them.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit /;
use Test::DynamoRL::Redis qw/ replica_conf admit gate wait_gate /;

###############################################################################

time_limit(Test::DynamoRL::scale(60));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my %A = (name => 'A', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $redis->url(),
	params => 'timeout=250ms'));

$t->run_fake_dynamo()->run();

###############################################################################

my $F = '{dynamo-rl}:fleet';

admit(\%A);

my $g = wait_gate(\%A, sub { ($_[0]{fleet}{replicas} // 0) == 1 });
is($g->{fleet}{replicas}, 1, 'A in the fleet');

# open: X (heartbeat 40 s, window 120 s) silent for 150 s, Z (heartbeat
# 300 s, window 900 s) for 930 s: both lost; W (window 120 s) silent for
# 200 s: forgotten

my $now = $redis->time_ms();

report('X', $now - 150000, 120000);
report('Z', $now - 930000, 900000);
report('W', $now - 200000, 120000);

$g = wait_gate(\%A, sub { lost($_[0]) eq 'X,Z' });
is(lost($g), 'X,Z', 'open: X and Z lost a minute past their windows')
	or diag(explain($g->{fleet}));
is($g->{fleet}{replicas}, 1, 'open: only A alive');

# a beat of A after the reports: Z, past 10 minutes and its window, but
# not a minute past it, kept

$t->wait_for(sub { beat() > $now }, 10);
ok(beat() > $now && has('Z'), 'open: Z kept by the beats');

# Z, silent for 970 s, a minute past its window: forgotten

report('Z', $redis->time_ms() - 970000, 900000);

$g = wait_gate(\%A, sub { lost($_[0]) eq 'X' });
is(lost($g), 'X', 'open: Z forgotten a minute past its window')
	or diag(explain($g->{fleet}));

###############################################################################

sub report {
	my ($name, $ts, $window) = @_;

	$redis->cmd('HSET', $F, $name, "1:0:$ts");
	$redis->cmd('HSET', "$F:q", $name, $window) if defined $window;
}

sub has {
	my ($name) = @_;
	return $redis->cmd('HEXISTS', $F, $name);
}

# the store time of the last beat of A

sub beat {
	my %f = @{$redis->cmd('HGETALL', $F) // []};
	my ($a) = grep { m!^A(/|$)! } keys %f;
	return 0 unless defined $a && $f{$a} =~ /:(\d+)$/;
	return $1;
}

sub lost {
	my ($g) = @_;
	return join(',', sort @{$g->{fleet}{lost} // []});
}

###############################################################################
