#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# What on_error=local forwards while the store is unavailable is not
# forgotten (issue 24, item 2).  Replica L (on_error=local) reaches
# Debian's redis-server through the fake RESP server of the test's own
# (Test::DynamoRL::Redis::resp_proxy), replica B (on_error=fail)
# directly.  The fake server falls silent for L only:
#
# - L forwards ids on its own (the zone decides), one of them streaming;
#   B, which still reaches the store, forwards one of the same ids
#   meanwhile (what on_error=local cannot prevent);
# - the store answers L again: L puts the ids it forwarded into the store
#   before it admits anything new through it; B then refuses them (409),
#   each was forwarded once; the stream's record is "streaming" on B and
#   ends there as it ends on L;
# - the id B forwarded meanwhile is a conflict: counted in the status
#   and in dynamo_rl_store_conflicts_total (B's stays 0), one warn line
#   naming it and B.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api forwarded is_false is_true json call
	metrics read_until start time_limit /;
use Test::DynamoRL::Redis qw/ admit gen replica_conf resp_proxy
	wait_done wait_state wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(19);
my $tb = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %L = (name => 'L', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);

my $PARAMS = 'timeout=250ms heartbeat=250ms gate_poll=100ms gate_stale=2s';

$t->write_file_expand('nginx.conf', replica_conf(%L,
	store => 'redis://127.0.0.1:8390', params => "on_error=local $PARAMS"));
$t->run_fake_dynamo()->run();

$tb->write_file_expand('nginx.conf', replica_conf(%B,
	store => 'redis://127.0.0.1:8379', params => $PARAMS));
$tb->run();

###############################################################################

my $SEQ = 0;
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

is(admit(\%L)->{status}, 200, 'L admits through the store');
is(admit(\%B)->{status}, 200, 'B admits');

# the store falls silent for L: its zone decides

$t->write_file('proxy/mode', "silent\n");
wait_status(\%L, sub { is_false($_[0]{store}{up}) });

is(gen(\%L, 'local-1')->{status}, 200, 'outage: L forwards local-1 alone');
is(gen(\%L, 'local-2')->{status}, 200, 'outage: L forwards local-2 alone');

my $s = start('POST', '/v1/chat/completions', port => $L{listen},
	body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => 'local-3',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 600,
		'x-fake-interval-ms' => 100 ]);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 /,
	'outage: L streams local-3 alone');

# B still reaches the store: local-2 goes through it too

is(gen(\%B, 'local-2')->{status}, 200, 'outage: B forwards local-2');

# the store answers L again

$t->write_file('proxy/mode', "pass\n");

ok(Test::DynamoRL::wait_for(sub {
	api('local-1', port => $B{api})->{status} == 200 }, 10),
	'back: B knows local-1');

is(gen(\%B, 'local-1')->{status}, 409, 'back: B refuses local-1');
is(forwarded($t, 'local-1'), 1, 'back: local-1 forwarded once');

my $rec = wait_state(\%B, 'local-3', 'streaming');
is($rec->{replica}, 'L', 'back: the stream of L in the store');
is(gen(\%B, 'local-3')->{status}, 409, 'back: B refuses local-3');

close $s;

is(wait_done(\%B, 'local-3')->{state}, 'canceled',
	'back: the stream ends in the store as on L');

# and L admits through the store again

ok(Test::DynamoRL::wait_for(sub {
	gen(\%L, 'new-' . ++$SEQ)->{status} == 200
		&& gen(\%B, "new-$SEQ")->{status} == 409 }, 10),
	'back: what L admits now B refuses');

# local-2 was a conflict

ok(Test::DynamoRL::wait_for(sub {
	(json(call('GET', '/rl/status', port => $L{api}))->{store}{conflicts}
		// 0) == 1 }, 10), 'conflict: counted');
is(metrics($L{api})->{dynamo_rl_store_conflicts_total}, 1,
	'conflict: in the metrics');
is(metrics($B{api})->{dynamo_rl_store_conflicts_total}, 0,
	'conflict: none on B');

my $want = 'attempt "local-2", forwarded by this replica while the store'
	. ' was unavailable, was claimed meanwhile through replica "B":'
	. ' a conflict';

ok(index($t->read_file('error.log'), $want) >= 0, 'conflict: logged');

###############################################################################
