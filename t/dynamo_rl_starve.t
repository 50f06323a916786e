#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests that the untrusted request plane cannot starve the trusted planes
# of the zone: rollout clients hold attempts open (headers and a
# Content-Length, the body never finished) until the ledger is full, and
# still a larger discovery snapshot is stored, the admin plane answers,
# and a finished attempt id within its TTL is still refused; nginx -t
# refuses a zone too small for max_size, with the formula; an attempt of
# which nothing was forwarded (413 on a chunked body over
# client_max_body_size) does not use up its id.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Select;
use IO::Socket::INET;
use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_conf rl_test /;

###############################################################################

# max_size=16k needs at least 16k + 256 + 64k: 96k leaves the ledger about
# 200 records, the snapshot its own 16k

my $t = rl_test(180, 37, <<'EOF');

%%RL_MAIN connections=2048%%

http {
    %%RL_HTTP 96k%%

    # attempts recorded before their bodies arrive, as without the body
    # policy: the held-open bodies that fill the ledger

    dynamo_rl_body_policy off;

    %%RL_PROXY_KEEPALIVE%%

    server {
        listen 127.0.0.1:8080;

        client_body_timeout 60s;

        location /v1/ {
            dynamo_rl_plane request;
            proxy_pass http://127.0.0.1:8081;
        }

        location /small/ {
            dynamo_rl_plane request;
            client_max_body_size 1k;
            proxy_pass http://127.0.0.1:8081/v1/;
        }

        %%RL_NOT_FOUND%%
    }

    server {
        listen 127.0.0.1:8085;

        dynamo_rl_discovery /_rl_discovery valid=0 max_size=16k;

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8082;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
        }

        %%RL_DISCOVERY_FETCH%%

        %%RL_APIS attempts status%%
    }
}

EOF

$t->run_fake_dynamo()->run();

# the full ledger is the point of the test

$t->allow_log(qr/attempt ledger is full/);

my (@HELD, @HELD_IDS);

###############################################################################

# nginx -t: a zone too small for max_size is refused, with the formula;
# the default max_size=4m needs 4m + 64k + 64k

my ($code, $out) = $t->nginx_t(tiny_conf('1m', ''));
isnt($code, 0, 'nginx -t: 1m zone, default max_size: refused');
like($out, qr/\[emerg\] dynamo_rl zone "rl" of 1048576 bytes is too small for a discovery snapshot of max_size=4194304: it needs at least max_size \+ max_size\/64 \+ 64k = 4325376 bytes, plus the attempt ledger, in \S+nginx-t.conf:\d+/,
	'nginx -t: the formula, the zone and its line');

($code, $out) = $t->nginx_t(tiny_conf('4325376', ''));
is($code, 0, 'nginx -t: exactly max_size + max_size/64 + 64k: accepted')
	or diag($out);

($code, $out) = $t->nginx_t(tiny_conf('4325375', ''));
isnt($code, 0, 'nginx -t: one byte less: refused');

($code, $out) = $t->nginx_t(tiny_conf('1m', ' max_size=256k',
	'dynamo_rl_discovery /_rl_discovery max_size=256k;'));
is($code, 0, 'nginx -t: 1m zone, max_size=256k: accepted') or diag($out);

# the largest max_size counts, the discovery plane's included

($code, $out) = $t->nginx_t(tiny_conf('1m', ' max_size=256k',
	'dynamo_rl_discovery /_rl_discovery max_size=2m;'));
like($out, qr/max_size=2097152/, 'nginx -t: the discovery plane counts');

my $ADMIN = '/v1/rl/workers/9007199254740993/engine/pause_generation';

# a snapshot of the fake's three workers: the admin plane works

my $r = admin($ADMIN);
is($r->{status}, 200, 'admin: allowed before');

my $small = length(listener_doc());

# rollout clients hold attempts open until the ledger refuses new ones

my ($held, $full) = hold_until_full(600);

ok($full, "ledger full after $held held attempts")
	or diag("held $held without a ledger_full");
cmp_ok($held, '>', 50, 'many attempts held');

my $st = status();
is($st->{ledger}{in_flight}, $held, 'status: all held attempts in flight');

# three of them give up, which leaves room for one finished attempt, well
# within the default 10m TTL (the ledger's own eviction makes the room)

release_held(3);

ok($t->wait_for(sub { status()->{ledger}{in_flight} == $held - 3 }, 10),
	'three released');

$r = attempt('done-1', '/v1/completions', '{"prompt":"p"}');
is($r->{status}, 200, 'done-1: forwarded');
ok(wait_state('done-1', 'succeeded'), 'done-1: succeeded');

