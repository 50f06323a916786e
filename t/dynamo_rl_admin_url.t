#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for dynamo_rl_admin_url (issue 26): the discovery answer names the
# gateway's admin plane in each worker's system_url (the URL and the
# decimal instance id), admin_base_url is removed, a worker the admin plane
# would refuse (an error, no or a bad system_url, an id shared by two
# entries) keeps no system_url, and every other byte, the workers' order
# and protocol_version stay; over HTTP/1.1, HTTP/2 and keep-alive, a
# listener answer of exactly max_size, ids above 2^63, a caller's scope;
# identical bytes from two worker processes and two servers; a URL from
# variables, and one that evaluates to no usable URL (no system_url at
# all, one log line); the off switch; nginx -t on a bad URL; no validator
# or digest of the listener's bytes on a rewritten answer, no URL header
# of a redirecting listener.  And GET
# {instance_id}/live, forwarded to the worker's /live under the checks of
# /health.

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;
use IO::Socket::INET;
use POSIX ();

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ doc err_since json_lines rl_test worker /;

###############################################################################

my $t = rl_test(Test::DynamoRL::scale(240), 61, <<'EOF', has => [qw/ http proxy map http_v2 /]);

%%RL_MAIN workers=2%%

http {
    %%RL_HTTP 8m%%

    %%RL_ACCESS_LOG t status deny pid=pid uri%%

    %%RL_LISTENER%%

    map $http_x_team $rl_ns {
        a         "exact=dynamo";
        default   any;
    }

    server {
        %%RL_LISTEN 8080 reuseport 8085 http2%%

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_namespace $rl_ns;
            dynamo_rl_admin_url http://127.0.0.1:8080/v1/rl/workers/;
            proxy_pass http://rl_listener;
        }

        location = /big/v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_rl_discovery max_size=64k;
            dynamo_rl_admin_url http://127.0.0.1:8080/v1/rl/workers/;
            proxy_pass http://rl_listener/v1/rl/workers;
        }

        location = /off/v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_admin_url off;
            proxy_pass http://rl_listener/v1/rl/workers;
        }

        location = /host/v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_admin_url http://$host/v1/rl/workers/;
            proxy_pass http://rl_listener/v1/rl/workers;
        }

        location = /var/v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_admin_url $http_x_url;
            proxy_pass http://rl_listener/v1/rl/workers;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=0;
            dynamo_rl_namespace $rl_ns;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        %%RL_DISCOVERY_FETCH rl_listener%%
    }

    # a listener that serves a file (ETag, Last-Modified, Accept-Ranges,
    # digests), and one that redirects

    server {
        %%RL_LISTEN 8084%%

        location = /v1/rl/workers {
            alias         %%TESTDIR%%/file.json;
            default_type  application/json;
            add_header    Content-MD5 "bm90IHRoZXNlIGJ5dGVz";
            add_header    Digest "sha-256=bm90IHRoZXNlIGJ5dGVz";
        }

        location = /redirect {
            add_header  Content-Location http://10.9.9.9:8000/x always;
            add_header  Refresh "0; url=http://10.9.9.9:8000/" always;
            add_header  Link "<http://10.9.9.9:8000/>; rel=preload" always;
            return 307 http://10.9.9.9:8000/v1/rl/workers;
        }
    }

    server {
        %%RL_LISTEN 8086%%

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_admin_url http://127.0.0.1:8080/v1/rl/workers/;
            proxy_pass http://127.0.0.1:8084;
        }

        location = /plain/v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8084/v1/rl/workers;
        }

        location = /redirect/v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8084/redirect;
        }
    }

    # another replica of the same gateway, for the same clients

    server {
        %%RL_LISTEN 8083%%

        dynamo_rl_admin_url http://127.0.0.1:8080/v1/rl/workers/;

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://rl_listener;
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;

my $W = '/v1/rl/workers';
my $GW = 'http://127.0.0.1:' . port(8080) . "$W/";

my $ID0 = '7587888160958628117';
my $BIG = '18446744073709551615';

# in document order: two that the admin plane allows, one with an error,
# one without system_url, one out of team a's scope, one with a system_url
# the admin plane refuses, two sharing an id, one whose system_url member
# is spelled with an escape (a worker entry the admin plane refuses)

my @FLEET = (
	worker(id => $ID0, w => 0,
		admin_base_url => 'http://127.0.0.1:' . port(8092) . '/dev'),
	worker(id => $BIG, w => 1),
	worker(id => '103', w => 2, error => 'worker discovery timed out'),
	worker(id => '104', w => 2, system_url => undef,
		admin_base_url => 'http://10.9.9.9:1'),
	worker(id => '105', w => 2, namespace => 'team-b'),
	worker(id => '106', w => 2, system_url => 'http://u@127.0.0.1:1'),
	worker(id => '107', w => 0),
	worker(id => '107', w => 1),
);

# the last worker's system_url member is spelled with an escape: a
# worker entry the admin plane refuses, whose address must not leak

my $DOC = doc(@FLEET);
my $ESC = $JS->encode(worker(id => '108', w => 2, system_url => undef));
$ESC =~ s/\{/{"system\\u005furl":"http:\/\/10.1.1.1:5",/;
$DOC =~ s/\]\}\z/,$ESC]}/;

