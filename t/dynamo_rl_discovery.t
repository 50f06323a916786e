#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the discovery plane and the validation of discovery documents,
# through nginx to the fake Dynamo's RL listener: GET and HEAD pass the
# document on, faithful in meaning and with exact u64 ids; other methods
# are refused; every document-level failure is a 502 on the discovery
# plane and discovery_unavailable on the admin plane, with one error-log
# line; worker-level problems deny only that worker; a document seen
# through the discovery plane becomes the snapshot; max_size, and
# documents bigger than the subrequest's output buffer; no compression;
# namespace scopes, the "env" one read from the environment nginx was
# started with; and a listener slower than the proxy's read timeout.

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Basename qw/ dirname /;
use JSON::PP;
use Math::BigInt;
use Time::HiRes qw/ time /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ admin_call doc listener_fetches rl_conf
	time_limit vllm_routes worker /;

###############################################################################

time_limit(300);

# "dynamo_rl_namespace env" starts with none of these set

delete @ENV{qw/ DYN_NAMESPACE DYN_NAMESPACE_PREFIX
	DYN_NAMESPACE_WORKER_SUFFIX /};

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(213);

# the namespace scopes of nginx.conf, by port

my @SCOPES = (
	[ 8085, 'prefix=prod-rl' ],
	[ 8086, 'exact=ns suffix=abc' ],
	[ 8087, 'prefix=ns-' ],
	[ 8088, 'prefix=ns' ],
	[ 8089, 'env' ],
	[ 8094, 'prefix=dynamo' ],
);

$t->write_file_expand('nginx.conf', nginx_conf());
$t->write_file('scoped.conf', scoped_conf());
$t->run_fake_dynamo()->run();

###############################################################################

my $JS = JSON::PP->new->canonical->allow_bignum;
my $FIXTURES = dirname(__FILE__) . '/fixtures';

my @VLLM = vllm_routes();

my $W = '/v1/rl/workers';

my ($r, $raw, $doc);

###############################################################################

# GET: the listener's document, faithful in meaning, ids exact in the bytes

$t->fake_unset('discovery.json');

my $direct = parse_response(http_get($W,
	PeerAddr => '127.0.0.1:' . port(8082)));

$r = get($W);
is($r->{status}, 200, 'get: status');
is($r->{headers}{'content-type'}, 'application/json', 'get: content type');
is_deeply(bigjson($r->{body}), bigjson($direct->{body}),
	'get: same document');
like($r->{body}, qr/"instance_id":18446744073709551615[,}]/,
	'get: 2^64 - 1 exact in the body');
like($r->{body}, qr/"instance_id":9007199254740993[,}]/,
	'get: 2^53 + 1 exact in the body');
like($r->{body}, qr/"instance_id":7587888160958628117[,}]/,
	'get: 7587888160958628117 exact in the body');
is(scalar(grep { /\[(?:warn|error|crit|alert|emerg)\]/ } @{$r->{err}}), 0,
	'get: nothing logged');

# a pretty-printed fixture, every optional field present

$doc = fixture('rl-workers-multi-namespace-prefix.json');
$t->fake_set('discovery.json', $doc);

$r = get($W);
is($r->{status}, 200, 'fixture: status');
is_deeply(bigjson($r->{body}), bigjson($doc), 'fixture: same document');
is(join(' ', map { "$_->{instance_id}" } workers($r->{body})),
	'1311768467463790320 1311768467463791001 7587888160958628117',
	'fixture: order and ids kept');

# gzip is on in that server: the discovery plane never compresses

