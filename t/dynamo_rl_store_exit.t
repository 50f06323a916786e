#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Writes queued while the store is down, at a worker process's exit
# (issue 24, item 8), with Debian's redis-server started by the test:
# replica F reaches it through the fake RESP server of the test's own
# (Test::DynamoRL::Redis::resp_proxy), replica G directly.
#
# - an attempt streams through F; the store stops answering F (the fake
#   server falls silent, Redis keeps its data); the client goes away, so
#   the attempt's end is queued; F is reloaded, and its old worker
#   process exits with the end still queued: one warn line for the
#   dropped write, and dynamo_rl_store_dropped_total counts it;
# - the record, left "streaming" in the store, is ended by the fleet as
#   that of a silent worker process: failed, replica_lost, within
#   seconds on G; its id stays refused and was forwarded once.

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call forwarded is_false json metrics
	read_until start time_limit /;
use Test::DynamoRL::Redis qw/ admit gen replica_conf resp_proxy store_key
	wait_done wait_state wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(10 + 2);
my $tg = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %F = (name => 'F', listen => 8080, api => 8070);
my %G = (name => 'G', listen => 8180, api => 8170);

my $PARAMS = 'timeout=250ms heartbeat=250ms gate_poll=100ms gate_stale=2s';

$t->write_file_expand('nginx.conf', replica_conf(%F,
	store => 'redis://127.0.0.1:8390', params => $PARAMS));
$t->run_fake_dynamo()->run();

$tg->write_file_expand('nginx.conf', replica_conf(%G,
	store => 'redis://127.0.0.1:8379', params => $PARAMS));
$tg->run();

###############################################################################

my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

is(admit(\%F)->{status}, 200, 'F admits through the fake server');

my $s = start('POST', '/v1/chat/completions', port => $F{listen},
	body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => 'exit-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 600,
		'x-fake-interval-ms' => 100 ]);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 /, 'F streams');
is(wait_state(\%G, 'exit-1', 'streaming')->{replica}, 'F',
	'G sees the stream of F');

# the store falls silent for F; the attempt ends meanwhile

$t->write_file('proxy/mode', "silent\n");
wait_status(\%F, sub { is_false($_[0]{store}{up}) });

close $s;

my $off = -s $t->testdir() . '/error.log';
my $dropped = metrics($F{api})->{dynamo_rl_store_dropped_total} // 0;

# a reload: the old worker process exits with the end queued

$t->reload();

ok(Test::DynamoRL::wait_for(sub {
	substr($t->read_file('error.log'), $off) =~ /dynamo[ ]rl[ ]store:[ ]a[ ]
		queued[ ]write[ ]\(end\)[ ]is[ ]dropped[ ]as[ ]the[ ]worker[ ]
		process[ ]exits/x }, 15),
	'exit: the dropped write logged');

cmp_ok(metrics($F{api})->{dynamo_rl_store_dropped_total} // 0, '>',
	$dropped, 'exit: the dropped write counted');

# the record is ended by the fleet, as that of a silent process

my $rec = wait_done(\%G, 'exit-1');
is($rec->{state}, 'failed', 'settled: failed');
is($rec->{reason}, 'replica_lost', 'settled: replica_lost');

is(gen(\%G, 'exit-1')->{status}, 409, 'settled: the id is refused');
is(forwarded($t, 'exit-1'), 1, 'settled: forwarded once');

$t->write_file('proxy/mode', "pass\n");

Test::DynamoRL::wait_for(sub {
	api('exit-1', port => $F{api})->{status} == 200 }, 10);

is(api('exit-1', port => $F{api})->{json}{reason} // '', 'replica_lost',
	'settled: F says so too once the store answers it again');

###############################################################################
