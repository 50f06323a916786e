#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for discovery sources (issue 26): each dynamo_rl_discovery source
# keeps its own snapshot, so admin locations with different sources never
# overwrite each other (a worker listed only in the file is reachable
# through the file's location, and a listener's worker is never forwarded
# through it, nor the file's through the listener's); a fixed worker set
# served from a file by an internal location (alias), with SGLang-shaped
# workers of the fake and their Dynamo route spellings: a valid file, the
# namespace scope, a file replaced while running (picked up after valid=),
# removed, truncated, not JSON, the wrong protocol_version, duplicate
# instance ids, each refusing with one log line that names the file;
# a discovery-plane location stores only into a source it names in its
# own block (one inherited from its server may be another document's);
# and nginx -t sizing the zone for every source.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd ();
use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ doc err_since error fwd rl_test t_admin t_conf
	t_server worker worker_call /;

###############################################################################

my $t = rl_test(Test::DynamoRL::scale(180), 60, <<'EOF');

%%RL_MAIN workers=1%%

http {
    %%RL_HTTP 8m%%

    %%RL_LISTENER%%

    server {
        %%RL_LISTEN 8080%%

        location = /v1/rl/workers {
            dynamo_rl_plane      discovery;
            dynamo_rl_discovery  /_rl_discovery max_size=1m;
            proxy_pass           http://rl_listener;
        }

        # the listener's workers

        location /v1/rl/workers/ {
            dynamo_rl_plane      admin;
            dynamo_rl_discovery  /_rl_discovery valid=0 max_size=1m;
            proxy_pass           $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream  off;
        }

        # SGLang workers, from a file the operator writes

        location /v1/rl/sglang/ {
            dynamo_rl_plane      admin;
            dynamo_rl_discovery  /_rl_sglang valid=0 max_size=1m;
            dynamo_rl_namespace  exact=slime;
            proxy_pass           $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream  off;
        }

        # another file, kept for a while

        location /v1/rl/fixed/ {
            dynamo_rl_plane      admin;
            dynamo_rl_discovery  /_rl_fixed valid=1s max_size=1m;
            proxy_pass           $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream  off;
        }

        %%RL_DISCOVERY_FETCH rl_listener%%

        %%RL_DISCOVERY_FILE /_rl_sglang sglang.json%%
        %%RL_DISCOVERY_FILE /_rl_fixed fixed.json%%
    }

    # the server's source is the listener's; /c/workers inherits it but
    # proxies another document

    server {
        %%RL_LISTEN 8083%%

        dynamo_rl_discovery  /_rl_a valid=1h max_size=1m;

        location = /v1/rl/workers {
            dynamo_rl_plane      discovery;
            dynamo_rl_discovery  /_rl_a;
            proxy_pass           http://rl_listener;
        }

        location = /c/workers {
            dynamo_rl_plane  discovery;
            proxy_pass       http://127.0.0.1:8084/c.json;
        }

        location /v1/rl/workers/ {
            dynamo_rl_plane      admin;
            proxy_pass           $dynamo_rl_system_url$dynamo_rl_engine_path;
            proxy_next_upstream  off;
        }

        location = /_rl_a {
            internal;
            proxy_pass  http://rl_listener/v1/rl/workers;
        }
    }

    server {
        %%RL_LISTEN 8084%%

        location = /c.json {
            alias         %%TESTDIR%%/c.json;
            default_type  application/json;
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;

my @SGLANG = qw! control/update_weights_from_disk control/update_weight_version
	pause_generation continue_generation flush_cache !;

my $SGLANG_FILE = $t->testdir() . '/sglang.json';
my $FIXED_FILE = $t->testdir() . '/fixed.json';

# the listener: worker 101 on fake worker 0; the file: SGLang worker 201 on
# fake worker 1, and 202 out of the location's scope

$t->fake_set('discovery.json', doc(worker(id => '101', w => 0)));
$t->fake_set('worker-1.flavor', "sglang\n");

my $FILE = doc(
	worker(id => '201', w => 1, namespace => 'slime', component => 'sglang',
		endpoint => 'engine', model => undef, routes => [ @SGLANG ]),
	worker(id => '202', w => 1, namespace => 'other', component => 'sglang',
		endpoint => 'engine', model => undef, routes => [ @SGLANG ]),
);

$t->write_file('sglang.json', $FILE);
$t->write_file('fixed.json', doc(worker(id => '301', w => 2)));

###############################################################################

# each location its own source

my $r = call('POST', '/v1/rl/sglang/201/engine/control/update_weights_from_disk',
	'{"model_path":"/models/policy-2","weight_version":"2"}');
is($r->{status} . ' ' . fwd($r), '200 1 /engine/control/update_weights_from_disk',
	'file: its worker, reached');
is(json($r)->{success}, JSON::PP::true(), 'file: SGLang\'s answer passed on');

$r = call('POST', '/v1/rl/workers/101/engine/pause_generation', '{}');
is($r->{status} . ' ' . fwd($r), '200 0 /engine/pause_generation',
	'listener: its worker, reached');

$r = call('POST', '/v1/rl/sglang/101/engine/pause_generation', '{}');
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'file\'s location: the listener\'s worker is not forwarded');

$r = call('POST', '/v1/rl/workers/201/engine/pause_generation', '{}');
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'listener\'s location: the file\'s worker is not forwarded');

$r = call('POST', '/v1/rl/sglang/201/engine/continue_generation', '{}');
is($r->{status} . ' ' . fwd($r), '200 1 /engine/continue_generation',
	'file: still its own after the listener\'s refresh');

$r = call('GET', '/v1/rl/sglang/201/health');
is($r->{status} . ' ' . fwd($r), '200 1 /health', 'file: health');

# the SGLang spellings only: a vLLM route is not advertised

$r = call('POST', '/v1/rl/sglang/201/engine/resume_generation', '{}');
is(join(' ', $r->{status}, error($r), fwd($r)),
	'403 route_not_advertised ', 'file: an unadvertised route');

# the scope of the file's location

$r = call('POST', '/v1/rl/sglang/202/engine/flush_cache', '{}');
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'file: a worker out of scope');