$r = get($W, headers => "Accept-Encoding: gzip\r\n");
is(join(' ', $r->{status}, $r->{headers}{'content-encoding'} // 'identity'),
	'200 identity', 'gzip: not compressed');
is_deeply(bigjson($r->{body}), bigjson($doc), 'gzip: same document');

# HEAD, and the methods outside GET and HEAD

$r = get($W, method => 'HEAD');

is($r->{status}, 200, 'head: status');

is($r->{body}, '', 'head: no body');
is(listener_method_count('HEAD'), 1, 'head: forwarded as HEAD');

$t->fake_set('discovery.status', '500');

$r = get($W, method => 'HEAD');
is(join(' ', $r->{status}, $r->{body}), '502 ', 'head: listener 500');

$t->fake_unset('discovery.status');

for my $m (qw/ POST PUT DELETE /) {
	$r = get($W, method => $m);
	is(join(' ', $r->{status}, $r->{json}{error} // ''), '405 method',
		"$m: 405 method");
}

is(listener_method_count('POST') + listener_method_count('PUT')
	+ listener_method_count('DELETE'), 0, 'other methods: never forwarded');

# the listener's own failure: 500 with {"error":"discovery_failed"}

$t->fake_set('discovery.json', fixture('rl-workers-discovery-failed-500.json'));
$t->fake_set('discovery.status', '500');

plane_invalid('listener 500', qr/listener answered 500/);
admin_unavailable('listener 500',
	qr/discovery refresh from "\/_rl_discovery" failed: status 500/);

$t->fake_unset('discovery.status');

###############################################################################

# document-level failures: 502 on the discovery plane, discovery_unavailable
# on the admin plane, one error-log line each

my $good = fixture('rl-workers-vllm-healthy-2.json');

my @invalid = (
	[ 'non-JSON', 'this is not JSON' ],
	[ 'HTML', "<html><body>502 Bad Gateway</body></html>\n" ],
	[ 'empty body', '' ],
	[ 'truncated JSON', substr($good, 0, int(length($good) / 2)) ],
	[ 'truncated after the last bracket', substr($good, 0, -2) ],
	[ 'trailing garbage', "$good x" ],
	[ 'two documents', "$good$good" ],
	[ 'top-level array', "[$good]" ],
	[ 'top-level string', '"{}"' ],
	[ 'protocol_version missing',
		'{"namespace":"dynamo","workers":[]}' ],
	[ 'protocol_version 2',
		'{"protocol_version":2,"namespace":"dynamo","workers":[]}' ],
	[ 'protocol_version "1"',
		'{"protocol_version":"1","namespace":"dynamo","workers":[]}' ],
	[ 'protocol_version 1.0',
		'{"protocol_version":1.0,"namespace":"dynamo","workers":[]}' ],
	[ 'protocol_version 1e0',
		'{"protocol_version":1e0,"namespace":"dynamo","workers":[]}' ],
	[ 'protocol_version true',
		'{"protocol_version":true,"namespace":"dynamo","workers":[]}' ],
	[ 'protocol_version null',
		'{"protocol_version":null,"namespace":"dynamo","workers":[]}' ],
	[ 'workers missing', '{"protocol_version":1,"namespace":"dynamo"}' ],
	[ 'workers an object',
		'{"protocol_version":1,"namespace":"dynamo","workers":{}}' ],
	[ 'workers a string',
		'{"protocol_version":1,"namespace":"dynamo","workers":"[]"}' ],
	[ 'workers null',
		'{"protocol_version":1,"namespace":"dynamo","workers":null}' ],
	[ 'system_routes instead of workers',
		'{"protocol_version":1,"namespace":"dynamo",'
		. '"system_routes":[]}' ],
	[ 'duplicate protocol_version',
		'{"protocol_version":1,"protocol_version":1,'
		. '"namespace":"dynamo","workers":[]}' ],
	[ 'duplicate workers',
		'{"protocol_version":1,"namespace":"dynamo","workers":[],'
		. '"workers":' . worker_json(worker(id => '77', w => 0))
		. '}' ],
	[ 'duplicate key in a worker', dup_key_doc() ],
);

for my $case (@invalid) {
	my ($name, $body) = @$case;

	$t->fake_set('discovery.json', $body);

	plane_invalid($name, qr/discovery document is invalid/);
	admin_unavailable($name,
		qr/discovery document from "\/_rl_discovery" is invalid/);
}

###############################################################################

# worker-level problems keep the document valid: the discovery plane passes
# every entry on, and admin denies only the broken workers

my $port2 = port(8093);

$doc = doc(
	worker(id => '201', w => 0),
	worker(id => '202', w => 2),
	worker(id => '202', w => 2, component => 'prefill'),
	worker(id => '203', w => 2, routes => [], system_url => undef,
		world_size => undef,
		error => 'worker discovery timed out after 30s'),
	worker(id => '204', w => 2, system_url => undef),
	worker(id => '205', w => 2,
		system_url => "http://user:secret\@127.0.0.1:$port2"),
	worker(id => '206', w => 2, system_url => "http://127.0.0.1:$port2/x"),
	worker(id => '207', w => 2, system_url => "http://127.0.0.1:$port2?x"),
	worker(id => '208', w => 2, system_url => "ftp://127.0.0.1:$port2"),
	worker(id => '209', w => 2, system_url => undef,
		admin_base_url => "http://127.0.0.1:$port2",
		request_plane_url => "http://127.0.0.1:$port2",
		transport => { http => "http://127.0.0.1:$port2" }),
	worker(id => '210', w => 2, routes => []),
	worker(id => '211', w => 2, routes => [ 'liveness_probe', '' ]),
	worker(id => '212', w => 0,
		routes => [ '../x', '/x', 'x/', 'a//b', 'liveness_probe' ]),
	worker(id => '213', w => 2, routes => [ 'liveness_probe', 7 ]),
	worker(id => '214', w => 2, transport => undef),
	worker(id => '215', w => 2, world_size => 0),
	worker(id => '216', w => 2, system_url => 8081),
	worker(id => '217', w => 2, namespace => undef),
	worker(id => '218', w => 2, instance_id => '218'),
	worker(id => '219', w => 2, instance_id => 219.5),
	worker(id => '220', w => 2,
		instance_id => Math::BigInt->new('18446744073709551616')),
	worker(id => '221', w => 2, instance_id => -221),
	worker(id => '0', w => 0, routes => [ 'flush_cache' ]),
);

$t->fake_set('discovery.json', $doc);

$r = get($W);
is($r->{status}, 200, 'worker problems: document valid');
is_deeply(bigjson($r->{body}), bigjson($doc),
	'worker problems: every entry passed on');
like($r->{body}, qr/"instance_id":18446744073709551616[,}]/,
	'worker problems: id beyond u64 passed on exactly');
is(scalar(grep { /\[warn\].*4 route\(s\) outside the route grammar/ }
	@{$r->{err}}), 1, 'worker problems: odd routes logged once');
is(scalar(grep { /\[(?:error|crit|alert)\]/ } @{$r->{err}}), 0,
	'worker problems: no error logged');

my @worker_cases = (
	[ 201, 'liveness_probe', 200 ],
	[ 202, 'liveness_probe', 409, 'ambiguous_worker' ],
	[ 203, 'liveness_probe', 503, 'worker_error' ],
	(map { [ $_, 'liveness_probe', 503, 'no_system_url' ] } 204 .. 209),
	[ 210, 'liveness_probe', 403, 'route_not_advertised' ],
	[ 211, 'liveness_probe', 503, 'worker_invalid' ],
	[ 212, 'liveness_probe', 200 ],
	[ 212, 'x', 403, 'route_not_advertised' ],
	[ 212, 'a/b', 403, 'route_not_advertised' ],
	(map { [ $_, 'liveness_probe', 503, 'worker_invalid' ] } 213 .. 217),
	(map { [ $_, 'liveness_probe', 404, 'unknown_worker' ] } 218, 219, 221),
	[ 0, 'flush_cache', 200 ],
	[ '18446744073709551615', 'liveness_probe', 404, 'unknown_worker' ],
);

for my $c (@worker_cases) {
	my ($id, $route, $status, $reason) = @$c;

	$r = admin("$W/$id/engine/$route");

	if ($status == 200) {
		is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" }
			@{$r->{fwd}}), "200 0 /engine/$route",
			"worker $id $route: allowed");
		next;
	}

	is(join(' ', $r->{status}, $r->{json}{error} // '', $r->{log}{deny},
		scalar @{$r->{fwd}}), "$status $reason $reason 0",
		"worker $id $route: $reason, not forwarded");
}

