#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The store's host names resolved on every connect with a "resolver"
# (issue 25).  The test runs a DNS responder of its own on loopback
# (Test::DynamoRL::DNS), named in "resolver ... valid=1s", and Debian's
# redis-server twice on one port: SA on 127.0.0.1, SB on [::1].
#
# - two gateway replicas, A and B, on redis://store.test:P: up through
#   SA (the name's A record, resolved by the gateways, not at start);
# - the name moved to ::1 (AAAA only) and SA stopped: A and B follow to
#   SB without a reload, within FOLLOW, and their claims are in SB;
# - without a resolver, nginx -t resolves "localhost" and says nothing;
# - a name answered NXDOMAIN: 503 store_unavailable, nothing forwarded,
#   one error line naming the host and "Host not found", however many
#   reconnects resolve it again;
# - a responder that does not answer: "resolver_timeout" ends each try,
#   503 meanwhile, one error line, and the worker serves the other
#   locations at once; a reload or a stop does not wait for it;
# - sentinel://sentinels.test:S/rl: a sentinel given by name is
#   resolved, asked, and its primary used;
# - rediss://tls.test:T: the certificate (DNS:tls.test only) is checked
#   against the URL's name, not the address it resolved to.
#
# On the code before the resolver, the names are resolved by the C
# library when the configuration is read: the gateways do not start.
# (Run that check with no network, "unshare -rn", so that the C library's
# queries for the test's names do not leave the machine.)

###############################################################################

use warnings;
use strict;

use Test::More;

use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::DNS;
use Test::DynamoRL::Fixture qw/ err_since forwarded time_limit /;
use Test::DynamoRL::Redis qw/ admit gen reason replica_conf status
	store_key /;

###############################################################################

time_limit(Test::DynamoRL::scale(150));

system('redis-sentinel --version >/dev/null 2>&1') == 0
	or plan(skip_all => 'no redis-sentinel');

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(38);
my $tb = Test::DynamoRL->new()->check_at_end();
my $tc = Test::DynamoRL->new()->check_at_end();

# the bound, stated (docs/operations.md, "Managed stores"): the name's
# answer lives 1 s (valid=1s), a reconnect comes within the backoff's
# 2 s at most, one more for the load of this machine

my $FOLLOW = Test::DynamoRL::scale(4);

my $dns = Test::DynamoRL::DNS->new($t, port => 8353)->start();

my $sa = Test::DynamoRL::Redis->new($t, port => 8379)->start();
my $sb = Test::DynamoRL::Redis->new($t, port => 8379, host => '::1')
	->start();

my $P = $sa->port();

$dns->set('store.test', A => '127.0.0.1');
$dns->set('store.test', AAAA => undef);
$dns->set('sentinels.test', A => '127.0.0.1');
$dns->set('sentinels.test', AAAA => undef);
$dns->silent('silent.test');

my $RESOLVER = 'resolver 127.0.0.1:' . $dns->port() . ' valid=1s;';
my $PARAMS = 'timeout=' . Test::DynamoRL::scale(1) . 's'
	. ' gate_poll=100ms gate_stale=2s';
my $URL = "redis://store.test:$P";

my %A = (name => 'A', listen => 8080, api => 8070);
my %B = (name => 'B', listen => 8180, api => 8170);
my %C = (name => 'C', listen => 8280, api => 8270);

$t->write_file_expand('nginx.conf', replica_conf(%A, store => $URL,
	params => $PARAMS, http => $RESOLVER));
$t->run_fake_dynamo()->run();

$tb->write_file_expand('nginx.conf', replica_conf(%B, store => $URL,
	params => $PARAMS, http => $RESOLVER));
$tb->run();

###############################################################################

sub lines {
	my ($tt, $off, $re) = @_;
	return scalar(grep { /$re/ } err_since($tt, $off));
}

# fresh ids on a gateway until one is 200: the seconds it took, or undef

sub until_200 {
	my ($rep, $prefix, $seconds) = @_;

	my ($n, $start) = (0, time());

	while (time() - $start < $seconds) {
		return time() - $start
			if gen($rep, $prefix . '-' . ++$n)->{status} == 200;
	}

	return undef;
}