# a snapshot kept for its valid= is not replaced by another source's

$r = call('GET', '/v1/rl/fixed/301/health');
is($r->{status} . ' ' . fwd($r), '200 2 /health', 'fixed: its worker');

$r = call('POST', '/v1/rl/workers/101/engine/flush_cache', '{}');
is($r->{status}, 200, 'listener: refreshed meanwhile');

$r = call('GET', '/v1/rl/workers', undef);
is($r->{status}, 200, 'discovery plane: stored meanwhile');

$r = call('GET', '/v1/rl/fixed/301/health');
is($r->{status} . ' ' . fwd($r), '200 2 /health',
	'fixed: still its own snapshot');

$r = call('GET', '/v1/rl/fixed/101/health');
is(join(' ', $r->{status}, error($r)), '404 unknown_worker',
	'fixed: not the listener\'s workers');

# the file replaced while running: picked up once valid= (1s) has passed

$t->write_file('fixed.json', doc(worker(id => '302', w => 2)));

my $seen = Test::DynamoRL::wait_for(sub {
	call('GET', '/v1/rl/fixed/302/health')->{status} == 200;
}, 10);

ok($seen, 'fixed: the new file is picked up');

$r = call('GET', '/v1/rl/fixed/301/health');
is(join(' ', $r->{status}, error($r)), '404 unknown_worker',
	'fixed: the old worker is gone');

###############################################################################

# a discovery location's answer refreshes a source only when the location
# names it itself: /c/workers inherits the server's source and proxies
# another document, whose worker 401 the admin location must not allow,
# nor lose the listener's worker 101

$t->write_file('c.json', doc(worker(id => '401', w => 2)));

$r = call('POST', '/v1/rl/workers/101/engine/pause_generation', '{}', 8083);
is($r->{status} . ' ' . fwd($r), '200 0 /engine/pause_generation',
	'inherited source: the listener\'s worker');

$r = call('GET', '/c/workers', undef, 8083);
like($r->{body}, qr/"instance_id":401/, 'inherited source: the other answer');

$r = call('POST', '/v1/rl/workers/401/engine/pause_generation', '{}', 8083);
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'inherited source: the other answer\'s worker is not forwarded');

$r = call('POST', '/v1/rl/workers/101/engine/flush_cache', '{}', 8083);
is($r->{status} . ' ' . fwd($r), '200 0 /engine/flush_cache',
	'inherited source: the listener\'s worker is still known');

# the location that names the source refreshes it (valid=1h: nothing else
# would)

$t->fake_set('discovery.json', doc(worker(id => '101', w => 0),
	worker(id => '102', w => 1)));

$r = call('POST', '/v1/rl/workers/102/engine/flush_cache', '{}', 8083);
is(join(' ', $r->{status}, error($r), fwd($r)), '404 unknown_worker ',
	'named source: a new worker, before the discovery answer');

