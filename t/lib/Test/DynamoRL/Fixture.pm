package Test::DynamoRL::Fixture;

# (C) ngx_dynamo_rl_module developers

# The fixtures that the test files share, so that each of them holds its
# assertions and the nginx configuration it is about, not a copy of the
# same helpers.  Test::DynamoRL starts and stops processes and speaks
# HTTP; this module builds on it.  Nothing is exported by default: a test
# names what it uses,
#
#     use Test::DynamoRL::Fixture qw/ call json rl_conf /;
#
# and helpers that read the files of a test take its harness first.
#
# The start of a test file:
#
#     time_limit($seconds)  STDOUT and STDERR unbuffered, and an alarm
#                           that fails the test with "test timed out"
#                           after $seconds (scale() them where valgrind
#                           must stretch them)
#     rl_test($seconds, $plan, $conf, has => [ modules ])  the opener of
#                           most files: time_limit($seconds), a
#                           Test::DynamoRL that has the modules (http and
#                           proxy unless given) and plans $plan tests
#                           (none if undef), and nginx.conf written from
#                           rl_conf($conf); returns the harness
#     fail_without($name, $problem)  with a $problem (what a tool the
#                           file needs lacks), plans one test, fails it
#                           as $name, gives the problem and exits 1
#
# Configuration:
#
#     rl_conf($text)        expands the macros below in nginx.conf text;
#                           each becomes one line, so that line numbers of
#                           the heredoc still hold (as in Test::DynamoRL);
#                           pass the result to $t->write_file_expand()
#
#         %%RL_ACCESS_LOG field[=variable] ...%%  the access log
#                                 rl.log in the test directory, in the
#                                 format "rl" of %%RL_LOG_FORMAT rl ...%%
#         %%RL_MAIN [workers=N] [connections=N] [faketime]%%  the main
#                                 context: %%TEST_GLOBALS%%,
#                                 %%RL_FAKETIME%% with "faketime",
#                                 worker_processes and the events block
#         %%RL_HTTP size [params]%%  the head of the http block:
#                                 %%TEST_GLOBALS_HTTP%% and the zone
#                                 "rl" of that size (dynamo_rl_zone
#                                 zone=rl:size params)
#         %%RL_LISTEN port [params] [port [params]] ...%%  the head of
#                                 a server: a listen on 127.0.0.1 for
#                                 each port, with the parameters that
#                                 follow it (reuseport, http2), and
#                                 server_name localhost
#         %%RL_LOG_FORMAT name field[=variable] ...%%  log_format
#                                 name escape=json, one JSON object of
#                                 string fields; a field without a
#                                 variable takes the one %LOG_FIELDS
#                                 names (attempt: $dynamo_rl_attempt_id,
#                                 uri: $request_uri, t: $http_x_test...)
#         %%RL_REQUEST_PLANE [options]%%  location /v1/ proxied to
#                                 "frontend"; "keepalive" adds HTTP/1.1
#                                 with an empty Connection, "unbuffered"
#                                 proxy_buffering off, "sse" both and
#                                 the rest of examples/dynamo-rl.conf's
#                                 /v1/ (no request buffering, a 60s read
#                                 timeout, proxy_next_upstream error
#                                 timeout), "ungated" dynamo_rl_gate off
#                                 (a refresh's check that generation
#                                 works while the gates are closed)
#         %%RL_FRONTEND [n]%%     upstream "frontend": the fake frontend
#                                 (8081), with "keepalive n" if given
#         %%RL_LISTENER%%         upstream "rl_listener": the fake RL
#                                 listener (8082)
#         %%RL_UPSTREAMS [n]%%    both upstreams of the fake Dynamo:
#                                 %%RL_FRONTEND n%% and %%RL_LISTENER%%
#         %%RL_PROXY_KEEPALIVE [unbuffered]%%  HTTP/1.1 with an empty
#                                 Connection to upstreams, for their
#                                 keepalive; "unbuffered" adds
#                                 proxy_buffering off
#         %%RL_FAKETIME%%         the environment that faketime() sets,
#                                 passed to the worker processes
#         %%RL_NOT_FOUND [json|error]%%  location / answering 404,
#                                 with "json" the frontend's JSON error
#                                 body, with "error" the module's
#                                 ({"error":"not_found",...})
#         %%RL_DISCOVERY_PLANE%%  location = /v1/rl/workers, proxied to
#                                 "rl_listener"
#         %%RL_ADMIN_PLANE args%% location /v1/rl/workers/ of the admin
#                                 plane and its internal /_rl_discovery;
#                                 args go to dynamo_rl_discovery
#         %%RL_CONTROL_PLANES args%%  %%RL_DISCOVERY_PLANE%% and
#                                 %%RL_ADMIN_PLANE args%%: the planes of
#                                 a trusted server, the discovery plane
#                                 on the admin plane's source (args go
#                                 to its dynamo_rl_discovery too)
#         %%RL_ADMIN_LOCATION fetch args%%  only the location
#                                 /v1/rl/workers/ of the admin plane,
#                                 refreshed from the internal location
#                                 "fetch" (written by the test); args go
#                                 to dynamo_rl_discovery
#         %%RL_ADMIN_DOWN%%       the admin plane of a listener that is
#                                 down: its location, valid=0, and the
#                                 internal /_rl_down proxied to
#                                 127.0.0.1:8099, where nothing listens
#         %%RL_REQUEST_SERVER port [options]%%  a server on port with
#                                 only %%RL_REQUEST_PLANE options%%
#         %%RL_ROLLOUT_SERVER port%%  the rollout clients' server of
#                                 examples/dynamo-rl.conf on port:
#                                 %%RL_REQUEST_PLANE sse%% and
#                                 %%RL_NOT_FOUND json%%
#         %%RL_ADMIN_SERVER port args%%  a server on port with only
#                                 %%RL_ADMIN_PLANE args%%
#         %%RL_API_SERVER port [names]%%  a server on port with only
#                                 %%RL_APIS names%%
#         %%RL_DISCOVERY_SOURCE location url [size]%%  an internal
#                                 location (= location) proxied to url,
#                                 for dynamo_rl_discovery; a size sets
#                                 its subrequest_output_buffer_size
#         %%RL_DISCOVERY_FETCH [upstream [size]]%%  the internal
#                                 /_rl_discovery, proxied to the fake
#                                 listener (127.0.0.1:8082) or upstream;
#                                 a size sets its
#                                 subrequest_output_buffer_size
#         %%RL_DISCOVERY_FILE location file%%  an internal location (=
#                                 location) that serves the JSON file
#                                 of the test directory, for
#                                 dynamo_rl_discovery: a fixed worker
#                                 set; 404 without a log line if there
#                                 is no file
#         %%RL_APIS [names]%%     locations of the gate, attempts, status
#                                 and metrics handlers (default: all)
#
# Requests (to 127.0.0.1:port(N), port 8080 unless port => N):
#
#     raw($method, $uri, headers => [ name => value ...], body => $body)
#                           the text of a request; a body is JSON
#     call($method, $uri, %o)  sends raw(), returns parse_response()'s
#                           hash (status 0 if nothing came) plus
#                           "raw_body", the body before any de-chunking
#     start($method, $uri, %o)  sends raw(), returns the socket
#     attempt($id, $body, %o)  call() of POST /v1/completions (or uri =>
#                           ...) with $body under attempt id $id, after
#                           any other headers => [ ... ]
#     hold($id, port => N)  starts a generation under attempt id $id that
#                           the fake frontend holds open (scenario
#                           "hang"); returns the socket
#     resp($raw)            parse_response(), or an empty answer
#     json($r)              the body of $r decoded, {} if not JSON
#     flat($r, $code, $type)  true if the body is an OpenAI-style error
#                           {code, message, type} with that code and type
#     is_true($v), is_false($v)  a JSON boolean of that value
#     iso_ms($iso)          an ISO 8601 UTC time with milliseconds, in ms
#     json_error($r)        "<status> <error of the JSON body>"
#     attempt_record($id, port => N)  the attempts API's record of $id
#                           on 8070 (http_json), or { http => status }
#     api($id, port => N)   GET /rl/attempts/<id> on 8070, with "json"
#     metrics($port)        the samples of GET /metrics: name => value
#     deny_reasons()        every reason of $dynamo_rl_deny_reason, in
#                           the order of the status page
#     plane_reasons()       the reasons of dynamo_rl_denials_total that
#                           each plane can give: plane => [ reasons ]
#     duration_buckets()    the "le" of every duration histogram
#     samples($text)        the samples of an exposition, labels and all:
#                           name{label=value,...} => value, labels sorted
#     parse_labels($s)      the labels of a sample: name => value
#     promtool()            the path of promtool, undef if not installed
#     promtool_check($t, $text)  the exit code and output of "promtool
#                           check metrics" on $text; -1 without promtool
#     concurrent($port, @paths)  POST {} to every path at once, then
#                           read the answers
#     read_until($sock, $re, $seconds)  reads until $re matches, the
#                           socket closes or the time (scale()d) is over
#     output(@cmd)          the standard output of a command, its stderr
#                           dropped, without the trailing white space;
#                           '' if it could not be started
#     curl_response(@cmd)   runs a command that prints a response with
#                           its header (curl -i), its stderr dropped;
#                           returns parse_response() of the output
#                           (undef if none) and the output, with the
#                           command's status in $?
#
# Discovery documents:
#
#     vllm_routes()         the engine routes a vLLM worker advertises
#     worker(id => ..., w => N, url => ..., field => value|undef)
#                           a worker entry; "w" is the fake worker its
#                           system_url points at, undef drops a field
#     doc(@workers)         a discovery document
#
# Files of a test:
#
#     slurp($path)          the content of a file, undef if unreadable
#     json_lines($path, bytes => 1)  the JSON lines of a file, decoded
#                           (from UTF-8, or as bytes)
#     err_since($t, $off)   the lines of error.log from byte $off
#     frontend_records($t)  what the fake frontend received
#     frontend_requests($t) how many requests (not events) it received
#     forwarded($t, $id)    how many of them had X-Request-Id $id
#     record_with($t, $name, $value)  the first request the fake
#                           frontend received with header $name $value
#     listener_fetches($t)  how many requests the fake listener answered
#     worker_counts($t) / worker_records_since($t, $counts)
#                           what the fake workers received since
#     worker_calls($t, $counts)  the same, by worker: n => [ records ]
#     worker_state($t, $n)  the state file of fake worker $n, decoded
#     admin_call($t, $method, $path, %o)  an admin-plane call with its
#                           access-log entry, error-log lines and the
#                           worker records it caused (see below)
#
# nginx's wall clock (libfaketime):
#
#     faketime($t)          runs nginx with libfaketime, which reads an
#                           offset from the real time in the test
#                           directory on every call; the wall clock only,
#                           the monotonic one stays; nginx.conf needs
#                           "env FAKETIME_TIMESTAMP_FILE; env
#                           FAKETIME_NO_CACHE; env
#                           FAKETIME_DONT_FAKE_MONOTONIC;"
#     set_clock($t, $offset)  sets the offset ("+7200", "-60")
#     clock_is($offset, port => N)  waits until nginx's wall clock, as
#                           /rl/status on N shows it, is the real time
#                           plus $offset seconds (within 5 s)
#
# Processes of a test's own:
#
#     refresh_python()      the python of examples/rl-refresh: python3,
#                           or TEST_PYTHON; undef if it is not there or
#                           older than 3.6
#     refresh_start($t, proxy => $url, @args)  examples/rl-refresh with
#                           @args in the background (python3, or
#                           TEST_PYTHON), its output in a file; every
#                           proxy variable of its environment set to $url,
#                           or unset without one; returns the run
#     refresh_args($version)  the arguments of a refresh to weight
#                           version $version (model /models/policy-
#                           $version) at the tests' pace: a 30 s lease,
#                           10 s timeouts, a poll every 50 ms
#     refresh_output($run)  what it has printed so far
#     refresh_sequence()    the engine paths a refresh calls on every
#                           worker, in order
#     refresh_replicas(\@args, @gateways)  the replicas of a refresh:
#                           "--gateway" and each of @gateways, or the
#                           "replicas" of a hash at the end of @args,
#                           which it removes
#     refresh_failure($out)  the "FAILED at step" line of a refresh's
#                           output, all of them joined with " | " unless
#                           there is exactly one
#     refresh_failed($name, $res, rc => N, step => $step, who => $who)
#                           tests "$name: exit N" and "$name: step and
#                           who" of the refresh $res: its exit code, and
#                           one "FAILED at step $step, $who: " line;
#                           returns that line (refresh_failure())
#     refresh_finish($run)  waits for it (60 s, then kills it); returns
#                           { rc => exit code or -1, out => its output }
#
#     run_timed($cmd, $log, $seconds, kids => \@pids, poll => $s)
#                           runs the command @$cmd with stdout and stderr
#                           to $log, in its own process group, killed
#                           after $seconds (not scale()d); its pid is in
#                           @pids while it runs (for an alarm handler
#                           that kills them), its exit polled every $s
#                           (0.2); returns the exit status or a reason
#
#     example_conf($t, $name)  examples/$name as make run fills it in:
#                           the module of TEST_NGINX_MODULES (or build/),
#                           the test directory for @PREFIX@, the fake
#                           listener (8082) for @RL_LISTENER@
#
# Servers of a test's own:
#
#     fork_server($port, $name, $conn, backlog => N)  the body of a
#                           run_daemon(): listens on 127.0.0.1:$port and
#                           calls $conn->($socket) in a child process per
#                           connection, until the test process is gone
#
# Admin-plane calls that see the fake workers:
#
#     worker_call($t, $method, $uri, %o)  call() (port => N, body =>
#                           ...), with the requests that fake workers 0
#                           to 2 received meanwhile in "fwd": a list of
#                           "<n> <uri>"
#     fwd($r)               the "fwd" of a worker_call(), joined by ", "
#     error($r)             the "error" of a JSON object body, '' if none
#
# Configurations for $t->nginx_t() (the zone's sizing):
#
#     t_conf($zone, @text)  the test's globals, an events block and an
#                           http block: its globals, the zone "rl" of
#                           size $zone, then @text (directives, servers)
#     t_server($port, @text)  a server that listens on 127.0.0.1:$port,
#                           holding @text (directives, locations)
#     t_admin($prefix, $source)  location $prefix of the admin plane,
#                           proxied to the worker; with $source (a URI
#                           and parameters), its own dynamo_rl_discovery
#
# The gateway as a user runs it (make run, util/run-gateway):
#
#     run_gateway($t, $log, \@cmd, %o)  forks @cmd in the background, its
#                           output (stdout and stderr) to $log, stdin
#                           /dev/null, SIGINT at its default (a background
#                           job of a shell starts with SIGINT ignored,
#                           which bash cannot trap then, and Ctrl-C must
#                           reach it); its nginx the test's
#                           (TEST_NGINX_BINARY; under TEST_NGINX_PRELOAD
#                           a wrapper that preloads the sanitizer), its
#                           module the one under test, its TMPDIR the test
#                           directory, DYNAMO_FRONTEND and
#                           DYNAMO_RL_LISTENER unset; returns the pid
#         setsid => 1       in a session and process group of its own, as
#                           a terminal starts it: Ctrl-C is SIGINT to the
#                           group
#         dir => $dir       its working directory
#         env => { }        more environment variables
#         unset => [ ]      more environment variables unset
#
# Bodies in pieces (the body filters' splits):
#
#     split_at($s, @at)     $s cut at the offsets @at, in order
#     chunked($uri, \@parts, $id, port => N, headers => [ name => value
#                           ... ])  POST of a JSON body in the chunks
#                           @parts (Transfer-Encoding: chunked) under
#                           attempt id $id; returns resp()
#     has_curl_h2()         true if curl speaks HTTP/2
#     curl_h2($t, $uri, $body, $id, @headers)  POST of $body with
#                           curl --http2-prior-knowledge to port(8085)
#                           under attempt id $id, with more header
#                           lines "Name: value"; returns the status and
#                           the response head

