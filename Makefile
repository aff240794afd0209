# pam_totp — see README.md. Two builds from one Package.swift (docs/ARCHITECTURE.md, section 3):
#   .build-embedded/  what ships: pam_totp.so, pam-totpd and totp-enroll, Embedded Swift (no Swift runtime)
#   .build-embedded-module/  pam_totp.so's own build (its library targets optimised for size)
#   .build/           the test suite (and a normal build of everything, for development)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
UNITDIR     ?= /etc/systemd/system
DOCDIR      ?= $(PREFIX)/share/doc/pam_totp
MANDIR      ?= $(PREFIX)/share/man
LIBEXECDIR  ?= $(PREFIX)/libexec
MULTIARCH   := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
PAMDIR      ?= /lib/$(MULTIARCH)/security
STOREDIR    ?= /var/lib/pam-totp
PAMCONFDIR  ?= /etc/pam.d
SWIFT       ?= swift
SWIFTC      ?= swiftc

# The package version (make deb): BASE_VERSION (the release, Sources/MFACommandLine/Version.swift,
# NEWS), then the commit count and commit in a git tree, so that every commit on main builds a
# higher version. VERSION=... overrides it.
BASE_VERSION := $(shell sed -n 's/^public let packageVersion = "\(.*\)"$$/\1/p' Sources/MFACommandLine/Version.swift)
VERSION     ?= $(BASE_VERSION)$(shell n=$$(git rev-list --count HEAD 2>/dev/null) && echo "+git$$n.$$(git rev-parse --short=7 HEAD)")
DEB_ARCH    := $(shell dpkg-architecture -qDEB_HOST_ARCH 2>/dev/null || dpkg --print-architecture)
DEB         := dist/pam-totp_$(VERSION)_$(DEB_ARCH).deb
# Who built it: the last commit's author (DEB_MAINTAINER=... overrides it).
DEB_MAINTAINER ?= $(or $(shell git log -1 --format='%an <%ae>' 2>/dev/null),pam_totp developers <pam-totp@localhost.localdomain>)
LINTIAN     ?= yes

EMBEDDED_SO := .build-embedded-module/release/libpam_totp.so
STRIPPED_SO := .build-embedded/pam_totp.so
ENROLL_BIN  := .build-embedded/release/totp-enroll
DAEMON_BIN  := .build-embedded/release/pam-totpd
# Embedded Swift's Unicode tables (String comparison and hashing normalise), a static archive of
# the toolchain's: the programs link it, the module needs none.
EMBEDDED_LIBDIR = $(shell $(SWIFTC) -print-target-info | sed -n 's/.*"runtimeResourcePath": "\(.*\)".*/\1/p')/embedded/$(shell $(SWIFTC) -print-target-info | sed -n '0,/"triple"/s/.*"triple": "\(.*\)".*/\1/p')
EMBEDDED_LINK = -Xlinker -L$(EMBEDDED_LIBDIR) -Xlinker -lswiftUnicodeDataTables
VERIFY_BENCH := .build-embedded/release/verify-bench

# libFuzzer (make fuzz): one binary, every target; the library's sources and Fuzz/*.swift compiled
# as one module, so the harnesses also reach internal parsers. FUZZ_TARGET picks the target.
FUZZ_DIR     := .build-fuzz
FUZZ_BIN     := $(FUZZ_DIR)/pam_totp_fuzz
FUZZ_SECONDS ?= 5400
FUZZ_RUNS    ?= 10000000
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_SWIFTFLAGS := -swift-version 6 -sanitize=fuzzer,address -parse-as-library -O -wmo \
                   -module-name PamTOTPFuzz -package-name pam_totp -I Sources/CLibc -I Sources/CSpawn/include -use-ld=lld
