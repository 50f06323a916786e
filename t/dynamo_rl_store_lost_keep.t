#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A record ended as replica_lost is kept for the longer of its ttl and the
# lease (attack 25, issue 25), with Debian's redis-server started by the
# test: replica A reaches it through the fake RESP server of the test's
# own (Test::DynamoRL::Redis::resp_proxy), replica B directly; both with
# dynamo_rl_attempt_ttl 3s and lease=20s.
#
# - an attempt streams through A; the store stops answering A (the fake
#   server falls silent): A is cut off from the store, its stream goes
#   on;
# - B ends the record as that of a silent worker process, failed,
#   replica_lost, and keeps it for the lease, not for the 3 s ttl: once
#   the ttl has run, the same id through B is still 409, never forwarded
#   a second time while A streams it.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ forwarded is_false read_until start
	time_limit /;
use Test::DynamoRL::Redis qw/ admit gen replica_conf resp_proxy store_key
	wait_done wait_state wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(9 + 2);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

my $PARAMS = 'timeout=250ms heartbeat=250ms gate_poll=100ms gate_stale=2s'
	. ' lease=20s';

sub conf {
	my ($rep, $store) = @_;

	my $c = replica_conf(%$rep, store => $store, params => $PARAMS);
	$c =~ s/(dynamo_rl_zone )/dynamo_rl_attempt_ttl 3s;\n    $1/;

	return $c;
}

$t->write_file_expand('nginx.conf', conf(\%A, 'redis://127.0.0.1:8390'));
$t->run_fake_dynamo()->run();

$tb->write_file_expand('nginx.conf', conf(\%B, 'redis://127.0.0.1:8379'));
$tb->run();

###############################################################################

my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';
my $key = store_key('a:keep-1');

is(admit(\%A)->{status}, 200, 'A admits through the fake server');
is(admit(\%B)->{status}, 200, 'B admits');

my $s = start('POST', '/v1/chat/completions', port => $A{listen},
	body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => 'keep-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 400,
		'x-fake-interval-ms' => 100 ]);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 /, 'A streams');
is(wait_state(\%B, 'keep-1', 'streaming')->{replica}, 'A',
	'B sees the stream of A');

# A is cut off from the store; its stream goes on

$t->write_file('proxy/mode', "silent\n");
wait_status(\%A, sub { is_false($_[0]{store}{up}) });

my $rec = wait_done(\%B, 'keep-1');
is($rec->{reason}, 'replica_lost', 'cut off: ended as replica_lost on B');

my $pttl = $redis->cmd('PTTL', $key);
cmp_ok($pttl, '>', 10000, 'cut off: kept for the lease, not the 3 s ttl')
	or diag("pttl $pttl");

# the ttl runs out on the store's clock; the id stays refused

my $ended = $redis->time_ms();
$t->wait_for(sub { $redis->time_ms() > $ended + 3500 }, 10);

is(gen(\%B, 'keep-1')->{status}, 409, 'after the ttl: the retry is 409');
is(forwarded($t, 'keep-1'), 1, 'after the ttl: forwarded once');

my $more = read_until($s, qr/data: \{/, 10);
ok($more =~ /data: \{/ && $more !~ /\[DONE\]/, 'after the ttl: A still streams');

close $s;

$t->write_file('proxy/mode', "pass\n");

###############################################################################