$t->fake_set('discovery.json', $DOC);

###############################################################################

# what the answer must be: the listener's bytes, element by element

my @elts = elements($DOC);

sub rewritten {
	my ($elt, $keep) = @_;

	(my $id) = $elt =~ /"instance_id":(\d+)/;

	$elt =~ s/"admin_base_url":"[^"]*",//;
	$elt =~ s/,"system\\u005furl":"[^"]*"//;
	$elt =~ s/"system\\u005furl":"[^"]*",//;

	if ($keep) {
		$elt =~ s/"system_url":"[^"]*"/"system_url":"$GW$id"/;

	} else {
		$elt =~ s/"system_url":"[^"]*",//;
	}

	return $elt;
}

my @keep = (1, 1, 0, 0, 1, 0, 0, 0, 0);
my @want = map { rewritten($elts[$_], $keep[$_]) } 0 .. $#elts;

my $EXPECT = prefix($DOC) . join(',', @want) . ']}';
my $EXPECT_A = prefix($DOC)
	. join(',', map { $want[$_] } grep { $_ != 4 } 0 .. $#want) . ']}';

my $r = get($W);

is($r->{status}, 200, 'answer: status');
is($r->{headers}{'content-type'}, 'application/json', 'answer: json');
is($r->{body}, $EXPECT, 'answer: the listener\'s bytes, rewritten')
	or diag("$r->{body}\n$EXPECT");
is($r->{headers}{'content-length'}, length $EXPECT,
	'answer: its own length');

my $j = eval { $JS->decode($r->{body}) } // {};

is($j->{protocol_version}, 1, 'answer: protocol_version');
is(join(' ', map { $_->{instance_id} } @{$j->{workers}}),
	"$ID0 $BIG 103 104 105 106 107 107 108", 'answer: order kept');
is(join(' ', map { $_->{system_url} // '-' } @{$j->{workers}}),
	"$GW$ID0 $GW$BIG - - ${GW}105 - - - -",
	'answer: system_url names the gateway, or is gone');
is(scalar(grep { exists $_->{admin_base_url} } @{$j->{workers}}), 0,
	'answer: no admin_base_url');

my @real = map { port(8091 + $_) } 0 .. 2;
unlike($r->{body}, qr/:(?:@{[ join('|', @real) ]})\b|10\.9\.9\.9|10\.1\.1\.1/,
	'answer: no worker address');

# a caller held to namespace "dynamo": 105 (team-b) is gone, the rest as
# before

$r = get($W, 'X-Team: a');
is($r->{body}, $EXPECT_A, 'scope: out-of-scope worker removed, rewritten');

# HTTP/2

my $h2 = curl($W);
is($h2->{version} . ' ' . $h2->{status}, '2 200', 'h2: status');
is($h2->{body}, $EXPECT, 'h2: the same bytes');

# keep-alive: three answers on one connection

my @ka = keepalive(3, $W);
is(scalar @ka, 3, 'keep-alive: three answers');
is(scalar(grep { $_->{status} == 200 && $_->{body} eq $EXPECT } @ka), 3,
	'keep-alive: each the same bytes');

# two worker processes and another server: identical bytes

my (%pids, %bodies);
my $before = log_count();

for my $i (1 .. 200) {
	my $a = get($W, "X-Test: p$i");
	$bodies{$a->{body}}++;

	if ($i % 10 == 0) {
		%pids = map { $_->{pid} => 1 }
			grep { $_->{t} =~ /^p\d+$/ } log_entries();
		last if keys %pids > 1;
	}
}

is(scalar keys %pids, 2, 'replicas: answered by two worker processes');
is(join('', keys %bodies), $EXPECT, 'replicas: identical bytes');

$r = get($W, undef, 8083);
is($r->{body}, $EXPECT, 'replicas: another server, identical bytes');

# the off switch: the listener's bytes unchanged

$r = get("/off$W");
is($r->{body}, $DOC, 'off: the listener\'s bytes');

# HEAD: headers only

$r = parse_response(Test::DynamoRL::http(
	"HEAD $W HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"))
	// {};
is($r->{status}, 200, 'head: status');
is($r->{body} // '', '', 'head: no body');
is($r->{headers}{'content-length'}, undef,
	'head: not the listener\'s length');

###############################################################################

# a listener answer of exactly max_size (64k) is rewritten whole, even
# though it grows; one byte more is refused

my $pad = 65536 - length($DOC) - length(',"pad":""');
my $BIGDOC = $DOC;
$BIGDOC =~ s/\}\z/,"pad":"@{[ 'x' x $pad ]}"}/;
is(length $BIGDOC, 65536, 'max_size: document of 64k');

$t->fake_set('discovery.json', $BIGDOC);

$r = get("/big$W");
is($r->{status}, 200, 'max_size: status');
is($r->{body}, substr($EXPECT, 0, -1) . ',"pad":"' . ('x' x $pad) . '"}',
	'max_size: rewritten whole');

(my $OVER = $BIGDOC) =~ s/"pad":"/"pad":"x/;
$t->fake_set('discovery.json', $OVER);

$r = get("/big$W");
is(join(' ', $r->{status}, json($r)->{error} // ''),
	'502 discovery_invalid', 'max_size: one byte more is refused');

$t->fake_set('discovery.json', $DOC);

###############################################################################

# a URL from $host: the caller's own Host header (without its port),
# reflected to it alone

$r = get("/host$W", 'Host: gw.example:9090');
$j = eval { $JS->decode($r->{body}) } // {};
is($j->{workers}[0]{system_url}, "http://gw.example$W/$ID0",
	'$host: the caller\'s Host');

# a variable that gives no usable URL: no system_url at all, one log line

my $off = -s $t->testdir() . '/error.log';

$r = get("/var$W", 'X-Url: ftp://x/');
$j = eval { $JS->decode($r->{body}) } // {};
is($r->{status}, 200, 'bad url: status');
is(scalar(grep { exists $_->{system_url} } @{$j->{workers}}), 0,
	'bad url: no system_url');
is(scalar(grep { /dynamo_rl_admin_url is not an http or https URL/ }
	err_since($t, $off)), 1, 'bad url: one log line');

$r = get("/var$W");
$j = eval { $JS->decode($r->{body}) } // {};
is(scalar(grep { exists $_->{system_url} } @{$j->{workers}}), 0,
	'empty url: no system_url');

$r = get("/var$W", 'X-Url: https://gw/a/');
$j = eval { $JS->decode($r->{body}) } // {};
is($j->{workers}[1]{system_url}, "https://gw/a/$BIG", 'variable url: used');

###############################################################################

# the URLs of the answer are the admin plane: concatenation works

my $before_w = counts();

$r = post_url("$GW$ID0/engine/pause_generation");
is($r->{status}, 200, 'engine: allowed');
is(calls($before_w), "0 POST /engine/pause_generation", 'engine: worker 0');

$before_w = counts();
$r = get_url("$GW$BIG/health");
is($r->{status}, 200, 'health: allowed');
is(calls($before_w), "1 GET /health", 'health: worker 1');

# GET {id}/live: the worker's /live under the checks of /health

$before_w = counts();
$r = get_url("$GW$BIG/live");
is($r->{status}, 200, 'live: allowed');
like($r->{body}, qr/"status":"ready"/, 'live: the worker\'s answer');
is(calls($before_w), "1 GET /live", 'live: worker 1, its /live');

$r = get_url("${GW}105/live", 'X-Team: a');
is(join(' ', $r->{status}, json($r)->{error} // ''), '404 unknown_worker',
	'live: out of scope');

$before_w = counts();

my @live = (
	[ '103', 503, 'worker_error' ],
	[ '104', 503, 'no_system_url' ],
	[ '106', 503, 'no_system_url' ],
	[ '107', 409, 'ambiguous_worker' ],
	[ '108', 503, 'worker_invalid' ],
	[ '999', 404, 'unknown_worker' ],
);

for my $c (@live) {
	$r = get_url("$GW$c->[0]/live");
	is(join(' ', $r->{status}, json($r)->{error} // ''),
		"$c->[1] $c->[2]", "live: $c->[0] $c->[2]");
}

$r = post_url("$GW$ID0/live");
is(join(' ', $r->{status}, json($r)->{error} // ''), '405 method',
	'live: GET only');
like($r->{headers}{allow} // '', qr/^GET\b/, 'live: Allow');

for my $p ("$ID0/live/", "$ID0/lives", "0$ID0/live", "$ID0/engine/live") {
	$r = get_url("$GW$p");
	like($r->{status}, qr/^40[035]$/, "live: $p refused");
}

is(calls($before_w), '', 'live: nothing forwarded for the refusals');

# a worker that reports an error keeps no system_url: the admin plane
# refuses it, so no trainer is told to call it

is(scalar(grep { /"instance_id":103/ && /system_url/ } @want), 0,
	'error worker: no system_url in the expected answer');

###############################################################################

# the listener's validators and digests describe its bytes: a rewritten
# answer (GET, and HEAD of it) carries none of them; an answer passed on
# as the listener's bytes keeps them

my $FILE = doc(worker(id => '501', w => 0));
$t->write_file('file.json', $FILE);

my @VALIDATORS = qw/ etag last-modified accept-ranges content-md5 digest /;

$r = get($W, undef, 8086);
like($r->{body}, qr!"system_url":"\Q$GW\E501"!, 'file: rewritten');
is(join(' ', map { $r->{headers}{$_} // '-' } @VALIDATORS), '- - - - -',
	'file: rewritten, no validator nor digest of the listener\'s bytes');

$r = parse_response(Test::DynamoRL::http("HEAD $W HTTP/1.1\r\n"
	. "Host: localhost\r\nConnection: close\r\n\r\n",
	PeerAddr => '127.0.0.1:' . port(8086))) // { headers => {} };
is(join(' ', $r->{status} // 0,
	map { $r->{headers}{$_} // '-' } 'content-length', @VALIDATORS),
	'200 - - - - - -', 'file: HEAD, neither length nor validators');

$r = get("/plain$W", undef, 8086);
is($r->{body}, $FILE, 'file: passed on unchanged');
like($r->{headers}{etag} // '', qr/^"/, 'file: unchanged, its ETag kept');

# a listener's redirect: a 502, without the URLs it named

$r = get("/redirect$W", undef, 8086);
is(join(' ', $r->{status}, json($r)->{error} // '',
	map { $r->{headers}{$_} // '-' }
		qw/ location content-location refresh link /),
	'502 discovery_invalid - - - -', 'redirect: 502, no URL header');

###############################################################################

# nginx -t refuses a URL that is not http or https

my ($rc, $out) = $t->nginx_t(<<'EOF');
%%TEST_GLOBALS%%
events { }
http {
    %%TEST_GLOBALS_HTTP%%
    dynamo_rl_zone zone=rl:1m;
    server {
        listen 127.0.0.1:8080;
        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_admin_url ftp://gw/v1/rl/workers/;
            proxy_pass http://127.0.0.1:8082;
        }
    }
}
EOF

isnt($rc, 0, 'nginx -t: refused');
like($out, qr/"dynamo_rl_admin_url" must be an http or https URL.*nginx-t\.conf:10/,
	'nginx -t: message with file and line');

###############################################################################

sub prefix {
	my ($doc) = @_;
	return substr($doc, 0, index($doc, '"workers":[') + 11);
}

sub elements {
	my ($doc) = @_;

	my $body = substr($doc, length prefix($doc));
	$body =~ s/\]\}\z//;

	# the fake's entries hold no braces in strings

	my (@e, $depth, $cur);
	$depth = 0;
	$cur = '';

	for my $c (split //, $body) {
		next if $depth == 0 && $c eq ',';
		$cur .= $c;
		$depth++ if $c eq '{';
		$depth-- if $c eq '}';

		if ($depth == 0) {
			push @e, $cur;
			$cur = '';
		}
	}

	return @e;
}

sub get {
	my ($uri, $header, $port) = @_;

	my $h = '';
	$h = "Host: localhost\r\n" unless ($header // '') =~ /^Host:/i;
	$h .= "$header\r\n" if defined $header;

	my $raw = Test::DynamoRL::http("GET $uri HTTP/1.1\r\n$h"
		. "Connection: close\r\n\r\n",
		PeerAddr => '127.0.0.1:' . port($port // 8080));

	return parse_response($raw) // { status => 0, headers => {},
		body => '' };
}

sub json {
	my ($r) = @_;
	my $j = eval { decode_json($r->{body}) };
	return ref $j eq 'HASH' ? $j : {};
}

sub url_request {
	my ($method, $url, $header) = @_;

	my ($host, $port, $path) = $url =~ m!^http://([^/:]+):(\d+)(/.*)$!
		or die "not a URL of the gateway: $url\n";

	my $h = "Host: $host:$port\r\n";
	$h .= "$header\r\n" if defined $header;
	$h .= "Content-Type: application/json\r\nContent-Length: 2\r\n"
		if $method eq 'POST';

	my $raw = Test::DynamoRL::http("$method $path HTTP/1.1\r\n$h"
		. "Connection: close\r\n\r\n" . ($method eq 'POST' ? '{}' : ''),
		PeerAddr => "$host:$port");

	return parse_response($raw) // { status => 0, headers => {},
		body => '' };
}

sub get_url {
	return url_request('GET', @_);
}

sub post_url {
	return url_request('POST', @_);
}

sub counts {
	return { map { $_ => scalar @{$t->fake_records("worker-$_")} } 0 .. 2 };
}

sub calls {
	my ($before) = @_;

	my @c;

	for my $w (0 .. 2) {
		my $recs = $t->fake_records("worker-$w");
		push @c, map { "$w $_->{method} $_->{uri}" }
			@$recs[$before->{$w} .. $#$recs];
	}

	return join(', ', @c);
}

sub log_entries {
	return json_lines($t->testdir() . '/rl.log');
}

sub log_count {
	return scalar log_entries();
}

sub keepalive {
	my ($n, $uri) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
		Timeout => 5) or return ();

	print $s "GET $uri HTTP/1.1\r\nHost: localhost\r\n\r\n" x $n;

	my ($buf, @r) = ('');

	local $SIG{ALRM} = sub { die "keepalive timed out\n" };
	alarm(Test::DynamoRL::scale(10));

	while (@r < $n) {
		if ($buf =~ /\A(.*?\r\n\r\n)/s) {
			my $head = $1;
			my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
			last unless defined $len;

			if (length($buf) >= length($head) + $len) {
				push @r, parse_response(substr($buf, 0,
					length($head) + $len, ''));
				next;
			}
		}

		my $got = sysread($s, $buf, 65536, length $buf);
		last unless $got;
	}

	alarm(Test::DynamoRL::scale(240));

	return @r;
}

sub curl {
	my ($uri) = @_;

	my $hfile = $t->testdir() . '/curl.headers';
	unlink $hfile;

	my @cmd = ('curl', '-sS', '--http2-prior-knowledge', '--max-time', '10',
		'-D', $hfile, '-o', $t->testdir() . '/curl.body',
		'-w', '%{http_version}', 'http://127.0.0.1:' . port(8085) . $uri);

	my $pid = open(my $fh, '-|') // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	my $version = join '', <$fh>;
	close $fh;

	my $head = Test::DynamoRL::Fixture::slurp($hfile) // '';
	my ($status) = $head =~ m{^HTTP/\S+ (\d{3})};

	return { version => $version, status => $status // 0,
		body => Test::DynamoRL::Fixture::slurp($t->testdir()
			. '/curl.body') // '' };
}

###############################################################################
