#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for dynamo_rl_zone state=: the gate and the used attempt ids
# survive a stop and start and a binary upgrade (USR2, both masters
# running, then QUIT of the old one, as Debian's "invoke-rc.d nginx
# upgrade" does), including the window in which the workers of both
# masters accept: none forwards while the gate is closed, a gate
# change through one master reaches the other, and ids used through both
# masters in turns while both write the file are all kept.  A state file
# that does not check out closes the gate with a reason that says so.  Without state=,
# nginx -t warns, and a restart or an upgrade opens the gate and forgets
# the used ids (today's behaviour, documented here).

###############################################################################

use warnings;
use strict;

use Test::More;

use JSON::PP;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ rl_conf slurp time_limit /;

###############################################################################

time_limit(240);

my $t = Test::DynamoRL->new()->has(qw/http proxy/)->plan(84);

my $d = $t->testdir();
my $STATE = "$d/state/rl.state";

$t->write_file_expand('nginx.conf', nginx_conf("state=$STATE", 8076));
$t->run_fake_dynamo()->run();

my $FRONTEND_LOG = $t->fake_dir() . '/frontend.log';

###############################################################################

my ($r, $g, @res);

# first start: no file yet, which is not an error

ok(!-e $STATE, 'first start: no state file');
is(scalar $t->log_lines('error.log', qr/no state file ".*" yet/), 1,
	'first start: noticed, not an error');
is(scalar $t->log_lines('error.log', qr/\[(?:error|crit|warn)\]/), 0,
	'first start: no error, no warning');

$g = gate();
is(join(' ', $g->{state}, $g->{epoch}), 'open 0', 'first start: gate open');

is(gen('state-used-1')->{status}, 200, 'used id: forwarded');
is(forwarded('state-used-1'), 1, 'used id: forwarded once');

$r = gate_post({ action => 'close', reason => 'weights step 7',
	lease => '600s' });
is(join(' ', $r->{status}, $r->{json}{state}, $r->{json}{epoch}),
	'200 closed 1', 'close: answered');

# written before the answer

like(slurp($STATE) // '', qr/\Adynamo_rl_state 2\nwritten \d+\ngate closed 1 /,
	'close: in the state file before the answer');