# The fuzz and seed programs compile the library's targets, MFAWire, MFAImport, MFAPamStacks, MFADaemon and MFACommandLine as one module:
# copies of the sources without their imports of each other, in $(FUZZ_DIR)/src.
FUZZ_TARGETS := MFASystem MFACrypto MFAPolicy MFAFileStore MFAWire MFAImport MFAPamStacks MFADaemon MFACommandLine
FUZZ_INPUTS  := $(sort $(foreach t,$(FUZZ_TARGETS),$(wildcard Sources/$(t)/*.swift)))
FUZZ_SOURCES := $(addprefix $(FUZZ_DIR)/src/,$(notdir $(FUZZ_INPUTS)))
# MFADaemon's C target (the sender's start, Sources/CSpawn), compiled once for both programs.
FUZZ_OBJECTS := $(FUZZ_DIR)/cspawn.o

BUILD_DEPS  := libpam0g-dev libqrencode-dev libpq-dev
TEST_DEPS   := postgresql-15 postgresql-client-15 openssl iproute2 valgrind i3lock xvfb xdotool x11-utils pamtester oathtool faketime libpam-google-authenticator zbar-tools openssh-server openssh-client expect python3 python3-pskc groff-base util-linux libmagickcore-6.q16-6-extra uidmap msmtp python3-aiosmtpd curl gammu-smsd strace freeradius freeradius-utils openvpn pgbouncer
DEB_DEPS    := debhelper dpkg-dev fakeroot lintian
DEB_TEST_DEPS := debootstrap
BENCH_DEPS  := valgrind hyperfine time libpam-google-authenticator pamtester oathtool faketime strace

# Installs the Debian packages named in $(1) that are missing (apt-get update only if needed).
define apt_install
	missing=""; for p in $(1); do dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

.PHONY: all module enroll daemon programs test-bundle test-quick version install uninstall check test bench bench-fleet deps test-deps bench-deps deb-deps clean fuzz fuzz-smoke fuzz-seeds deb deb-test

all: module enroll daemon

deps:
	@$(call apt_install,$(BUILD_DEPS))

test-deps: deps
	@$(call apt_install,$(TEST_DEPS))

bench-deps: deps
	@$(call apt_install,$(BENCH_DEPS))

deb-deps: deps
	@$(call apt_install,$(DEB_DEPS) $(DEB_TEST_DEPS))

module: $(STRIPPED_SO)

# Bench only, never installed: TOTPVerifier.match behind a fixed symbol name, built like the module.
$(VERIFY_BENCH): Package.swift $(wildcard Sources/*/*.swift Sources/*/*.h Sources/*/module.modulemap Tests/VerifyBench/*.swift)
	PAM_TOTP_EMBEDDED=1 $(SWIFT) build -c release --scratch-path .build-embedded --product verify-bench $(EMBEDDED_LINK)

$(STRIPPED_SO): Package.swift $(wildcard Sources/*/*.swift Sources/*/*.h Sources/*/*.map Sources/*/module.modulemap)
	@# Its own scratch path: the library targets it links are built for size there (Package.swift, PAM_TOTP_MODULE).
	PAM_TOTP_EMBEDDED=1 PAM_TOTP_MODULE=1 $(SWIFT) build -c release --scratch-path .build-embedded-module --product pam_totp --disable-local-rpath
	@mkdir -p $(dir $@)
	@# As dh_strip does: no symbols, no toolchain notes (.comment, the linker's version note).
	strip --strip-all --remove-section=.comment --remove-section=.note.gnu.gold-version -o $@ $(EMBEDDED_SO)

enroll:
	PAM_TOTP_EMBEDDED=1 $(SWIFT) build -c release --scratch-path .build-embedded --product totp-enroll --disable-local-rpath $(EMBEDDED_LINK)

daemon:
	PAM_TOTP_EMBEDDED=1 $(SWIFT) build -c release --scratch-path .build-embedded --product pam-totpd --disable-local-rpath $(EMBEDDED_LINK)

install: deps all
	install -d -m 0755 $(DESTDIR)$(PAMDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(DOCDIR)/pam.d
	install -m 0644 $(STRIPPED_SO) $(DESTDIR)$(PAMDIR)/pam_totp.so
	# Set-uid root like passwd: it acts only for the real uid and re-authenticates the caller
	# through /etc/pam.d/totp-enroll before any change (docs/ARCHITECTURE.md, section 4.3).
	install -s -m 4755 -o root -g root $(ENROLL_BIN) $(DESTDIR)$(BINDIR)/totp-enroll
	@# The store, on the live system only: with DESTDIR (a package) the postinst creates it.
	if [ -z "$(DESTDIR)" ]; then install -d -m 0700 -o root -g root $(STOREDIR); fi
	@# The unprivileged user pam-totpd runs text-message and email senders as (sms_command,
	@# email_command; never root, never the caller). On the live system only (the postinst, in a package).
	if [ -z "$(DESTDIR)" ] && ! getent passwd pam-totp-sender >/dev/null; then \
	  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group pam-totp-sender; fi
	@# The check run before the module is removed (make uninstall, the package's prerm).
	install -D -m 0755 scripts/pam-stacks-naming-module.sh $(DESTDIR)$(LIBEXECDIR)/pam-totp/pam-stacks-naming-module
	# pam-totpd answers callers without root (screen lockers): socket-activated under systemd.
	install -s -m 0755 $(DAEMON_BIN) $(DESTDIR)$(SBINDIR)/pam-totpd
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's|/usr/local/sbin/pam-totpd|$(SBINDIR)/pam-totpd|' systemd/pam-totpd.service > $(DESTDIR)$(UNITDIR)/pam-totpd.service
	install -m 0644 systemd/pam-totpd.socket $(DESTDIR)$(UNITDIR)/pam-totpd.socket
	chmod 0644 $(DESTDIR)$(UNITDIR)/pam-totpd.service
	install -D -m 0644 man/pam-totpd.8 $(DESTDIR)$(MANDIR)/man8/pam-totpd.8
	install -m 0644 pam.d/* $(DESTDIR)$(DOCDIR)/pam.d/
	install -D -m 0644 sshd_config.d/pam_totp.conf $(DESTDIR)$(DOCDIR)/sshd_config.d/pam_totp.conf
	# A pam-auth-update profile with "Default: no": it changes nothing until an admin runs
	# pam-auth-update --enable pam_totp.
	install -D -m 0644 pam.d/pam-configs-pam_totp $(DESTDIR)/usr/share/pam-configs/pam_totp
	install -m 0644 README.md docs/ADMIN.md docs/FLEET.md docs/HARDWARE-TOKENS.md $(DESTDIR)$(DOCDIR)/
	install -d -m 0755 $(DESTDIR)$(DOCDIR)/examples
	install -m 0644 docs/examples/* $(DESTDIR)$(DOCDIR)/examples/
	install -D -m 0644 man/totp-enroll.1 $(DESTDIR)$(MANDIR)/man1/totp-enroll.1
	install -D -m 0644 man/pam_totp.8 $(DESTDIR)$(MANDIR)/man8/pam_totp.8
	# The tool's own PAM service; an existing (admin-edited) one is kept.
	[ -e $(DESTDIR)$(PAMCONFDIR)/totp-enroll ] || install -D -m 0644 pam.d/totp-enroll $(DESTDIR)$(PAMCONFDIR)/totp-enroll
	@# Run what was installed: the module loads with only libc/libpam, the CLI computes RFC 6238's first vector.
	@if ldd $(DESTDIR)$(PAMDIR)/pam_totp.so $(DESTDIR)$(SBINDIR)/pam-totpd $(DESTDIR)$(BINDIR)/totp-enroll | grep -qi swift; then echo "a binary links a Swift library" >&2; exit 1; fi
	@test "$$($(DESTDIR)$(BINDIR)/totp-enroll code --secret GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ --time 59 --digits 8)" = 94287082
	@$(DESTDIR)$(SBINDIR)/pam-totpd --help >/dev/null
	@if [ -n "$(DESTDIR)" ]; then \
	  echo "DESTDIR: the units are installed, not enabled (a package's postinst does that)"; \
	elif [ -d /run/systemd/system ]; then \
	  systemctl daemon-reload && systemctl enable --now pam-totpd.socket && echo "enabled pam-totpd.socket"; \
	else \
	  echo "systemd is not running: start $(SBINDIR)/pam-totpd yourself for screen lockers (README, 'Screen lockers and desktops')"; \
	fi
	@echo "installed $(DESTDIR)$(PAMDIR)/pam_totp.so ($$(stat -c %s $(DESTDIR)$(PAMDIR)/pam_totp.so) bytes), $(DESTDIR)$(BINDIR)/totp-enroll, $(DESTDIR)$(SBINDIR)/pam-totpd$(if $(DESTDIR),, store $(STOREDIR))"
	@echo "no /etc/pam.d stack was changed; see README.md 'Enable it' and $(DOCDIR)/pam.d/"

# The package's prerm runs the same check (scripts/pam-stacks-naming-module.sh): refuse while a
# stack that pam-auth-update does not manage names the module, else unregister the profile.
# The check compares files (pam_2fa.so -> pam_totp.so names the module too), so it is told the
# module this Makefile installed and the module directories, both under DESTDIR and with PAMDIR
# among them: its defaults are the live system's, which a staging tree or a PAMDIR elsewhere
# does not use (a pam_2fa.so there went unnoticed and the module was removed).
STACKCHECK_MODULEDIRS = $(sort $(wildcard $(DESTDIR)/lib/*/security $(DESTDIR)/usr/lib/*/security $(DESTDIR)/lib/security $(DESTDIR)/usr/lib/security) $(DESTDIR)$(PAMDIR))
uninstall:
	@if [ -d $(DESTDIR)$(PAMCONFDIR) ]; then scripts/pam-stacks-naming-module.sh --pamdir $(DESTDIR)$(PAMCONFDIR) --before-removal --module $(DESTDIR)$(PAMDIR)/pam_totp.so $(foreach d,$(STACKCHECK_MODULEDIRS),--moduledir $(d)); fi
	-if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl disable --now pam-totpd.socket pam-totpd.service; fi
	rm -f $(DESTDIR)$(PAMDIR)/pam_totp.so $(DESTDIR)$(BINDIR)/totp-enroll $(DESTDIR)/usr/share/pam-configs/pam_totp
	rm -f $(DESTDIR)$(SBINDIR)/pam-totpd $(DESTDIR)$(UNITDIR)/pam-totpd.socket $(DESTDIR)$(UNITDIR)/pam-totpd.service $(DESTDIR)$(MANDIR)/man8/pam-totpd.8
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -f $(DESTDIR)$(MANDIR)/man1/totp-enroll.1 $(DESTDIR)$(MANDIR)/man8/pam_totp.8
	rm -rf $(DESTDIR)$(LIBEXECDIR)/pam-totp
	@echo "kept $(STOREDIR) (enrolments), $(PAMCONFDIR)/totp-enroll, /etc/security/pam_totp.conf if you wrote it, and the system user pam-totp-sender (docs/ADMIN.md, \"Uninstalling\")"

# Every test: the library's unit tests, the module through the real libpam (pam_start_confdir and
# pamtester), the programs, sshd, PostgreSQL, the VPN peers, symbol and dependency checks.
# The builds run side by side (each in its own scratch path; the Embedded ones compile a module
# on one core), with the fuzzing smoke run once its binary is built; then every test class runs
# in its own process, TEST_JOBS at a time, as Tests/test-plan.txt places them
# (scripts/run-tests.py). PAM_TOTP_SO tells the tests which .so to load. One class or one test:
# README, "Contributing".
TEST_JOBS ?= 6
TEST_BUNDLE := .build/debug/pam_totpPackageTests.xctest
TEST_ENV = PAM_TOTP_SO=$(abspath $(STRIPPED_SO)) PAM_TOTPD=$(abspath $(DAEMON_BIN)) TOTP_ENROLL=$(abspath $(ENROLL_BIN))
check: test-deps
	@# No hand-written function over 60 lines (a hash's unrolled compression is marked exempt).
	python3 scripts/function-lengths.py Sources Fuzz
	$(MAKE) -j4 --output-sync=target module programs fuzz-smoke test-bundle
	$(TEST_ENV) python3 scripts/run-tests.py --binary $(TEST_BUNDLE) --jobs $(TEST_JOBS) --log .build-test.log

# Pure and in-process tests only (the library; the module loaded through libpam in the test
# process), side by side: the tier to run while working (README, "Contributing").
test-quick: deps
	$(MAKE) -j2 --output-sync=target module test-bundle
	$(TEST_ENV) python3 scripts/run-tests.py --binary $(TEST_BUNDLE) --tier quick --jobs $(TEST_JOBS) --log .build-test.log

# The release (Sources/MFACommandLine/Version.swift, NEWS).
version:
	@echo $(BASE_VERSION)

# pam-totpd, then totp-enroll: one scratch path, so one after the other.
programs:
	$(MAKE) daemon
	$(MAKE) enroll

# The normal build of everything and the XCTest bundle (make check's tests run it directly).
test-bundle:
	$(SWIFT) build --build-tests --scratch-path .build

test: check

# The Debian package, from the same build as make install (debian/rules runs make all and
# make install DESTDIR=debian/pam-totp with Debian's paths). debian/changelog is written here
# (it carries the version); dpkg-buildpackage's .changes and .buildinfo go to dist/ beside the .deb.
deb: deb-deps all
	@mkdir -p dist
	@printf 'pam-totp (%s) unstable; urgency=medium\n\n  * Built from %s.\n\n -- %s  %s\n' \
	  '$(VERSION)' "$$(git describe --always --dirty 2>/dev/null || echo 'a source tree without git')" \
	  '$(DEB_MAINTAINER)' "$$(git log -1 --format=%cD 2>/dev/null || date -R)" > debian/changelog
	PAM_TOTP_MAINTAINER='$(DEB_MAINTAINER)' dpkg-buildpackage -b -nc --no-sign --buildinfo-option=-u$(CURDIR)/dist --changes-option=-u$(CURDIR)/dist \
	  --buildinfo-option=-O$(CURDIR)/dist/pam-totp_$(VERSION)_$(DEB_ARCH).buildinfo \
	  --changes-option=-O$(CURDIR)/dist/pam-totp_$(VERSION)_$(DEB_ARCH).changes
	@test -f $(DEB)
	@if [ "$(LINTIAN)" = yes ]; then lintian --fail-on error --info $(DEB); fi
	@echo "built $(DEB) ($$(stat -c %s $(DEB)) bytes)"

# Builds the package and the same tree as a lower version, checks that the builds changed no
# file git tracks and left none it does not ignore (debian/pam-totp*/ are dh's staging trees:
# build output, in .gitignore), then, for each suite of DEB_TEST_SUITES (Debian 12 bookworm and
# Debian 13 trixie), installs the package with apt in a fresh debootstrap'ed root (no Swift
# there) and checks files, modes, pamtester logins, remove, purge, prerm's refusal and the
# upgrade from the lower version (scripts/deb-test.sh). Fails if any suite failed.
DEB_TEST_SUITES ?= bookworm trixie
deb-test: deb-deps
	@mkdir -p dist && { git status --porcelain --untracked-files=all 2>/dev/null || :; } > dist/git-status.before
	$(MAKE) deb
	$(MAKE) deb VERSION='$(VERSION)~prev' LINTIAN=no
	@failed=0; \
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  if git status --porcelain --untracked-files=all | diff dist/git-status.before - > dist/git-status.diff; then \
	    echo "PASS: make deb changed no file git tracks and left none that git does not ignore"; \
	  else \
	    echo "FAIL: make deb changed what git status shows (< before, > after):"; cat dist/git-status.diff; failed=1; \
	  fi; \
	else echo "deb-test: not a git work tree: the tracked-files check is skipped"; fi; \
	for suite in $(DEB_TEST_SUITES); do \
	  DEB_TEST_SUITE=$$suite scripts/deb-test.sh dist/pam-totp_$(VERSION)~prev_$(DEB_ARCH).deb $(DEB) dist/pam-totp-fleet_$(VERSION)_$(DEB_ARCH).deb || failed=1; \
	done; \
	[ $$failed -eq 0 ] && echo "deb-test: passed on $(DEB_TEST_SUITES)" || { echo "deb-test: FAILED (see FAIL lines above)" >&2; exit 1; }

define fuzz_copy
$$(FUZZ_DIR)/src/%.swift: Sources/$(1)/%.swift
	@mkdir -p $$(@D)
	sed -E '/^(@testable )?import MFA(System|Crypto|Policy|FileStore|Wire|Import|PamStacks|Daemon|CommandLine)$$$$/d' $$< > $$@
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_copy,$(t))))