$r = call('GET', '/v1/rl/workers', undef, 8083);
like($r->{body}, qr/"instance_id":102/, 'named source: the discovery answer');

$r = call('POST', '/v1/rl/workers/102/engine/flush_cache', '{}', 8083);
is($r->{status} . ' ' . fwd($r), '200 1 /engine/flush_cache',
	'named source: refreshed by the discovery answer');

$t->fake_set('discovery.json', doc(worker(id => '101', w => 0)));

###############################################################################

# a bad file fails closed: 503, nothing forwarded, one line naming the file

sub bad_file {
	my ($name, $content, $log) = @_;

	my $off = -s $t->testdir() . '/error.log';

	if (defined $content) {
		$t->write_file('sglang.json', $content);

	} else {
		unlink $SGLANG_FILE;
	}

	my $r = call('POST', '/v1/rl/sglang/201/engine/flush_cache', '{}');
	is(join(' ', $r->{status}, error($r), fwd($r)),
		'503 discovery_unavailable ', "$name: refused");

	my @lines = grep { /discovery/ && !/\[debug\]/ } err_since($t, $off);
	my @named = grep { /\Q$SGLANG_FILE\E/ } @lines;

	is(scalar @named, 1, "$name: one line names the file")
		or diag(@lines);
	like($named[0] // '', $log, "$name: why");
	# nginx's context of the line (", client: ..., subrequest: ...") aside

	is(scalar(grep { s/, client: .*//sr =~ m!"/_rl_sglang"! } @lines), 0,
		"$name: not the internal location") or diag(@lines);
}

bad_file('removed', undef, qr/refresh from file "\Q$SGLANG_FILE\E" failed: status 404/);

bad_file('truncated', substr($FILE, 0, length($FILE) / 2),
	qr/document from file "\Q$SGLANG_FILE\E" is invalid: document is not valid JSON/);

bad_file('not JSON', "workers: 201\n",
	qr/document from file "\Q$SGLANG_FILE\E" is invalid: document is not valid JSON/);

(my $v2 = $FILE) =~ s/"protocol_version":1/"protocol_version":2/;
bad_file('protocol_version 2', $v2,
	qr/is invalid: "protocol_version" is not the integer 1/);

# duplicate instance ids: the snapshot is valid, the id ambiguous

(my $dup = $FILE) =~ s/"instance_id":202/"instance_id":201/;
$dup =~ s/"namespace":"other"/"namespace":"slime"/;
$t->write_file('sglang.json', $dup);

$r = call('POST', '/v1/rl/sglang/201/engine/flush_cache', '{}');
is(join(' ', $r->{status}, error($r), fwd($r)), '409 ambiguous_worker ',
	'duplicate ids: ambiguous');

# the file back: the worker again

$t->write_file('sglang.json', $FILE);

$r = call('POST', '/v1/rl/sglang/201/engine/flush_cache', '{}');
is($r->{status} . ' ' . fwd($r), '200 1 /engine/flush_cache',
	'file back: reached');

###############################################################################

# a reload that adds a source: room of its own from the zone, and every
# other source keeps its snapshot (found by its URI, not its position)

my $conf = $t->read_file('nginx.conf');
(my $more = $conf) =~ s!(        # SGLang workers, from a file)!        location /v1/rl/extra/ { dynamo_rl_plane admin; dynamo_rl_discovery /_rl_extra valid=0 max_size=1m; proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path; } location = /_rl_extra { internal; alias ${\$t->testdir()}/fixed.json; log_not_found off; }\n$1!
	or die "no anchor\n";

$t->write_file('nginx.conf', $more);
$t->reload();
ok(!$t->reload_failed(), 'reload with a new source: accepted');

$r = call('GET', '/v1/rl/extra/302/health');
is($r->{status} . ' ' . fwd($r), '200 2 /health', 'reload: the new source');

$r = call('GET', '/v1/rl/extra/101/health');
is(join(' ', $r->{status}, error($r)), '404 unknown_worker',
	'reload: the new source has its own snapshot');

$r = call('POST', '/v1/rl/sglang/201/engine/flush_cache', '{}');
is($r->{status} . ' ' . fwd($r), '200 1 /engine/flush_cache',
	'reload: the file\'s source still its own');

###############################################################################

# nginx -t sizes the zone for every source: admin locations /a/ and /b/,
# each with a source of its own (max_size 4m by default)

my $AB = join('', map { t_admin("/$_/", "/_$_") } qw/ a b /);

my ($rc, $out) = $t->nginx_t(t_conf('6m', t_server(8080, $AB)));

isnt($rc, 0, 'nginx -t: two 4m sources in 6m refused');
like($out, qr/too small for the snapshots of 2 discovery sources, max_size=8388608 in all: it needs at least each max_size \+ max_size\/64, and 64k, = 8585216 bytes/,
	'nginx -t: the room of both');

($rc, $out) = $t->nginx_t(t_conf('10m', t_server(8080, $AB)));

is($rc, 0, 'nginx -t: two 4m sources in 10m accepted') or diag($out);
unlike($out, qr/\[warn\].*does not name its source/,
	'nginx -t: no orphan discovery location, no warning');

# a discovery-plane location that names no source among several

my $ORPHAN = <<'EOF';
        location = /v1/rl/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8082;
        }
EOF

($rc, $out) = $t->nginx_t(t_conf('10m', t_server(8080, $ORPHAN, $AB)));

is($rc, 0, 'nginx -t: an orphan discovery location is accepted');
like($out, qr!\[warn\] the discovery-plane location "/v1/rl/workers" does not name its source in its own block: its answers refresh no snapshot; add "dynamo_rl_discovery" to it!,
	'nginx -t: with a warning');

# with one source, inherited from the server, or the only one: no snapshot
# is refreshed either, with the same warning

my $INHERITED = <<'EOF';
        dynamo_rl_discovery /_a;
        location = /c/workers {
            dynamo_rl_plane discovery;
            proxy_pass http://127.0.0.1:8082/c.json;
        }
        location = /d/workers {
            dynamo_rl_plane discovery;
            dynamo_rl_discovery /_a;
            proxy_pass http://127.0.0.1:8082/v1/rl/workers;
            limit_except GET { deny all; }
            if ($arg_x) { proxy_pass http://127.0.0.1:8084; }
        }
EOF

($rc, $out) = $t->nginx_t(t_conf('10m',
	t_server(8080, $INHERITED, t_admin('/a/')), t_server(8081, $ORPHAN)));

is($rc, 0, 'nginx -t: discovery locations that name no source of their own');
is(join(' ', $out =~ /\[warn\] the discovery-plane location "([^"]*)" does not name its source/g),
	'/c/workers /v1/rl/workers', 'nginx -t: a warning for each')
	or diag($out);
like($out, qr!\[warn\] an "if" block in the discovery-plane location "/d/workers" may proxy elsewhere: its answers refresh no snapshot!,
	'nginx -t: and for an "if" block in a location that names it');

# the example of a mixed fleet, and its fixed worker set

my $top = Cwd::abs_path('.');
my $mixed = Test::DynamoRL::Fixture::example_conf($t, 'dynamo-rl-mixed.conf');
$mixed =~ s!\@SGLANG_WORKERS\@!$top/examples/sglang-workers.json!g;

($rc, $out) = $t->nginx_t($mixed);
is($rc, 0, 'examples/dynamo-rl-mixed.conf: nginx -t') or diag($out);
unlike($out, qr/does not name its source/,
	'examples/dynamo-rl-mixed.conf: its discovery location names its source');

# and the shipped gateway's: its discovery location refreshes the snapshot

my $main = Test::DynamoRL::Fixture::example_conf($t, 'dynamo-rl.conf');
$main =~ s!\@FRONTEND\@!127.0.0.1:8081!g;

($rc, $out) = $t->nginx_t($main);
is($rc, 0, 'examples/dynamo-rl.conf: nginx -t') or diag($out);
unlike($out, qr/does not name its source/,
	'examples/dynamo-rl.conf: its discovery location names its source');

my $set = eval { $JS->decode(Test::DynamoRL::Fixture::slurp(
	"$top/examples/sglang-workers.json")) } // {};
is($set->{protocol_version}, 1, 'examples/sglang-workers.json: version 1');
is(scalar(grep { grep { m!^control/update_weights_from_disk$! }
	@{$_->{routes}} } @{$set->{workers} // []}), 2,
	'examples/sglang-workers.json: SGLang\'s spellings');

###############################################################################

sub call {
	my ($method, $uri, $body, $port) = @_;

	return worker_call($t, $method, $uri, port => $port // 8080,
		defined $body ? (body => $body) : ());
}

sub json {
	my ($r) = @_;
	my $j = eval { $JS->decode($r->{body}) };
	return ref $j eq 'HASH' ? $j : {};
}

###############################################################################
