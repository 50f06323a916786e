#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for dynamo_rl_status: the JSON schema, checked field by field
# before and after a snapshot (the fleet with exact u64 instance ids as
# strings, each worker's admin eligibility or deny reason: worker_error,
# no_system_url, worker_invalid, ambiguous_worker, from a crafted
# discovery document; the namespace scope of the location), the gate, the
# ledger, the counters and the recent denials; the HTML dashboard chosen
# by ?format=html or Accept: text/html, self-contained, with the same
# JSON inside a script element that a model name cannot break out of;
# and the dashboard rendered by headless Chromium (pointed at 127.0.0.1
# only): the gate state and one row per worker in the DOM, and a
# screenshot saved as build/dashboard.png.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use JSON::PP;
use Math::BigInt;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ call deny_reasons doc iso_ms
	plane_reasons rl_test vllm_routes worker /;

###############################################################################

my $t = rl_test(300, 128, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 5m%%

    %%RL_UPSTREAMS 8%%
    %%RL_PROXY_KEEPALIVE unbuffered%%

    %%RL_REQUEST_SERVER 8080%%

    server {
        %%RL_LISTEN 8070%%

        %%RL_CONTROL_PLANES valid=1h%%

        location = /rl/status {
            dynamo_rl_status;
        }

        # the fleet as a location scoped to one namespace sees it

        location = /rl/status-dynamo {
            dynamo_rl_namespace exact=dynamo;
            dynamo_rl_status;
        }

        location = /rl/gate {
            dynamo_rl_gate_api;
        }
    }
}

EOF

$t->run_fake_dynamo()->run();

###############################################################################

my $REPO = abs_path(dirname(abs_path(__FILE__)) . '/..');
my $SHOT = "$REPO/build/dashboard.png";

my $ISO = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
my $JS = JSON::PP->new->canonical->allow_bignum;

my $XSS = '</script><img src=x onerror=alert(1)>';

my @VLLM = vllm_routes();

my $A = '7587888160958628117';
my $B = '9007199254740993';
my $DUP = '18446744073709551615';

my @PLANES = qw/ request discovery admin /;

my @REASONS = deny_reasons();

# the reasons each plane can give: the counters have only these

my %PLANE_REASONS = plane_reasons();

my ($r, $j, $w);

###############################################################################

# before any snapshot

$r = status();
$j = $r->{json};

is($r->{status}, 200, 'empty: status');
is($r->{headers}{'content-type'}, 'application/json', 'empty: content type');
ok(ref $j eq 'HASH', 'empty: a JSON object') or diag($r->{body});

is(join(',', sort keys %$j), 'counters,durations,gate,ledger,nginx,'
	. 'recent_denials,snapshot,time,version,zone', 'empty: top-level fields');