###############################################################################

use warnings;
use strict;

use base qw/ Exporter /;

our @EXPORT_OK = qw/ deny_reasons output time_limit rl_test fail_without
	rl_conf raw call start attempt hold resp json
	flat json_error is_true is_false iso_ms api metrics concurrent
	read_until vllm_routes worker doc json_lines err_since frontend_records
	frontend_requests forwarded listener_fetches worker_counts
	worker_records_since worker_calls worker_state admin_call curl_response
	fork_server samples record_with faketime set_clock clock_is step_times
	refresh_python refresh_start refresh_args refresh_output refresh_finish
	refresh_replicas refresh_failure refresh_failed refresh_sequence
	run_timed attempt_record example_conf
	promtool promtool_check parse_labels plane_reasons duration_buckets
	slurp /;

use Cwd qw/ abs_path /;
use File::Basename qw/ dirname /;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Math::BigInt;
use POSIX qw/ WNOHANG /;
use Test::More ();
use Time::HiRes qw/ time /;
use Time::Local qw/ timegm /;

use Test::DynamoRL qw/ http http_end parse_response port /;

my $JS = JSON::PP->new->canonical->allow_bignum;
my $JSU = JSON::PP->new->utf8->allow_bignum;

###############################################################################

sub time_limit {
	my ($seconds) = @_;

	select STDERR; $| = 1;
	select STDOUT; $| = 1;

	$SIG{ALRM} = sub { die "test timed out\n" };
	alarm($seconds);
}