# entries of "workers" that are not even objects are passed on too

$doc = '{"protocol_version":1,"namespace":"dynamo","workers":[7,"x",null,'
	. worker_json(worker(id => '222', w => 0)) . ',[1],{}]}';

$t->fake_set('discovery.json', $doc);

$r = get($W);
is($r->{status}, 200, 'non-object entries: document valid');

is_deeply(bigjson($r->{body}), bigjson($doc),
	'non-object entries: passed on');

$r = admin("$W/222/engine/liveness_probe");
is($r->{status}, 200, 'non-object entries: the object entry allowed');

###############################################################################

# a valid document through the discovery plane becomes the snapshot: the
# valid=60s admin location of its server ($K) allows a worker it never
# fetched itself

my $K = '/v1/rl/kept';

$t->fake_set('discovery.json', doc(worker(id => '4242', w => 1)));

$r = get($W);
is($r->{status}, 200, 'plane snapshot: discovery plane');

my $fetches = listener_fetches($t);

$r = admin("$K/4242/engine/flush_cache");
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 1 /engine/flush_cache', 'plane snapshot: admin allowed');
is(listener_fetches($t), $fetches, 'plane snapshot: no fetch by admin');

$t->fake_set('discovery.json', doc(worker(id => '4343', w => 1)));

