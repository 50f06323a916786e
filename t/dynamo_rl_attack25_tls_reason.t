#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: the store's certificate changes under a connected gateway (a
# managed service rotates it to one for another name, or of another CA).
# The verification holds: the session is not resumed, the new
# certificate is refused, 503 and nothing forwarded.  But the reference
# says such a failure is "logged once at error with the reason": the
# error line written is the loss of the connection ("the store closed
# the connection"), and every reconnect after it, refused for the
# certificate, is logged at debug only, so at the usual log levels
# nothing ever says why the store stays unavailable.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit forwarded /;
use Test::DynamoRL::Redis qw/ replica_conf reason gen store_lines /;

###############################################################################

time_limit(Test::DynamoRL::scale(60));

my $t = Test::DynamoRL->new()->has(qw/http proxy/);

system('openssl version >/dev/null 2>&1') == 0
	or plan(skip_all => 'no openssl command');

$t->plan(5);

my $d = $t->testdir();

sub ossl {
	my (@args) = @_;
	system('openssl', @args) == 0 or die "openssl @args failed\n";
}

{
	local *STDERR;
	open STDERR, '>', "$d/openssl.log";

	ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout',
		"$d/ca.key", '-out', "$d/ca.crt", '-days', '30', '-subj',
		'/CN=attack25-ca');

	for my $n (qw/ redis other /) {
		ossl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout',
			"$d/$n.key", '-out', "$d/$n.csr", '-subj', '/CN=x');

		open my $fh, '>', "$d/$n.ext" or die "$!\n";
		print $fh "subjectAltName=DNS:$n.test\n";
		close $fh;

		ossl('x509', '-req', '-in', "$d/$n.csr", '-CA', "$d/ca.crt",
			'-CAkey', "$d/ca.key", '-CAcreateserial', '-out',
			"$d/$n.crt", '-days', '30', '-extfile', "$d/$n.ext");
	}
}

my $redis = Test::DynamoRL::Redis->new($t, port => 8379, tls => 8380,
	args => [ '--tls-cert-file', "$d/redis.crt", '--tls-key-file',
	"$d/redis.key", '--tls-ca-cert-file', "$d/ca.crt",
	'--tls-auth-clients', 'no' ])->start();

my $rep = { listen => 8080, api => 8070 };

$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
	store => 'rediss://127.0.0.1:' . $redis->tls_port(),
	params => "timeout=1s tls_trusted_certificate=$d/ca.crt"
		. ' tls_name=redis.test'));

$t->run_fake_dynamo()->run();

###############################################################################

my ($r, $i) = ({}, 0);

$t->wait_for(sub { $r = gen($rep, 'rot-' . ++$i); $r->{status} == 200 }, 5);
is($r->{status}, 200, 'redis.test: admits');

# the certificate is rotated to one for another name; connections cut

my $off = -s "$d/error.log";

$redis->cmd('CONFIG', 'SET', 'tls-cert-file', "$d/other.crt",
	'tls-key-file', "$d/other.key");
$redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');

$t->wait_for(sub {
	$t->log_lines('error.log', qr/does not match "redis\.test"/)
}, 5);

$r = gen($rep, 'rot-x');
is($r->{status} . ' ' . (reason($r) // '-'), '503 store_unavailable',
	'another name: 503');
is(forwarded($t, 'rot-x'), 0, 'nothing forwarded');

my @lines = (store_lines($t, $off, 'error'), store_lines($t, $off, 'warn'),
	store_lines($t, $off, 'crit'));

ok(@lines, 'an error line at all');
ok((grep { /does not match "redis\.test"/ } @lines),
	'an error line tells why: the certificate does not match');

###############################################################################
