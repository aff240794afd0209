#!/usr/bin/env bash
# make deb-test: the Debian package on a host without Swift.
# Usage: [DEB_TEST_SUITE=bookworm|trixie] deb-test.sh PREVIOUS.deb NEW.deb NEW-FLEET.deb
#
# debootstrap --variant=minbase SUITE gives a fresh root of that release: bookworm (Debian 12,
# the default) or trixie (Debian 13); make deb-test runs both with the same bookworm-built
# package, each in 25-90 s. apt installs the package there (resolving its dependencies from
# the same Debian mirror the host uses), and every check below prints PASS or FAIL. PREVIOUS.deb is the same tree built as a lower version:
# it is installed first, a user enrols and logs in, then NEW.deb upgrades it and the same
# enrolment must still log in. Then: files and modes, ldd, RFC 6238's first vector, pamtester
# logins, prerm's refusals, remove (store kept, profile unregistered), purge (store deleted,
# what it leaves named). No service starts in the root (policy-rc.d), and everything is
# unmounted and deleted on exit. Ends with "deb-test (SUITE): N passed, M failed"; exits
# non-zero when a check failed.
set -uo pipefail

[ $# -eq 3 ] || { echo "usage: $0 PREVIOUS.deb NEW.deb NEW-FLEET.deb" >&2; exit 2; }
PREV=$(realpath "$1") NEW=$(realpath "$2") FLEET=$(realpath "$3")
[ -f "$PREV" ] && [ -f "$NEW" ] && [ -f "$FLEET" ] || { echo "deb-test: no such package: $1, $2 or $3" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "deb-test: debootstrap is not installed (make deb-deps)" >&2; exit 2; }

SUITE=${DEB_TEST_SUITE:-bookworm}
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
SO=/lib/$MULTIARCH/security/pam_totp.so
SECRET=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ    # RFC 6238's SHA-1 key, in Base32
USERNAME=totpdeb
PASSWORD="Deb-$RANDOM$RANDOM-pass"
passed=0 failed=0

WORK=$(mktemp -d /tmp/pam-totp-deb-test.XXXXXX)
R=$WORK/root
cleanup() {
    for m in "$R/dev/pts" "$R/proc"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    # Only after every mount is gone: never follow a bind mount out of the root.
    if ! grep -q " $R/" /proc/mounts; then rm -rf --one-file-system "$WORK"; else echo "deb-test: left $WORK (still mounted)" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1${2:+ — $2}"; failed=$((failed + 1)); }
# check NAME COMMAND...: PASS when the command succeeds.
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
finish() {
    echo "deb-test ($SUITE): $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# The host's Debian mirror (its apt sources say which), or DEB_TEST_MIRROR.
mirror=${DEB_TEST_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | sed -nE -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' \
    | tr ' ' '\n' | grep -E '/debian/?$' | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}

t0=$(date +%s)
echo "deb-test: debootstrap --variant=minbase $SUITE from $mirror into $R"
if ! debootstrap --variant=minbase "$SUITE" "$R" "$mirror" >"$WORK/debootstrap.log" 2>&1; then
    tail -20 "$WORK/debootstrap.log" >&2
    fail "debootstrap a fresh $SUITE root"
    finish
fi
pass "debootstrap a fresh $SUITE root ($(( $(date +%s) - t0 )) s)"

# apt in the root: the mirror debootstrap used, the host's proxy settings if any, DNS.
echo "deb $mirror $SUITE main" > "$R/etc/apt/sources.list"
for f in /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] && grep -qi 'proxy' "$f" && cp "$f" "$R/etc/apt/apt.conf.d/"
done
cp -L /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
# No service starts in the root.
printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod 0755 "$R/usr/sbin/policy-rc.d"
mount -t proc proc "$R/proc"
mkdir -p "$R/dev/pts" && mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts" 2>/dev/null || true
cp "$PREV" "$R/tmp/previous.deb"; cp "$NEW" "$R/tmp/new.deb"

check "no Swift toolchain in the root" in_root sh -c '! command -v swift && ! ls /opt/swift /usr/lib/swift >/dev/null 2>&1'
if ! in_root apt-get update -qq >"$WORK/apt.log" 2>&1 \
   || ! in_root apt-get install -y -qq --no-install-recommends pamtester oathtool >>"$WORK/apt.log" 2>&1; then
    tail -20 "$WORK/apt.log" >&2
    fail "apt installs pamtester and oathtool in the root"
    finish
fi
pass "apt installs pamtester and oathtool in the root"

# login CODE: password then code through the test stack; the output goes to login.log.
login() { printf '%s\n%s\n' "$PASSWORD" "$1" | in_root pamtester pamtotp-debtest "$USERNAME" authenticate >>"$WORK/login.log" 2>&1; }
# login_ahead: a right code for now + k periods, k = 1, 2, ...: each login uses a later step than
# the one before (the replay guard refuses a step already used), within the ±5-step window.
step=0 last_code=
login_ahead() {
    step=$((step + 1))
    local code
    code=$(in_root oathtool --totp -b -N "@$(( $(date +%s) + 30 * step ))" "$SECRET") || return 1
    last_code=$code
    login "$code" || { tail -3 "$WORK/login.log"; return 1; }
}
status_of() { in_root dpkg-query -W -f='${Status}' pam-totp 2>/dev/null; }

# --- the previous version, then an enrolment that must survive the upgrade
if in_root apt-get install -y -qq /tmp/previous.deb >"$WORK/install-prev.log" 2>&1; then
    pass "apt installs the previous build ($(in_root dpkg-query -W -f='${Version}' pam-totp))"
else
    tail -20 "$WORK/install-prev.log"; fail "apt installs the previous build"; finish
fi
in_root useradd -M -s /usr/sbin/nologin "$USERNAME"
printf '%s:%s\n' "$USERNAME" "$PASSWORD" | in_root chpasswd
# A stack of the admin's (not managed by pam-auth-update): password, then code.
printf 'auth required pam_unix.so\nauth required pam_totp.so\naccount required pam_unix.so\n' > "$R/etc/pam.d/pamtotp-debtest"
check "totp-enroll (previous build) enrols $USERNAME as root" \
    bash -c 'in_root() { chroot "$0" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
             code=$(in_root oathtool --totp -b "$2")
             in_root totp-enroll --user "$1" --name phone --secret - --code "$code" --qr none <<<"$2" >/dev/null' \
    "$R" "$USERNAME" "$SECRET"
check "pamtester login with an oathtool code (previous build)" login_ahead

# --- upgrade
if in_root apt-get install -y -qq /tmp/new.deb >"$WORK/install-new.log" 2>&1; then
    pass "apt upgrades to the new build ($(in_root dpkg-query -W -f='${Version}' pam-totp))"
else
    tail -20 "$WORK/install-new.log"; fail "apt upgrades to the new build"; finish
fi
check "the upgrade keeps the store and the enrolment" test -s "$R/var/lib/pam-totp/$USERNAME"
# No systemd in this root: the install says that nothing will start pam-totpd (a new admin's
# trial: lockers failed later with no hint).
check "without systemd the install says pam-totpd must be started" grep -q "nothing will start pam-totpd" "$WORK/install-new.log"
check "... and that sent codes need it too" grep -q "nothing will start pam-totpd: .*text-message and email codes" "$WORK/install-new.log"
denied() { ! "$@"; }
check "the code used before the upgrade is still refused after it (the state is kept)" denied login "$last_code"
check "the enrolment still logs in after the upgrade" login_ahead
check "a wrong code is denied" denied login 000000
check "an empty code is denied" denied login ""

# --- files, modes, dependencies
mode_is() { [ "$(stat -c '%a %U:%G' "$R$1" 2>/dev/null)" = "$2" ]; }
check "$SO 644 root:root" mode_is "$SO" "644 root:root"
check "/usr/bin/totp-enroll set-uid root (4755 root:root)" mode_is /usr/bin/totp-enroll "4755 root:root"
check "/usr/sbin/pam-totpd 755 root:root" mode_is /usr/sbin/pam-totpd "755 root:root"
check "the store /var/lib/pam-totp is 700 root:root" mode_is /var/lib/pam-totp "700 root:root"
# Text-message and email senders run as this user (pam_totp(8), sms_command), never root.
check "the postinst made the delivery user pam-totp-sender (a system uid, no login shell)" \
    in_root sh -c 'u=$(getent passwd pam-totp-sender) && uid=$(echo "$u" | cut -d: -f3) && [ "$uid" -gt 0 ] && [ "$uid" -lt 1000 ] && [ "$(echo "$u" | cut -d: -f7)" = /usr/sbin/nologin ]'
check "the example senders are in /usr/share/doc/pam-totp/examples" \
    test -s "$R/usr/share/doc/pam-totp/examples/sms-gammu" -a -s "$R/usr/share/doc/pam-totp/examples/email-sendmail" -a -s "$R/usr/share/doc/pam-totp/examples/sms-http-curl"
check "the sshd drop-in example in the doc directory" test -f "$R/usr/share/doc/pam-totp/sshd_config.d/pam_totp.conf"
# Every document the README points to (dh_compress gzips the larger ones).
doc_installed() { [ -s "$R/usr/share/doc/pam-totp/$1" ] || [ -s "$R/usr/share/doc/pam-totp/$1.gz" ]; }
for doc in README.md ADMIN.md FLEET.md HARDWARE-TOKENS.md; do
    check "$doc in /usr/share/doc/pam-totp" doc_installed "$doc"
done
check "systemd units in /lib/systemd/system" test -f "$R/lib/systemd/system/pam-totpd.socket" -a -f "$R/lib/systemd/system/pam-totpd.service"
check "pam-totpd.socket is enabled (the service is socket-activated only)" \
    bash -c '[ -L "$0/etc/systemd/system/sockets.target.wants/pam-totpd.socket" ] && ! ls "$0"/etc/systemd/system/*.wants/pam-totpd.service >/dev/null 2>&1' "$R"
check "/etc/pam.d/totp-enroll is a conffile" bash -c 'chroot "$0" dpkg-query -W -f="\${Conffiles}" pam-totp | grep -q "^ /etc/pam.d/totp-enroll "' "$R"
check "the pam-auth-update profile is installed" test -f "$R/usr/share/pam-configs/pam_totp"
check "the profile is registered but not enabled (Default: no)" \
    bash -c 'grep -qx pam_totp "$0/var/lib/pam/seen" && ! grep -q pam_totp "$0/etc/pam.d/common-auth"' "$R"
check "man pages installed" test -f "$R/usr/share/man/man1/totp-enroll.1.gz" -a -f "$R/usr/share/man/man8/pam_totp.8.gz" -a -f "$R/usr/share/man/man8/pam-totpd.8.gz"
for bin in "$SO" /usr/bin/totp-enroll /usr/sbin/pam-totpd; do
    check "ldd $bin finds every library, none of Swift's" \
        bash -c 'out=$(chroot "$0" ldd "$1") && ! grep -q "not found" <<<"$out" && ! grep -qi swift <<<"$out"' "$R" "$bin"
done
check "totp-enroll code gives RFC 6238's first vector (94287082)" \
    bash -c '[ "$(chroot "$0" totp-enroll code --secret - --time 59 --digits 8 <<<"$1")" = 94287082 ]' "$R" "$SECRET"
check "pam-totpd --help runs" bash -c 'chroot "$0" pam-totpd --help >/dev/null' "$R"

# --- no database client without fleet mode (a new admin's trial: libpq pulled libssl, Kerberos,
# LDAP and SASL onto every host); the metapackage pam-totp-fleet brings it
check "pam-totp depends on no database, TLS, Kerberos or LDAP library" \
    bash -c '! dpkg-deb -f "$0" Depends | grep -Eq "libpq|libssl|libkrb5|libgssapi|libldap|libsasl"' "$NEW"
# The previous build depended on libpq5; after the upgrade nothing does, and autoremove takes it.
in_root apt-get autoremove -y -qq >"$WORK/autoremove.log" 2>&1
check "libpq is not installed in the root (after apt autoremove)" bash -c '! chroot "$0" ldconfig -p | grep -q "libpq\.so"' "$R"
mkdir -p "$R/etc/pam_totp"
printf 'backend = postgresql\npostgresql = host=/nonexistent dbname=pam_totp user=host_test\nsocket = /run/fleet-test.socket\n' > "$R/etc/pam_totp/fleet-test.conf"
fleet_start() { timeout 20 chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin pam-totpd --config /etc/pam_totp/fleet-test.conf >"$WORK/fleet.log" 2>&1; }
fleet_without_libpq() { ! fleet_start && grep -q 'apt install pam-totp-fleet' "$WORK/fleet.log"; }
fleet_with_libpq() { ! fleet_start && grep -q 'cannot reach the database' "$WORK/fleet.log" && ! grep -q 'pam-totp-fleet' "$WORK/fleet.log"; }
check "without libpq, pam-totpd in fleet mode says to install pam-totp-fleet" fleet_without_libpq
cp "$FLEET" "$R/tmp/fleet.deb"
if in_root apt-get install -y -qq /tmp/fleet.deb >"$WORK/install-fleet.log" 2>&1; then pass "apt installs pam-totp-fleet (and libpq5 with it)"
else tail -5 "$WORK/install-fleet.log"; fail "apt installs pam-totp-fleet (and libpq5 with it)"; fi
check "with pam-totp-fleet, pam-totpd loads libpq and tries the database" fleet_with_libpq
if in_root apt-get remove -y -qq pam-totp-fleet >"$WORK/remove-fleet.log" 2>&1; then pass "apt removes pam-totp-fleet, pam-totp stays"
else tail -5 "$WORK/remove-fleet.log"; fail "apt removes pam-totp-fleet, pam-totp stays"; fi
rm -f "$R/etc/pam_totp/fleet-test.conf"
# The base package at most 8 MB installed (issue 21: it was 34 MB, each program carrying a
# static Swift runtime; the programs are Embedded Swift now).
check "pam-totp's Installed-Size is at most 8 MB (8192 KiB)" \
    bash -c '[ "$(dpkg-deb -f "$0" Installed-Size)" -le 8192 ]' "$NEW"
echo "deb-test: installed sizes: pam-totp $(dpkg-deb -f "$NEW" Installed-Size) KiB, pam-totp-fleet $(dpkg-deb -f "$FLEET" Installed-Size) KiB"

# --- prerm refuses while a stack the profile does not manage names the module
refused_remove() {  # $1: what the message must name
    local out
    out=$(in_root apt-get remove -y pam-totp 2>&1) && return 1
    grep -q "not removing pam_totp.so: .*$1" <<<"$out" || { echo "$out" | tail -5; return 1; }
    [ "$(status_of)" = "install ok installed" ] && [ -f "$R$SO" ]
}
check "remove is refused while /etc/pam.d/pamtotp-debtest names the module (package and .so stay)" \
    refused_remove /etc/pam.d/pamtotp-debtest
check "the refused remove leaves a working login" login_ahead
rm "$R/etc/pam.d/pamtotp-debtest"
in_root pam-auth-update --enable pam_totp
check "pam-auth-update --enable pam_totp puts the module in common-auth" grep -q pam_totp.so "$R/etc/pam.d/common-auth"
cp -p "$R/etc/pam.d/common-auth" "$WORK/common-auth"
echo "auth optional pam_totp.so" >> "$R/etc/pam.d/common-auth"
check "remove is refused while common-auth names the module outside pam-auth-update's block" \
    refused_remove /etc/pam.d/common-auth:
cp -p "$WORK/common-auth" "$R/etc/pam.d/common-auth"

# --- remove: the profile's line goes, the store stays; purge deletes it
if in_root apt-get remove -y -qq pam-totp >"$WORK/remove.log" 2>&1; then pass "apt removes the package once only the profile names the module"
else tail -5 "$WORK/remove.log"; fail "apt removes the package once only the profile names the module"; fi
check "remove unregisters the profile: common-auth no longer names pam_totp" bash -c '! grep -q pam_totp "$0/etc/pam.d/common-auth"' "$R"
check "remove deletes the module and the tool" bash -c '[ ! -e "$0$1" ] && [ ! -e "$0/usr/bin/totp-enroll" ]' "$R" "$SO"
check "remove keeps the store and the enrolment" bash -c '[ -s "$0/var/lib/pam-totp/$1" ] && [ "$(stat -c %a "$0/var/lib/pam-totp")" = 700 ]' "$R" "$USERNAME"
check "remove keeps the conffile /etc/pam.d/totp-enroll" test -f "$R/etc/pam.d/totp-enroll"
# A reinstall after the remove: the profile was enabled before it, so it is enabled again, and
# the install says so (a new admin's trial: the factors came back, 2FA stayed off, nothing said).
if in_root apt-get install -y -qq /tmp/new.deb >"$WORK/reinstall.log" 2>&1; then pass "apt installs the package again after the remove"
else tail -5 "$WORK/reinstall.log"; fail "apt installs the package again after the remove"; fi
check "the reinstall enables the profile that was enabled before the remove" grep -q pam_totp.so "$R/etc/pam.d/common-auth"
check "the reinstall says it enabled the profile again" grep -q "enabled it again" "$WORK/reinstall.log"
check "the reinstall keeps the enrolment" test -s "$R/var/lib/pam-totp/$USERNAME"
in_root pam-auth-update --disable pam_totp
if in_root apt-get remove -y -qq pam-totp >"$WORK/remove2.log" 2>&1; then pass "apt removes it again (profile disabled first)"
else tail -5 "$WORK/remove2.log"; fail "apt removes it again (profile disabled first)"; fi
check "a profile disabled before the remove leaves no note to enable it" test ! -e "$R/var/lib/pam-totp/.profile-enabled-before-removal"
# The admin's own configuration (no package ships it): purge leaves it, and the system user,
# and says so in one line.
printf 'adjacent_intervals = 3\n' > "$R/etc/security/pam_totp.conf"
if in_root apt-get purge -y -qq pam-totp >"$WORK/purge.log" 2>&1; then pass "apt purges the package"
else tail -5 "$WORK/purge.log"; fail "apt purges the package"; fi
check "purge deletes the store /var/lib/pam-totp" test ! -e "$R/var/lib/pam-totp"
check "purge deletes /etc/pam.d/totp-enroll" test ! -e "$R/etc/pam.d/totp-enroll"
check "purge leaves the admin's /etc/security/pam_totp.conf and the user pam-totp-sender" \
    bash -c '[ -s "$0/etc/security/pam_totp.conf" ] && chroot "$0" getent passwd pam-totp-sender >/dev/null' "$R"
# (/etc/pam_totp/ is there too: the fleet check above wrote its file in it.)
purge_said() {
    local line
    [ "$(grep -c "^pam_totp: purge deleted /var/lib/pam-totp" "$WORK/purge.log")" = 1 ] || return 1
    line=$(grep "^pam_totp: purge deleted /var/lib/pam-totp" "$WORK/purge.log")
    for what in "left /etc/security/pam_totp.conf (yours" "/etc/pam_totp (yours" "the system user pam-totp-sender" \
                "rm -r /etc/security/pam_totp.conf" "rm -r /etc/pam_totp" "userdel pam-totp-sender"; do
        grep -qF "$what" <<<"$line" || { echo "not in the purge's line: $what"; cat "$WORK/purge.log"; return 1; }
    done
}
check "purge says in one line what it left and how to delete it" purge_said
check "nothing is left in dpkg's database" bash -c '[ -z "$(chroot "$0" dpkg-query -W -f="\${Status}" pam-totp 2>/dev/null | grep -v "not-installed")" ]' "$R"

echo "deb-test ($SUITE): took $(( $(date +%s) - t0 )) s"
finish