$(FUZZ_DIR)/cspawn.o: Sources/CSpawn/spawn.c Sources/CSpawn/include/cspawn.h
	@mkdir -p $(@D)
	$(CC) -c -O2 -fPIC -I Sources/CSpawn/include -o $@ $<

$(FUZZ_BIN): $(FUZZ_SOURCES) $(FUZZ_OBJECTS) $(wildcard Fuzz/*.swift) Sources/CLibc/shim.h Sources/CLibc/module.modulemap Sources/CSpawn/include/module.modulemap
	@mkdir -p $(FUZZ_DIR)
	$(SWIFTC) $(FUZZ_SWIFTFLAGS) $(FUZZ_SOURCES) $(sort $(wildcard Fuzz/*.swift)) $(FUZZ_OBJECTS) -o $@

# Every fuzz target to FUZZ_RUNS executions each (10 million; FUZZ_SECONDS, 90 minutes, is the cap:
# a target that stops short fails), on a scratch copy of its seed corpus; FUZZ_TARGETS_RUN picks some
# (Fuzz/corpus/TARGET); prints executions and crashes per target, fails on any crash.
fuzz: $(FUZZ_BIN)
	FUZZ_RUNS=$(FUZZ_RUNS) scripts/fuzz.sh $(FUZZ_BIN) $(FUZZ_SECONDS) $(FUZZ_DIR)/run $(FUZZ_TARGETS_RUN)

# A few seconds per target, from the seeds alone (part of make check: a broken harness fails).
fuzz-smoke: $(FUZZ_BIN)
	rm -rf $(FUZZ_DIR)/smoke
	scripts/fuzz.sh $(FUZZ_BIN) $(FUZZ_SMOKE_SECONDS) $(FUZZ_DIR)/smoke

# Rewrites the generated seeds (Fuzz/corpus/*/gen-*) with the store's own serializers.
fuzz-seeds: $(FUZZ_SOURCES) $(FUZZ_OBJECTS)
	@mkdir -p $(FUZZ_DIR)
	$(SWIFTC) -swift-version 6 -parse-as-library -module-name PamTOTPFuzz -package-name pam_totp -I Sources/CLibc -I Sources/CSpawn/include $(FUZZ_SOURCES) Fuzz/Seeds/MakeSeeds.swift $(FUZZ_OBJECTS) -o $(FUZZ_DIR)/make-seeds
	$(FUZZ_DIR)/make-seeds Fuzz/corpus