$r = get($W);
is($r->{status}, 200, 'plane snapshot: next document');

$r = admin("$K/4242/engine/flush_cache");
is(join(' ', $r->{status}, $r->{json}{error} // ''), '404 unknown_worker',
	'plane snapshot: worker gone with the next document');

$r = admin("$K/4343/engine/flush_cache");
is($r->{status}, 200, 'plane snapshot: new worker allowed');
is(listener_fetches($t), $fetches + 1,
	'plane snapshot: only the plane fetched');

# the discovery plane's invalid answer is no snapshot

$t->fake_set('discovery.json', '{"protocol_version":1,"workers":7}');

$r = get($W);
is($r->{status}, 502, 'plane snapshot: invalid document refused');

$r = admin("$K/4343/engine/flush_cache");
is($r->{status}, 200, 'plane snapshot: the valid snapshot stays');

###############################################################################

# max_size=1k: a bigger document fails closed, a small one passes

$t->fake_unset('discovery.json');

$direct = parse_response(http_get($W, PeerAddr => '127.0.0.1:' . port(8082)));
cmp_ok(length($direct->{body}), '>', 1024, 'max_size: default document > 1k');

plane_invalid('max_size',
	qr/discovery document is invalid: document exceeds max_size/,
	port => 8084);
admin_unavailable('max_size',
	qr/discovery document from "\/_rl_discovery" is invalid: /
		. qr/\d+ bytes exceed max_size 1024/,
	port => 8084);

# exactly max_size bytes pass, one more byte fails

$doc = doc(worker(id => '5', w => 0, routes => [ 'liveness_probe' ]));
$doc .= ' ' x (1024 - length $doc);

$t->fake_set('discovery.json', $doc);

$r = get($W, port => 8084);
is(join(' ', $r->{status}, length $r->{body}), '200 1024',
	'max_size: 1024 bytes pass');

$r = admin("$W/5/engine/liveness_probe", port => 8084);
is($r->{status}, 200, 'max_size: 1024 bytes allow');

$t->fake_set('discovery.json', "$doc ");

$r = get($W, port => 8084);
is(join(' ', $r->{status}, $r->{json}{error} // ''),
	'502 discovery_invalid', 'max_size: 1025 bytes fail');

$r = admin("$W/5/engine/liveness_probe", port => 8084);
is(join(' ', $r->{status}, $r->{json}{error} // ''),
	'503 discovery_unavailable', 'max_size: 1025 bytes deny');

###############################################################################

# a document bigger than the internal location's subrequest output buffer
# (its default, one page): max_size bounds it, not that buffer

$doc = doc(map { worker(id => 7000 + $_, w => $_ % 3) } 0 .. 59);
cmp_ok(length $doc, '>', 16384, 'big document: > 16k');

$t->fake_set('discovery.json', $doc);

$r = admin("$W/7059/engine/liveness_probe", port => 8095);
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 2 /engine/liveness_probe', 'big document: allowed');

$r = get($W, port => 8095);
is_deeply(bigjson($r->{body}), bigjson($doc), 'big document: passed on');

###############################################################################

# namespace scope: prefix=prod-rl with the reference fixture, system_urls
# rewritten to the fake workers, and a sibling deployment prod-rl2

$doc = fixture('rl-workers-multi-namespace-prefix.json');

my %host;
$doc =~ s{"(system_url|admin_base_url)": "http://(10\.[\d.]+):\d+"}{
	$host{$2} = scalar keys %host unless exists $host{$2};
	my $h = $host{$2};
	qq("$1": "http://127.0.0.1:) . port(8091 + $h) . '"'
}ge;

unlike($doc, qr/"http:\/\/10\./, 'prod-rl: no 10.x URL left');

my $sibling = worker_json(worker(id => '1311768467463799999', w => 0,
	namespace => 'prod-rl2',
	request_plane_url => 'dyn://prod-rl2.backend.rl'));

$doc =~ s/\}\s*\]\s*\}\s*\z/}, $sibling]}\n/ or die "cannot extend fixture\n";

