#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A gate change through the gate API whose answer does not come back
# from the store (issue 25, attack finding 3).  Replica F reaches Debian's
# redis-server through the test's fake RESP server
# (Test::DynamoRL::Redis::resp_proxy), which, on a close whose reason
# names a fault:
#
# - "late": closes F's connection and hands the close to Redis 1.5 s
#   later, long after F answered: F answers 503 store_unavailable ("the
#   gate did not change"), and the close, past its deadline on the
#   store's clock, is refused: the gate stays open;
# - "stall": hands the close to Redis and keeps its answer: the close was
#   made; F reads the gate again and answers 200, the gate closed;
# - "stall", then the store silent for longer than F reads again: F
#   cannot know, and says so, 503 gate_outcome_unknown, never "did not
#   change" (the close was made);
# - a store paused (CLIENT PAUSE) for 6 s as the close is sent: F's reads
#   go unanswered, then its connection is dropped and cannot be made
#   again: 503 gate_outcome_unknown within the 3 s of reads; the close,
#   run when the store goes on, is refused: the gate stays open.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL qw/ port /;
use Test::DynamoRL::Fixture qw/ time_limit start read_until resp json
	is_true /;
use Test::DynamoRL::Redis qw/ admit gate_post replica_conf resp_proxy
	store_key wait_status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(19);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $PROXY = $t->testdir() . '/proxy';

$t->run_daemon(\&resp_proxy, port(8390), $redis->port(), $PROXY);
$t->waitforsocket('127.0.0.1:' . port(8390))
	or die "the fake RESP server does not listen\n";

my %F = (name => 'F', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%F,
	store => 'redis://127.0.0.1:8390',
	params => 'timeout=250ms gate_poll=100ms'));

$t->run_fake_dynamo()->run();

###############################################################################

my ($r, $g);

is(admit(\%F)->{status}, 200, 'F admits through the fake server');

my $epoch = gate_record()->{epoch};

# a close that reaches the store after F answered

$r = gate_post(\%F, { action => 'close', reason => 'fault-late-a' });
is($r->{status} . ' ' . ($r->{json}{error} // ''), '503 store_unavailable',
	'late: 503 store_unavailable');

ok(Test::DynamoRL::wait_for(sub { -e "$PROXY/late-fault-late-a" }, 10),
	'late: the close reached the store afterwards');

$g = gate_record();
is(($g->{state} // '') . ' ' . ($g->{epoch} // ''), "open $epoch",
	'late: refused there, the gate still open, the epoch unchanged');

# a close made in the store whose answer is lost

$r = gate_post(\%F, { action => 'close', reason => 'fault-stall-b',
	epoch => $epoch + 0 });
is($r->{status}, 200, 'made, unanswered: 200 once read again');
is($r->{json}{state}, 'closed', 'made, unanswered: closed');
is($r->{json}{epoch}, $epoch + 1, 'made, unanswered: the epoch moved once');

$g = gate_record();
is(($g->{state} // '') . ' ' . ($g->{reason} // ''), 'closed fault-stall-b',
	'made, unanswered: closed in the store');

$r = gate_post(\%F, { action => 'open', epoch => $epoch + 1 });
is($r->{status} . ' ' . ($r->{json}{state} // ''), '200 open', 'opened');

# made, then the store silent for longer than F reads again

my $s = start('POST', '/rl/gate', port => $F{api},
	body => '{"action":"close","reason":"fault-stall-c"}');

ok(Test::DynamoRL::wait_for(sub {
	-e "$PROXY/fired-fault-stall-c"
}, 5), 'unknown: the close reached the store');

$t->write_file('proxy/mode', 'silent');

$r = resp(read_until($s, undef, 20));
is($r->{status}, 503, 'unknown: 503');
is(json($r)->{error}, 'gate_outcome_unknown', 'unknown: gate_outcome_unknown');
like(json($r)->{message}, qr/may or may not have been made/,
	'unknown: the message says so');
ok(($r->{headers}{'retry-after'} // '') eq '1', 'unknown: Retry-After: 1');

$t->write_file('proxy/mode', 'pass');

is(gate_record()->{state}, 'closed', 'unknown: it was made');

wait_status(\%F, sub { is_true($_[0]{store}{up}) });

$r = gate_post(\%F, { action => 'open' });
is($r->{status} . ' ' . ($r->{json}{state} // ''), '200 open', 'opened again');

$epoch = gate_record()->{epoch};

# the store paused for longer than F reads again

$redis->cmd('CLIENT', 'PAUSE', 6000, 'ALL');

my $t0 = time();

$r = gate_post(\%F, { action => 'close', reason => 'paused' });
is($r->{status} . ' ' . ($r->{json}{error} // ''),
	'503 gate_outcome_unknown', 'paused: 503 gate_outcome_unknown');
cmp_ok(time() - $t0, '<', 5.5, 'paused: answered within the reads\' time');

$t->wait_for(sub { $redis->ping() eq 'PONG' }, 10);

$g = gate_record();
is(($g->{state} // '') . ' ' . ($g->{epoch} // ''), "open $epoch",
	'paused: the close, run late, refused: still open');

###############################################################################

sub gate_record {
	return $redis->hgetall(store_key('gate'));
}

###############################################################################
