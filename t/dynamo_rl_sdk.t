#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# A real client on the request plane: the official OpenAI Node SDK
# (t/sdk, pinned in t/sdk/package-lock.json) sends non-streaming and
# streaming completions and chat completions through nginx to the fake
# Dynamo frontend, reads the attempt id from the raw response, names an
# attempt of its own, and gets the 409 of a re-used id as an APIError.
#
# The SDK is installed into t/sdk/node_modules with "npm ci" when it is
# not there yet.  Without node or npm, or without the registry, the test
# fails: it is not skipped.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use Fcntl qw/ :flock O_WRONLY O_CREAT /;
use File::Basename qw/ dirname /;
use JSON::PP;
use Time::HiRes qw/ time sleep /;

use lib 't/lib';
use Test::DynamoRL;
use Test::DynamoRL::Fixture qw/ attempt_record fail_without rl_conf
	run_timed slurp /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my @KIDS;

$SIG{ALRM} = sub { kill 'KILL', map { -$_ } @KIDS; die "test timed out\n" };
alarm(300);

my $SDK = abs_path(dirname(__FILE__)) . '/sdk';
my $SCRIPT = "$SDK/openai_client.mjs";

my $t = Test::DynamoRL->new()->has(qw/http proxy/);

my ($pinned, $problem) = install_sdk();

fail_without('OpenAI Node SDK available in t/sdk/node_modules', $problem);

$t->plan(93)->write_file_expand('nginx.conf', rl_conf(<<'EOF'));

%%RL_MAIN%%

http {
    %%RL_HTTP 1m%%

    %%RL_FRONTEND 8%%

    # rollout clients, as in examples/dynamo-rl.conf

    %%RL_ROLLOUT_SERVER 8080%%

    # trusted: the attempts API

    %%RL_API_SERVER 8070 attempts metrics%%
}

EOF

$t->run_fake_dynamo()->run();

my $FRONTEND_LOG = $t->fake_dir() . '/frontend.log';
my $STDERR_LOG = $t->testdir() . '/node.stderr';

###############################################################################

my $UUID7 = qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-
	[0-9a-f]{12}$/x;

# the fake's answer to any prompt, 3 events by default

my $TEXT = 'Hello from the';

my $CLIENT_ID = "sdk-trainer.step-7:rollout_$$";

note("openai $pinned, node " . `node --version`);

my ($rc, @lines) = run_node('--base-url', 'http://127.0.0.1:' . port(8080)
	. '/v1', '--attempt-id', $CLIENT_ID);

is($rc, 0, 'node: script exit status')
	or diag($t->read_file('node.stderr'));
is(scalar @lines, 9, 'node: one line per call');

my %call = map { $_->{call} => $_ } @lines;

my @OK = (
	# call, uri, stream, client id
	[ 'completion', '/v1/completions', 0 ],
	[ 'completion_stream', '/v1/completions', 1 ],
	[ 'chat', '/v1/chat/completions', 0 ],
	[ 'chat_stream', '/v1/chat/completions', 1 ],
	[ 'chat_raw', '/v1/chat/completions', 0 ],
	[ 'client_id', '/v1/completions', 0, $CLIENT_ID ],
);

my %seen;

