#!/usr/bin/perl

# (C) ngx_dynamo_rl_module developers

# Tests for the Debian package of "make deb": it is built with util/build-deb
# when build/ has none for the module's version, installed into the system
# nginx with dpkg, checked with dpkg -s and dpkg -L, and then nginx -t must
# accept examples/dynamo-rl.conf loading the module from
# /usr/lib/nginx/modules, directly and through the package's
# modules-enabled symlink.  The package is purged at the end, so that
# the system is left as it was found.
#
# Installing into the system needs root: other users skip this file.  Only
# nginx -t runs, nothing listens.

###############################################################################

use warnings;
use strict;

use Test::More;

use Cwd qw/ abs_path /;
use Fcntl qw/ :flock /;
use File::Basename qw/ dirname /;
use File::Temp qw/ tempdir /;
use POSIX ();

use lib 't/lib';
use Test::DynamoRL ();
use Test::DynamoRL::Fixture qw/ slurp /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

plan(skip_all => 'installs a package into the system nginx: run as root')
	if $> != 0;

my $REPO = abs_path(dirname(__FILE__) . '/..');
my $PKG = 'libnginx-mod-http-dynamo-rl';
my $NGINX = '/usr/sbin/nginx';
my $SO = '/usr/lib/nginx/modules/ngx_http_dynamo_rl_module.so';
my $SNIPPET = '/usr/share/nginx/modules-available/mod-http-dynamo-rl.conf';
my $ENABLED = '/etc/nginx/modules-enabled/50-mod-http-dynamo-rl.conf';
my $STATE_DIR = '/var/lib/nginx/dynamo-rl';

plan(tests => 43);

# one run at a time on this machine: the package is system-wide state

open my $lock, '>', '/run/lock/ngx_dynamo_rl_deb.t.lock'
	or die "cannot open the lock file: $!\n";
flock($lock, LOCK_EX) or die "cannot lock: $!\n";

my $version = module_version();
my $arch = (run('dpkg', '--print-architecture'))[1];
chomp $arch;

my $deb = "$REPO/build/${PKG}_${version}_$arch.deb";

my $d = tempdir('dynamo-rl-deb-XXXXXXXXXX', TMPDIR => 1,
	CLEANUP => !$ENV{TEST_NGINX_LEAVE});

my $installed = 0;

END {
	local $?;
	purge() if $installed;
}

###############################################################################

# the package

# built again when a source is newer than it: a package left from an
# earlier commit would test old code

my @sources = (glob("$REPO/ngx_dynamo_rl_module/*"), "$REPO/config",
	glob("$REPO/debian/*"), "$REPO/examples/rl-refresh",
	glob("$REPO/examples/{grafana,prometheus}/*"));

if (!-f $deb || grep { -M $_ < -M $deb } @sources) {
	my ($code, $out) = run("$REPO/util/build-deb");
	is($code, 0, 'util/build-deb') or diag($out);

} else {
	pass("$deb is newer than its sources");
}

ok(-f $deb, "${PKG}_${version}_$arch.deb") or finish();

is(field($deb, 'Package'), $PKG, 'deb: Package');
is(field($deb, 'Version'), $version, 'deb: Version is the module\'s');
like(field($deb, 'Recommends') // '', qr/^nginx(?:,|$)/,
	'deb: Recommends nginx');

is(status(), 'not-installed', 'not installed before the test')
	or finish("the test purges $PKG at the end and cannot restore it:"
		. " remove it first (dpkg -P $PKG)");

my $enabled_before = modules_enabled();
my ($system_t) = run($NGINX, '-t', '-q');

# installation

my ($code, $out) = dpkg('-i', $deb);
$installed = 1;

is($code, 0, 'dpkg -i') or diag($out);
is(status(), 'installed', 'dpkg -s: installed') or finish();

my %s = dpkg_s();

is($s{Version}, $version, 'dpkg -s: Version');
is($s{Architecture}, $arch, 'dpkg -s: Architecture');

my %depends = map { (split /\s/, $_)[0] => $_ } split /,\s*/, $s{Depends};
my $abi = nginx_abi();

ok(defined $abi, 'the system nginx provides an nginx-abi-*');
$abi //= 'nginx-abi-(none)';