my $evictions = status()->{ledger}{evictions};

# a document four times the first one, within max_size: stored, and
# the admin plane follows it

my $big = bigger_doc(20);
cmp_ok(length($big), '>', 4 * $small, 'bigger document');
cmp_ok(length($big), '<=', 16384, 'bigger document within max_size');

$t->fake_set('discovery.json', $big);

$r = admin('/v1/rl/workers/1020/engine/pause_generation');
is($r->{status}, 200, 'held: admin to a worker of the bigger snapshot')
	or diag($r->{body});

$r = admin($ADMIN);
is($r->{status}, 200, 'held: admin allowed');

$st = status();
is($st->{snapshot}{workers}, 23, 'held: snapshot of 23 workers');

# the discovery plane stores it too

$r = http_get_port(8085, '/v1/rl/workers');
is($r->{status}, 200, 'held: discovery plane');

# storing it evicted nothing: the finished id is still refused

$st = status();
is($st->{ledger}{evictions}, $evictions, 'held: no eviction by the snapshot');
is($st->{ledger}{in_flight}, $held - 3, 'held: all still in flight');

$r = attempt('done-1', '/v1/completions', '{"prompt":"p"}');
is($r->{status}, 409, 'held: finished id within its TTL refused');
is($r->{headers}{'x-dynamo-rl-reason'}, 'duplicate_attempt',
	'held: duplicate_attempt');

# the held clients give up: nothing of theirs was forwarded, so their ids
# are free again

my $last = $HELD_IDS[-1];

release_held();

ok($t->wait_for(sub { status()->{ledger}{in_flight} == 0 }, 20),
	'released: nothing in flight');

my $rec = attempt_api($last);
is($rec->{state}, 'canceled', "released: $last canceled");
is($rec->{reason}, 'not_forwarded', "released: $last not forwarded");

$r = attempt($last, '/v1/completions', '{"prompt":"p"}');
is($r->{status}, 200, "released: $last sent again is forwarded");

# 413: a chunked body over client_max_body_size after admission; nothing
# was forwarded, so the id is not used up

$r = chunked('big-body', '/small/completions', 'x' x 2048);
is($r->{status}, 413, '413: body too large');

$rec = attempt_api('big-body');
is($rec->{state}, 'failed', '413: recorded as failed');
is($rec->{status}, 413, '413: status');
is($rec->{reason}, 'not_forwarded', '413: not forwarded');