for my $case (@OK) {
	my ($name, $uri, $stream, $cid) = @$case;

	my $c = $call{$name} // {};
	my $id = $c->{attempt_id};

	ok($c->{ok}, "$name: no error")
		or diag(JSON::PP->new->canonical->encode($c));
	is($c->{status}, 200, "$name: status 200");

	if (defined $cid) {
		is($id, $cid, "$name: the client's attempt id");

	} else {
		like($id, $UUID7, "$name: UUIDv7 attempt id");
	}

	is($c->{x_request_id}, $id, "$name: x-request-id echoed by the frontend");

	if ($name eq 'chat_raw') {
		is($c->{content_type}, 'application/json',
			"$name: content type from asResponse()");

	} else {
		is($c->{request_id}, $id, "$name: the SDK's request id");
	}

	is($c->{text}, $TEXT, "$name: text");

	if ($stream) {
		is($c->{chunks}, 3, "$name: 3 chunks");
		ok($c->{stream_done}, "$name: the async iterator completed");

	} else {
		like($c->{object}, qr/^(?:text_completion|chat\.completion)$/,
			"$name: object");
		is($c->{finish_reason}, 'stop', "$name: finish reason");
	}

	my @recs = grep { ($_->{headers}{'x-request-id'} // '') eq ($id // '-') }
		requests();

	is(scalar @recs, 1, "$name: one frontend request with the id");

	my $body = eval { decode_json($recs[0]{body}) } // {};

	ok(@recs && $recs[0]{uri} eq $uri
		&& ($recs[0]{headers}{'x-dynamo-attempt-id'} // '') eq $id
		&& ($body->{stream} ? 1 : 0) == $stream,
		"$name: frontend got $uri, the attempt header, stream "
		. ($stream ? 'true' : 'false'));

	my $a = wait_done($id);

	is($a->{state}, 'succeeded', "$name: attempts API succeeded");
	ok(JSON::PP::is_bool($a->{stream}) && ($a->{stream} ? 1 : 0) == $stream,
		"$name: attempts API stream " . ($stream ? 'true' : 'false'));

	$seen{$id // ''}++;
}

is(scalar(grep { length } keys %seen), 6, 'six distinct attempt ids');

# the re-used id: 409 through the SDK, in Dynamo's flat shape, not forwarded

my $d = $call{duplicate} // {};

ok(!$d->{ok}, 'duplicate: the SDK threw');
ok($d->{api_error}, 'duplicate: an OpenAI.APIError');
is($d->{error_class}, 'ConflictError', 'duplicate: ConflictError');
is($d->{status}, 409, 'duplicate: status 409');
like($d->{sdk_message}, qr/^409\b/, 'duplicate: the SDK message has 409');
is($d->{attempt_id}, $CLIENT_ID, 'duplicate: attempt id on the 409');
is($d->{message}, 'attempt id already used: generation is not idempotent',
	'duplicate: the flat error message');
is(join(',', sort keys %{ref $d->{body} ? $d->{body} : {}}),
	'code,message,type', 'duplicate: flat error shape');
is(ref $d->{body} && $d->{body}{type}, 'Conflict', 'duplicate: type');
is(ref $d->{body} && $d->{body}{code}, 409, 'duplicate: code');
is(scalar(grep { ($_->{headers}{'x-request-id'} // '') eq $CLIENT_ID }
	requests()), 1, 'duplicate: not forwarded');

# with the SDK's default retries, the 409 is not retried

$d = $call{duplicate_retries} // {};

is($d->{status}, 409, 'default retries: 409');
is($d->{error_class}, 'ConflictError', 'default retries: ConflictError');
is(($call{duplicate_retries_fetches} // {})->{fetches}, 1,
	'default retries: the SDK sent the request once');
is(scalar(grep { ($_->{headers}{'x-request-id'} // '') eq $CLIENT_ID }
	requests()), 1, 'default retries: not forwarded');

my $a = api($CLIENT_ID);

is($a->{state}, 'succeeded', 'duplicate: the first attempt stays succeeded');
ok(defined $a->{stream} && !$a->{stream},
	'duplicate: the first attempt stays non-streaming');

is(scalar(grep { $_->{event} } frontend_records()), 0,
	'no client_closed at the frontend');

###############################################################################

# installs the pinned SDK with "npm ci" unless it is there; returns the
# pinned version and, on failure, a message that says what to do

sub install_sdk {
	my $pkg = eval { decode_json(slurp("$SDK/package.json")) }
		or return (undef, "cannot read $SDK/package.json: $@");
	my $version = $pkg->{dependencies}{openai}
		or return (undef, "$SDK/package.json does not depend on openai");

	my $node = `node --version 2>&1` // '';

	return ($version, "node (Node.js 20 or later) is needed to run the"
		. " OpenAI SDK test: $node")
		unless $? == 0 && $node =~ /^v(\d+)\./ && $1 >= 20;

	my $installed = sub {
		my $p = eval {
			decode_json(slurp("$SDK/node_modules/openai/package.json"))
		};
		return $p && ($p->{version} // '') eq $version;
	};

	return ($version) if $installed->();

	# one installer at a time when test files run in parallel

	my $lock = ($ENV{TMPDIR} // '/tmp') . '/dynamo-rl-sdk-npm.lock';
	sysopen(my $lfh, $lock, O_WRONLY | O_CREAT)
		or return ($version, "cannot open $lock: $!");
	flock($lfh, LOCK_EX) or return ($version, "cannot lock $lock: $!");

	return ($version) if $installed->();

	my $npm = `npm --version 2>&1`;

	return ($version, 'npm is needed to install the OpenAI SDK into'
		. " $SDK/node_modules (npm ci --prefix t/sdk): "
		. ($npm // 'not found'))
		unless $? == 0;

	my $log = $t->testdir() . '/npm.log';
	my @cmd = ('npm', 'ci', '--prefix', $SDK, '--no-audit', '--no-fund',
		'--fetch-timeout=60000', '--fetch-retries=1');

	diag("installing the OpenAI SDK $version: @cmd");

	my $st = run_timed(\@cmd, $log, 180, kids => \@KIDS);

	return ($version, "\"@cmd\" failed ($st), is the npm registry"
		. " reachable?\n" . tail_of($log))
		if $st ne '0';

	return ($version, "\"@cmd\" succeeded, but"
		. " $SDK/node_modules/openai is not version $version\n"
		. tail_of($log))
		unless $installed->();

	return ($version);
}

# runs the SDK script; returns its exit status and the decoded lines

sub run_node {
	my (@args) = @_;

	my $out = $t->testdir() . '/node.stdout';

	my $st = run_timed([ 'node', $SCRIPT, @args ], $out, 120,
		kids => \@KIDS);

	# stdout and stderr share the log: JSON lines are the calls

	my @lines;

	for my $line (split /\n/, slurp($out) // '') {
		next unless $line =~ /^\{/;
		my $j = eval { decode_json($line) } or next;
		push @lines, $j;
	}

	open my $fh, '>', $STDERR_LOG;
	print $fh join "\n", grep { !/^\{/ } split /\n/, slurp($out) // '';
	close $fh;

	return ($st, @lines);
}


# the first lines say what failed, the last where the whole log is

sub tail_of {
	my ($path) = @_;

	my @l = split /\n/, slurp($path) // '';
	splice(@l, 8, @l - 12, '...') if @l > 12;

	return join '', map { "  $_\n" } @l;
}

sub frontend_records {
	open my $fh, '<', $FRONTEND_LOG or return ();

	my $json = JSON::PP->new->utf8->allow_bignum;
	return map { $json->decode($_) } grep { /\S/ } <$fh>;
}

sub requests {
	return grep { !exists $_->{event} } frontend_records();
}

sub api {
	return attempt_record(@_);
}

# polls until the attempt is in a terminal state: the client may see the
# last byte before nginx finalizes the request

sub wait_done {
	my ($id) = @_;

	return {} unless defined $id;

	my $last = {};

	Test::DynamoRL::wait_for(sub {
		$last = api($id);
		return ($last->{state} // '') =~ /^(?:succeeded|failed|canceled)$/;
	}, 10);

	return $last;
}

###############################################################################
