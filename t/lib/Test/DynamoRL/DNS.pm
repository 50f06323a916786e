package Test::DynamoRL::DNS;

# (C) ngx_dynamo_rl_module developers

# A tiny DNS responder for the tests (issue 25): UDP on a free loopback
# port, A and AAAA answers from a table the test changes while it runs,
# written with pack/unpack (Net::DNS is not installed).
#
#     my $dns = Test::DynamoRL::DNS->new($t, port => 8353)->start();
#     $dns->set('store.test', A => '127.0.0.1');     # the answers of a name
#     $dns->set('store.test', AAAA => '::1');        # (A and AAAA apart)
#     $dns->set('store.test', A => undef);           # none: NOERROR, empty
#     $dns->silent('slow.test');                     # never answered
#     $dns->port()                                    # its port
#     $dns->queries($name)                            # queries seen so far
#     $dns->stop()                                    # SIGTERM to its pid
#
# A name not in the table is answered NXDOMAIN.  Answers have a TTL of
# 1 s.  The table is a file the responder reads again for each query, so
# a change is seen by the next query; each query is appended to a log
# ("name TYPE") that queries() counts.  The responder is a child process
# of the test, stopped by its pid when $t stops, and it exits by itself
# once the test process is gone.

###############################################################################

use warnings;
use strict;

use IO::Select;
use IO::Socket::IP;
use POSIX qw/ _exit WNOHANG /;
use Socket qw/ AF_INET6 inet_aton inet_pton /;

use Test::DynamoRL ();

my %TYPE = (1 => 'A', 28 => 'AAAA');

###############################################################################

sub new {
	my ($class, $t, %o) = @_;

	my $self = bless {
		port => Test::DynamoRL::port($o{port} // 8353),
		dir => $t->testdir(),
		table => {},
		owner => $$,
	}, $class;

	$self->_write();
	$t->at_stop(sub { $self->stop() });

	return $self;
}

sub port {
	my ($self) = @_;
	return $self->{port};
}

sub set {
	my ($self, $name, $type, @values) = @_;

	$self->{table}{lc $name}{$type} = [ grep { defined } @values ];
	delete $self->{table}{lc $name}{silent};
	$self->_write();

	return $self;
}

sub silent {
	my ($self, $name) = @_;

	$self->{table}{lc $name} = { silent => 1 };
	$self->_write();

	return $self;
}

sub queries {
	my ($self, $name) = @_;

	open my $fh, '<', "$self->{dir}/dns-queries.log" or return 0;
	my $n = grep { /^\Q$name\E / } <$fh>;
	close $fh;

	return $n;
}

# the table, one line each: "name TYPE value..." or "name silent"

sub _write {
	my ($self) = @_;

	my $f = "$self->{dir}/dns-table";

	open my $fh, '>', "$f.tmp" or die "$f.tmp: $!\n";

	for my $name (sort keys %{$self->{table}}) {
		my $e = $self->{table}{$name};

		if ($e->{silent}) {
			print $fh "$name silent\n";
			next;
		}

		print $fh join(' ', $name, $_, @{$e->{$_}}) . "\n"
			for sort keys %$e;
	}

	close $fh;
	rename "$f.tmp", $f or die "$f: $!\n";
}

sub _read {
	my ($self) = @_;

	my %table;

	open my $fh, '<', "$self->{dir}/dns-table" or return {};

	while (<$fh>) {
		my ($name, $type, @values) = split;
		next unless defined $type;
		$table{$name}{$type} = $type eq 'silent' ? 1 : \@values;
	}

	close $fh;

	return \%table;
}

sub start {
	my ($self) = @_;

	my $s = IO::Socket::IP->new(LocalHost => '127.0.0.1',
		LocalPort => $self->{port}, Proto => 'udp')
		or die "cannot listen on udp 127.0.0.1:$self->{port}: $@\n";

	my $parent = $$;
	my $pid = fork() // die "cannot fork: $!\n";

	if ($pid == 0) {
		$SIG{TERM} = sub { _exit(0) };
		$self->_serve($s, $parent);
		_exit(0);
	}

	close $s;
	$self->{pid} = $pid;

	return $self;
}

sub stop {
	my ($self) = @_;

	return $self if $self->{owner} != $$;

	if (my $pid = delete $self->{pid}) {
		kill 'TERM', $pid;
		Test::DynamoRL::wait_for(sub { waitpid($pid, WNOHANG) != 0 }, 10)
			or kill 'KILL', $pid;
		waitpid($pid, WNOHANG);
	}

	return $self;
}

sub _serve {
	my ($self, $s, $parent) = @_;

	my $sel = IO::Select->new($s);

	while (getppid() == $parent) {
		next unless $sel->can_read(0.5);

		my $from = $s->recv(my $q, 512) or next;
		my $reply = $self->_answer($q);

		$s->send($reply, 0, $from) if defined $reply;
	}
}

# one query: the header, one question; the reply repeats the question

sub _answer {
	my ($self, $q) = @_;

	return undef if length($q) < 12;

	my ($id, $flags, $qd) = unpack('n n n', $q);
	return undef if $qd != 1 || ($flags & 0x8000);

	my ($pos, @labels) = (12);

	while (1) {
		return undef if $pos >= length($q);
		my $len = ord(substr($q, $pos, 1));
		$pos++;
		last if $len == 0;
		return undef if $len > 63 || $pos + $len > length($q);
		push @labels, substr($q, $pos, $len);
		$pos += $len;
	}

	return undef if $pos + 4 > length($q);

	my ($qtype) = unpack('n', substr($q, $pos, 2));
	my $question = substr($q, 12, $pos + 4 - 12);
	my $name = lc join('.', @labels);
	my $type = $TYPE{$qtype} // $qtype;

	if (open my $fh, '>>', "$self->{dir}/dns-queries.log") {
		print $fh "$name $type\n";
		close $fh;
	}

	my $e = $self->_read()->{$name};

	return undef if $e && $e->{silent};

	my ($rcode, @rr) = (0);

	if (!$e) {
		$rcode = 3;

	} else {
		for my $v (@{$e->{$type} // []}) {
			my $rdata = $type eq 'A' ? inet_aton($v)
				: inet_pton(AF_INET6, $v);
			push @rr, pack('n n n N n', 0xc00c, $qtype, 1, 1,
				length($rdata)) . $rdata;
		}
	}

	# QR, AA, RD as asked, RA

	return pack('n n n n n n', $id, 0x8480 | ($flags & 0x0100) | $rcode,
		1, scalar(@rr), 0, 0) . $question . join('', @rr);
}

###############################################################################

1;

###############################################################################
