#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The beat script's drop of old fleet reports, by each instance's own
# declared window ("{prefix}:fleet:q"): while the gate is open, a report
# older than 10 minutes but within the window its instance declared (a
# heartbeat over 200 s) is kept; while it is closed, the report of an
# instance alive by its own window at the close is kept, and listed lost,
# however long ago the gate closed.  The reports of the other, silent,
# instances are written into the store by the test; the beats of replica
# A drop the ones that are old enough, the test waits for that.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit is_false /;
use Test::DynamoRL::Redis qw/ replica_conf admit gate gate_post
	wait_gate /;

###############################################################################

time_limit(Test::DynamoRL::scale(60));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(6);

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

# open: Z (heartbeat 300 s, window 900 s) and Y (no window), both 700 s old

my $now = $redis->time_ms();

report('Z', $now - 700000, 900000);
report('Y', $now - 700000);

ok($t->wait_for(sub { !has('Y') }, 10), 'open: Y, 700 s old, dropped');
ok(has('Z'), 'open: Z, 700 s old, within its own 900 s window, kept');

$redis->cmd('HDEL', $F, 'Z');
$redis->cmd('HDEL', "$F:q", 'Z');

# closed 700 s ago (as written in the store): X (window 120 s) silent for
# 100 s then, alive at the close by its own window; W silent for 190 s then,
# past its window and a minute

my $r = gate_post(\%A, { action => 'close', reason => 'refresh' });
is($r->{status}, 200, 'the gate closed through A');

$now = $redis->time_ms();
$redis->cmd('HSET', '{dynamo-rl}:gate', 'since', $now - 700000);

report('X', $now - 800000, 120000);
report('W', $now - 890000, 120000);

$t->wait_for(sub { !has('W') }, 10);

ok(has('X') && !has('W'),
	'closed: X, alive at the close by its own window, kept; W dropped');

$g = gate(\%A);
is(join(',', @{$g->{fleet}{lost} // []}) . ' '
	. (is_false($g->{fleet}{drained}) ? 'not drained' : 'drained'),
	'X not drained', 'closed: X lost, the fleet not drained')
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

###############################################################################