like($j->{version}, qr/^\d+\.\d+\.\d+/, 'empty: version');
like($j->{nginx}, qr/^1\.\d+\.\d+$/, 'empty: nginx version');
is($j->{zone}, 'rl', 'empty: zone name');
like($j->{time}, $ISO, 'empty: time');
ok(abs((iso_ms($j->{time}) // 0) - time() * 1000) < 5000,
	'empty: time is now');

is_deeply($j->{snapshot}, { generation => 0, age_ms => undef,
	source => undef, fetched => undef, workers => 0, eligible => 0,
	fleet => [] }, 'empty: no snapshot');

is(ref $j->{recent_denials}, 'ARRAY', 'empty: recent_denials an array');
is(scalar @{$j->{recent_denials} // []}, 0, 'empty: no denials yet');

schema_ok('empty', $j);

###############################################################################

# a crafted fleet, loaded through the discovery plane

$t->fake_set('discovery.json', doc(
	worker(id => $A, model => $XSS),
	worker(id => $B, routes => [],
		error => 'worker discovery timed out after 30s'),
	worker(id => '1001', system_url => undef),
	worker(id => '1002', component => undef),
	worker(id => $DUP, w => 1),
	worker(id => $DUP, w => 2, component => 'prefill'),
	worker(id => '106', instance_id => '106'),
	worker(id => '1003', namespace => 'other-ns', model => undef,
		routes => [ 'flush_cache' ], w => 2),
));

$r = call('GET', '/v1/rl/workers', port => 8070);
is($r->{status}, 200, 'fleet: loaded through the discovery plane');

$r = status();
$j = $r->{json};

schema_ok('fleet', $j);

my $snap = $j->{snapshot} // {};

is($snap->{generation}, 1, 'fleet: generation 1');
is($snap->{source}, 'discovery', 'fleet: source discovery');
like($snap->{age_ms}, qr/^\d+$/, 'fleet: age_ms');
cmp_ok($snap->{age_ms} // 1e9, '<', 10000, 'fleet: age_ms small');
like($snap->{fetched}, $ISO, 'fleet: fetched');
ok(abs((iso_ms($snap->{fetched}) // 0) - time() * 1000) < 10000,
	'fleet: fetched just now');
is($snap->{workers}, 8, 'fleet: 8 workers');
is($snap->{eligible}, 2, 'fleet: 2 admin-eligible');
is(scalar @{$snap->{fleet} // []}, 8, 'fleet: 8 entries');

is(join(',', sort keys %{$snap->{fleet}[0] // {}}),
	'admin,instance_id,model,namespace,routes', 'fleet: entry fields');

# instance ids are JSON strings, exact beyond 2^53

for my $id ($A, $B, '1001', '1002', $DUP, '1003') {
	like($r->{body}, qr/"instance_id":"$id"/,
		"fleet: instance id $id as a string");
}

unlike($r->{body}, qr/"instance_id":\d/, 'fleet: no instance id as a number');

my %by;
push @{$by{$_->{instance_id} // 'null'}}, $_ for @{$snap->{fleet} // []};

$w = $by{$A}[0] // {};
is($w->{admin}, 'eligible', 'worker A: eligible');
is($w->{namespace}, 'dynamo', 'worker A: namespace');
is($w->{model}, $XSS, 'worker A: model, whatever its bytes');
is($w->{routes}, scalar @VLLM, 'worker A: route count');

$w = $by{$B}[0] // {};
is($w->{admin}, 'worker_error', 'worker B: worker_error');
is($w->{routes}, 0, 'worker B: no routes');

$w = $by{1001}[0] // {};
is($w->{admin}, 'no_system_url', 'worker 1001: no_system_url');
is($w->{routes}, scalar @VLLM, 'worker 1001: route count');

is(($by{1002}[0] // {})->{admin}, 'worker_invalid',
	'worker 1002 (no component): worker_invalid');

is(scalar @{$by{$DUP} // []}, 2, 'duplicate id: both entries listed');
is(join(',', map { $_->{admin} } @{$by{$DUP} // []}),
	'ambiguous_worker,ambiguous_worker', 'duplicate id: ambiguous_worker');

$w = $by{null}[0] // {};
is($w->{admin}, 'worker_invalid', 'string id: worker_invalid');
ok(exists $w->{instance_id} && !defined $w->{instance_id},
	'string id: instance_id null');

$w = $by{1003}[0] // {};
is($w->{admin}, 'eligible', 'worker 1003: eligible');
is($w->{namespace}, 'other-ns', 'worker 1003: namespace');
ok(exists $w->{model} && !defined $w->{model}, 'worker 1003: model null');
is($w->{routes}, 1, 'worker 1003: one route');

# the namespace scope of the status location

$j = status('/rl/status-dynamo')->{json} // {};

is($j->{snapshot}{workers}, 7, 'scoped: 7 workers');
is($j->{snapshot}{eligible}, 1, 'scoped: 1 eligible');
ok(!grep({ ($_->{namespace} // '') ne 'dynamo' }
	@{$j->{snapshot}{fleet} // []}), 'scoped: only namespace dynamo');

# the admin plane agrees with the eligibility shown

is(call('POST', "/v1/rl/workers/$A/engine/flush_cache", port => 8070,
	body => '{}')->{status}, 200, 'admin: A allowed');

for my $case ([ $B, 503, 'worker_error' ], [ 1001, 503, 'no_system_url' ],
	[ 1002, 503, 'worker_invalid' ], [ $DUP, 409, 'ambiguous_worker' ])
{
	my ($id, $status, $reason) = @$case;

	$r = call('POST', "/v1/rl/workers/$id/engine/flush_cache", port => 8070,
		body => '{}');
	is(join(' ', $r->{status}, (eval { decode_json($r->{body}) } // {})
		->{error} // ''), "$status $reason", "admin: $id $reason");
}

###############################################################################

# the gate, the ledger, the counters and the recent denials

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'status-ok' ]);
is($r->{status}, 200, 'request: ok');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'status-ok' ]);
is($r->{status}, 409, 'request: duplicate');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}',
	headers => [ 'X-Dynamo-Attempt-Id' => 'bad id' ]);
is($r->{status}, 400, 'request: bad id');

$r = call('POST', '/rl/gate', port => 8070,
	body => '{"action":"close","reason":"weights v7 <b>now</b>",'
	. '"lease":"10m"}');
my $gate = eval { decode_json($r->{body}) } // {};
is($gate->{state}, 'closed', 'gate: closed');

$r = call('POST', '/v1/completions', body => '{"prompt":"x"}');
is($r->{status}, 503, 'request: gate 503');

$j = Test::DynamoRL::wait_for(sub {
	my $x = status()->{json} // {};
	return ($x->{counters}{requests}{request}{rejected} // 0) >= 3 ? $x
		: undef;
}, 10) // {};

schema_ok('activity', $j);

# lease_remaining_ms moves with the clock between the two reads

cmp_ok($j->{gate}{lease_remaining_ms} // -1, '<=',
	$gate->{lease_remaining_ms} // -1, 'gate: lease remaining counts down');
is_deeply({ %{$j->{gate}}, lease_remaining_ms => 0 },
	{ %$gate, in_flight => 0, lease_remaining_ms => 0 },
	'gate: as the gate API');

is($j->{ledger}{records}, 1, 'ledger: one record');
is($j->{ledger}{in_flight}, 0, 'ledger: none in flight');
is($j->{ledger}{duplicates}, 1, 'ledger: one duplicate refused');
is($j->{ledger}{evictions}, 0, 'ledger: no evictions');
cmp_ok($j->{ledger}{capacity}, '>', 100, 'ledger: capacity');

is_deeply($j->{counters}{requests}, {
	request => { succeeded => 1, failed => 0, canceled => 0,
		rejected => 3 },
	discovery => { ok => 1, invalid => 0, rejected => 0 },
	admin => { ok => 1, error => 0, rejected => 4 },
}, 'counters: requests');

is_deeply($j->{counters}{admin_results}, { ok => 1, error => 0 },
	'counters: admin results');
is_deeply($j->{counters}{discovery_refreshes}, { ok => 0, failed => 0 },
	'counters: no refresh, the discovery response was fresh');

my %den = map { my $p = $_; map { ("$p/$_" => $j->{counters}{denials}{$p}{$_}) }
	keys %{$j->{counters}{denials}{$p} // {}} } @PLANES;
is(join(',', map { "$_=$den{$_}" } sort grep { $den{$_} } keys %den),
	'admin/ambiguous_worker=1,admin/no_system_url=1,admin/worker_error=1,'
	. 'admin/worker_invalid=1,request/bad_attempt_id=1,'
	. 'request/duplicate_attempt=1,request/gate_closed=1',
	'counters: denials');

# newest first

is(join(' ', map { "$_->{plane}/$_->{reason}/$_->{status}" }
	@{$j->{recent_denials} // []}),
	'request/gate_closed/503 request/bad_attempt_id/400 '
	. 'request/duplicate_attempt/409 admin/ambiguous_worker/409 '
	. 'admin/worker_invalid/503 admin/no_system_url/503 '
	. 'admin/worker_error/503', 'recent denials: plane, reason, status');

ok(!grep({ !defined $_->{time} || $_->{time} !~ $ISO }
	@{$j->{recent_denials} // []}), 'recent denials: times');

###############################################################################

# the dashboard: chosen by ?format=html or an Accept of text/html

my $html = status('/rl/status?format=html');

is($html->{status}, 200, 'html: status');
is($html->{headers}{'content-type'}, 'text/html', 'html: ?format=html');

$r = status('/rl/status', accept => 'text/html,application/xhtml+xml,'
	. 'application/xml;q=0.9,*/*;q=0.8');
is($r->{headers}{'content-type'}, 'text/html', 'html: browser Accept');
like($r->{body}, qr/^<!DOCTYPE html>/, 'html: a document');

$r = status('/rl/status', accept => 'text/html');
is($r->{headers}{'content-type'}, 'text/html', 'html: Accept: text/html');

$r = status('/rl/status?format=json', accept => 'text/html');
is($r->{headers}{'content-type'}, 'application/json',
	'json: ?format=json wins over Accept');

$r = status('/rl/status', accept => 'application/json');
is($r->{headers}{'content-type'}, 'application/json',
	'json: Accept: application/json');

my $body = $html->{body};

like($body, qr/^<!DOCTYPE html>/, 'html: doctype');
is(scalar(() = $body =~ /<\/script>/gi), 2,
	'html: exactly the two script elements close');
unlike($body, qr/<\/script><img/i, 'html: the model name does not break out');
unlike($body, qr/<img/i, 'html: no img element in the markup');
unlike($body, qr/<(?:script|link|img|iframe)[^>]*\s(?:src|href)\s*=/i,
	'html: no external assets');
unlike($body, qr/https?:\/\//, 'html: no URL at all');
unlike($body, qr/<meta http-equiv="refresh"/i, 'html: no reload');
like($body, qr/fetch\(location\.pathname/, 'html: polls the status instead');

my ($data) = $body
	=~ /<script type="application\/json" id="data">(.*?)<\/script>/s;
ok(defined $data, 'html: the data element');
unlike($data // '', qr/[<>&]/, 'html: no <, > or & inside the data');

my $embedded = eval { decode_json($data // '') } // {};
is_deeply($embedded->{snapshot}{fleet}, $j->{snapshot}{fleet},
	'html: the same fleet as the JSON');
is_deeply({ %{$embedded->{gate}}, lease_remaining_ms => 0 },
	{ %{$j->{gate}}, lease_remaining_ms => 0 }, 'html: the same gate');
is(($embedded->{snapshot}{fleet}[0] // {})->{model}, $XSS,
	'html: the model name intact inside the data');

$r = status('/rl/status?format=html', method => 'HEAD');
is($r->{status}, 200, 'html HEAD: status');
is($r->{body}, '', 'html HEAD: no body');

$r = call('POST', '/rl/status', port => 8070, body => '{}');
is($r->{status}, 405, 'POST: 405');
is($r->{headers}{allow}, 'GET, HEAD', 'POST: Allow');

$r = call('HEAD', '/rl/status', port => 8070);
is($r->{status}, 200, 'HEAD: 200');
is($r->{body}, '', 'HEAD: no body');

###############################################################################

# headless Chromium, pointed at 127.0.0.1 only

my $chromium = chromium_path();
ok($chromium, 'chromium installed (Debian package chromium)')
	or diag('apt-get install -y chromium');

my $url = 'http://127.0.0.1:' . port(8070) . '/rl/status?format=html';

my ($rc, $dom, $err) = chromium($chromium, '--dump-dom', $url);

is($rc, 0, 'chromium --dump-dom: exit 0') or diag($err);

my ($gate_div) = ($dom // '') =~ /(<div id="gate"[^>]*>.*?)<h2>/s;

like($gate_div // '', qr/<div id="gate" class="card closed">/,
	'dom: the gate element styled closed');
like($gate_div // '', qr/gate CLOSED/, 'dom: the gate state text');
like($gate_div // '', qr/phase drained/, 'dom: the drain progress');
like($gate_div // '', qr/reason: weights v7 &lt;b&gt;now&lt;\/b&gt;/,
	'dom: the gate reason, as text');
like($gate_div // '', qr/lease until \d{4}-/, 'dom: the lease');

my ($tbody) = ($dom // '') =~ /<table id="fleet">.*?<tbody>(.*?)<\/tbody>/s;
my @rows = ($tbody // '') =~ /<tr>(.*?)<\/tr>/sg;

is(scalar @rows, 8, 'dom: one fleet row per worker');

for my $id ($A, $B, '1001', '1002', $DUP, '1003') {
	ok(scalar(grep { /<td>\Q$id\E<\/td>/ } @rows), "dom: a row for $id");
}

is(scalar(grep { /<td>\Q$DUP\E<\/td>/ } @rows), 2,
	'dom: two rows for the duplicate id');
ok(scalar(grep { /\Q$A\E.*>eligible</s } @rows), 'dom: A eligible');
ok(scalar(grep { /\Q$B\E.*>worker_error</s } @rows), 'dom: B worker_error');
ok(scalar(grep { /<td>&lt;\/script&gt;&lt;img src=x /
	. qr/onerror=alert\(1\)&gt;<\/td>/ } @rows),
	'dom: the model name shown as text');
unlike($dom // '', qr/<img/i, 'dom: no img element was created');

my ($recent) = ($dom // '') =~ /<table id="recent">.*?<tbody>(.*?)<\/tbody>/s;
is(scalar(() = ($recent // '') =~ /<tr>/g), 7, 'dom: the recent denials');
like($recent // '', qr/gate_closed/, 'dom: a denial reason');

like($dom // '', qr/<div id="ledger">ledger: 1 records/, 'dom: the ledger');

# the screenshot

unlink $SHOT;

($rc, undef, $err) = chromium($chromium, "--screenshot=$SHOT",
	'--window-size=1200,900', $url);

is($rc, 0, 'chromium --screenshot: exit 0') or diag($err);
ok(-s $SHOT, 'screenshot: build/dashboard.png written');

my $png = '';

if (open my $fh, '<', $SHOT) {
	binmode $fh;
	read($fh, $png, 24);
}

is(substr($png, 0, 8), "\x89PNG\r\n\x1a\n", 'screenshot: a PNG');
is(join('x', unpack('NN', substr($png, 16, 8) . "\0" x 8)), '1200x900',
	'screenshot: 1200x900');



sub status {
	my ($uri, %o) = @_;

	my $r = call($o{method} // 'GET', $uri // '/rl/status', port => 8070,
		headers => [ defined $o{accept} ? ('Accept' => $o{accept})
			: () ]);

	$r->{json} = eval { decode_json($r->{body}) }
		if ($r->{headers}{'content-type'} // '') eq 'application/json';

	return $r;
}

# the types of every part of the document

sub schema_ok {
	my ($name, $j) = @_;

	my @bad;

	my $int = sub {
		my ($path, $v) = @_;
		push @bad, "$path not an integer" unless defined $v && !ref $v
			&& $v =~ /^\d+$/;
	};

	my $s = $j->{snapshot} // {};

	push @bad, 'snapshot fields' unless join(',', sort keys %$s) eq
		'age_ms,eligible,fetched,fleet,generation,source,workers';
	$int->("snapshot.$_", $s->{$_}) for qw/ generation workers eligible /;
	push @bad, 'fleet not an array' unless ref $s->{fleet} eq 'ARRAY';

	for my $w (@{ref $s->{fleet} eq 'ARRAY' ? $s->{fleet} : []}) {
		push @bad, 'fleet entry fields' unless join(',', sort keys %$w)
			eq 'admin,instance_id,model,namespace,routes';
		push @bad, "instance_id $w->{instance_id}"
			if defined $w->{instance_id}
			&& $w->{instance_id} !~ /^(?:0|[1-9]\d*)$/;
		$int->('fleet.routes', $w->{routes});
		push @bad, "admin $w->{admin}" unless grep { $_ eq $w->{admin} }
			'eligible', @REASONS;
	}

	my $g = $j->{gate} // {};

	push @bad, 'gate fields' if grep { !exists $g->{$_} } qw/ state reason
		epoch in_flight lease_expires expired /;
	push @bad, 'gate state'
		unless ($g->{state} // '') =~ /^(?:open|closed)$/;
	$int->("gate.$_", $g->{$_}) for qw/ epoch in_flight /;
	push @bad, 'gate expired' unless JSON::PP::is_bool($g->{expired});
	push @bad, 'gate lease_expires' if defined $g->{lease_expires}
		&& $g->{lease_expires} !~ $ISO;

	my $l = $j->{ledger} // {};

	push @bad, 'ledger fields' if grep { !exists $l->{$_} } qw/ records
		capacity evictions duplicates /;
	$int->("ledger.$_", $l->{$_}) for keys %$l;

	my $c = $j->{counters} // {};

	push @bad, 'counters fields' unless join(',', sort keys %$c) eq
		'admin_results,denials,discovery_refreshes,requests';

	my %outcomes = (
		request => 'canceled,failed,rejected,succeeded',
		discovery => 'invalid,ok,rejected',
		admin => 'error,ok,rejected',
	);

	for my $p (@PLANES) {
		push @bad, "requests.$p fields" unless join(',',
			sort keys %{$c->{requests}{$p} // {}}) eq $outcomes{$p};
		push @bad, "denials.$p fields" unless join(',',
			sort keys %{$c->{denials}{$p} // {}})
			eq join(',', sort @{$PLANE_REASONS{$p}});
		$int->("requests.$p", $_)
			for values %{$c->{requests}{$p} // {}};
		$int->("denials.$p", $_) for values %{$c->{denials}{$p} // {}};
	}

	push @bad, 'planes' unless join(',', sort keys %{$c->{requests} // {}})
		eq 'admin,discovery,request';
	push @bad, 'admin_results' unless join(',',
		sort keys %{$c->{admin_results} // {}}) eq 'error,ok';
	push @bad, 'discovery_refreshes' unless join(',',
		sort keys %{$c->{discovery_refreshes} // {}}) eq 'failed,ok';

	for my $d (@{$j->{recent_denials} // []}) {
		push @bad, 'denial fields' unless join(',', sort keys %$d)
			eq 'plane,reason,status,time';
		push @bad, "denial plane $d->{plane}"
			unless grep { $_ eq $d->{plane} } @PLANES;
		push @bad, "denial reason $d->{reason}"
			unless grep { $_ eq $d->{reason} } @REASONS;
		$int->('denial status', $d->{status});
	}

	is(join('; ', @bad), '', "$name: schema");
}




sub chromium_path {
	for my $dir (split /:/, $ENV{PATH} // '/usr/bin') {
		return "$dir/chromium" if -x "$dir/chromium";
	}

	return undef;
}

# one headless Chromium run, bounded: (exit code, stdout, stderr); every
# host name but 127.0.0.1 fails to resolve, so nothing leaves the machine

sub chromium {
	my ($bin, @args) = @_;

	return (-1, '', 'chromium is not installed') unless $bin;

	my $d = $t->testdir();
	my $profile = "$d/chromium-" . int(rand(1e9));

	mkdir $profile;

	my @cmd = ($bin, '--headless', '--no-sandbox', '--disable-gpu',
		'--disable-background-networking', '--disable-component-update',
		'--disable-sync', '--no-first-run', '--disable-extensions',
		'--disable-default-apps', '--no-default-browser-check',
		'--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
		"--user-data-dir=$profile", @args);

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		setpgrp(0, 0);
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', "$profile.out";
		open STDERR, '>', "$profile.err";
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	my $done = Test::DynamoRL::wait_for(sub {
		waitpid($pid, WNOHANG) == $pid;
	}, 60, 0.1);

	my $rc = $? >> 8;

	if (!$done) {
		kill 'KILL', -$pid;
		waitpid($pid, 0);
		$rc = -1;
	}

	# whatever the browser left behind in its process group

	kill 'KILL', -$pid;

	my $read = sub {
		open my $fh, '<', $_[0] or return '';
		local $/;
		return <$fh> // '';
	};

	return ($rc, $read->("$profile.out"), $read->("$profile.err"));
}

###############################################################################
