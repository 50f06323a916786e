#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# The HTML dashboard (issue 17) under its Content-Security-Policy (issue
# 18, item 1), in headless Chromium:
#
# - the page sends a Content-Security-Policy with default-src 'none',
#   its style and script allowed by a nonce that is new in every answer,
#   connect-src 'self' for its polling, and no outside origin; it does
#   not reload itself;
# - while generations run, the page polls the status document: the
#   charts are drawn (inline SVG), the figures change between polls, and
#   the console shows no CSP violation and no script error;
# - the gate's history shows its phases: draining while a stream is in
#   flight behind a closed gate, drained once it ended, open again;
# - with the gateway stopped after the page was served, the page says
#   the gateway cannot be reached;
# - a screenshot at a laptop's size;
# - the control: the same page with another nonce in its policy is
#   refused by Chromium, and the refusal is seen in its console;
# - with a store (issue 25), a second nginx S whose dynamo_rl_store is
#   Debian's redis-server, reached as an ACL user with a password: the
#   page shows the store up, its address and never the password, the
#   queue and the fallbacks, the replica's name and the fleet's drain
#   (open, closed and drained); with redis-server killed by its pid, the
#   store down, then the zone deciding (on_error=local) and its
#   fallbacks; without a store, no store at all.
#
# Chromium runs headless with its own profile in the test directory,
# bounded by timeout(1), against 127.0.0.1 only.

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ attempt call raw read_until rl_test slurp /;
use Test::DynamoRL::Redis qw/ gate_post gen replica_conf wait_status /;

###############################################################################

my ($CHROMIUM) = grep { -x } map { "$_/chromium" }
	split /:/, $ENV{PATH} // '/usr/bin';

die "chromium is missing: install Debian's chromium (make test-deps)\n"
	unless defined $CHROMIUM;

my $t = rl_test(Test::DynamoRL::scale(300), 32 + 18 + 2 + 8, <<'EOF');

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 4%%
    %%RL_PROXY_KEEPALIVE unbuffered%%

    %%RL_REQUEST_SERVER 8080%%

    %%RL_API_SERVER 8070 gate status%%
}

EOF

my $DIR = $t->testdir();

$t->run_fake_dynamo()->run();

my $BODY = '{"model":"m","prompt":"hello there"}';
my $CHAT = '{"messages":[{"role":"user","content":"hi"}],"stream":true}';
my $PAGE = 'http://127.0.0.1:' . port(8070) . '/rl/status?format=html';

###############################################################################

# the policy, and a nonce that is new in every answer

my $r1 = call('GET', '/rl/status?format=html', port => 8070);
my $r2 = call('GET', '/rl/status?format=html', port => 8070);

my $csp = $r1->{headers}{'content-security-policy'} // '';
my ($nonce) = $csp =~ /script-src 'nonce-([A-Za-z0-9+\/=]{16,})'/;

like($csp, qr/(?:^|; )default-src 'none'(?:;|$)/, 'csp: default-src none');
ok(defined $nonce, 'csp: the script by its nonce');
my $N = $nonce // 'none';

like($csp, qr/(?:^|; )style-src 'nonce-\Q$N\E'(?:;|$)/,
	'csp: the style by the same nonce');
like($csp, qr/(?:^|; )connect-src 'self'(?:;|$)/, 'csp: polls its origin');
unlike($csp, qr/unsafe-|https?:|\*|data:/,
	'csp: no unsafe-inline, no other origin');