my ($res, $off, $took);

# up through SA, the name resolved by the gateways

is(admit(\%A)->{status}, 200, 'A is up through the name');
is(admit(\%B)->{status}, 200, 'B is up through the name');

ok(lines($t, 0, qr/connected to "\Q$URL\E" \(127\.0\.0\.1:$P\)/),
	'A connected to 127.0.0.1');
cmp_ok($dns->queries('store.test'), '>=', 2,
	'the gateways asked the responder');

$res = gen(\%A, 'sa-1');
is($res->{status}, 200, 'a claim through SA');
ok($sa->has_key(store_key('a:sa-1')), 'the claim is in SA');

# without a resolver, as before: resolved when the configuration is read
# (localhost, by the C library: /etc/hosts), and nginx -t says nothing

my ($code, $out) = $t->nginx_t(replica_conf(%C,
	store => "redis://localhost:$P", params => $PARAMS));
is($code, 0, 'no resolver: nginx -t passes');
unlike($out, qr/\[(?:warn|error|emerg)\]|resolv/, 'no resolver: nothing said')
	or diag($out);

###############################################################################

# NXDOMAIN: down, one line, nothing forwarded

$tc->write_file_expand('nginx.conf', replica_conf(%C,
	store => "redis://nosuch.test:$P", params => $PARAMS,
	http => $RESOLVER));
$tc->run();

ok(Test::DynamoRL::wait_for(sub { $dns->queries('nosuch.test') >= 4 }, 10),
	'NXDOMAIN: resolved again on each reconnect');

$res = gen(\%C, 'nx-1');
is($res->{status}, 503, 'NXDOMAIN: 503');
is(reason($res), 'store_unavailable', 'NXDOMAIN: store_unavailable');
is(forwarded($t, 'nx-1'), 0, 'NXDOMAIN: nothing forwarded');
is(lines($tc, 0, qr/\[error\] .*"nosuch\.test" could not be resolved:/
	. qr/ Host not found/), 1, 'NXDOMAIN: one error line naming the host');
is(lines($tc, 0, qr/\[error\]/), 1, 'NXDOMAIN: no other error line');

$tc->stop();

# a responder that does not answer: resolver_timeout, 503, other
# locations served at once

$off = -s $tc->testdir() . '/error.log';

$tc->write_file_expand('nginx.conf', replica_conf(%C,
	store => "redis://silent.test:$P", params => $PARAMS,
	http => "$RESOLVER resolver_timeout 1s;"));
$tc->run();

my $start = time();
$res = gen(\%C, 'si-1');
is($res->{status}, 503, 'no answer: 503');
is(forwarded($t, 'si-1'), 0, 'no answer: nothing forwarded');

$res = gen(\%C, 'si-2', '/zone');
is($res->{status}, 200, 'no answer: another location is served');
cmp_ok(time() - $start, '<', 1, 'no answer: at once, not after the timeout');

ok(Test::DynamoRL::wait_for(sub {
	lines($tc, $off, qr/"silent\.test" could not be resolved:/
		. qr/ Operation timed out/) }, Test::DynamoRL::scale(5)),
	'no answer: resolver_timeout');

is(lines($tc, $off, qr/\[error\] .*silent\.test/), 1,
	'no answer: one error line');

# a reload, then a stop, while a resolution is under way for 60 s: the
# worker processes exit at once, they do not wait for the resolver

my $asked = $dns->queries('silent.test');

$tc->write_file_expand('nginx.conf', replica_conf(%C,
	store => "redis://silent.test:$P", params => $PARAMS,
	http => "$RESOLVER resolver_timeout 60s;"));
$tc->reload();

my ($w) = $tc->worker_pids();
Test::DynamoRL::wait_for(sub { $dns->queries('silent.test') > $asked }, 5);

$start = time();
$tc->reload();
ok(Test::DynamoRL::wait_for(sub { !kill(0, $w) }, 10),
	'no answer: the old worker process exits on a reload');
cmp_ok(time() - $start, '<', Test::DynamoRL::scale(3),
	'no answer: at once, not after resolver_timeout');

