#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# TLS to the store, "rediss://" (issue 25), against Debian's redis-server
# with --tls-port and certificates the test makes with openssl:
#
# - verified (the address of the URL in the certificate): a generation
#   passes, the same id again is 409; a connection the store drops comes
#   back with the TLS session reused;
# - a CA that did not sign the store's certificate, a name the
#   certificate does not have, an expired certificate (made under
#   faketime), a client certificate the store requires and is not
#   given: each a store that is down, 503 store_unavailable, nothing
#   forwarded, one error line naming the reason; the client certificate
#   given: 200;
# - a TLS handshake that stalls (a listener that accepts and never
#   answers): 503 store_unavailable at once, nothing forwarded, "timed
#   out" in the log; then a good server on that port: 200 without a
#   reload.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;
use POSIX ();

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ err_since forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf store_lines /;

###############################################################################

time_limit(Test::DynamoRL::scale(180));

system('which faketime >/dev/null 2>&1') == 0
	or plan(skip_all => 'no faketime');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(34);

my $d = $t->testdir();

sub ossl {
	my ($cmd) = @_;
	system("cd $d && $cmd >>openssl.log 2>&1") == 0
		or die "openssl failed: $cmd\n";
}

# a CA, another CA, the server's certificates, a client's

for my $ca (qw/ ca other /) {
	ossl("openssl req -x509 -newkey rsa:2048 -nodes -keyout $ca.key"
		. " -out $ca.crt -days 30 -subj /CN=$ca-test-ca");
}

sub cert {
	my ($name, $ext, $fake) = @_;

	ossl("openssl req -newkey rsa:2048 -nodes -keyout $name.key"
		. " -out $name.csr -subj /CN=$name");
	open my $fh, '>', "$d/$name.ext" or die;
	print $fh "$ext\n";
	close $fh;
	ossl(($fake ? "faketime '$fake' " : '')
		. "openssl x509 -req -in $name.csr -CA ca.crt -CAkey ca.key"
		. " -CAcreateserial -days 1 -out $name.crt -extfile $name.ext");
}

cert('server', 'subjectAltName=DNS:redis.test,IP:127.0.0.1');
cert('expired', 'subjectAltName=DNS:redis.test,IP:127.0.0.1',
	'2020-01-01 00:00:00');
cert('client', 'extendedKeyUsage=clientAuth');

sub tls_args {
	my ($name, $auth) = @_;
	return [ '--tls-cert-file', "$d/$name.crt",
		'--tls-key-file', "$d/$name.key",
		'--tls-ca-cert-file', "$d/ca.crt",
		'--tls-auth-clients', $auth ];
}

my $good = Test::DynamoRL::Redis->new($t, port => 8379, tls => 8380,
	args => tls_args('server', 'no'))->start();
my $auth = Test::DynamoRL::Redis->new($t, port => 8381, tls => 8382,
	args => tls_args('server', 'yes'))->start();
my $old = Test::DynamoRL::Redis->new($t, port => 8383, tls => 8384,
	args => tls_args('expired', 'no'))->start();
my $late = Test::DynamoRL::Redis->new($t, port => 8385, tls => 8386,
	args => tls_args('server', 'no'));

my %A = (name => 'A', listen => 8080, api => 8070);

my $TIMEOUT = int(Test::DynamoRL::scale(0.5) * 1000);

sub conf {
	my ($redis, $params) = @_;

	$t->write_file_expand('nginx.conf', replica_conf(%A,
		store => 'rediss://127.0.0.1:' . $redis->tls_port(),
		params => "timeout=${TIMEOUT}ms heartbeat=500ms gate_poll=100ms"
			. " gate_stale=2s $params"));
}

###############################################################################

# verified

conf($good, "tls_trusted_certificate=$d/ca.crt");

$t->run_fake_dynamo()->run();

my $r = admit(\%A);
is($r->{status}, 200, 'verified: admitted');

$r = gen(\%A, 'tls-once');
is($r->{status}, 200, 'verified: 200');
$r = gen(\%A, 'tls-once');
is($r->{status}, 409, 'verified: the same id again, 409');
is(forwarded($t, 'tls-once'), 1, 'verified: forwarded once');

my @info = grep { /dynamo rl store: TLSv1\.[23] to "127\.0\.0\.1",/ }
	err_since($t, 0);
like($info[0] // '', qr/verified/, 'verified: the handshake logged');

# the store drops the connection: back with the session reused

my $off = -s "$d/error.log";
$good->cmd('CLIENT', 'KILL', 'TYPE', 'normal');

ok(Test::DynamoRL::wait_for(sub {
	grep { /session reused/ } err_since($t, $off)
}, 10), 'verified: reconnected, the TLS session reused');

$r = admit(\%A);
is($r->{status}, 200, 'verified: admitted after the reconnect');

###############################################################################

# a store that is down: 503, nothing forwarded, one line with the reason

sub down {
	my ($what, $redis, $params, $re) = @_;

	my $off = -s "$d/error.log";

	conf($redis, $params);
	$t->reload();

	my $r = gen(\%A, "tls-$what");
	is($r->{status}, 503, "$what: 503");
	is(reason($r), 'store_unavailable', "$what: store_unavailable");
	is(forwarded($t, "tls-$what"), 0, "$what: nothing forwarded");

	my @lines;
	Test::DynamoRL::wait_for(sub {
		@lines = store_lines($t, $off, 'error');
	}, 10);

	is(scalar(@lines), 1, "$what: one error line")
		or diag(explain(\@lines));
	like($lines[0] // '', $re, "$what: the reason");
}

down('wrong-ca', $good, "tls_trusted_certificate=$d/other.crt",
	qr/is unavailable: the store's certificate is not trusted:.*(?:issuer|self-signed)/);

down('wrong-name', $good,
	"tls_trusted_certificate=$d/ca.crt tls_name=other.test",
	qr/is unavailable: the store's certificate does not match "other\.test"/);

down('expired', $old, "tls_trusted_certificate=$d/ca.crt",
	qr/is unavailable: the store's certificate is not trusted:.*expired/);

down('no-client-cert', $auth, "tls_trusted_certificate=$d/ca.crt",
	qr/is unavailable: .*(?:certificate required|the store asked for a client certificate)/);

# the client certificate given

conf($auth, "tls_trusted_certificate=$d/ca.crt tls_name=redis.test"
	. " tls_certificate=$d/client.crt tls_certificate_key=$d/client.key");
$t->reload();

$r = admit(\%A);
is($r->{status}, 200, 'client certificate: admitted');

###############################################################################

# a handshake that stalls: a listener that accepts and never answers

my $pid = fork() // die "cannot fork: $!\n";

if ($pid == 0) {
	my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1:'
		. $late->tls_port(), Listen => 16, ReuseAddr => 1)
		or POSIX::_exit(1);
	my @keep;
	while (my $c = $l->accept()) {
		push @keep, $c;
	}
	POSIX::_exit(0);
}

Test::DynamoRL::waitforsocket('127.0.0.1:' . $late->tls_port());

down('stalled', $late, "tls_trusted_certificate=$d/ca.crt",
	qr/is unavailable: the TLS handshake timed out/);

# a good server there now: back without a reload

kill 'KILL', $pid;
waitpid($pid, 0);

$late->start();

$r = admit(\%A);
is($r->{status}, 200, 'stalled: admitted once a good server is there');

###############################################################################
