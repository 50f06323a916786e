#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Over TLS ("rediss://"), the commands of the turns that come while a
# batch is unanswered are held and go out in one send (issue 25, "Speed"):
# redis-server reads a TLS connection one record at a time, so without
# the hold each turn's claim is a record, a read and a reply of its own.
#
# Debian's redis-server with --tls-port (and a plain port for the test's
# own client), certificates made with openssl.  The store's writes are
# paused (CLIENT PAUSE WRITE: the claim scripts wait, INFO answers); eight
# generations come 50 ms apart, each in its own turn of the gateway's
# event loop; redis-server's total_reads_processed tells how many sends
# it got meanwhile: the first claim's, then nothing (the other seven
# held), where eight came before.  Once the pause ends, all eight are
# admitted and forwarded once.  Then a store paused past the timeout: a
# claim held behind another is refused by its own deadline.

###############################################################################

use warnings;
use strict;

use Test::More;

use POSIX ();
use Time::HiRes qw/ sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen replica_conf status /;

###############################################################################

time_limit(Test::DynamoRL::scale(120));

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(10);

my $d = $t->testdir();

sub ossl {
	my ($cmd) = @_;
	system("cd $d && $cmd >>openssl.log 2>&1") == 0
		or die "openssl failed: $cmd\n";
}

ossl('openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key'
	. ' -out ca.crt -days 30 -subj /CN=batch-test-ca');
ossl('openssl req -newkey rsa:2048 -nodes -keyout server.key'
	. ' -out server.csr -subj /CN=server');

open my $fh, '>', "$d/server.ext" or die;
print $fh "subjectAltName=IP:127.0.0.1\n";
close $fh;

ossl('openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key'
	. ' -CAcreateserial -days 1 -out server.crt -extfile server.ext');

my $redis = Test::DynamoRL::Redis->new($t, port => 8379, tls => 8380,
	args => [ '--tls-cert-file', "$d/server.crt",
		'--tls-key-file', "$d/server.key",
		'--tls-ca-cert-file', "$d/ca.crt",
		'--tls-auth-clients', 'no' ])->start();

my %A = (name => 'A', listen => 8080, api => 8070);

# the claims outlive the pause; the gate's reads and the heartbeats,
# every 100 and 500 ms, are held behind the first claim too

my $TIMEOUT = int(Test::DynamoRL::scale(10) * 1000);

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => 'rediss://127.0.0.1:' . $redis->tls_port(),
	params => "tls_trusted_certificate=$d/ca.crt timeout=${TIMEOUT}ms"
		. ' gate_poll=100ms heartbeat=500ms gate_stale=30s'));

$t->run_fake_dynamo()->run();

is(admit(\%A)->{status}, 200, 'admitted');

###############################################################################

sub reads {
	my ($n) = ($redis->cmd('INFO', 'stats') // '')
		=~ /^total_reads_processed:(\d+)/m;
	return $n // 0;
}

my $PAUSE = int(Test::DynamoRL::scale(3) * 1000);
my $N = 8;

my $before = reads();
$redis->cmd('CLIENT', 'PAUSE', $PAUSE, 'WRITE');

my @pids;

for my $i (1 .. $N) {
	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		my $r = gen(\%A, "batch-$i");
		POSIX::_exit($r->{status} == 200 ? 0 : 1);
	}

	push @pids, $pid;
	sleep(0.05);
}

# every claim waits in the gateway's queue: sent, or held

ok(Test::DynamoRL::wait_for(sub {
	(status(\%A)->{store}{queue} // 0) >= $N
}, 10), "paused store: $N claims waiting");

# CLIENT PAUSE and the second INFO: the test's own reads since the first

my $sends = reads() - $before - 2;

cmp_ok($sends, '<=', 2,
	"paused store: $N claims in at most 2 sends over TLS")
	or diag("sends: $sends");
cmp_ok($sends, '>=', 1, 'paused store: the first claim sent');

my $ok = 0;

for my $pid (@pids) {
	waitpid($pid, 0);
	$ok++ if $? == 0;
}

is($ok, $N, "the pause over: all $N admitted");
is(scalar(grep { forwarded($t, "batch-$_") == 1 } 1 .. $N), $N,
	"each of the $N forwarded once");

###############################################################################

# a store slower than the timeout: a held claim is refused by its own
# deadline (the first claim's timeout lets it go), not when the
# connection is given up (4 timeouts)

my $SHORT = Test::DynamoRL::scale(0.5);

$t->write_file_expand('nginx.conf', replica_conf(%A,
	store => 'rediss://127.0.0.1:' . $redis->tls_port(),
	params => "tls_trusted_certificate=$d/ca.crt"
		. ' timeout=' . int($SHORT * 1000) . 'ms'
		. ' gate_poll=100ms heartbeat=500ms gate_stale=30s'));
$t->reload();

is(admit(\%A)->{status}, 200, 'short timeout: admitted');

$redis->cmd('CLIENT', 'PAUSE', int(Test::DynamoRL::scale(8) * 1000),
	'WRITE');

my $first = fork() // die "cannot fork: $!\n";

if ($first == 0) {
	my $r = gen(\%A, 'slow-1');
	POSIX::_exit($r->{status} == 503 ? 0 : 1);
}

sleep(0.1);

my $t0 = Time::HiRes::time();
my $r = gen(\%A, 'slow-2');
my $took = Time::HiRes::time() - $t0;

is($r->{status}, 503, 'slow store: the claim held behind another, 503');
cmp_ok($took, '<', 2.5 * $SHORT,
	'slow store: refused by its own timeout, not the connection\'s');

waitpid($first, 0);
is($?, 0, 'slow store: the first claim 503 too');

$redis->cmd('CLIENT', 'UNPAUSE');

###############################################################################