$start = time();
$tc->stop();
cmp_ok(time() - $start, '<', Test::DynamoRL::scale(3),
	'no answer: nginx stops at once');

# a sentinel given by its name

my $s = Test::DynamoRL::Redis->new($t, port => 8390,
	sentinel => [ "monitor rl 127.0.0.1 $P 1" ])->start();

$off = -s $tc->testdir() . '/error.log';

$tc->write_file_expand('nginx.conf', replica_conf(%C,
	store => 'sentinel://sentinels.test:' . $s->port() . '/rl',
	params => $PARAMS, http => $RESOLVER));
$tc->run();

is(admit(\%C)->{status}, 200, 'sentinel by name: up');
ok(lines($tc, $off, qr/sentinel 127\.0\.0\.1:${\ $s->port()} names/
	. qr/ 127\.0\.0\.1:$P the primary/), 'sentinel by name: asked');

$tc->stop();
$s->stop();

# rediss:// by name: the certificate's name checked against the URL's
# host, not the address it resolved to (the certificate has no address)

my $d = $t->testdir();

# the name in the subjectAltName alone: the CN is never checked

$t->write_file('tls.ext', "subjectAltName=DNS:tls.test\n");

for my $cmd ('openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key'
		. ' -out ca.crt -days 30 -subj /CN=resolve-test-ca',
	'openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr'
		. ' -subj /CN=tls.test',
	'openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key'
		. ' -CAcreateserial -days 1 -out tls.crt -extfile tls.ext')
{
	system("cd $d && $cmd >>openssl.log 2>&1") == 0
		or die "openssl failed: $cmd\n";
}

my $st = Test::DynamoRL::Redis->new($t, port => 8387, tls => 8388,
	args => [ '--tls-cert-file', "$d/tls.crt", '--tls-key-file',
		"$d/tls.key", '--tls-ca-cert-file', "$d/ca.crt",
		'--tls-auth-clients', 'no' ])->start();

$dns->set('tls.test', A => '127.0.0.1');
$dns->set('tls.test', AAAA => undef);

$off = -s $tc->testdir() . '/error.log';

$tc->write_file_expand('nginx.conf', replica_conf(%C,
	store => 'rediss://tls.test:' . $st->tls_port(),
	params => "$PARAMS tls_trusted_certificate=$d/ca.crt",
	http => $RESOLVER));
$tc->run();

is(admit(\%C)->{status}, 200, 'rediss:// by name: up');
ok(lines($tc, $off, qr/TLSv1\.[23] to "tls\.test", .*verified/),
	'rediss:// by name: the name verified');

$tc->stop();
$st->stop();

###############################################################################

# the name moves to ::1, SA stops: A and B follow to SB

my ($offa, $offb) = map { -s $_->testdir() . '/error.log' } $t, $tb;
$asked = $dns->queries('store.test');

$dns->set('store.test', A => undef);
$dns->set('store.test', AAAA => '::1');
$sa->stop();

$took = until_200(\%A, 'mv-a', 3 * $FOLLOW);
ok(defined $took && $took < $FOLLOW, "A follows to SB within $FOLLOW s")
	or diag('A: ' . ($took // 'never'));
diag(sprintf('A followed the name in %.2f s', $took // -1));

$took = until_200(\%B, 'mv-b', 3 * $FOLLOW);
ok(defined $took && $took < $FOLLOW, "B follows to SB within $FOLLOW s")
	or diag('B: ' . ($took // 'never'));

ok(lines($t, $offa, qr/connected to "\Q$URL\E" \(\[::1\]:$P\)/)
	&& lines($tb, $offb, qr/connected to "\Q$URL\E" \(\[::1\]:$P\)/),
	'A and B connected to [::1]');
cmp_ok($dns->queries('store.test'), '>', $asked, 'the name asked again');

$res = gen(\%B, 'sb-1');
is($res->{status}, 200, 'a claim through SB');
ok($sb->has_key(store_key('a:sb-1')), 'the claim is in SB');

ok(!grep({ /\[(?:alert|crit|emerg)\]/ } err_since($t, 0), err_since($tb, 0),
	err_since($tc, 0)), 'no alert or crit');

###############################################################################