$r = gen('state-closed-1');
is(join(' ', $r->{status}, $r->{headers}{'x-dynamo-rl-reason'} // ''),
	'503 gate_closed', 'close: generation refused');

# a stop and a start

$t->stop_nginx();

like(slurp($STATE) // '', qr/^a state-used-1 3 200 /m,
	'stop: the used id written on exit');

$t->run();

$g = gate();
is(join(' ', $g->{state}, $g->{epoch}, $g->{reason}), 'closed 1 weights step 7',
	'restart: gate still closed, same epoch and reason');
ok(!$g->{expired} && $g->{lease_remaining_ms} > 500000
	&& $g->{lease_remaining_ms} <= 600000, 'restart: lease kept')
	or diag(explain($g));
is(scalar $t->log_lines('error.log',
	qr/state file ".*" read into dynamo_rl zone "rl": gate closed at epoch 1,/
	. qr/ 1 attempts restored/), 1, 'restart: state read, logged');

$r = gen('state-closed-2');
is(join(' ', $r->{status}, forwarded('state-closed-2')), '503 0',
	'restart: generation refused, not forwarded');

$r = gate_post({ action => 'open' });
is(join(' ', $r->{status}, $r->{json}{state}, $r->{json}{epoch}),
	'200 open 2', 'restart: opened');

$r = gen('state-used-1');
is(join(' ', $r->{status}, $r->{headers}{'x-dynamo-rl-reason'} // ''),
	'409 duplicate_attempt', 'restart: used id still refused');
is(forwarded('state-used-1'), 1, 'restart: used id not forwarded again');

$r = http_json('/rl/attempts/state-used-1', PeerAddr => addr(8070));
is(join(' ', $r->{status}, $r->{json}{state} // '', $r->{json}{status} // ''),
	'200 succeeded 200', 'restart: used id in the attempts API');

is(gen('state-used-2')->{status}, 200, 'restart: new id forwarded');

$r = gate_post({ action => 'close', reason => 'before upgrade' });
is(join(' ', $r->{status}, $r->{json}{epoch}), '200 3', 'closed again');

# a binary upgrade: the new configuration listens on 8075, the old one on
# 8076, so that each master can be reached alone

$t->write_file_expand('nginx.conf', nginx_conf("state=$STATE", 8075));

my $old = $t->master();
my $new = $t->upgrade(2);

ok($new != $old && kill(0, $old), 'upgrade: two masters');

$g = gate(8075);
is(join(' ', $g->{state}, $g->{epoch}, $g->{reason}),
	'closed 3 before upgrade', 'upgrade: new master, gate closed');

@res = map { gen("state-overlap-$_") } 1 .. 40;

is(join(' ', grep { $_ != 503 } map { $_->{status} } @res), '',
	'overlap: every request refused');
is(scalar grep({ forwarded("state-overlap-$_") } 1 .. 40), 0,
	'overlap: none forwarded');

# a change through the old master reaches the new one, and back

$r = gate_post({ action => 'open' }, 8076);
is(join(' ', $r->{status}, $r->{json}{epoch}), '200 4',
	'overlap: opened through the old master');

ok($t->wait_for(sub { gate(8075)->{state} eq 'open' }, 3),
	'overlap: open in the new master');

$r = gen('state-used-1');
is(join(' ', $r->{status}, forwarded('state-used-1')), '409 1',
	'overlap: used id refused');

# an id used through one master is refused by the other once the first
# has written it, every second while the other master runs

for my $case ([ 'old', 8086, 8075, 8085 ], [ 'new', 8085, 8076, 8086 ]) {
	my ($name, $via, $api, $other) = @$case;
	my $id = "state-overlap-$name";

	is(gen($id, $via)->{status}, 200, "overlap: id used through the $name");
	ok($t->wait_for(sub {
		http_json("/rl/attempts/$id", PeerAddr => addr($api))->{status}
			== 200 }, 3), "overlap: id from the $name known to the other");

	$r = gen($id, $other);
	is(join(' ', $r->{status}, forwarded($id)), '409 1',
		"overlap: id from the $name refused by the other");
}

$r = gate_post({ action => 'close', reason => 'overlap close' }, 8075);
is(join(' ', $r->{status}, $r->{json}{epoch}), '200 5',
	'overlap: closed through the new master');

ok($t->wait_for(sub { gate(8076)->{state} eq 'closed' }, 3),
	'overlap: closed in the old master');
is(gate(8076)->{epoch}, 5, 'overlap: one epoch in both');

@res = map { gen("state-overlap2-$_") } 1 .. 20;

is(join(' ', grep { $_ != 503 } map { $_->{status} } @res), '',
	'overlap: closed again, every request refused');
is(scalar grep({ forwarded("state-overlap2-$_") } 1 .. 20), 0,
	'overlap: closed again, none forwarded');

# both masters writing the file at once: ids used through both, in turns,
# while the gate is open; every one is kept

is(gate_post({ action => 'open' }, 8075)->{status}, 200,
	'overlap burst: opened');
ok($t->wait_for(sub { gate(8076)->{state} eq 'open' }, 3),
	'overlap burst: open in the old master');

my @burst = map { ("state-burst-old-$_", "state-burst-new-$_") } 1 .. 25;

@res = map { gen($_, /-old-/ ? 8086 : 8085) } @burst;
is(join(' ', grep { $_ != 200 } map { $_->{status} } @res), '',
	'overlap burst: every id forwarded through either master');

$r = gate_post({ action => 'close', reason => 'overlap close' }, 8075);
is($r->{status}, 200, 'overlap burst: closed again');
ok($t->wait_for(sub { gate(8076)->{state} eq 'closed' }, 3),
	'overlap burst: closed in the old master');

$t->upgrade_finish();

ok(!Test::DynamoRL::_alive($old), 'upgrade: old master gone');

@res = map { gen($_, 8085) } @burst;
is(join(' ', grep { $_ != 503 } map { $_->{status} } @res), '',
	'overlap burst: closed after the upgrade');

is(gate_post({ action => 'open' })->{status}, 200,
	'overlap burst: opened after the upgrade');

@res = map { gen($_, 8085) } @burst;
is(join(' ', grep { $_ != 409 } map { $_->{status} } @res), '',
	'overlap burst: every id refused after the upgrade');
is(join(' ', grep { forwarded($_) != 1 } @burst), '',
	'overlap burst: every id forwarded once');

is(gate_post({ action => 'close', reason => 'overlap close' })->{status},
	200, 'overlap burst: closed for the rest');

$g = gate(8075);
is(join(' ', $g->{state}, $g->{epoch}, $g->{reason}), 'closed 9 overlap close',
	'upgrade done: gate closed');

$r = gate_post({ action => 'open' });
is(join(' ', $r->{status}, $r->{json}{epoch}), '200 10', 'upgrade done: opened');

@res = map { gen($_) } qw/ state-used-1 state-used-2 /;

is(join(' ', map { $_->{status} } @res), '409 409',
	'upgrade done: used ids refused');
is(join(' ', map { forwarded($_) } qw/ state-used-1 state-used-2 /), '1 1',
	'upgrade done: used ids not forwarded again');

is(gen('state-used-3')->{status}, 200, 'upgrade done: new id forwarded');

# a gate change that cannot be written: made all the same, and said so

chmod 0555, "$d/state" or die "cannot chmod $d/state: $!\n";

$r = gate_post({ action => 'close', reason => 'disk full' });
is(join(' ', $r->{status}, $r->{json}{error} // ''), '500 state_unwritable',
	'unwritable: 500 state_unwritable');
is(gate()->{state}, 'closed', 'unwritable: closed in the zone');
is(scalar $t->log_lines('error.log', qr/\[crit\] .*open\(\) /
	. qr/"\Q$STATE\E\.tmp" failed, state of dynamo_rl zone "rl" not /
	. qr/written/), 1, 'unwritable: logged');

chmod 0700, "$d/state" or die "cannot chmod $d/state: $!\n";

is(gate_post({ action => 'open' })->{status}, 200, 'writable again: opened');

# a corrupt state file: one byte changed, the gate closes and says why

$t->stop_nginx();

my $text = slurp($STATE) // '';
like($text, qr/^a state-used-3 /m, 'stop after upgrade: new id written');
is(join(' ', grep { $text !~ /^a \Q$_\E /m } @burst), '',
	'stop after upgrade: every id of the overlap burst in the file');

(my $bad = $text) =~ s/state-used-3/state-used-X/;
spew($STATE, $bad);

$t->run();

$g = gate();
is(join(' ', $g->{state}, $g->{reason}),
	'closed state file unreadable: checksum mismatch',
	'corrupt: gate closed, reason');
is(scalar $t->log_lines('error.log', qr/\[error\] .*state file "\Q$STATE\E" /
	. qr/is unreadable \(checksum mismatch\), the gate is closed in /
	. qr/dynamo_rl zone "rl"/), 1, 'corrupt: logged once as an error');

$r = gen('state-corrupt-1');
is(join(' ', $r->{status}, forwarded('state-corrupt-1')), '503 0',
	'corrupt: generation refused');

# not a state file at all, and a version from the future

$t->stop_nginx();
spew($STATE, "garbage\n");
$t->run();

is(gate()->{reason}, 'state file unreadable: not a state file',
	'garbage: gate closed, reason');

$t->stop_nginx();
spew($STATE, "dynamo_rl_state 3\nwritten 0\n");
$t->run();

is(gate()->{reason}, 'state file unreadable: unsupported version',
	'version 3: gate closed, reason');

# an empty file, as a full disk can leave without the rename

$t->stop_nginx();
spew($STATE, '');
$t->run();

is(gate()->{reason}, 'state file unreadable: empty', 'empty: gate closed, reason');

# opened by the operator: written, and a restart keeps it open

$r = gate_post({ action => 'open' });
is(join(' ', $r->{status}, $r->{json}{state}), '200 open', 'empty: opened');

$t->stop_nginx();
$t->run();

$g = gate();
is(join(' ', $g->{state}, $g->{reason} // 'null'), 'open null',
	'rewritten: open after restart');

# without state=: nginx -t warns, once

my ($rc, $out) = $t->nginx_t(nginx_conf('', 8076));
is($rc, 0, 'no state: nginx -t passes');
my $warn = qr/\[warn\] dynamo_rl zone "rl" has no "state" parameter: /
	. qr/a restart or a binary upgrade opens the gate and forgets used /
	. qr/attempt ids in \S+nginx-t.conf:\d+/;
is(scalar(() = $out =~ /$warn/g), 1,
	'no state: nginx -t warns once') or diag($out);

($rc, $out) = $t->nginx_t(nginx_conf("state=$STATE", 8076));
unlike($out, qr/"state" parameter/, 'state: nginx -t does not warn');

for my $case (
	[ 'state=', 'invalid state file "state="' ],
	[ "state=$d/state/", qq{invalid state file "state=$d/state/"} ],
	[ "state=$STATE state=$STATE", qq{duplicate parameter "state=$STATE"} ],
) {
	my ($param, $message) = @$case;
	($rc, $out) = $t->nginx_t(nginx_conf($param, 8076));
	like($out, qr/\[emerg\] \Q$message\E in \S+nginx-t.conf:\d+/,
		"nginx -t: $message") or diag($out);
}

# without state=, today: a restart opens the gate and forgets the ids

$t->stop_nginx();
$t->write_file_expand('nginx.conf', nginx_conf('', 8076));
$t->run();

is(gen('nostate-used-1')->{status}, 200, 'no state: id used');
is(gate_post({ action => 'close', reason => 'x' })->{status}, 200,
	'no state: closed');

$t->stop_nginx();
$t->run();

$g = gate();
is(join(' ', $g->{state}, $g->{epoch}), 'open 0',
	'no state: restart opens the gate');
is(gen('nostate-used-1')->{status}, 200, 'no state: restart forgets the id');
is(forwarded('nostate-used-1'), 2, 'no state: the id forwarded twice');

# without state=, a binary upgrade: the new master's gate is open while
# the old one's is closed

is(gate_post({ action => 'close', reason => 'x' })->{status}, 200,
	'no state upgrade: closed');

$t->write_file_expand('nginx.conf', nginx_conf('', 8075));
$old = $t->master();
$new = $t->upgrade(2);

is(gate(8075)->{state}, 'open', 'no state upgrade: new master open');
is(gate(8076)->{state}, 'closed', 'no state upgrade: old master closed');

$t->upgrade_finish();

is(gate()->{state}, 'open', 'no state upgrade: open after the upgrade');
is(gen('nostate-used-1')->{status}, 200,
	'no state upgrade: used id forwarded again');

###############################################################################

sub nginx_conf {
	my ($state, $extra) = @_;

	# 8075 and 8085 for the new master of an upgrade, 8076 and 8086 for
	# the old one

	my $request = $extra + 10;

	return rl_conf(<<"EOF");

%%TEST_GLOBALS%%

worker_processes 2;

# a binary upgrade passes on only these: make asan's runtime and options
env LD_PRELOAD;
env ASAN_OPTIONS;
env LSAN_OPTIONS;

events {
    worker_connections 1024;
}

http {
    %%RL_HTTP 1m $state%%

    %%RL_FRONTEND%%

    server {
        %%RL_LISTEN 8080 $request%%

        %%RL_REQUEST_PLANE%%
    }

    server {
        %%RL_LISTEN 8070 $extra%%

        %%RL_APIS gate attempts%%
    }
}

EOF
}

sub addr {
	my ($p) = @_;
	return '127.0.0.1:' . port($p);
}

sub gen {
	my ($id, $p) = @_;

	return parse_response(http_post('/v1/completions',
		'{"model":"m","prompt":"hello"}', PeerAddr => addr($p // 8080),
		headers => "X-Dynamo-Attempt-Id: $id")) // {};
}

sub gate {
	my ($p) = @_;
	return http_json('/rl/gate', PeerAddr => addr($p // 8070))->{json} // {};
}

sub gate_post {
	my ($data, $p) = @_;
	return http_json('/rl/gate', json => $data,
		PeerAddr => addr($p // 8070));
}

sub forwarded {
	my ($id) = @_;

	open my $fh, '<', $FRONTEND_LOG or return 0;

	my $json = JSON::PP->new->utf8->allow_bignum;
	return scalar grep { !exists $_->{event}
		&& ($_->{headers}{'x-request-id'} // '') eq $id }
		map { $json->decode($_) } grep { /\S/ } <$fh>;
}


sub spew {
	my ($path, $content) = @_;
	open my $fh, '>', $path or die "cannot write $path: $!\n";
	print $fh $content;
	close $fh;
}

###############################################################################