ok(exists $depends{$abi}, "dpkg -s: Depends on $abi")
	or diag("Depends: $s{Depends}");
ok(exists $depends{libjansson4}, 'dpkg -s: Depends on libjansson4')
	or diag("Depends: $s{Depends}");
ok(exists $depends{libssl3}, 'dpkg -s: Depends on libssl3')
	or diag("Depends: $s{Depends}");
ok(exists $depends{'libhiredis0.14'}, 'dpkg -s: Depends on libhiredis0.14')
	or diag("Depends: $s{Depends}");

note("Depends: $s{Depends}");

my %files = map { $_ => 1 } split /\n/, (run('dpkg', '-L', $PKG))[1];

ok($files{$SO}, "dpkg -L: $SO");
ok($files{$SNIPPET}, "dpkg -L: $SNIPPET");
ok($files{"/usr/share/doc/$PKG/copyright"}, 'dpkg -L: copyright');

# what a platform engineer needs beside the module, where Debian puts a
# package's data: the refresh client, the dashboard, the alerting rules

my $SHARE = "/usr/share/$PKG";

is(join(' ', grep { m!^\Q$SHARE\E/.*\.\w+$|^\Q$SHARE\E/rl-refresh$! }
	sort keys %files), "$SHARE/grafana/dynamo-rl-dashboard.json "
	. "$SHARE/prometheus/dynamo-rl-alerts.test.yml "
	. "$SHARE/prometheus/dynamo-rl-alerts.yml $SHARE/rl-refresh",
	"dpkg -L: rl-refresh, the dashboard and the rules in $SHARE");
ok(-x "$SHARE/rl-refresh", 'rl-refresh is executable');
like((run("$SHARE/rl-refresh", '--help'))[1], qr/--verify-url/,
	'rl-refresh --help runs');
is(slurp("$SHARE/grafana/dynamo-rl-dashboard.json"),
	slurp("$REPO/examples/grafana/dynamo-rl-dashboard.json"),
	'the dashboard as in examples/');
is(slurp("$SHARE/prometheus/dynamo-rl-alerts.yml"),
	slurp("$REPO/examples/prometheus/dynamo-rl-alerts.yml"),
	'the alerting rules as in examples/');
is(scalar(grep { m!^/etc/! } keys %files), 0, 'dpkg -L: nothing under /etc');

ok(-f $SO, 'the module is installed');
is(slurp($SNIPPET), "load_module modules/ngx_http_dynamo_rl_module.so;\n",
	'the load_module snippet');
is(readlink($ENABLED), $SNIPPET, 'postinst: the modules-enabled symlink');

# dynamo_rl_zone state=: the directory docs/operations.md names, www-data's
# alone (nginx -t refuses anything else)