is(scalar grep({ ($_->{headers} // '') =~ /big-body/i }
	@{$t->fake_records('frontend')}), 0, '413: nothing reached Dynamo');

$r = attempt('big-body', '/small/completions', '{"prompt":"p"}');
is($r->{status}, 200, '413: the same id with a small body is forwarded');
ok(wait_state('big-body', 'succeeded'), '413: then succeeded');

# a reload that keeps the zone (same name and size) keeps its room: a
# larger max_size that passes the size check still needs a restart

my $conf = $t->read_file('nginx.conf');
(my $bigger = $conf) =~ s/max_size=16k/max_size=24k/ or die "no max_size\n";

$t->write_file('nginx.conf', $bigger);
$t->allow_log(qr/holds 16384 bytes for a discovery snapshot/);
$t->reload();

ok($t->reload_failed(), 'reload with max_size=24k: refused');
is(scalar $t->log_lines('error.log', qr/\[emerg\] .*dynamo_rl zone "rl" holds 16384 bytes for a discovery snapshot and max_size now needs 24576: restart nginx/), 1,
	'reload: the emerg line says why');

$t->write_file('nginx.conf', $conf);

$r = admin($ADMIN);
is($r->{status}, 200, 'reload refused: the old configuration still works');

###############################################################################

sub hold_until_full {
	my ($max) = @_;

	my $n = 0;

	# quickly, in batches: the first ones must not reach
	# client_body_timeout before the last

	while (@HELD < $max) {
		my %batch;

		for (1 .. 10) {
			my $id = 'held-' . ++$n;

			my $s = IO::Socket::INET->new(
				PeerAddr => '127.0.0.1:' . port(8080))
				or die "connect: $!\n";

			print $s "POST /v1/completions HTTP/1.1\r\n"
				. "Host: localhost\r\n"
				. "X-Dynamo-Attempt-Id: $id\r\n"
				. "Content-Type: application/json\r\n"
				. "Content-Length: 100\r\n\r\n{\"prompt\":";

			$batch{$id} = $s;
		}

		# admitted and recorded, or refused at once

		my @refused = IO::Select->new(values %batch)->can_read(0.2);

		for my $id (sort { num($a) <=> num($b) } keys %batch) {
			next if grep { $_ == $batch{$id} } @refused;
			push @HELD, $batch{$id};
			push @HELD_IDS, $id;
		}

		next unless @refused;

		my $full = 0;

		for my $s (@refused) {
			$full++ if refused($s);
		}

		# a refusal that came late

		while (my @late = IO::Select->new(@HELD)->can_read(0.5)) {
			for my $s (@late) {
				$full++ if refused($s);

				my ($i) = grep { $HELD[$_] == $s } 0 .. $#HELD;
				splice(@HELD, $i, 1);
				splice(@HELD_IDS, $i, 1);
			}
		}

		return (scalar @HELD, $full >= @refused);
	}

	return (scalar @HELD, 0);
}

sub num {
	return (shift =~ /(\d+)$/)[0];
}

sub refused {
	my ($s) = @_;

	my $buf = '';
	sysread($s, $buf, 65536);
	close $s;

	return $buf =~ /X-Dynamo-RL-Reason: ledger_full/i;
}

sub release_held {
	my ($n) = @_;

	$n //= scalar @HELD;

	close $_ for splice(@HELD, 0, $n);
	splice(@HELD_IDS, 0, $n);
}

sub attempt {
	my ($id, $uri, $body) = @_;

	return parse_response(http_post($uri, $body,
		headers => "X-Dynamo-Attempt-Id: $id\r\n"
		. "Content-Type: application/json\r\n"));
}

sub chunked {
	my ($id, $uri, $body) = @_;

	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
		or die "connect: $!\n";

	print $s "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
		. "X-Dynamo-Attempt-Id: $id\r\nConnection: close\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n"
		. sprintf("%x\r\n%s\r\n0\r\n\r\n", length($body), $body);

	my $buf = '';
	my $sel = IO::Select->new($s);

	while ($sel->can_read(5)) {
		my $n = sysread($s, $buf, 65536, length $buf);
		last unless $n;
	}

	close $s;

	return parse_response($buf);
}

sub admin {
	my ($uri) = @_;
	return http_post_port(8085, $uri, '{}');
}

sub attempt_api {
	my ($id) = @_;

	my $r = http_get_port(8085, "/rl/attempts/$id");
	return $r->{status} == 200 ? decode_json($r->{body}) : {};
}

sub wait_state {
	my ($id, $state) = @_;
	return $t->wait_for(sub { (attempt_api($id)->{state} // '') eq $state },
		10);
}

sub status {
	return decode_json(http_get_port(8085, '/rl/status')->{body});
}

sub listener_doc {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8082))
		or die "connect: $!\n";

	print $s "GET /v1/rl/workers HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\n\r\n";

	local $/;
	my $r = parse_response(scalar <$s>);

	return $r->{body};
}

# the fake's document with copies of its first worker, ids 1001 and up,
# in the listener's own bytes (its ids do not all survive a Perl number)

sub bigger_doc {
	my ($extra) = @_;

	my $doc = listener_doc();
	my ($w) = $doc =~ /(\{"namespace".*?"world_size":1\})/
		or die "no worker in $doc\n";

	my @copies = map { (my $c = $w) =~ s/"instance_id":\d+/"instance_id":$_/;
		$c } 1001 .. 1000 + $extra;

	$doc =~ s/\]\}\s*\z/',' . join(',', @copies) . ']}'/e
		or die "no end in $doc\n";

	return $doc;
}

sub tiny_conf {
	my ($zone, $max, $discovery) = @_;

	$discovery //= '';

	return rl_conf(<<"EOF");

%%RL_MAIN%%

http {
    %%RL_HTTP $zone%%

    server {
        listen 127.0.0.1:8080;

        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            $discovery
            proxy_pass http://127.0.0.1:8082;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery$max;
            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
        }

        location = /_rl_discovery {
            internal;
            proxy_pass http://127.0.0.1:8082/v1/rl/workers;
        }
    }
}

EOF
}

sub http_get_port {
	my ($p, $uri) = @_;

	return parse_response(http("GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n",
		PeerAddr => '127.0.0.1:' . port($p)));
}

sub http_post_port {
	my ($p, $uri, $body) = @_;

	return parse_response(http("POST $uri HTTP/1.0\r\nHost: localhost\r\n"
		. "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body",
		PeerAddr => '127.0.0.1:' . port($p)));
}

###############################################################################
