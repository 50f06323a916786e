#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: a gate change that the gate API refuses with 503 is applied
# afterwards.  The reference: "POST of the gate API: 503
# store_unavailable; nothing changes, in the store or in the zone".  A
# store that is slow past timeout (here CLIENT PAUSE; a failover, a long
# script, a WAIT convoy the same) answers the open after the API said
# 503: the command was already sent and runs when the store goes on, and
# the gate opens.  An operator (or examples/rl-refresh) told "not opened"
# stops with the gate closed, as documented, while the fleet generates
# again at weights nobody verified.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit /;
use Test::DynamoRL::Redis qw/ replica_conf gen admit gate_post store_key /;

###############################################################################

time_limit(Test::DynamoRL::scale(60));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(5);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my %A = (name => 'A', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $redis->url(),
	params => 'timeout=250ms'));

$t->run_fake_dynamo()->run();

###############################################################################

admit(\%A);

my $r = gate_post(\%A, { action => 'close', reason => 'refresh' });
is($r->{status}, 200, 'closed');

my $epoch = $r->{json}{epoch};

# the store stalls for 0.7 s (past timeout=250ms, within the 1 s after
# which the connection is dropped); the open is sent meanwhile

$redis->cmd('CLIENT', 'PAUSE', 700, 'ALL');

$r = gate_post(\%A, { action => 'open', epoch => $epoch });
is($r->{status}, 503, 'open while the store stalls: 503');
is($r->{json}{error}, 'store_unavailable', 'store_unavailable');

# the store goes on

$t->wait_for(sub { $redis->ping() eq 'PONG' }, 5);
$t->wait_for(sub {
	($redis->hgetall(store_key('gate'))->{state} // '') ne 'closed'
}, 3);

is($redis->hgetall(store_key('gate'))->{state}, 'closed',
	'the open refused with 503 did not happen: still closed');
is(gen(\%A, 'late-1')->{status}, 503, 'and generation still refused');

###############################################################################