$t->fake_set('discovery.json', $doc);

$r = get($W, port => 8085);

my $want = bigjson($doc);
$want->{workers} = [ grep { $_->{namespace} ne 'prod-rl2' }
	@{$want->{workers}} ];

is($r->{status}, 200, 'prod-rl: status');
is_deeply(bigjson($r->{body}), $want, 'prod-rl: out of scope removed');
unlike($r->{body}, qr/prod-rl2|1311768467463799999/,
	'prod-rl: nothing of prod-rl2 in the bytes');
like($r->{body}, qr/"instance_id": 7587888160958628117,/,
	'prod-rl: ids exact in the bytes');

$r = get($W);
is(scalar(workers($r->{body})), 4, 'prod-rl: any scope: all');

$r = admin("$W/7587888160958628117/engine/liveness_probe", port => 8085);
is(join(' ', $r->{status}, map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'200 2 /engine/liveness_probe', 'prod-rl: prod-rl-legacy allowed');

$r = admin("$W/1311768467463791001/engine/control/pause_generation",
	port => 8085);
is(join(' ', map { "$_->{worker} $_->{uri}" } @{$r->{fwd}}),
	'1 /engine/control/pause_generation',
	'prod-rl: prod-rl-1a2b3c4d route with a slash forwarded');

$r = admin("$W/1311768467463799999/engine/liveness_probe", port => 8085);
is(join(' ', $r->{status}, $r->{json}{error} // '', scalar @{$r->{fwd}}),
	'404 unknown_worker 0', 'prod-rl: prod-rl2 unknown');

$r = admin("$W/1311768467463799999/engine/liveness_probe");
is($r->{status}, 200, 'prod-rl: prod-rl2 allowed with any scope');

# exact=ns suffix=abc, prefix=ns-, prefix=ns, prefix=dynamo over one fleet

my @NS = ('ns', 'ns-abc', 'ns-abcd', 'ns-abc-1', 'ns2', 'ns-', 'nsx',
	'dynamo', 'dynamo-x', '', 'other-ns', '-abc', 'NS-abc', 'dynamo2');

my $ns_doc = doc(map {
	worker(id => 300 + $_, w => $_ % 3, namespace => $NS[$_],
		routes => [ 'liveness_probe' ])
} 0 .. $#NS);

$t->fake_set('discovery.json', $ns_doc);

scope('any', 8080, @NS);
scope('exact=ns suffix=abc', 8086, 'ns-abc');
scope('prefix=ns-', 8087, 'ns-abc', 'ns-abcd', 'ns-abc-1', 'ns-');
scope('prefix=ns', 8088, 'ns', 'ns-abc', 'ns-abcd', 'ns-abc-1', 'ns-');
scope('env, nothing set', 8089, 'dynamo');

scope('prefix=dynamo', 8094, @NS);

###############################################################################

# a listener slower than the internal location's proxy_read_timeout

$t->fake_set('discovery.json', doc(worker(id => '6', w => 0)));
$t->fake_set('discovery.delay_ms', '3000');

my $start = time();
$r = admin("$W/6/engine/liveness_probe", port => 8090);
my $took = time() - $start;

is(join(' ', $r->{status}, $r->{json}{error} // '', scalar @{$r->{fwd}}),
	'503 discovery_unavailable 0', 'slow listener: admin denied');
cmp_ok($took, '<', 2.8, 'slow listener: denied at the read timeout');
ok(scalar(grep { /\[error\].*upstream timed out/ } @{$r->{err}}),
	'slow listener: timeout logged');
is(scalar(grep { /\[error\].*discovery refresh from "\/_rl_slow" failed/ }
	@{$r->{err}}), 1, 'slow listener: refresh failure logged once');

$r = get($W, port => 8090);
is(join(' ', $r->{status}, $r->{json}{error} // ''), '502 discovery_invalid',
	'slow listener: discovery plane');

$t->fake_unset('discovery.delay_ms');

$r = admin("$W/6/engine/liveness_probe", port => 8090);
is($r->{status}, 200, 'slow listener: allowed once the listener is quick');

###############################################################################

# "dynamo_rl_namespace env": the scope comes from the environment nginx was
# started with, so each case restarts it

env_scope('DYN_NAMESPACE_PREFIX=ns', { DYN_NAMESPACE_PREFIX => 'ns',
	DYN_NAMESPACE => 'other', DYN_NAMESPACE_WORKER_SUFFIX => 'abc' },
	'ns', 'ns-abc', 'ns-abcd', 'ns-abc-1', 'ns-');
env_scope('DYN_NAMESPACE and suffix, empty prefix', {
	DYN_NAMESPACE_PREFIX => '', DYN_NAMESPACE => 'ns',
	DYN_NAMESPACE_WORKER_SUFFIX => 'abc' }, 'ns-abc');
env_scope('DYN_NAMESPACE, empty suffix', { DYN_NAMESPACE => 'ns',
	DYN_NAMESPACE_WORKER_SUFFIX => '' }, 'ns');
env_scope('suffix, DYN_NAMESPACE unset', {
	DYN_NAMESPACE_WORKER_SUFFIX => 'x' }, 'dynamo-x');
env_scope('empty DYN_NAMESPACE', { DYN_NAMESPACE => '' }, '');

env_scope('DYN_NAMESPACE_PREFIX=dynamo',
	{ DYN_NAMESPACE_PREFIX => 'dynamo' }, @NS);

###############################################################################

alarm(0);

###############################################################################

sub nginx_conf {
	return rl_conf(<<"EOF");

%%RL_MAIN%%

http {
    %%RL_HTTP 48m%%

    %%RL_ACCESS_LOG t status port plane deny uri%%

    %%RL_LISTENER%%

    %%RL_PROXY_KEEPALIVE%%

    # any namespace, valid=0

    server {
        %%RL_LISTEN 8080%%

        gzip on;
        gzip_types application/json;
        gzip_min_length 1;

        %%RL_CONTROL_PLANES valid=0%%

        # valid=60s on the same source (a source is its URI in its server)

        location /v1/rl/kept/ {
            dynamo_rl_plane admin;
            dynamo_rl_discovery /_rl_discovery valid=60s;

            proxy_pass \$dynamo_rl_system_url\$dynamo_rl_engine_path;
            proxy_next_upstream off;
        }

        %%RL_NOT_FOUND error%%
    }

    # admin only, valid=60s

    %%RL_ADMIN_SERVER 8083 valid=60s%%

    # max_size=1k, for both planes

    server {
        %%RL_LISTEN 8084%%

        dynamo_rl_discovery /_rl_discovery valid=0 max_size=1k;

        include scoped.conf;
    }

    # a server for each namespace scope (scoped_server below)

@{[ join '', map { scoped_server(@$_) } @SCOPES ]}
    # the internal location with nginx's default buffers

    server {
        %%RL_LISTEN 8095%%

        %%RL_DISCOVERY_PLANE%%

        %%RL_ADMIN_LOCATION /_rl_discovery valid=0%%

        %%RL_DISCOVERY_FETCH rl_listener%%
    }

    # a listener slower than proxy_read_timeout

    server {
        %%RL_LISTEN 8090%%

        proxy_read_timeout 1s;

        %%RL_DISCOVERY_PLANE%%

        %%RL_ADMIN_LOCATION /_rl_slow valid=0%%

        %%RL_DISCOVERY_SOURCE /_rl_slow http://rl_listener/v1/rl/workers 1m%%
    }
}

EOF
}

# a server on $port scoped to the namespaces of $scope, with the planes
# of scoped.conf

sub scoped_server {
	my ($port, $scope) = @_;

	return <<"EOF";
    server {
        %%RL_LISTEN $port%%

        dynamo_rl_namespace $scope;
        dynamo_rl_discovery /_rl_discovery valid=0;

        include scoped.conf;
    }

EOF
}

sub scoped_conf {
	return rl_conf(<<'EOF');
%%RL_DISCOVERY_PLANE%%

location /v1/rl/workers/ {
    dynamo_rl_plane admin;

    proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;
    proxy_next_upstream off;
}

%%RL_DISCOVERY_FETCH rl_listener 1m%%
EOF
}

###############################################################################

sub fixture {
	my ($name) = @_;

	open my $fh, '<', "$FIXTURES/$name" or die "cannot open $name: $!\n";
	binmode $fh;
	local $/;
	return scalar <$fh>;
}

sub bigjson {
	my ($text) = @_;
	return eval { $JS->decode($text) };
}

sub workers {
	my ($text) = @_;

	my $d = bigjson($text);
	return ref $d eq 'HASH' && ref $d->{workers} eq 'ARRAY'
		? @{$d->{workers}} : ();
}

sub worker_json {
	my ($w) = @_;
	return $JS->encode($w);
}

sub dup_key_doc {
	my $w = worker_json(worker(id => '78', w => 0));
	$w =~ s/^\{/{"component":"other",/;

	return '{"protocol_version":1,"namespace":"dynamo","workers":[' . $w
		. ']}';
}

my $SEQ;

# one request (Test::DynamoRL::Fixture::admin_call)

sub request {
	return admin_call($t, @_);
}

sub get {
	my ($path, %o) = @_;
	return request($o{method} // 'GET', $path, %o);
}

sub admin {
	my ($path, %o) = @_;
	return request('POST', $path, %o);
}

# a document-level failure as the discovery plane reports it

sub plane_invalid {
	my ($name, $cause, %o) = @_;

	my $res = get($W, %o);

	is(join(' ', $res->{status}, $res->{headers}{'content-type'} // '',
		$res->{json}{error} // '', ($res->{json}{message} // '') ne ''
		? 'message' : ''),
		'502 application/json discovery_invalid message',
		"$name: discovery plane 502");

	my @e = grep { /\[error\]/ } @{$res->{err}};

	ok(@e == 1 && $e[0] =~ $cause, "$name: discovery plane, one error line")
		or diag(join '', @{$res->{err}});
}

# ... and as the admin plane does

sub admin_unavailable {
	my ($name, $cause, %o) = @_;

	my $res = admin("$W/7587888160958628117/engine/liveness_probe", %o);

	is(join(' ', $res->{status}, $res->{json}{error} // '',
		$res->{log}{deny} // '', scalar @{$res->{fwd}}),
		'503 discovery_unavailable discovery_unavailable 0',
		"$name: admin denied");

	my @e = grep { /\[error\]/ } @{$res->{err}};
	my @w = grep { /\[warn\]/ } @{$res->{err}};

	my $deny = qr/dynamo rl admin: denied, discovery_unavailable/;

	ok(@e == 1 && scalar(grep { $_ =~ $cause } @e) == 1
		&& scalar(grep { $_ =~ $deny } @w) == 1,
		"$name: admin, cause (error) and denial (warn) logged")
		or diag(join '', @{$res->{err}});
}

# the namespaces that a scoped server keeps, on both planes

sub scope {
	my ($name, $port, @in) = @_;

	my %in = map { $_ => 1 } @in;

	my $res = get($W, port => $port);
	my $d = bigjson($res->{body}) // {};

	is(join(',', map { "[$_->{namespace}]" } @{$d->{workers} // []}),
		join(',', map { "[$_]" } grep { $in{$_} } @NS),
		"scope $name: discovery plane");

	my (@got, @want);

	for my $i (0 .. $#NS) {
		my $res = admin("$W/" . (300 + $i) . '/engine/liveness_probe',
			port => $port);

		push @got, "[$NS[$i]] $res->{status} " . scalar @{$res->{fwd}};
		push @want, "[$NS[$i]] " . ($in{$NS[$i]} ? '200 1' : '404 0');
	}

	is(join(', ', @got), join(', ', @want), "scope $name: admin");
}

sub env_scope {
	my ($name, $env, @in) = @_;

	$t->stop();

	my %saved = map { $_ => $ENV{$_} } keys %$env;

	@ENV{keys %$env} = values %$env;

	$t->run_fake_dynamo();
	$t->run();

	$t->fake_set('discovery.json', $ns_doc);

	for my $k (keys %saved) {
		if (defined $saved{$k}) {
			$ENV{$k} = $saved{$k};

		} else {
			delete $ENV{$k};
		}
	}

	scope("env, $name", 8089, @in);
}

sub listener_method_count {
	my ($m) = @_;
	return scalar grep { $_->{method} eq $m }
		@{$t->fake_records('listener')};
}

###############################################################################