my @st = stat $STATE_DIR;
is(join(' ', scalar(getpwuid($st[4] // -1)) // '-',
	sprintf('%04o', ($st[2] // 0) & 07777)), 'www-data 0700',
	"postinst: $STATE_DIR, www-data's, mode 0700");

($code, $out) = run('ldd', $SO);
unlike($out, qr/not found/, 'ldd: every library found') or diag($out);
like($out, qr/^\s*libjansson\.so\.4 => /m, 'ldd: libjansson');
like($out, qr/^\s*libhiredis\.so\.0\.14 => /m, 'ldd: libhiredis');

# nginx -t on the example, with the module from /usr/lib/nginx/modules

my $conf = example("load_module $SO;");

unlike($conf, qr/@[A-Z_]+@/, 'every placeholder of the example replaced');

nginx_t($conf, 'load_module');

# and through the package's symlink, as the system's nginx.conf loads
# /etc/nginx/modules-enabled/*.conf ("modules/" is relative to the
# prefix, /usr/share/nginx)

nginx_t(example("include $ENABLED;"), 'modules-enabled');

SKIP: {
	skip 'nginx -t fails on the system nginx.conf without the package', 1
		if $system_t != 0;

	($code, $out) = run($NGINX, '-t', '-q');
	is($code, 0, 'nginx -t: the system nginx.conf with the module')
		or diag($out);
}

# removal: purge, as "dpkg -r" keeps a modules-enabled/*.removed symlink

($code, $out) = dpkg('-P', $PKG);
$installed = 0;

is($code, 0, 'dpkg -P') or diag($out);
is(status(), 'not-installed', 'not installed after the test');
ok(!-e $SO, 'the module is removed');
ok(!-e $SNIPPET, 'the snippet is removed');
is_deeply(modules_enabled(), $enabled_before, 'modules-enabled as before');
ok(!-e $STATE_DIR, "purge: $STATE_DIR removed");

###############################################################################

sub finish {
	my ($why) = @_;

	diag($why) if defined $why;
	purge() if $installed;
	exit(1);
}

sub purge {
	$installed = 0;

	my ($code, $out) = dpkg('-P', $PKG);
	diag("dpkg -P $PKG: $out") if $code != 0;
}

sub module_version {
	my $h = slurp("$REPO/ngx_dynamo_rl_module/ngx_http_dynamo_rl_common.h")
		// '';

	$h =~ /^#define\s+NGX_HTTP_DYNAMO_RL_VERSION\s+"([^"]+)"/m
		or die "NGX_HTTP_DYNAMO_RL_VERSION not found\n";

	return $1;
}

sub example {
	my ($load) = @_;

	my $conf = slurp("$REPO/examples/dynamo-rl.conf") // '';

	$conf =~ s/^load_module\s+\@MODULE\@;$/$load/m
		or die "no \"load_module \@MODULE\@;\" in the example\n";

	$conf =~ s/\@PREFIX\@/$d/g;
	$conf =~ s/\@FRONTEND\@/127.0.0.1:8000/g;
	$conf =~ s/\@RL_LISTENER\@/127.0.0.1:8001/g;

	return $conf;
}

sub nginx_t {
	my ($conf, $name) = @_;

	my $file = "$d/nginx-$name.conf";

	open my $fh, '>', $file or die "cannot write $file: $!\n";
	print $fh $conf;
	close $fh or die "cannot write $file: $!\n";

	my ($code, $out) = run($NGINX, '-t', '-c', $file);

	is($code, 0, "nginx -t ($name): exit code") or diag($out);
	like($out, qr/^nginx: configuration file \Q$file\E test is successful$/m,
		"nginx -t ($name): test is successful");
}

sub status {
	my ($code, $out) = run('dpkg-query', '-W', '-f', '${db:Status-Status}',
		$PKG);

	return 'not-installed' if $code != 0 || $out eq ''
		|| $out eq 'not-installed';
	return $out;
}

sub dpkg_s {
	my $out = (run('dpkg', '-s', $PKG))[1];
	my %f;

	$out =~ s/\n\s+/ /g;
	$f{$1} = $2 while $out =~ /^([\w-]+):\s*(.*)$/mg;

	return %f;
}

sub field {
	my ($file, $name) = @_;

	my $out = (run('dpkg-deb', '--field', $file, $name))[1];
	chomp $out;

	return $out;
}

sub nginx_abi {
	my $out = (run('dpkg-query', '-W', '-f',
		'${db:Status-Status} ${Provides}\n'))[1];

	for my $line (split /\n/, $out) {
		next unless $line =~ /^installed /;
		return $1 if $line =~ /\b(nginx-abi-[\w.+~-]+)/;
	}

	return undef;
}

sub modules_enabled {
	my $dir = '/etc/nginx/modules-enabled';

	opendir(my $dh, $dir) or return [];
	my @l = map { "$_ -> " . (readlink("$dir/$_") // '') }
		sort grep { !/^\.\.?$/ } readdir($dh);
	closedir($dh);

	return \@l;
}

# dpkg, waiting while another dpkg or apt holds its lock

sub dpkg {
	my @args = @_;
	my ($code, $out);

	for (1 .. 120) {
		($code, $out) = run('dpkg', @args);
		last unless $code != 0 && $out =~ /\block\b.*\blocked\b|is locked/;
		sleep 1;
	}

	return ($code, $out);
}

sub run {
	my @cmd = @_;

	return Test::DynamoRL::run_command(sub {
		$ENV{DEBIAN_FRONTEND} = 'noninteractive';
	}, @cmd);
}

###############################################################################
