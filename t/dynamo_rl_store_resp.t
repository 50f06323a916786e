#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A store that answers badly, and on_error=local (issue 13).
#
# Replica F reaches Redis through a fake RESP server of the test's own
# (Test::DynamoRL::Redis::resp_proxy), which passes commands on and, for
# chosen attempt ids, stalls (the timeout path), closes the connection
# half-way through the reply, or sends bytes that are not RESP; then it
# accepts connections and never answers at all.  Each fault gives 503
# store_unavailable with nothing forwarded, one "dynamo rl store:" error
# line, and no crash; F recovers by itself.  A claim whose answer was
# lost (stalled, or cut off) is released once the store is reachable
# again, so that its id is not used up.
#
# Replica L has on_error=local and its own Redis, killed by its pid: the
# zone takes over (single use within the replica, the attempts API with
# "source": "local", the fallbacks counted, one warn line), a gate POST
# still answers 503, and L goes back to the store when it returns.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ api call err_since flat forwarded is_false
	is_true json metrics time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf resp_proxy
	store_key store_lines wait_done /;

###############################################################################

time_limit(Test::DynamoRL::scale(240));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(66 + 2);
my $tl = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $redis2 = Test::DynamoRL::Redis->new($t, port => 8479)->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %F = (name => 'F', listen => 8080, api => 8070);
my %L = (name => 'L', listen => 8180, api => 8170);

my $PARAMS = 'timeout=250ms heartbeat=500ms gate_poll=100ms gate_stale=2s';

$t->write_file_expand('nginx.conf', replica_conf(%F,
	store => 'redis://127.0.0.1:8390', params => "prefix=f $PARAMS"));

$t->run_fake_dynamo()->run();

$tl->write_file_expand('nginx.conf', replica_conf(%L,
	store => 'redis://127.0.0.1:8479',
	params => "on_error=local $PARAMS"));
$tl->run();

###############################################################################


my ($r, $off, $SEQ);

###############################################################################

# through the fake RESP server, F works

$r = admit(\%F);
is($r->{status}, 200, 'proxied: F admits');
ok($redis->has_key(store_key('a:' . $r->{headers}{'x-dynamo-attempt-id'}, 'f')),
	'proxied: the record in Redis, under the prefix');

my @pids = $t->worker_pids();

# a stalled reply, a connection closed in the middle of one, garbage

for my $kind (qw/ stall close garbage /) {
	my $id = "fault-$kind-1";

	$off = -s $t->testdir() . '/error.log';

	$r = gen(\%F, $id);

	is($r->{status}, 503, "$kind: 503");
	is(reason($r), 'store_unavailable', "$kind: store_unavailable");
	ok(flat($r, 503, 'Service Unavailable'), "$kind: flat body");
	is($r->{headers}{'retry-after'}, 1, "$kind: Retry-After: 1");
	is(forwarded($t, $id), 0, "$kind: not forwarded");

	$r = admit(\%F);
	is($r->{status}, 200, "$kind: F recovers by itself");

	my @errors = store_lines($t, $off, 'error');
	is(scalar @errors, 1, "$kind: one error line") or diag(@errors);

	is(join(' ', $t->worker_pids()), "@pids", "$kind: no crash");
}

# the claims whose answers were lost were released: the ids pass

for my $kind (qw/ stall close /) {
	my $id = "fault-$kind-1";

	ok(Test::DynamoRL::wait_for(sub {
		!$redis->has_key(store_key("a:$id", 'f')) }, 10),
		"$kind: the claim released");

	$r = gen(\%F, $id);
	is($r->{status}, 200, "$kind: the same id passes afterwards");
	is(forwarded($t, $id), 1, "$kind: forwarded once");
}

# a claim answered NOSCRIPT after its deadline: it did not run, and its
# request, refused, sent its release; it is not sent again as EVAL behind
# the release, which would use up the id (the scripts are loaded again)

