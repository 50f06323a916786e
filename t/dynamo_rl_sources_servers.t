#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for discovery sources across servers (DESIGN.md "Fixed worker
# sets", issue 26): a dynamo_rl_discovery URI is resolved in the server of
# the location that names it, so two servers whose internal "/_d" serve
# two files have two sources, each with its own snapshot: each server's
# admin location forwards its own workers only; both snapshots are kept
# across a reload that keeps the servers, even one that reorders them; and
# nginx -t sizes the zone for each server's source.

###############################################################################

use warnings;
use strict;

use Test::More;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ doc error fwd rl_test t_admin t_conf t_server
	worker worker_call /;

###############################################################################

my $SERVER_A = <<'EOF';
    server {
        %%RL_LISTEN 8080%%

        location /v1/rl/workers/ {
            dynamo_rl_plane      admin;
            dynamo_rl_discovery  /_d valid=1h max_size=1m;
            proxy_pass           $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream  off;
        }

        %%RL_DISCOVERY_FILE /_d a.json%%
    }
EOF

(my $SERVER_B = $SERVER_A) =~ s/8080/8083/;
$SERVER_B =~ s/a\.json/b.json/;

my $CONF = <<'EOF';

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 8m%%

%%SERVERS%%
}

EOF

my $t = rl_test(Test::DynamoRL::scale(120), 15,
	conf($SERVER_A . "\n" . $SERVER_B));

$t->run_fake_dynamo();

# server A's file: worker 1 on fake worker 0; server B's: 2 on fake worker 1

$t->write_file('a.json', doc(worker(id => '1', w => 0)));
$t->write_file('b.json', doc(worker(id => '2', w => 1)));

$t->run();

###############################################################################

my $r;

$r = call('POST', '/v1/rl/workers/1/engine/pause_generation', 8080);
is($r->{status} . ' ' . fwd($r), '200 0 /engine/pause_generation',
	'server A: its worker');

$r = call('POST', '/v1/rl/workers/2/engine/pause_generation', 8083);
is($r->{status} . ' ' . fwd($r), '200 1 /engine/pause_generation',
	'server B: its worker');

$r = call('POST', '/v1/rl/workers/1/engine/pause_generation', 8083);
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'server B: server A\'s worker is not forwarded');

$r = call('POST', '/v1/rl/workers/2/engine/pause_generation', 8080);
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'server A: server B\'s worker is not forwarded');

$r = call('GET', '/v1/rl/workers/2/health', 8083);
is($r->{status} . ' ' . fwd($r), '200 1 /health', 'server B: health');

# a reload that swaps the servers: each keeps its snapshot (valid=1h),
# found by its server and URI; the files are gone, so a snapshot that was
# lost would be 503, and one handed to the other server would be 404

unlink $t->testdir() . '/a.json', $t->testdir() . '/b.json';

$t->write_file_expand('nginx.conf', Test::DynamoRL::Fixture::rl_conf(
	conf($SERVER_B . "\n" . $SERVER_A)));
$t->reload();
ok(!$t->reload_failed(), 'reload with the servers swapped: accepted');

ok(Test::DynamoRL::wait_for(sub {
	call('GET', '/v1/rl/workers/1/health', 8080)->{status} == 200
}, 10), 'reload: server A\'s worker, from its kept snapshot');

$r = call('POST', '/v1/rl/workers/2/engine/flush_cache', 8083);
is($r->{status} . ' ' . fwd($r), '200 1 /engine/flush_cache',
	'reload: server B\'s worker, from its kept snapshot');

$r = call('POST', '/v1/rl/workers/1/engine/flush_cache', 8083);
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'reload: server B still refuses server A\'s worker');

$r = call('POST', '/v1/rl/workers/2/engine/flush_cache', 8080);
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'reload: server A still refuses server B\'s worker');

###############################################################################

# nginx -t: room for one snapshot per server that resolves /_d; one
# server's locations naming /_d share one

my $D = "        location = /_d { internal; return 404; }\n";

my $SIZE = t_conf('1500k', "    dynamo_rl_discovery /_d max_size=1m;\n",
	t_server(8080, t_admin('/v1/rl/workers/'),
		t_admin('/v1/rl/other/', '/_d max_size=1m'), $D),
	"%%SECOND%%\n");

my $second = t_server(8081, t_admin('/v1/rl/workers/'), $D);

(my $one = $SIZE) =~ s/%%SECOND%%//;
my ($rc, $out) = $t->nginx_t($one);
is($rc, 0, 'nginx -t: one server, two locations, one source') or diag($out);

(my $two = $SIZE) =~ s/%%SECOND%%/$second/;
($rc, $out) = $t->nginx_t($two);
is($rc, 1, 'nginx -t: two servers, two sources, the zone too small');
like($out, qr/\[emerg\] dynamo_rl zone "rl" of \d+ bytes is too small for the snapshots of 2 discovery sources/,
	'nginx -t: the message') or diag($out);

$two =~ s/rl:1500k/rl:2200k/;
($rc, $out) = $t->nginx_t($two);
is($rc, 0, 'nginx -t: two sources, room for both') or diag($out);

(my $same = $two) =~ s/listen 127\.0\.0\.1:8081;/listen 127.0.0.1:8080;/;
$same =~ s/rl:2200k/rl:1500k/;
($rc, $out) = $t->nginx_t($same);
is($rc, 1, 'nginx -t: two servers alike: still two sources') or diag($out);

###############################################################################

sub conf {
	my ($servers) = @_;
	(my $c = $CONF) =~ s/%%SERVERS%%/$servers/;
	return $c;
}

sub call {
	my ($method, $uri, $port) = @_;

	return worker_call($t, $method, $uri, port => $port,
		$method eq 'POST' ? (body => '{}') : ());
}

###############################################################################
