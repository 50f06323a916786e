#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Reloads while the shared store is down (issue 24), with Debian's
# redis-server started by the test and one replica A of two worker
# processes:
#
# - ids used while the store answers are saved (SAVE) so that a Redis
#   started again keeps them;
# - Redis frozen (SIGSTOP: connections made, nothing answered), then 3
#   reloads, a request with a new id and a retry of a used id after
#   each: every one 503 store_unavailable, nothing forwarded, every
#   reload done;
# - then Redis stopped (connections refused), and 10 reloads: the same;
#   no worker process crashes, and the old ones exit;
# - Redis back: requests pass without another reload, every used id is
#   refused (409), each id refused during the outage passes once, and
#   no id reached the upstream twice.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ err_since forwarded frontend_records
	time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf store_key /;

###############################################################################

time_limit(Test::DynamoRL::scale(240));

my $RELOADS = 10;
my $FROZEN = 3;

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(20);

my $redis = Test::DynamoRL::Redis->new($t, port => 8379)->start();

my %A = (name => 'A', listen => 8080, api => 8070);

$t->write_file_expand('nginx.conf', replica_conf(%A, workers => 2,
	store => 'redis://127.0.0.1:8379',
	params => 'timeout=250ms heartbeat=500ms gate_poll=100ms gate_stale=2s'));

$t->run_fake_dynamo()->run();

###############################################################################

my ($r, @res);

is(admit(\%A)->{status}, 200, 'up: A admits');

@res = map { gen(\%A, "used-$_") } 1 .. 5;
is(join(' ', map { $_->{status} } @res), '200 200 200 200 200',
	'up: five ids used');

# kept by the Redis that starts again (no persistence otherwise)

is($redis->cmd('SAVE'), 'OK', 'up: SAVE');

my $off = -s $t->testdir() . '/error.log';

# frozen: connections made, nothing answered

my (@down, @retry, @reloaded);

kill 'STOP', $redis->pid() or die "cannot stop redis: $!\n";

for my $i (1 .. $FROZEN) {
	$t->reload();
	push @reloaded, !$t->reload_failed();

	push @down, gen(\%A, "frozen-$i");
	push @retry, gen(\%A, "used-$i");
}

is(scalar(grep { $_ } @reloaded), $FROZEN, "frozen: $FROZEN reloads done");
is(join(' ', grep { !/^503 store_unavailable$/ }
	map { "$_->{status} " . (reason($_) // '') } @down, @retry), '',
	'frozen: every request 503 store_unavailable');

# then stopped, every connection refused (what it ran when it woke is
# not saved)

kill 'CONT', $redis->pid() or die "cannot continue redis: $!\n";
$redis->stop();


for my $i (1 .. $RELOADS) {
	$t->reload();
	push @reloaded, !$t->reload_failed();

	push @down, gen(\%A, "down-$i");
	push @retry, gen(\%A, 'used-' . (1 + $i % 5));
}

is(scalar(grep { $_ } @reloaded), $RELOADS + $FROZEN,
	"stopped: $RELOADS reloads done");
is(join(' ', grep { !/^503 store_unavailable$/ }
	map { "$_->{status} " . (reason($_) // '') }
	@down[$FROZEN .. $#down], @retry[$FROZEN .. $#retry]), '',
	'stopped: every request 503 store_unavailable');

my @ids = ((map { "down-$_" } 1 .. $RELOADS), map { "frozen-$_" } 1 .. $FROZEN);

is(scalar(grep { forwarded($t, $_) } @ids), 0,
	'down: nothing refused was forwarded');
is(join(' ', map { forwarded($t, "used-$_") } 1 .. 5), '1 1 1 1 1',
	'down: used ids not forwarded again');

# the old worker processes of every reload exit

ok($t->wait_for(sub { scalar($t->worker_pids()) == 2
	&& scalar(Test::DynamoRL::_children($t->master())) == 2 }, 20),
	'down: the old worker processes exited') or diag(`ps -ef`);

is(scalar(grep { /exited on signal|\[alert\]/ } err_since($t, $off)), 0,
	'down: no worker process crashed');

# Redis back, with what it saved: no reload needed

$redis->stop();
$redis->start();

is(join(' ', map { $redis->cmd('EXISTS', store_key("a:used-$_")) } 1 .. 5),
	'1 1 1 1 1', 'back: the used ids are in the store')
	or diag(explain($redis->cmd('KEYS', '*')));

my $pids = join ' ', sort $t->worker_pids();

is(admit(\%A)->{status}, 200, 'back: A admits');
is(join(' ', sort $t->worker_pids()), $pids, 'back: without a reload');

@res = map { gen(\%A, "used-$_") } 1 .. 5;
is(join(' ', map { "$_->{status} " . (reason($_) // '') } @res),
	join(' ', ('409 duplicate_attempt') x 5), 'back: used ids refused');

@res = map { gen(\%A, $_) } @ids;
is(join(' ', grep { $_ != 200 } map { $_->{status} } @res), '',
	'back: ids refused during the outage pass');

@res = map { gen(\%A, $_) } @ids;
is(join(' ', grep { $_ != 409 } map { $_->{status} } @res), '',
	'back: and only once');

is(join(' ', grep { forwarded($t, $_) != 1 } @ids, map { "used-$_" } 1 .. 5),
	'', 'back: each id forwarded once');

my %seen;
$seen{$_->{headers}{'x-request-id'} // ''}++
	for grep { !exists $_->{event} } @{frontend_records($t)};

is(join(' ', grep { $seen{$_} > 1 } sort keys %seen), '',
	'no id reached the upstream twice');

is(scalar(grep { /exited on signal|\[alert\]/ } err_since($t, $off)), 0,
	'back: no worker process crashed');

###############################################################################
