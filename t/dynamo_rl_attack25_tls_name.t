#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Attack 25: the store's certificate name check with rediss://.  The
# reference says tls_name is "checked against the certificate (its
# subjectAltName DNS names, or, for an address, its IP addresses)".  A
# certificate of the trusted CA with no subjectAltName at all, only
# CN=redis.test, must then not pass for tls_name=redis.test; one with a
# DNS name "127.0.0.1" must not pass for the address 127.0.0.1; a partial
# wildcard "r*.example.test" must not pass for redis.example.test.  A
# certificate with subjectAltName DNS:redis.test is the control, and one
# with the whole-label wildcard DNS:*.example.test that of the partial one.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ time_limit /;
use Test::DynamoRL::Redis qw/ replica_conf reason gen /;

###############################################################################

time_limit(Test::DynamoRL::scale(180));

my $t = Test::DynamoRL->new()->has(qw/http proxy/);

system('openssl version >/dev/null 2>&1') == 0
	or plan(skip_all => 'no openssl command');

$t->plan(7);

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

	for my $c ([ 'good', '/CN=x', 'subjectAltName=DNS:redis.test' ],
		[ 'cn', '/CN=redis.test', undef ],
		[ 'dnsip', '/CN=127.0.0.1', 'subjectAltName=DNS:127.0.0.1' ],
		[ 'partial', '/CN=x', 'subjectAltName=DNS:r*.example.test' ],
		[ 'wild', '/CN=x', 'subjectAltName=DNS:*.example.test' ])
	{
		my ($n, $subj, $ext) = @$c;

		ossl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout',
			"$d/$n.key", '-out', "$d/$n.csr", '-subj', $subj);

		my @ext;

		if (defined $ext) {
			open my $fh, '>', "$d/$n.ext" or die "$!\n";
			print $fh "$ext\n";
			close $fh;
			@ext = ('-extfile', "$d/$n.ext");
		}

		ossl('x509', '-req', '-in', "$d/$n.csr", '-CA', "$d/ca.crt",
			'-CAkey', "$d/ca.key", '-CAcreateserial', '-out',
			"$d/$n.crt", '-days', '30', @ext);
	}
}

my %redis;
my $port = 8379;

for my $n (qw/ good cn dnsip partial wild /) {
	$redis{$n} = Test::DynamoRL::Redis->new($t, port => $port,
		tls => $port + 1, args => [ '--tls-cert-file', "$d/$n.crt",
		'--tls-key-file', "$d/$n.key", '--tls-ca-cert-file',
		"$d/ca.crt", '--tls-auth-clients', 'no' ])->start();
	$port += 2;
}

my $rep = { listen => 8080, api => 8070 };

sub conf {
	my ($n, $name) = @_;

	my $url = 'rediss://127.0.0.1:' . $redis{$n}->tls_port();
	my $p = "timeout=1s tls_trusted_certificate=$d/ca.crt";
	$p .= " tls_name=$name" if defined $name;

	$t->write_file_expand('nginx.conf', replica_conf(name => 'A',
		store => $url, params => $p));
}

# the first answer other than 503 within 3 s, or 503

sub admitted {
	my ($tag) = @_;

	my $r;
	my $i = 0;

	$t->wait_for(sub {
		$r = gen($rep, "tls-$tag-" . ++$i);
		return $r->{status} != 503;
	}, 3);

	return $r;
}

conf('good', 'redis.test');
$t->run_fake_dynamo()->run();

is(admitted('good')->{status}, 200, 'control: SAN DNS:redis.test admits');

conf('cn', 'redis.test');
$t->reload();

my $r = admitted('cn');
is($r->{status}, 503, 'CN=redis.test without a subjectAltName: refused');
is(reason($r), 'store_unavailable', 'CN only: store_unavailable');

conf('dnsip', undef);
$t->reload();

$r = admitted('dnsip');
is($r->{status}, 503, 'DNS:127.0.0.1 for the address 127.0.0.1: refused');

conf('partial', 'redis.example.test');
$t->reload();

$r = admitted('partial');
is($r->{status}, 503,
	'partial wildcard r*.example.test for redis.example.test: refused');

# the control of the partial one: a whole label's wildcard still serves

conf('wild', 'redis.example.test');
$t->reload();

is(admitted('wild')->{status}, 200,
	'wildcard *.example.test for redis.example.test: admits');

conf('good', 'redis.test');
$t->reload();

is(admitted('good2')->{status}, 200, 'control again: admits');

###############################################################################