sub fail_without {
	my ($name, $problem) = @_;

	return unless $problem;

	Test::More::plan(tests => 1);
	Test::More::fail($name);
	Test::More::diag($problem);
	exit 1;
}

sub rl_test {
	my ($seconds, $plan, $conf, %o) = @_;

	time_limit($seconds);

	my $t = Test::DynamoRL->new()->has(@{$o{has} // [qw/ http proxy /]});

	$t->plan($plan) if defined $plan;
	$t->write_file_expand('nginx.conf', rl_conf($conf));

	return $t;
}

###############################################################################

# the variables of the fields of %%RL_LOG_FORMAT%%, by field name

my %LOG_FIELDS = (
	t => 'http_x_test', case => 'http_x_case', status => 'status',
	pid => 'pid', port => 'server_port', proto => 'server_protocol',
	uri => 'request_uri', msec => 'msec', body_bytes => 'body_bytes_sent',
	map({ $_ => "dynamo_rl_$_" } qw/ plane outcome admin_result route
		system_url engine_path instance_id /),
	attempt => 'dynamo_rl_attempt_id', deny => 'dynamo_rl_deny_reason',
	generation => 'dynamo_rl_snapshot_generation',
);

my %CONF;

%CONF = (
	RL_LOG_FORMAT => sub {
		my ($name, @fields) = @_;

		my @json = map {
			my ($k, $v) = split /=/, $_, 2;
			$v //= $LOG_FIELDS{$k} // die "no field \"$k\"\n";
			qq["$k":"\$$v"];
		} @fields;

		return "log_format $name escape=json '{" . join(',', @json) . "}';";
	},

	RL_ACCESS_LOG => sub {
		return $CONF{RL_LOG_FORMAT}->('rl', @_)
			. ' access_log %%TESTDIR%%/rl.log rl;';
	},

	RL_MAIN => sub {
		my (%o) = map { /=/ ? split(/=/, $_, 2) : ($_ => 1) } @_;

		my @bad = grep { !/^(?:workers|connections|faketime)$/ } keys %o;
		die "no option \"@bad\"\n" if @bad;

		return '%%TEST_GLOBALS%%'
			. ($o{faketime} ? ' ' . $CONF{RL_FAKETIME}->() : '')
			. (defined $o{workers}
				? " worker_processes $o{workers};" : '')
			. ' events {'
			. (defined $o{connections}
				? " worker_connections $o{connections};" : '')
			. ' }';
	},

	RL_HTTP => sub {
		my ($size, @params) = @_;

		die "no size\n" unless defined $size;

		return '%%TEST_GLOBALS_HTTP%% dynamo_rl_zone '
			. join(' ', "zone=rl:$size", @params) . ';';
	},

	RL_LISTEN => sub {
		my (@args) = @_;

		die "no port\n" unless @args && $args[0] =~ /^\d+$/;

		my $listen = '';

		for my $a (@args) {
			$listen .= $a =~ /^\d+$/ ? "; listen 127.0.0.1:$a" : " $a";
		}

		return substr($listen, 2) . '; server_name localhost;';
	},

	RL_REQUEST_PLANE => sub {
		my (@args) = @_;

		my %opt = (
			keepalive => ' proxy_http_version 1.1;'
				. ' proxy_set_header Connection "";',
			unbuffered => ' proxy_buffering off;',
			ungated => ' dynamo_rl_gate off;',
		);

		# as in examples/dynamo-rl.conf, with a test's read timeout

		$opt{sse} = $opt{keepalive} . $opt{unbuffered}
			. ' proxy_request_buffering off; proxy_read_timeout 60s;'
			. ' proxy_next_upstream error timeout;';

		return 'location /v1/ { dynamo_rl_plane request;'
			. ' proxy_pass http://frontend;'
			. join('', map { $opt{$_} // die "no option \"$_\"\n" }
				@args)
			. ' }';
	},

	RL_FRONTEND => sub {
		my ($keepalive) = @_;

		return 'upstream frontend { server 127.0.0.1:8081;'
			. (defined $keepalive ? " keepalive $keepalive;" : '')
			. ' }';
	},

	RL_LISTENER => sub {
		return 'upstream rl_listener { server 127.0.0.1:8082; }';
	},

	RL_UPSTREAMS => sub {
		return $CONF{RL_FRONTEND}->(@_) . ' ' . $CONF{RL_LISTENER}->();
	},

	RL_PROXY_KEEPALIVE => sub {
		my (@args) = @_;

		my %opt = (unbuffered => ' proxy_buffering off;');

		return 'proxy_http_version 1.1; proxy_set_header Connection "";'
			. join('', map { $opt{$_} // die "no option \"$_\"\n" }
				@args);
	},

	RL_FAKETIME => sub {
		return 'env FAKETIME_TIMESTAMP_FILE; env FAKETIME_NO_CACHE;'
			. ' env FAKETIME_DONT_FAKE_MONOTONIC;';
	},

	RL_NOT_FOUND => sub {
		my ($type) = @_;

		return 'location / { return 404; }' unless defined $type;

		my %body = (
			json => '{"message":"Not Found","type":"Not Found","code":404}',
			error => '{"error":"not_found","message":"no such endpoint"}',
		);

		die "no type \"$type\"\n" unless defined $body{$type};

		return 'location / { default_type application/json;'
			. " return 404 '$body{$type}'; }";
	},

	RL_DISCOVERY_PLANE => sub {
		return 'location = /v1/rl/workers { dynamo_rl_plane discovery;'
			. ' proxy_pass http://rl_listener; }';
	},

	RL_ADMIN_PLANE => sub {
		my (@args) = @_;

		return 'location /v1/rl/workers/ { dynamo_rl_plane admin;'
			. " dynamo_rl_discovery /_rl_discovery @args;"
			. ' proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;'
			. ' proxy_next_upstream off; }'
			. ' location = /_rl_discovery { internal;'
			. ' proxy_pass http://rl_listener/v1/rl/workers;'
			. ' subrequest_output_buffer_size 1m; }';
	},

	RL_CONTROL_PLANES => sub {
		my (@args) = @_;

		# both planes on one source: the discovery plane stores into
		# the snapshot the admin plane reads

		return 'location = /v1/rl/workers { dynamo_rl_plane discovery;'
			. " dynamo_rl_discovery /_rl_discovery @args;"
			. ' proxy_pass http://rl_listener; } '
			. $CONF{RL_ADMIN_PLANE}->(@args);
	},

	RL_ADMIN_LOCATION => sub {
		my ($fetch, @args) = @_;

		die "no discovery location\n" unless defined $fetch;

		return 'location /v1/rl/workers/ { dynamo_rl_plane admin;'
			. " dynamo_rl_discovery " . join(' ', $fetch, @args) . ';'
			. ' proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;'
			. ' proxy_next_upstream off; }';
	},

	RL_ADMIN_DOWN => sub {
		return $CONF{RL_ADMIN_LOCATION}->('/_rl_down', 'valid=0')
			. ' location = /_rl_down { internal;'
			. ' proxy_pass http://127.0.0.1:8099/v1/rl/workers; }';
	},

	RL_REQUEST_SERVER => sub {
		my ($port, @args) = @_;

		return 'server { ' . $CONF{RL_LISTEN}->($port) . ' '
			. $CONF{RL_REQUEST_PLANE}->(@args) . ' }';
	},

	RL_ROLLOUT_SERVER => sub {
		my ($port) = @_;

		return 'server { ' . $CONF{RL_LISTEN}->($port) . ' '
			. $CONF{RL_REQUEST_PLANE}->('sse') . ' '
			. $CONF{RL_NOT_FOUND}->('json') . ' }';
	},

	RL_ADMIN_SERVER => sub {
		my ($port, @args) = @_;

		return 'server { ' . $CONF{RL_LISTEN}->($port) . ' '
			. $CONF{RL_ADMIN_PLANE}->(@args) . ' }';
	},

	RL_API_SERVER => sub {
		my ($port, @names) = @_;

		return 'server { ' . $CONF{RL_LISTEN}->($port) . ' '
			. $CONF{RL_APIS}->(@names) . ' }';
	},

	RL_DISCOVERY_SOURCE => sub {
		my ($location, $url, $size) = @_;

		die "no url\n" unless defined $url;

		return "location = $location { internal; proxy_pass $url;"
			. (defined $size
				? " subrequest_output_buffer_size $size;" : '')
			. ' }';
	},

	RL_DISCOVERY_FETCH => sub {
		my ($up, $size) = @_;

		$up //= '127.0.0.1:8082';

		return $CONF{RL_DISCOVERY_SOURCE}->('/_rl_discovery',
			"http://$up/v1/rl/workers", $size);
	},

	RL_APIS => sub {
		my (@names) = @_;

		my %api = (
			gate => 'location = /rl/gate { dynamo_rl_gate_api; }',
			attempts => 'location /rl/attempts/'
				. ' { dynamo_rl_attempts_api; }',
			status => 'location = /rl/status { dynamo_rl_status; }',
			metrics => 'location = /metrics { dynamo_rl_metrics; }',
		);

		@names = qw/ gate attempts status metrics / unless @names;

		return join(' ', map { $api{$_} // die "no api \"$_\"\n" }
			@names);
	},
);

sub rl_conf {
	my ($text) = @_;

	$text =~ s{%%(RL_[A-Z_]+)((?: [^%\n]+)?)%%}{
		my ($name, @args) = ($1, split(' ', $2));
		($CONF{$name} // die "unknown macro %%$name%%\n")->(@args);
	}ge;

	return $text;
}

###############################################################################

sub raw {
	my ($method, $uri, %o) = @_;

	my $req = "$method $uri HTTP/1.1\r\nHost: localhost\r\n";
	my @h = @{$o{headers} // []};

	$req .= "Connection: close\r\n"
		unless grep { !ref && /^connection$/i } @h;

	while (my ($name, $value) = splice(@h, 0, 2)) {
		$req .= "$name: $value\r\n";
	}

	if (defined $o{body}) {
		$req .= "Content-Type: application/json\r\n"
			. 'Content-Length: ' . length($o{body}) . "\r\n";
	}

	return "$req\r\n" . ($o{body} // '');
}

sub call {
	my ($method, $uri, %o) = @_;

	my $port = delete $o{port} // 8080;
	my $raw = http(raw($method, $uri, %o),
		PeerAddr => '127.0.0.1:' . port($port));

	my $r = resp($raw);
	$r->{raw_body} = ($raw // '') =~ /\r\n\r\n(.*)\z/s ? $1 : '';

	return $r;
}

sub start {
	my ($method, $uri, %o) = @_;

	my $port = delete $o{port} // 8080;

	return http(raw($method, $uri, %o), start => 1,
		PeerAddr => '127.0.0.1:' . port($port));
}

sub attempt {
	my ($id, $body, %o) = @_;

	my $uri = delete $o{uri} // '/v1/completions';

	return call('POST', $uri, %o, body => $body,
		headers => [ @{$o{headers} // []}, 'X-Dynamo-Attempt-Id' => $id ]);
}

sub hold {
	my ($id, %o) = @_;

	return start('POST', '/v1/completions', %o, body => '{"prompt":"p"}',
		headers => [ 'X-Dynamo-Attempt-Id' => $id,
			'x-fake-scenario' => 'hang' ]);
}

sub resp {
	my ($raw) = @_;

	return (length($raw // '') ? parse_response($raw) : undef)
		// { status => 0, headers => {}, body => '' };
}

sub json {
	my ($r) = @_;
	return (eval { decode_json($r->{body}) } // {});
}

sub flat {
	my ($r, $code, $type) = @_;

	my $j = eval { decode_json($r->{body}) };

	return ref $j eq 'HASH'
		&& join(',', sort keys %$j) eq 'code,message,type'
		&& !ref $j->{message} && length $j->{message}
		&& $j->{type} eq $type
		&& $j->{code} == $code;
}

sub is_true {
	my ($v) = @_;
	return JSON::PP::is_bool($v) && $v;
}

sub is_false {
	my ($v) = @_;
	return JSON::PP::is_bool($v) && !$v;
}

sub iso_ms {
	my ($s) = @_;

	my ($y, $mo, $d, $h, $mi, $sec, $ms) = ($s // '')
		=~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z$/
		or return undef;

	return timegm($sec, $mi, $h, $d, $mo - 1, $y) * 1000 + $ms;
}

sub json_error {
	my ($r) = @_;
	my $j = eval { decode_json($r->{body}) } // {};
	return "$r->{status} " . ($j->{error} // '-');
}

sub attempt_record {
	my ($id, %o) = @_;

	my $r = Test::DynamoRL::http_json("/rl/attempts/$id",
		PeerAddr => '127.0.0.1:' . port($o{port} // 8070)) // {};

	return $r->{status} && $r->{status} == 200 ? $r->{json}
		: { http => $r->{status} };
}

sub api {
	my ($id, %o) = @_;

	my $r = call('GET', "/rl/attempts/$id", port => $o{port} // 8070);
	$r->{json} = eval { decode_json($r->{body}) } // {};

	return $r;
}

sub metrics {
	my ($port) = @_;

	my $r = call('GET', '/metrics', port => $port // 8070);

	my %m;

	for my $line (split /\n/, $r->{body} // '') {
		next if $line =~ /^#/;
		my ($name, $value) = $line =~ /^(\S+)\s+(\S+)$/ or next;
		$m{$name} = $value;
	}

	return \%m;
}

sub deny_reasons {
	return qw/ method bad_path bad_attempt_id duplicate_attempt
		ledger_full gate_closed discovery_unavailable unknown_worker
		ambiguous_worker worker_invalid worker_error no_system_url
		route_not_advertised discovery_invalid redirected cross_origin
		caller_scope bad_body unsupported_encoding metadata_upload_denied
		rid_mismatch /;
}

sub plane_reasons {
	return (
		request => [ qw/ method bad_path bad_attempt_id duplicate_attempt
			ledger_full gate_closed redirected bad_body
			unsupported_encoding metadata_upload_denied rid_mismatch / ],
		discovery => [ qw/ method bad_path discovery_invalid redirected
			caller_scope / ],
		admin => [ qw/ method bad_path discovery_unavailable
			unknown_worker ambiguous_worker worker_invalid worker_error
			no_system_url route_not_advertised redirected cross_origin
			caller_scope / ],
	);
}

sub duration_buckets {
	return qw/ 0.005 0.010 0.025 0.050 0.100 0.250 0.500 1.000 2.500
		5.000 10.000 30.000 60.000 120.000 300.000 600.000 1800.000
		3600.000 +Inf /;
}

sub samples {
	my ($text) = @_;

	my %m;

	for my $line (split /\n/, $text // '') {
		next if $line =~ /^#/ || $line !~ /\S/;

		my ($name, $labels, $value) =
			$line =~ /^([a-z_]+)(?:\{(.*)\})? (\S+)$/ or next;

		my %l = parse_labels($labels // '');
		my $key = $name . (%l ? '{' . join(',', map { "$_=$l{$_}" }
			sort keys %l) . '}' : '');

		$m{$key} = $value;
	}

	return \%m;
}

sub parse_labels {
	my ($s) = @_;

	my %l;

	while ($s =~ /\G([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)",?/gc) {
		$l{$1} = $2;
	}

	return %l;
}

sub promtool {
	my ($bin) = grep { -x } map { "$_/promtool" }
		split /:/, $ENV{PATH} // '/usr/bin';

	return $bin;
}

sub promtool_check {
	my ($t, $text) = @_;

	my $bin = promtool() // return (-1,
		'promtool is not installed (Debian package prometheus)');

	$t->write_file('metrics.txt', $text);

	my $file = $t->testdir() . '/metrics.txt';
	my $out = `$bin check metrics < $file 2>&1`;

	return ($? >> 8, $out);
}

sub concurrent {
	my ($port, @paths) = @_;

	my @s = map {
		http("POST $_ HTTP/1.1\r\nHost: localhost\r\n"
			. "Connection: close\r\n"
			. "Content-Type: application/json\r\n"
			. "Content-Length: 2\r\n\r\n{}",
			PeerAddr => '127.0.0.1:' . port($port), start => 1)
	} @paths;

	return map { parse_response(http_end($_)) // { status => 0 } } @s;
}

sub read_until {
	my ($s, $re, $seconds) = @_;

	my $sel = IO::Select->new($s);
	my $deadline = time() + Test::DynamoRL::scale($seconds);
	my $buf = '';

	while (!defined $re || $buf !~ $re) {
		my $left = $deadline - time();
		last if $left <= 0 || !$sel->can_read($left);
		last unless sysread($s, $buf, 65536, length $buf);
	}

	return $buf;
}

# the standard output of a command, its stderr dropped, with its status
# in $?; undef if it could not fork

sub _stdout {
	my (@cmd) = @_;

	my $pid = open(my $fh, '-|') // return undef;

	if ($pid == 0) {
		open STDERR, '>', '/dev/null';
		{ exec @cmd; }
		POSIX::_exit(127);
	}

	local $/;
	my $out = <$fh> // '';
	close $fh;

	return $out;
}

sub output {
	my $out = _stdout(@_) // return '';
	$out =~ s/\s+\z//;
	return $out;
}

sub curl_response {
	my $out = _stdout(@_) // die "cannot fork: $!\n";
	return (parse_response($out), $out);
}

###############################################################################

sub vllm_routes {
	return sort qw/
		liveness_probe pause_generation resume_generation flush_cache
		update_weights_from_disk get_weight_version
		update_weights_from_distributed init_weights_update_group
		destroy_weights_update_group update_weights_from_tensor
		abort_request
	/;
}

sub worker {
	my (%o) = @_;

	my $w = delete $o{w} // 0;
	my $id = delete $o{id};
	my $url = delete $o{url} // 'http://127.0.0.1:' . port(8091 + $w);

	my %e = (
		namespace => 'dynamo',
		component => 'backend',
		endpoint => 'rl',
		instance_id => Math::BigInt->new($id),
		transport => { tcp => "127.0.0.1:9999/$id/rl" },
		request_plane_url => 'dyn://dynamo.backend.rl',
		system_url => $url,
		model => 'Qwen/Qwen3-0.6B',
		routes => [ vllm_routes() ],
		world_size => 1,
	);

	for my $k (keys %o) {
		if (defined $o{$k}) {
			$e{$k} = $o{$k};

		} else {
			delete $e{$k};
		}
	}

	return \%e;
}

sub doc {
	my (@workers) = @_;

	return '{"protocol_version":1,"namespace":"dynamo","workers":['
		. join(',', map { $JS->encode($_) } @workers) . ']}';
}

###############################################################################

sub slurp {
	my ($path) = @_;

	open my $fh, '<', $path or return undef;
	local $/;
	return scalar <$fh>;
}

sub json_lines {
	my ($path, %o) = @_;

	my $json = $o{bytes} ? $JS : $JSU;

	# a line still being written is left for the next call

	open my $fh, '<', $path or return ();
	return map { $json->decode($_) } grep { /\S/ && /\n\z/ } <$fh>;
}

sub err_since {
	my ($t, $off) = @_;

	open my $fh, '<', $t->testdir() . '/error.log' or return ();
	seek($fh, $off // 0, 0);
	return <$fh>;
}

# the log grows during a test and is read again and again while waiting:
# only what was added since the last call is decoded

my %FRONTEND;

sub frontend_records {
	my ($t) = @_;

	my $path = $t->fake_dir() . '/frontend.log';
	my $f = $FRONTEND{$path} //= { off => 0, records => [] };

	open my $fh, '<', $path or return [];

	$f = $FRONTEND{$path} = { off => 0, records => [] }
		if -s $fh < $f->{off};

	seek($fh, $f->{off}, 0);

	while (my $line = <$fh>) {
		last unless $line =~ /\n\z/;
		$f->{off} += length $line;
		push @{$f->{records}}, $JSU->decode($line) if $line =~ /\S/;
	}

	return $f->{records};
}

sub frontend_requests {
	my ($t) = @_;
	return scalar grep { !exists $_->{event} } @{frontend_records($t)};
}

sub forwarded {
	my ($t, $id) = @_;

	return scalar grep { !exists $_->{event}
		&& ($_->{headers}{'x-request-id'} // '') eq $id }
		@{frontend_records($t)};
}

sub record_with {
	my ($t, $name, $value) = @_;

	return undef unless defined $value;

	my @r = grep { !exists $_->{event}
		&& ($_->{headers}{$name} // '') eq $value }
		@{frontend_records($t)};

	return $r[0];
}

sub listener_fetches {
	my ($t) = @_;
	return scalar @{$t->fake_records('listener')};
}

sub worker_counts {
	my ($t) = @_;
	return { map { $_ => scalar @{$t->fake_records("worker-$_")} } 0 .. 2 };
}

sub worker_records_since {
	my ($t, $before) = @_;

	my @new;

	for my $w (sort keys %$before) {
		my $recs = $t->fake_records("worker-$w");
		push @new, @$recs[$before->{$w} .. $#$recs];
	}

	return @new;
}

sub worker_calls {
	my ($t, $before) = @_;

	return map {
		my $recs = $t->fake_records("worker-$_");
		($_ => [ @$recs[$before->{$_} .. $#$recs] ]);
	} sort keys %$before;
}

sub worker_state {
	my ($t, $n) = @_;
	return decode_json($t->read_file("fake/worker-$n.state"));
}

# one admin-plane call, tagged with an "X-Test" header that the access
# log "rl.log" records as "t"; returns the response with "json" (a hash,
# {} if none), the access-log entry ("log"), the new non-debug error-log
# lines ("err") and the worker records it caused ("fwd")

my $SEQ = 0;

sub admin_call {
	my ($t, $method, $path, %o) = @_;

	my $seq = ++$SEQ;
	my $body = $o{body} // '{}';
	my $port = port($o{port} // 8080);

	my $before = worker_counts($t);
	my $off = -s $t->testdir() . '/error.log';

	my $req = "$method $path HTTP/1.1\r\nHost: localhost\r\n"
		. "Connection: close\r\nX-Test: $seq\r\n" . ($o{headers} // '');

	$req .= $method eq 'GET' ? "\r\n" : "Content-Type: application/json\r\n"
		. 'Content-Length: ' . length($body) . "\r\n\r\n$body";

	my $res = resp(http($req, PeerAddr => "127.0.0.1:$port"));

	$res->{json} = eval { decode_json($res->{body}) } // {};
	$res->{json} = {} unless ref $res->{json} eq 'HASH';

	$res->{log} = $t->wait_for(sub {
		(grep { $_->{t} eq $seq }
			json_lines($t->testdir() . '/rl.log', bytes => 1))[0];
	}, 5) // {};

	$res->{err} = [ grep { !/\[debug\]/ } err_since($t, $off) ];
	$res->{fwd} = [ worker_records_since($t, $before) ];

	return $res;
}

###############################################################################

sub faketime {
	my ($t) = @_;

	my ($lib) = grep { -f }
		glob('/usr/lib/*/faketime/libfaketime.so.1'),
		'/usr/lib/faketime/libfaketime.so.1';

	die "libfaketime is missing: install Debian's faketime"
		. " (make test-deps)\n" unless defined $lib;

	my $dir = $t->testdir();

	set_clock($t, '+0');

	# under make asan, libfaketime comes before the sanitizer's runtime
	# in LD_PRELOAD: the other way round, its initialization hangs in
	# every program (Debian 12's libfaketime 0.9.10 and gcc 12's
	# libasan), so the sanitizer is told not to insist on being first

	$t->asan_options('verify_asan_link_order=0')
		if $ENV{TEST_NGINX_PRELOAD};

	$ENV{TEST_NGINX_PRELOAD} = join ' ', grep { defined && length }
		$lib, $ENV{TEST_NGINX_PRELOAD};

	# the sanitizer's reports of worker processes, which run as "nobody"
	# when the tests run as root, must be able to land in the test
	# directory

	chmod(01777, $dir) or die "cannot chmod $dir: $!\n";

	$ENV{FAKETIME_TIMESTAMP_FILE} = "$dir/faketime.rc";
	$ENV{FAKETIME_NO_CACHE} = 1;
	$ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
}

# libfaketime reads the file on every call (FAKETIME_NO_CACHE): it is
# replaced, never written in place

sub set_clock {
	my ($t, $offset) = @_;

	my $rc = $t->testdir() . '/faketime.rc';

	open my $fh, '>', "$rc.tmp" or die "cannot create $rc.tmp: $!\n";
	print $fh "$offset\n";
	close $fh or die "cannot write $rc.tmp: $!\n";
	rename("$rc.tmp", $rc) or die "cannot rename $rc.tmp: $!\n";
}

sub clock_is {
	my ($offset, %o) = @_;

	return Test::DynamoRL::wait_for(sub {
		my $j = json(call('GET', '/rl/status', port => $o{port}));
		my $ms = iso_ms($j->{time} // '') // return;
		return abs($ms - (time() + $offset) * 1000) < 5000;
	}, 10);
}

# an attempt record after a step back of nginx's wall clock during an
# attempt that took $real seconds: duration_ms is its length (at least
# 1.5 s), "ended" is shown and is "started" plus duration_ms (3 tests)

sub step_times {
	my ($a, $real) = @_;

	my $d = $a->{duration_ms} // -1;
	my $iso = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

	Test::More::ok($d >= 1500 && $d <= ($real + 1) * 1000,
		"backward step: duration_ms $d, the attempt's length");
	Test::More::like($a->{ended} // '', $iso, 'backward step: ended shown');
	Test::More::ok(abs((iso_ms($a->{ended}) // 0)
		- (iso_ms($a->{started}) // 0) - $d) <= 1,
		'backward step: ended minus started is duration_ms');
}

###############################################################################

my $REFRESH = abs_path(dirname(__FILE__) . '/../../../../examples/rl-refresh');
my (%REFRESH_PIDS, $REFRESH_RUNS);

sub refresh_python {
	my $python = $ENV{TEST_PYTHON} // 'python3';

	return system("$python -c 'import sys; "
		. "sys.exit(sys.version_info < (3, 6))' >/dev/null 2>&1") == 0
		? $python : undef;
}

sub refresh_start {
	my ($t, @args) = @_;

	my $proxy;
	($proxy, @args) = @args[1 .. $#args] if @args && $args[0] eq 'proxy';

	my $file = $t->testdir() . '/refresh.' . ++$REFRESH_RUNS . '.out';
	my $python = $ENV{TEST_PYTHON} // 'python3';

	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', $file or POSIX::_exit(126);
		open STDERR, '>&', \*STDOUT;

		for (qw/ http_proxy HTTP_PROXY https_proxy HTTPS_PROXY
			all_proxy ALL_PROXY /)
		{
			if (defined $proxy) {
				$ENV{$_} = $proxy;

			} else {
				delete $ENV{$_};
			}
		}

		delete $ENV{$_} for qw/ no_proxy NO_PROXY /;

		{ exec $python, $REFRESH, @args; }
		print STDERR "cannot exec $python: $!\n";
		POSIX::_exit(127);
	}

	$REFRESH_PIDS{$pid} = $$;

	return { pid => $pid, file => $file };
}

sub refresh_args {
	my ($ver) = @_;

	return ('--model-path', "/models/policy-$ver", '--weight-version', $ver,
		'--lease', '30s', '--timeout', '10', '--drain-timeout', '10',
		'--poll-interval', '0.05');
}

sub refresh_sequence {
	return map { "/engine/$_" } qw/ pause_generation
		update_weights_from_disk flush_cache resume_generation
		get_weight_version /;
}

sub refresh_replicas {
	my ($args, @gateways) = @_;

	my $o = @$args && ref $args->[-1] eq 'HASH' ? pop @$args : {};

	return @{$o->{replicas} // [ map { ('--gateway', $_) } @gateways ]};
}

sub refresh_failure {
	my ($out) = @_;

	my @lines = $out =~ /^(rl-refresh: FAILED at step .*)$/mg;

	return @lines == 1 ? $lines[0] : join(' | ', @lines);
}

sub refresh_failed {
	my ($name, $res, %o) = @_;

	Test::More::is($res->{rc}, $o{rc}, "$name: exit $o{rc}")
		or Test::More::diag($res->{out});

	my $line = refresh_failure($res->{out});

	Test::More::like($line,
		qr/^rl-refresh: FAILED at step \Q$o{step}\E, \Q$o{who}\E: /,
		"$name: step and who");

	return $line;
}

sub refresh_finish {
	my ($run) = @_;

	my $status;

	my $done = Test::DynamoRL::wait_for(sub {
		waitpid($run->{pid}, WNOHANG) == $run->{pid} or return;
		$status = $?;
		return 1;
	}, 60);

	unless ($done) {
		kill 'KILL', $run->{pid};
		waitpid($run->{pid}, 0);
		$status = -1;
	}

	delete $REFRESH_PIDS{$run->{pid}};

	return { rc => $status == -1 ? -1 : $status >> 8,
		out => refresh_output($run) };
}

sub refresh_output {
	my ($run) = @_;

	open my $fh, '<', $run->{file} or return '';
	local $/;
	return <$fh> // '';
}

# a forked child of the test that ends leaves the test's runs alone

END {
	for my $pid (grep { $REFRESH_PIDS{$_} == $$ } keys %REFRESH_PIDS) {
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
}

###############################################################################

sub run_timed {
	my ($cmd, $log, $seconds, %o) = @_;

	my $kids = $o{kids} // [];

	my $pid = fork() // return "cannot fork: $!";

	if ($pid == 0) {
		setpgrp(0, 0);
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', $log;
		open STDERR, '>&', \*STDOUT;
		{ exec @$cmd; }
		print STDERR "cannot exec $cmd->[0]: $!\n";
		POSIX::_exit(127);
	}

	push @$kids, $pid;

	my $done = Test::DynamoRL::wait_for(sub {
		waitpid($pid, WNOHANG) == $pid
	}, $seconds, $o{poll} // 0.2);

	@$kids = grep { $_ != $pid } @$kids;

	return $? >> 8 if $done;

	kill 'KILL', -$pid;
	kill 'KILL', $pid;
	waitpid($pid, 0);

	return "timed out after $seconds s";
}

sub example_conf {
	my ($t, $name) = @_;

	my $top = abs_path(dirname(__FILE__) . '/../../../..');
	my $dir = $ENV{TEST_NGINX_MODULES} // "$top/build";
	my $so = (abs_path($dir) // $dir) . '/ngx_http_dynamo_rl_module.so';
	my $d = $t->testdir();

	my $conf = slurp("$top/examples/$name")
		// die "examples/$name: $!\n";

	$conf =~ s/\@MODULE\@/$so/g;
	$conf =~ s/\@PREFIX\@/$d/g;
	$conf =~ s/\@RL_LISTENER\@/'127.0.0.1:' . port(8082)/ge;

	return $conf;
}

sub fork_server {
	my ($port, $name, $conn, %o) = @_;

	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
		Listen => $o{backlog} // 128, ReuseAddr => 1, Proto => 'tcp')
		or die "$name: cannot listen on $port: $!\n";

	my $parent = getppid();
	local $SIG{CHLD} = sub { 1 while waitpid(-1, WNOHANG) > 0 };
	local $SIG{PIPE} = 'IGNORE';

	my $sel = IO::Select->new($l);

	while (getppid() == $parent) {
		next unless $sel->can_read(0.5);

		my $c = $l->accept() or next;
		my $pid = fork();

		if (defined $pid && $pid == 0) {
			$SIG{CHLD} = 'DEFAULT';
			close $l;
			eval { $conn->($c); };
			POSIX::_exit(0);
		}

		close $c;
	}
}

###############################################################################

push @EXPORT_OK, qw/ worker_call fwd error t_conf t_server t_admin
	run_gateway split_at chunked has_curl_h2 curl_h2 /;

$CONF{RL_DISCOVERY_FILE} = sub {
	my ($location, $file) = @_;

	die "no file\n" unless defined $file;

	return "location = $location { internal; alias %%TESTDIR%%/$file;"
		. ' default_type application/json; log_not_found off; }';
};

sub worker_call {
	my ($t, $method, $uri, %o) = @_;

	my $before = worker_counts($t);
	my $r = call($method, $uri, %o);
	my %calls = worker_calls($t, $before);

	$r->{fwd} = [ map { my $w = $_; map { "$w $_->{uri}" } @{$calls{$w}} }
		sort keys %calls ];

	return $r;
}

sub fwd {
	my ($r) = @_;
	return join(', ', @{$r->{fwd}});
}

sub error {
	my ($r) = @_;
	my $j = eval { decode_json($r->{body}) };
	return ref $j eq 'HASH' ? $j->{error} // '' : '';
}

sub t_conf {
	my ($zone, @text) = @_;

	return "%%TEST_GLOBALS%%\nevents { }\nhttp {\n"
		. "    %%TEST_GLOBALS_HTTP%%\n"
		. "    dynamo_rl_zone zone=rl:$zone;\n"
		. join('', @text) . "}\n";
}

sub t_server {
	my ($port, @text) = @_;

	return "    server {\n        listen 127.0.0.1:$port;\n"
		. join('', @text) . "    }\n";
}

sub t_admin {
	my ($prefix, $source) = @_;

	my @lines = ('dynamo_rl_plane admin;');
	push @lines, "dynamo_rl_discovery $source;" if defined $source;
	push @lines, 'proxy_pass $dynamo_rl_system_url$dynamo_rl_engine_path;';

	return "        location $prefix {\n"
		. join('', map { "            $_\n" } @lines) . "        }\n";
}

sub run_gateway {
	my ($t, $log, $cmd, %o) = @_;

	my $top = abs_path(dirname(__FILE__) . '/../../../..');
	my $dir = $ENV{TEST_NGINX_MODULES} // "$top/build";
	my $nginx = $ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx';
	my $d = $t->testdir();

	if ($ENV{TEST_NGINX_PRELOAD}) {
		$t->write_file('nginx-preload', "#!/bin/sh\n"
			. "LD_PRELOAD=$ENV{TEST_NGINX_PRELOAD} "
			. "ASAN_OPTIONS=detect_leaks=0 exec $nginx \"\$@\"\n");
		chmod 0755, "$d/nginx-preload";
		$nginx = "$d/nginx-preload";
	}

	my $pid = fork() // die "cannot fork: $!\n";

	return $pid if $pid;

	POSIX::setsid() if $o{setsid};

	$SIG{INT} = 'DEFAULT';

	chdir $o{dir} if defined $o{dir};
	open STDIN, '<', '/dev/null';
	open STDOUT, '>', $log or POSIX::_exit(126);
	open STDERR, '>&', \*STDOUT;

	delete $ENV{$_} for qw/ DYNAMO_FRONTEND DYNAMO_RL_LISTENER /,
		@{$o{unset} // []};

	$ENV{$_} = $o{env}{$_} for keys %{$o{env} // {}};
	$ENV{TMPDIR} = $d;
	$ENV{NGX_BIN} = $nginx;
	$ENV{DYNAMO_RL_MODULE} = (abs_path($dir) // $dir)
		. '/ngx_http_dynamo_rl_module.so';

	{ exec @$cmd; }
	print "cannot exec $cmd->[0]: $!\n";
	POSIX::_exit(127);
}

sub split_at {
	my ($s, @at) = @_;

	my @parts;
	my $from = 0;

	for my $at (@at, length $s) {
		push @parts, substr($s, $from, $at - $from);
		$from = $at;
	}

	return @parts;
}

sub chunked {
	my ($uri, $parts, $id, %o) = @_;

	my $req = raw('POST', $uri, headers => [
		'Content-Type' => 'application/json',
		'Transfer-Encoding' => 'chunked',
		'X-Dynamo-Attempt-Id' => $id, @{$o{headers} // []} ]);
	my $body = join('', map { sprintf("%x\r\n%s\r\n", length, $_) } @$parts)
		. "0\r\n\r\n";

	return resp(http($req, body => $body,
		PeerAddr => '127.0.0.1:' . port($o{port} // 8080)));
}

sub has_curl_h2 {
	return system('curl --version 2>/dev/null | grep -q HTTP2') == 0;
}

sub curl_h2 {
	my ($t, $uri, $body, $id, @headers) = @_;

	$t->write_file('h2.body', $body);

	# the response head only (-D -), the body to /dev/null

	my $head = output('curl', '-sS', '--http2-prior-knowledge',
		'-o', '/dev/null', '-D', '-',
		'-H', 'content-type: application/json',
		'-H', "x-dynamo-attempt-id: $id",
		(map { ('-H', $_) } @headers),
		'--data-binary', '@' . $t->testdir() . '/h2.body',
		'http://127.0.0.1:' . port(8085) . $uri);

	my ($status) = $head =~ m{^HTTP/2 (\d{3})}m;

	return ($status, $head);
}

###############################################################################

1;
