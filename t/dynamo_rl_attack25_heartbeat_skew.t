#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: two replicas of one store whose heartbeat= differ (a rolling
# change of the setting, or two teams' configurations).  A worker process
# is judged silent by the judge's own heartbeat (six of them, 3 s at
# least), not by its own: B (heartbeat=500ms, the default) judges A's
# live worker process, which beats every 5 s as configured, silent
# between two of its beats and ends A's attempt in flight as failed
# ("replica_lost") while A still streams it.  The record then lives only
# for dynamo_rl_attempt_ttl: once that has run, the same id sent to B is
# forwarded a second time while the first generation still runs on A.
#
# Expected: a process that beats at its own configured rate is never
# judged silent; the retry is 409 and never forwarded.  (Or nginx -t /
# the docs require one heartbeat for all replicas: nothing says so.)

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit forwarded start /;
use Test::DynamoRL::Redis qw/ replica_conf gen admit store_key gate
	wait_gate /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5 + 2);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

sub conf {
	my ($rep, $params) = @_;

	my $c = replica_conf(%$rep, store => $redis->url(),
		params => "timeout=250ms $params");

	# a short ttl, so that the test need not wait 10 minutes

	$c =~ s/(dynamo_rl_zone )/dynamo_rl_attempt_ttl 3s;\n    $1/;

	return $c;
}

$t->write_file_expand('nginx.conf', conf(\%A, 'heartbeat=5s'));
$tb->write_file_expand('nginx.conf', conf(\%B, 'heartbeat=500ms'));

$t->run_fake_dynamo()->run();
$tb->run();

###############################################################################

admit(\%A);
admit(\%B);

# an attempt in flight on A: a stream of 150 events, 100 ms apart

my $held = start('POST', '/v1/completions', port => $A{listen},
	body => '{"model":"m","prompt":"p","stream":true}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'hb-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 150,
		'x-fake-interval-ms' => 100 ]);

my $key = store_key('a:hb-1');

$t->wait_for(sub { ($redis->hgetall($key)->{st} // '') eq 's' }, 5);

# two of A's heartbeats, and more than six of B's; B's gate API judges
# A's fleet report by A's heartbeat too: once B has seen it, never lost

my ($st, $g, $fleet);

wait_gate(\%B, sub { ($_[0]{fleet}{replicas} // 0) == 2 });

$t->wait_for(sub {
	$st = $redis->hgetall($key)->{st} // '-';
	$g = gate(\%B);
	$fleet //= '';
	$fleet = "replicas $g->{fleet}{replicas} lost "
		. join(',', @{$g->{fleet}{lost}})
		if $g->{fleet} && ($fleet eq '' || $fleet eq 'replicas 2 lost ');
	return $st ne 's';
}, 8);

is($st, 's', 'the attempt A still streams stays in flight in the store');
is($fleet, 'replicas 2 lost ', 'B never sees A lost in the fleet');

# the record's ttl runs out while A's generation goes on

$t->wait_for(sub { !$redis->has_key($key) }, 5);

my $r = gen(\%B, 'hb-1');
is($r->{status}, 409, 'a retry through B while A still streams: 409');
is(forwarded($t, 'hb-1'), 1, 'forwarded once');

# the first stream was still running: it ends now, whole

my $body = '';
$held->blocking(1);
local $SIG{ALRM} = sub { die "the stream did not end\n" };
alarm(Test::DynamoRL::scale(40));
1 while sysread($held, $body, 65536, length $body);
alarm(0);

ok($body =~ /\[DONE\]/, 'the first generation ran to its end meanwhile');

###############################################################################
