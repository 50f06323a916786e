#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Two replicas with one name (issue 24, item 9): "replica=" defaults to
# the host name, and two containers on host networking share it; each in
# its own pid namespace, their masters both have pid 1 and their worker
# processes pid 2.  A1 and A2, both "A", on Debian's redis-server:
#
# - an attempt streaming through A1, its id sent to A2 as A2's first
#   connection (the same worker pid and connection number as A1's): 409,
#   forwarded once (an owner includes the identity its worker process
#   drew as it started);
# - the gate closed while A1 streams: the fleet counts two replicas and
#   is never "drained" while the stream runs (each instance reports in a
#   field of its own, not "A/1" for both).

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ forwarded read_until start time_limit /;
use Test::DynamoRL::PidNS;
use Test::DynamoRL::Redis qw/ gate gate_post gen replica_conf store_key
	wait_state /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

system('unshare --pid --fork true >/dev/null 2>&1') == 0
	or plan(skip_all => 'no pid namespaces here (unshare --pid)');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(7 + 2);
my $t2 = Test::DynamoRL->new()->check_at_end();

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my $STORE = 'redis://127.0.0.1:8379';
my $PARAMS = 'heartbeat=250ms gate_poll=100ms gate_stale=2s';

my %A1 = (name => 'A', listen => 8080, api => 8070);
my %A2 = (name => 'A', listen => 8280, api => 8270);

$t->write_file_expand('nginx.conf', replica_conf(%A1,
	store => $STORE, params => $PARAMS));
$t->run_fake_dynamo();

$t2->write_file_expand('nginx.conf', replica_conf(%A2,
	store => $STORE, params => $PARAMS));

# nginx of A1 and A2, each in a pid namespace of its own

my (@NS, %clients);

END {
	local $?;
	$_->stop('KILL') for @NS;
}

###############################################################################

my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';

ns_start($t);
ns_start($t2);

my $s = start('POST', '/v1/chat/completions', port => $A1{listen},
	body => $CHAT, headers => [ 'X-Dynamo-Attempt-Id' => 'twin-1',
		'x-fake-scenario' => 'slow', 'x-fake-events' => 600,
		'x-fake-interval-ms' => 100 ]);

like(read_until($s, qr/data: \{/, 10), qr/^HTTP\/1\.1 200 /, 'A1 streams');

is(gen(\%A2, 'twin-1')->{status}, 409, 'the same id through A2: 409');
is(forwarded($t, 'twin-1'), 1, 'forwarded once');

# the gate closed while A1 streams: never drained

my $g = gate_post(\%A2, { action => 'close', reason => 'twins' });
is($g->{status}, 200, 'closed through A2');

my ($drained, $two) = (0, 0);

Test::DynamoRL::wait_for(sub {
	my $f = gate(\%A2)->{fleet} // {};
	$drained++ if $f->{drained} && $f->{drained} ne 'false';
	$two++ if ($f->{replicas} // 0) == 2;
	return 0;
}, 3, 0.05);

is($drained, 0, 'closed: never drained while A1 streams');
cmp_ok($two, '>', 0, 'closed: two replicas in the fleet');

close $s;

ok(Test::DynamoRL::wait_for(sub {
	my $f = gate(\%A2)->{fleet} // {};
	return $f->{drained} && $f->{drained} ne 'false';
}, 10), 'closed: drained once the stream ended');

###############################################################################

sub ns_start {
	my ($tt) = @_;

	my $ns = Test::DynamoRL::PidNS->new($tt, 'nginx');
	push @NS, $ns;

	# ready once its worker process's connection to the store ran a
	# script (a gate read): no connection to nginx before the test's

	$ns->start(sub {
		my @c = grep { /\bcmd=evalsha\b/ && !$clients{(/\bid=(\d+)/)[0]} }
			split /\n/, $redis->cmd('CLIENT', 'LIST');
		return 0 unless @c;
		$clients{(/\bid=(\d+)/)[0]} = 1 for @c;
		return 1;
	}) or die "nginx does not use the store\n";
}

###############################################################################