bench: bench-deps module enroll daemon $(VERIFY_BENCH)
	scripts/bench.sh $(abspath $(STRIPPED_SO)) $(abspath $(ENROLL_BIN)) $(abspath $(VERIFY_BENCH)) docs/benchmarks.md $(abspath $(DAEMON_BIN))

# Fleet mode's figures (docs/benchmarks.md, "Fleet mode"): a throwaway PostgreSQL, 1,000 users,
# logins/s and p50/p99 for 1 and 4 concurrent clients through one pam-totpd.
# make bench-fleet PRIVACYIDEA=1: also privacyIDEA (pinned, from PyPI, into a venv kept in
# /var/cache/pam-totp-bench) on the same PostgreSQL, the same users and clients, the runs alternating,
# CPU per login on each side, and the guarantee run (one code sent 4 times at once to each side);
# scripts/bench-fleet-privacyidea.sh. About 10 minutes once installed.
# make bench-fleet HOSTS=N [POOL=pgbouncer|direct]: instead, N hosts (N pam-totpd daemons) on one
# database, through PgBouncer (transaction pooling, one shared role, per-host credentials) and then
# the same N direct, side by side; POOL=direct: that run alone (scripts/bench-fleet-scale.sh).
# Prints its lines; writes no file.
POOL ?= pgbouncer
ifneq ($(HOSTS),)
ifneq ($(filter bench-fleet,$(MAKECMDGOALS)),)
ifeq ($(filter $(POOL),pgbouncer direct),)
$(error usage: make bench-fleet HOSTS=N POOL=pgbouncer|direct (POOL=$(POOL)))
endif
endif
endif
bench-fleet: deps daemon
ifneq ($(HOSTS),)
	@$(call apt_install,postgresql-15 postgresql-client-15 python3 $(if $(filter pgbouncer,$(POOL)),pgbouncer))
	HOSTS=$(HOSTS) POOL=$(POOL) scripts/bench-fleet-scale.sh $(abspath $(DAEMON_BIN))
else
	@$(call apt_install,postgresql-15 postgresql-client-15 python3 $(if $(filter 1,$(PRIVACYIDEA)),python3-venv))
	PRIVACYIDEA=$(PRIVACYIDEA) scripts/bench-fleet.sh $(abspath $(DAEMON_BIN)) docs/benchmarks.md
endif

clean:
	rm -rf .build .build-embedded .build-embedded-module .build-fuzz .build-test.log dist
	rm -rf debian/pam-totp debian/pam-totp-fleet debian/.debhelper debian/files debian/*.substvars debian/debhelper-build-stamp debian/*.debhelper.log debian/changelog