{
	my $id = 'fault-noscript-1';
	my $log = "$PROXY/commands.log";
	my $loads = () = (-e $log ? $t->read_file('proxy/commands.log') : '')
		=~ /^SCRIPT LOAD/mg;

	$r = gen(\%F, $id);
	is($r->{status} . ' ' . (reason($r) // '-'), '503 store_unavailable',
		'late NOSCRIPT: 503 store_unavailable');

	ok(Test::DynamoRL::wait_for(sub {
		my $n = () = $t->read_file('proxy/commands.log')
			=~ /^SCRIPT LOAD/mg;
		return $n > $loads;
	}), 'late NOSCRIPT: the scripts loaded again');

	$r = gen(\%F, $id);
	is($r->{status}, 200, 'late NOSCRIPT: the same id passes afterwards');
	is(forwarded($t, $id), 1, 'late NOSCRIPT: forwarded once');
}

# a server that accepts and never answers

$off = -s $t->testdir() . '/error.log';
$t->write_file('proxy/mode', "silent\n");

$r = Test::DynamoRL::wait_for(sub {
	my $x = gen(\%F, 'silent-' . ++$SEQ);
	return $x->{status} == 503 ? $x : undef;
}, 10) // {};

is(reason($r), 'store_unavailable', 'silent: 503 store_unavailable');
is(forwarded($t, $r->{headers}{'x-dynamo-attempt-id'} // '-'), 0,
	'silent: not forwarded');

$r = gen(\%F, 'silent-again');
is($r->{status} . ' ' . (reason($r) // '-'), '503 store_unavailable',
	'silent: still 503');
is(forwarded($t, 'silent-again'), 0, 'silent: still nothing forwarded');

$r = call('GET', '/rl/status', port => $F{api});
ok(is_false(json($r)->{store}{up}), 'silent: status says down');

my @errors = store_lines($t, $off, 'error');
is(scalar @errors, 1, 'silent: one error line') or diag(@errors);

$t->write_file('proxy/mode', "pass\n");

$r = admit(\%F);
is($r->{status}, 200, 'silent over: F recovers by itself');
is(join(' ', $t->worker_pids()), "@pids", 'silent: no crash');

###############################################################################

# on_error=local: L's store killed by its pid

$r = admit(\%L);
is($r->{status}, 200, 'local: L admits through the store');

my $stored = $r->{headers}{'x-dynamo-attempt-id'} // '-';
ok($redis2->has_key(store_key("a:$stored")), 'local: recorded in the store');

my $fallbacks = metrics($L{api})->{dynamo_rl_store_fallbacks_total};
is($fallbacks, 0, 'local: no fallback yet');

$off = -s $tl->testdir() . '/error.log';
$redis2->crash();

$r = gen(\%L, 'local-1');
is($r->{status}, 200, 'local, store down: forwarded through the zone');
is(forwarded($t, 'local-1'), 1, 'local, store down: forwarded once');

$r = gen(\%L, 'local-1');
is($r->{status}, 409, 'local, store down: the id used once in L');
is(reason($r), 'duplicate_attempt', 'local, store down: duplicate_attempt');
is(forwarded($t, 'local-1'), 1, 'local, store down: not forwarded again');

my $m = metrics($L{api});
is($m->{dynamo_rl_store_fallbacks_total}, 2, 'local: two fallbacks counted');
is($m->{dynamo_rl_store_up}, 0, 'local: the store down');

my $st = json(call('GET', '/rl/status', port => $L{api}));
is($st->{store}{fallbacks}, 2, 'local: fallbacks in the status');

my $rec = wait_done(\%L, 'local-1');
is($rec->{http} // 200, 200, 'local, api: 200');
is($rec->{state}, 'succeeded', 'local, api: succeeded');
is($rec->{source}, 'local', 'local, api: "source": "local"');

my @warn = grep { /dynamo rl store:/ }
	grep { /\[warn\]/ } err_since($tl, $off);
is(scalar @warn, 1, 'local: one warn line') or diag(@warn);

# the gate does not change without the store, even with on_error=local

$r = call('POST', '/rl/gate', port => $L{api},
	body => '{"action":"close","reason":"split brain"}');
is($r->{status}, 503, 'local, gate POST: 503');
is(json($r)->{error}, 'store_unavailable', 'local, gate POST: reason');

$r = gen(\%L, 'local-2');
is($r->{status}, 200, 'local, gate POST: nothing closed');

# the store back: L uses it again by itself

$redis2->start();

ok(Test::DynamoRL::wait_for(sub {
	my $id = 'back-' . ++$SEQ;
	my $x = gen(\%L, $id);
	return $x->{status} == 200 && $redis2->has_key(store_key("a:$id"));
}, 10), 'local, store back: recorded in the store again');

$st = json(call('GET', '/rl/status', port => $L{api}));
ok(is_true($st->{store}{up}), 'local, store back: up');
ok(is_false($st->{store}{fallback}), 'local, store back: no fallback now');
is($redis2->hgetall(store_key('gate'))->{state}, 'open',
	'local, store back: the gate record open');

###############################################################################
