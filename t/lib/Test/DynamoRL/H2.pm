package Test::DynamoRL::H2;

# (C) ngx_dynamo_rl_module developers

# A minimal HTTP/2 client with prior knowledge, enough to open streams,
# read their DATA and reset one with RST_STREAM: literal header fields
# without Huffman coding on the way out; on the way in, only :status is
# decoded (nginx sends it first, indexed or as a literal), the other
# header fields are not needed.
#
#     Test::DynamoRL::H2->new($addr, [window => $bytes])  connects and
#                           sends the preface and SETTINGS; undef if the
#                           connection fails.  With "window", SETTINGS
#                           carries SETTINGS_INITIAL_WINDOW_SIZE $bytes
#                           and no WINDOW_UPDATE is ever sent; without
#                           it, the window of every DATA frame is given
#                           back (stream and connection)
#     $h->request($path, $body, @headers)  a POST of a JSON body on a
#                           new stream; returns the stream id
#     $h->rst($sid, $code)  RST_STREAM; the stream's window is no longer
#                           given back
#     $h->pump($cond, $seconds)  reads frames until $cond->() is true
#                           (returns 1) or $seconds pass (returns 0)
#     $h->data($sid), status($sid), ended($sid), rst_code($sid)  what a
#                           stream received: its DATA, its :status,
#                           whether it ended (END_STREAM or RST_STREAM),
#                           the RST_STREAM error code
#     $h->{goaway}          true once a GOAWAY has been received
#     $h->finish()          GOAWAY and close

###############################################################################

use warnings;
use strict;

use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/ time /;

sub new {
	my ($class, $addr, %o) = @_;

	my $s = IO::Socket::INET->new(Proto => 'tcp', PeerAddr => $addr,
		Timeout => 5) or return undef;
	binmode $s;

	my $self = bless { s => $s, buf => '', next => 1, streams => {},
		window => $o{window} }, $class;

	$self->put("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
	$self->frame(4, 0, 0, defined $o{window}
		? pack('nN', 4, $o{window}) : '');

	return $self;
}

sub put {
	my ($self, $data) = @_;

	local $SIG{PIPE} = 'IGNORE';

	while (length $data) {
		my $n = syswrite($self->{s}, $data) or return;
		substr($data, 0, $n, '');
	}
}

sub frame {
	my ($self, $type, $flags, $sid, $payload) = @_;

	# 24-bit length and 8-bit type in one 32-bit word

	$self->put(pack('NCN', length($payload) << 8 | $type, $flags, $sid)
		. $payload);
}

sub int_enc {
	my ($v, $bits, $first) = @_;

	my $max = (1 << $bits) - 1;
	return chr($first | $v) if $v < $max;

	my $out = chr($first | $max);
	$v -= $max;

	while ($v >= 128) {
		$out .= chr(($v & 0x7f) | 0x80);
		$v >>= 7;
	}

	return $out . chr($v);
}

sub hpack {
	my (@h) = @_;

	my $out = '';

	while (my ($n, $v) = splice(@h, 0, 2)) {
		$out .= "\x00" . int_enc(length $n, 7, 0) . $n
			. int_enc(length $v, 7, 0) . $v;
	}

	return $out;
}

sub request {
	my ($self, $path, $body, @headers) = @_;

	my $sid = $self->{next};
	$self->{next} += 2;
	$self->{streams}{$sid} = { data => '', ended => 0 };

	$self->frame(1, 0x4, $sid, hpack(':method' => 'POST',
		':scheme' => 'http', ':path' => $path,
		':authority' => 'localhost',
		'content-type' => 'application/json',
		'content-length' => length $body, @headers));
	$self->frame(0, 0x1, $sid, $body);

	return $sid;
}

sub rst {
	my ($self, $sid, $code) = @_;

	$self->frame(3, 0, $sid, pack('N', $code));
	$self->{streams}{$sid}{reset} = 1;
}

sub finish {
	my ($self) = @_;

	$self->frame(7, 0, 0, pack('NN', $self->{next} - 2, 0));
	CORE::close($self->{s});
}

sub data { $_[0]{streams}{$_[1]}{data} }
sub status { $_[0]{streams}{$_[1]}{status} }
sub ended { $_[0]{streams}{$_[1]}{ended} }
sub rst_code { $_[0]{streams}{$_[1]}{rst} }

# reads frames until $cond is true or $seconds pass

sub pump {
	my ($self, $cond, $seconds) = @_;

	my $sel = IO::Select->new($self->{s});
	my $deadline = time() + $seconds;

	for (;;) {
		return 1 if $cond->();

		my $left = $deadline - time();
		return 0 if $left <= 0 || !$sel->can_read($left);

		my $n = sysread($self->{s}, $self->{buf}, 65536,
			length $self->{buf});
		return $cond->() ? 1 : 0 unless $n;

		$self->parse();
	}
}

sub parse {
	my ($self) = @_;

	while (length $self->{buf} >= 9) {
		my ($lt, $flags, $sid) = unpack('NCN', $self->{buf});
		my ($len, $type) = ($lt >> 8, $lt & 0xff);
		$sid &= 0x7fffffff;

		last if length $self->{buf} < 9 + $len;

		my $p = substr($self->{buf}, 9, $len);
		substr($self->{buf}, 0, 9 + $len, '');

		my $st = $self->{streams}{$sid};

		if ($type == 4 && !($flags & 0x1)) {
			$self->frame(4, 0x1, 0, '');

		} elsif ($type == 6 && !($flags & 0x1)) {
			$self->frame(6, 0x1, 0, $p);

		} elsif ($type == 7) {
			$self->{goaway} = 1;

		} elsif ($type == 0 && $st) {
			$p = substr($p, 1, length($p) - 1 - ord $p) if $flags & 0x8;
			$st->{data} .= $p;
			$st->{ended} = 1 if $flags & 0x1;

			# give the window back, stream and connection, unless
			# the window is fixed or the stream was reset

			if ($len && !$st->{reset} && !defined $self->{window}) {
				$self->frame(8, 0, $sid, pack('N', $len));
				$self->frame(8, 0, 0, pack('N', $len));
			}

		} elsif ($type == 1 && $st) {
			my $block = $p;
			$block = substr($block, 1, length($block) - 1 - ord $block)
				if $flags & 0x8;
			$block = substr($block, 5) if $flags & 0x20;

			$st->{status} //= status_of($block);
			$st->{ended} = 1 if $flags & 0x1;

		} elsif ($type == 3 && $st) {
			$st->{ended} = 1;
			$st->{rst} = unpack('N', $p);
		}
	}
}

# :status, the first field nginx sends: an indexed static entry
# (8 to 14), or a literal with indexed name 8 and a raw 3-digit value

sub status_of {
	my ($block) = @_;

	my %static = (8 => 200, 9 => 204, 10 => 206, 11 => 304, 12 => 400,
		13 => 404, 14 => 500);

	my $b = ord $block;

	return $static{$b & 0x7f} if $b & 0x80;

	return $1 + 0 if $block =~ /\A[\x48\x08\x18]\x03(\d{3})/;

	return undef;
}

###############################################################################

1;