isnt(($r2->{headers}{'content-security-policy'} // '') =~ /nonce-([^']+)/
	? $1 : '', $N, 'csp: a new nonce in the next answer');
is(scalar(() = $r1->{body} =~ /<(?:script|style) nonce="\Q$N\E">/g), 2,
	'html: the style and the script carry it');
is($r1->{headers}{'x-content-type-options'}, 'nosniff', 'html: nosniff');
unlike($r1->{body}, qr/http-equiv="refresh"/i, 'html: no reload');

# the page while generations run

my $STOP = "$DIR/traffic.stop";

$t->run_daemon(\&traffic, $STOP);

ok(Test::DynamoRL::wait_for(sub { requests() >= 5 }, 10),
	'traffic: generations running');

# the same denial four times, and another once: two rows, counted

for my $n (1 .. 4) {
	is(attempt('bad id!', $BODY)->{status}, 400, "a bad attempt id ($n)");
}

is(call('PUT', '/v1/completions', body => $BODY)->{status}, 405,
	'a method');

my $run = chromium('live', $PAGE, 12000);

my %svg = map { $_ => svg_attr($run->{dom}, $_) } qw/ c-out c-den c-fly
	c-ttft strip /;

ok($run->{dom} =~ /<body[^>]*data-polls="(\d+)"/ && $1 >= 3,
	'live: the page polled the status document');
ok(!grep({ !defined $svg{$_} } keys %svg), 'live: the five charts present');
cmp_ok($svg{'c-out'}{'data-points'} // 0, '>=', 8,
	'live: request outcomes drawn');
cmp_ok($svg{'c-fly'}{'data-points'} // 0, '>=', 3, 'live: in flight drawn');
like($run->{dom}, qr/<path d="M[\d.]+,[\d.]+L/, 'live: lines in the charts');

my ($first, $last) = $run->{dom} =~ /data-first="(\d+)"[^>]*data-last="(\d+)"/;
cmp_ok($last // 0, '>', $first // 0,
	'live: the figures change between polls');

like($run->{dom}, qr/<span id="conn"[^>]*>live/, 'live: connected');

my ($recent) = $run->{dom} =~ m{<table id="recent">.*?<tbody>(.*?)</tbody>}s;
my @rows = map { [ m{<td[^>]*>([^<]*)</td>}g ] }
	($recent // '') =~ m{<tr>(.*?)</tr>}gs;

is(join(' | ', map { join(' ', @$_[1 .. 4]) } @rows),
	'request method 405 1 | request bad_attempt_id 400 4',
	'live: recent denials grouped, each with its count');
like($run->{dom}, qr{<h2>Upstream header time, ms</h2>}, 'live: the '
	. 'header time is called so');
my $NOTE = "response header (a stream's comes with its first event), "
	. 'as the upper bound of its histogram bucket';

like($run->{dom}, qr/\Q$NOTE\E/, 'live: and says what it is');
is(join("\n", csp_violations($run->{log})), '', 'live: no CSP violation');
is(join("\n", grep { /Uncaught|TypeError|ReferenceError/ }
	console($run->{log})), '', 'live: no script error');

# the screenshot at a laptop's size

my $png = "$DIR/dashboard.png";
chromium('shot', $PAGE, 4000, "--screenshot=$png", '--window-size=1366,900');

ok(-s $png && -s $png > 20000, 'screenshot: taken');

$t->write_file('traffic.stop', '');
ok($t->waitforfile("$STOP.done"), 'traffic: stopped');

# the gate's history: a closed gate with a stream in flight (draining),
# after the stream (drained), open again

my $s = http(raw('POST', '/v1/chat/completions', body => $CHAT,
	headers => [ 'x-fake-scenario' => 'slow', 'x-fake-events' => 40,
		'x-fake-interval-ms' => 200 ]), start => 1);
read_until($s, qr/data: \{/, 10);

call('POST', '/rl/gate', port => 8070,
	body => '{"action":"close","reason":"weights v2","lease":"5m"}');

$run = chromium('draining', $PAGE, 4000);
is(svg_attr($run->{dom}, 'strip')->{'data-phases'}, 'draining',
	'history: draining while a stream is in flight');
like($run->{dom}, qr/phase draining/, 'gate: phase draining');

close $s;

ok(Test::DynamoRL::wait_for(sub {
	my $j = call('GET', '/rl/status', port => 8070)->{body};
	$j =~ /"in_flight":0/;
}, 10), 'gate: drained');

$run = chromium('drained', $PAGE, 4000);
is(svg_attr($run->{dom}, 'strip')->{'data-phases'}, 'drained',
	'history: drained, the refresh can run');
like($run->{dom}, qr/reason: weights v2/, 'gate: the reason shown');

call('POST', '/rl/gate', port => 8070, body => '{"action":"open"}');

$run = chromium('open', $PAGE, 4000);
is(svg_attr($run->{dom}, 'strip')->{'data-phases'}, 'open',
	'history: open again');

# the gateway goes away after serving the page: a one-shot server hands
# out the page nginx made, with its headers, then stops listening

my $page = call('GET', '/rl/status?format=html', port => 8070);
my $once = port(8085);

$t->run_daemon(\&serve_once, $once, $page);
$t->waitforfile("$DIR/once.ready");

$run = chromium('down', "http://127.0.0.1:$once/rl/status", 6000);

like($run->{dom}, qr/<span id="conn" class="down">gateway unreachable/,
	'down: the page says the gateway cannot be reached');
like($run->{dom}, qr/<body[^>]*class="down"/, 'down: the figures greyed');
is(join("\n", csp_violations($run->{log})), '', 'down: no CSP violation');

# the control: with another nonce in the policy, Chromium refuses the
# page's style and script and says so, which the checks above would see

my %bad = %$page;
$bad{headers} = { %{$page->{headers}} };
$bad{headers}{'content-security-policy'}
	=~ s/nonce-[^']+/nonce-AAAAAAAAAAAAAAAAAAAAAA==/g;

my $other = port(8086);

unlink "$DIR/once.ready";
$t->run_daemon(\&serve_once, $other, \%bad);
$t->waitforfile("$DIR/once.ready");

$run = chromium('control', "http://127.0.0.1:$other/rl/status", 2000);

ok(scalar(csp_violations($run->{log})), 'control: a CSP violation is seen');
unlike($run->{dom}, qr/data-polls=/, 'control: the script did not run');

###############################################################################

# with a store: S reaches redis-server as the ACL user "gw"

my $ts = Test::DynamoRL->new()->check_at_end();
my $redis = Test::DynamoRL::Redis->new($ts, port => 8379)->start();

$redis->cmd(qw/ ACL SETUSER gw on >s3cret-dash ~* &* +@all /);
$ts->write_file('store.pass', "s3cret-dash\n");

my %S = (name => 'gw-7', listen => 8180, api => 8170);

$ts->write_file_expand('nginx.conf', replica_conf(%S, store => $redis->url(),
	params => 'user=gw password_file=%%TESTDIR%%/store.pass'
	. ' heartbeat=500ms gate_poll=100ms gate_stale=1s on_error=local'));
$ts->run();

my $SPAGE = 'http://127.0.0.1:' . port(8170) . '/rl/status?format=html';
my $ADDR = 'redis://127.0.0.1:' . port(8379);
my $FLEET = 'fleet: 1 replica, 1 acked the epoch, 0 in flight, 0 lost';

wait_status(\%S, sub { ($_[0]{store}{fleet}{replicas} // 0) == 1 });

$run = chromium('store', $SPAGE, 3000);

my $card = store_card($run->{dom});

like($card, qr/<div id="store" class="card up">/, 'store: the card, up');
like($card, qr/<b>store UP<\/b>/, 'store: says up');
like($card, qr/>address \Q$ADDR\E, replica gw-7</,
	'store: the address and the replica\'s name');
unlike($run->{dom}, qr/s3cret/, 'store: never the password');
like($card, qr/>queue \d+, fallbacks 0, dropped 0, reconnects \d+</,
	'store: the queue and the fallbacks');
like($card, qr/<div id="drain">\Q$FLEET\E; gate open</,
	'store: the fleet, the gate open');
is(join("\n", csp_violations($run->{log}), grep { /Uncaught|TypeError/ }
	console($run->{log})), '', 'store: no CSP violation, no script error');

# the gate closed with nothing in flight: the fleet is drained

is(gate_post(\%S, { action => 'close', reason => 'weights v3' })->{status},
	200, 'store: gate closed');
wait_status(\%S, sub { $_[0]{store}{fleet}{drained} });

$run = chromium('store-drained', $SPAGE, 3000);
like(store_card($run->{dom}),
	qr/<div id="drain">\Q$FLEET\E; drained, the refresh can run</,
	'store: the fleet drained');

is(gate_post(\%S, { action => 'open' })->{status}, 200, 'store: gate open');

# redis-server killed: the store down, the fleet no longer known

$redis->crash();

my $st = wait_status(\%S, sub { $_[0]{store} && !$_[0]{store}{up}
	&& !defined $_[0]{store}{fleet} });

ok($st->{store} && !$st->{store}{up} && !defined $st->{store}{fleet},
	'store down: the status says so');

$run = chromium('store-down', $SPAGE, 3000);
$card = store_card($run->{dom});

like($card, qr/<div id="store" class="card down">/, 'store down: the card');
like($card, qr/<b>store DOWN<\/b>/, 'store down: says down');
like($card, qr/<div id="drain">fleet not known: no fresh read of the gate</,
	'store down: the fleet not known');

# on_error=local: the zone decides for S, counted

is(gen(\%S, 'fallback-1')->{status}, 200, 'fallback: S admits on its own');
wait_status(\%S, sub { ($_[0]{store}{fallbacks} // 0) >= 1 });

$run = chromium('store-fallback', $SPAGE, 3000);
$card = store_card($run->{dom});

like($card, qr/<b>store DOWN, the zone decides \(on_error=local\)<\/b>/,
	'fallback: the zone decides');
like($card, qr/>queue \d+, fallbacks [1-9]\d*, dropped \d+, reconnects \d+</,
	'fallback: counted');

# without a store: no store card

$run = chromium('no-store', $PAGE, 1000);

like($run->{dom}, qr/<div id="store" class="card" hidden="">/,
	'no store: the card hidden');

###############################################################################

# the dashboard's store card, or ''

sub store_card {
	my ($dom) = @_;
	return ($dom // '') =~ /(<div id="store".*?<\/div><\/div>)/s ? $1 : '';
}

# Chromium, headless, with virtual time: the page's timers run for
# $budget ms of page time while the network answers in real time;
# returns the DOM (or nothing, with --screenshot) and the console log

sub chromium {
	my ($name, $url, $budget, @extra) = @_;

	my $out = "$DIR/chromium.$name.html";
	my $log = "$DIR/chromium.$name.log";

	my @cmd = ('timeout', '-k', '5', Test::DynamoRL::scale(60), $CHROMIUM,
		'--headless', '--no-sandbox', '--disable-gpu',
		"--user-data-dir=$DIR/chromium-profile",
		'--no-first-run', '--no-default-browser-check',
		'--disable-background-networking', '--disable-component-update',
		'--disable-sync', '--disable-extensions',
		'--enable-logging=stderr', '--v=0',
		"--virtual-time-budget=$budget",
		@extra ? @extra : ('--dump-dom'), $url);

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', $out or POSIX::_exit(126);
		open STDERR, '>', $log or POSIX::_exit(126);
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	waitpid($pid, 0);

	return { dom => slurp($out) // '', log => slurp($log) // '' };
}


sub console {
	my ($log) = @_;
	return grep { /:CONSOLE/ } split /\n/, $log // '';
}

sub csp_violations {
	my ($log) = @_;
	return grep { /Content Security Policy|Refused to/ }
		split /\n/, $log // '';
}

# the attributes of the <svg> element with that id, or undef

sub svg_attr {
	my ($dom, $id) = @_;

	my ($tag) = ($dom // '') =~ /(<svg id="\Q$id\E"[^>]*>)/ or return undef;
	my %a = $tag =~ /([\w-]+)="([^"]*)"/g;

	return \%a;
}

# generations, one after another, until the stop file exists (30 s at
# most); then "<stop>.done"

sub traffic {
	my ($stop) = @_;

	my $end = time() + 30;
	my $n = 0;

	while (!-e $stop && time() < $end) {
		http(raw('POST', '/v1/completions', body => $BODY,
			headers => [ 'X-Dynamo-Attempt-Id' => "gen-$$-" . $n++ ]));
		sleep(0.02);
	}

	open my $fh, '>', "$stop.done" or die "cannot create $stop.done: $!\n";
	close $fh;
}

sub requests {
	my $j = call('GET', '/rl/status', port => 8070)->{body} // '';
	return $j =~ /"succeeded":(\d+)/ ? $1 : 0;
}

# one HTTP answer, the page as nginx made it, then no listener at all

sub serve_once {
	my ($port, $page) = @_;

	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => 5, ReuseAddr => 1) or die "cannot listen: $!\n";
	my ($c, $req);

	open my $fh, '>', "$DIR/once.ready" or die "cannot create: $!\n";
	close $fh;

	# the first connection that asks for something

	for (;;) {
		$c = $l->accept() or die "cannot accept: $!\n";
		$req = '';

		my $sel = IO::Select->new($c);

		while ($req !~ /\r\n\r\n/ && $sel->can_read(5)) {
			last unless sysread($c, $req, 4096, length $req);
		}

		last if $req =~ /^GET /;
		close $c;
	}

	my $head = "HTTP/1.1 200 OK\r\nConnection: close\r\n"
		. 'Content-Length: ' . length($page->{body}) . "\r\n";

	for my $h (qw/ content-type content-security-policy
		x-content-type-options /)
	{
		$head .= "$h: $page->{headers}{$h}\r\n"
			if defined $page->{headers}{$h};
	}

	print $c "$head\r\n$page->{body}";
	close $c;
	close $l;
}

###############################################################################
