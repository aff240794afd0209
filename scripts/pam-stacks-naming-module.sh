#!/bin/sh
# pam-stacks-naming-module: which PAM stacks name pam_totp.so, and whether the module may go.
#
# The one implementation of the check that runs before pam_totp.so is removed: the Debian
# package's prerm (installed as /usr/libexec/pam-totp/pam-stacks-naming-module) and
# `make uninstall` both call it, so the two cannot drift (docs/ARCHITECTURE.md, section 3). Removing
# the .so while a stack still names it fails every authentication through that stack with
# "Module is unknown".
#
# A stack line is "managed" when it is inside the block pam-auth-update writes in one of its
# common-* files, from '# here are the per-package modules (the "Primary" block)' to
# '# end of pam-auth-update config': such a line comes from the pam_totp profile and goes away
# with `pam-auth-update --package --remove pam_totp`. Every other active line that names the
# module (sshd, sudo, a hand-written line in common-auth outside the block, ...) is the
# admin's, and only the admin can take it out.
#
# A line names the module when its module field is pam_totp.so, or is any other name or path
# that resolves to the same file (device and inode: a symlink or hard link such as
# pam_2fa.so -> pam_totp.so). Relative names are resolved in the PAM module directories
# (--moduledir DIR, repeatable; default every /lib/*/security, /usr/lib/*/security,
# /lib/security and /usr/lib/security); the module is pam_totp.so in the first of them that
# has it (--module PATH names it instead).
#
# Usage:
#   pam-stacks-naming-module [--pamdir DIR] [--module PATH] [--moduledir DIR]... [--all]
#       Prints FILE:LINE for each active line in DIR (default /etc/pam.d) that names
#       pam_totp.so outside the managed blocks (with --all: managed ones too).
#       Exit 0: none; 1: some (listed); 2: usage error or DIR unreadable.
#   pam-stacks-naming-module [--pamdir DIR] --before-removal
#       Refuses (one line on stderr, exit 1) while an unmanaged line names the module; otherwise
#       unregisters the profile (pam-auth-update --package --remove pam_totp, only for
#       /etc/pam.d) and checks again that no line at all names the module (pam-auth-update
#       leaves a common-* file that was edited by hand alone). Exit 0: the module may go.
#
# Lines are read as libpam reads them: from '#' to the end of a line is a comment, and the
# module may follow a bracketed control with no blank ("[default=die]pam_totp.so"). The files
# read are every regular file under DIR, subdirectories too, and, to any depth, every file an
# include, substack or @include line names (libpam follows an absolute path, or one relative to
# DIR, "../" included, as well); for /etc/pam.d, /usr/lib/pam.d too. Backup files in DIR that no service reads (*.dpkg-old,
# *.dpkg-dist, *.dpkg-new, *.dpkg-bak, *.dpkg-tmp, *.ucf-*, *.pam-old, *~) are skipped unless
# a line includes them. Nothing here prints the contents of a stack.
set -eu

pamdir=/etc/pam.d
mode=list
all=0
module=
moduledirs=
while [ $# -gt 0 ]; do
    case "$1" in
        --pamdir) [ $# -ge 2 ] || { echo "pam-stacks-naming-module: --pamdir needs a directory" >&2; exit 2; }
                  pamdir=$2; shift 2 ;;
        --all) all=1; shift ;;
        --module) [ $# -ge 2 ] || { echo "pam-stacks-naming-module: --module needs a path" >&2; exit 2; }
                  module=$2; shift 2 ;;
        --moduledir) [ $# -ge 2 ] || { echo "pam-stacks-naming-module: --moduledir needs a directory" >&2; exit 2; }
                     moduledirs="$moduledirs
$2"; shift 2 ;;
        --before-removal) mode=before-removal; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "pam-stacks-naming-module: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ ! -d "$pamdir" ] || [ ! -r "$pamdir" ]; then
    echo "pam-stacks-naming-module: cannot read $pamdir" >&2
    exit 2
fi
# For the live /etc/pam.d, libpam also reads /usr/lib/pam.d: a service with no file in
# /etc/pam.d, and an include that /etc/pam.d does not have, come from there.
vendordir=
if [ "$pamdir" = /etc/pam.d ] && [ -d /usr/lib/pam.d ]; then vendordir=/usr/lib/pam.d; fi

nl='
'
if [ -z "$moduledirs" ]; then
    moduledirs=$(for d in /lib/*/security /usr/lib/*/security /lib/security /usr/lib/security; do
        if [ -d "$d" ]; then printf '%s\n' "$d"; fi; done)
fi
if [ -z "$module" ]; then
    module=$(printf '%s\n' "$moduledirs" | while IFS= read -r d; do
        if [ -n "$d" ] && [ -f "$d/pam_totp.so" ]; then printf '%s\n' "$d/pam_totp.so"; break; fi; done)
fi
# The installed module's device and inode (empty: not installed, so only names can match).
module_id=
if [ -n "$module" ]; then module_id=$(stat -L -c '%d:%i' -- "$module" 2>/dev/null || true); fi

# Whether module field $1 of a stack line is the installed module's file under another name.
same_file() {
    [ -n "$module_id" ] || return 1
    case "$1" in
        /*) [ "$(stat -L -c '%d:%i' -- "$1" 2>/dev/null)" = "$module_id" ]; return ;;
    esac
    printf '%s\n' "$moduledirs" | while IFS= read -r d; do
        [ -n "$d" ] || continue
        if [ "$(stat -L -c '%d:%i' -- "$d/$1" 2>/dev/null)" = "$module_id" ]; then echo yes; break; fi
    done | grep -q yes
}

# Prints the file each include, substack or @include line of file $1 names, as libpam opens it.
# Lines are joined as libpam joins them: a trailing backslash continues a line, a line that is
# blank or only a comment is skipped in between, and a '#' ends the joined line.
include_targets() {
    awk -v dir="$pamdir" -v vendor="$vendordir" '
        /^[ \t]*(#|$)/ { next }
        {
            if (index($0, "#")) { sub(/#.*/, ""); $0 = joined $0; joined = "" }
            else if (sub(/\\[ \t]*$/, " ")) { joined = joined $0; next }
            else { $0 = joined $0; joined = "" }
            target = ""
            if (tolower($1) == "@include") target = $2
            else if (tolower($1) ~ /^-?(auth|account|password|session)$/ && (tolower($2) == "include" || tolower($2) == "substack")) target = $3
            if (target == "") next
            if (substr(target, 1, 1) == "/") { print target; next }
            print dir "/" target
            if (vendor != "") print vendor "/" target
        }' "$1"
}

# Prints every file libpam may read for a stack in $pamdir, one a line: the regular files under
# it (backups skipped), then what their include lines name, followed until nothing new turns up.
stack_files() {
    set -f
    files=$(find -L "$pamdir" ${vendordir:+"$vendordir"} -type f 2>/dev/null | LC_ALL=C sort | while IFS= read -r f; do
        case "${f##*/}" in
            *.dpkg-old|*.dpkg-dist|*.dpkg-new|*.dpkg-bak|*.dpkg-tmp|*.ucf-*|*.pam-old|*~) continue ;;
        esac
        printf '%s\n' "$f"
    done)
    seen=$(printf '%s\n' "$files" | while IFS= read -r f; do [ -n "$f" ] && readlink -f "$f"; done)
    todo=$files
    while [ -n "$todo" ]; do
        next=
        IFS=$nl
        for f in $todo; do
            for t in $(include_targets "$f"); do
                [ -f "$t" ] || continue
                c=$(readlink -f "$t")
                if ! printf '%s\n' "$seen" | grep -qxF -e "$c"; then
                    seen=$seen$nl$c
                    files=$files$nl$c
                    next=$next$nl$c
                fi
            done
        done
        unset IFS
        todo=${next#"$nl"}
    done
    printf '%s\n' "$files"
    set +f
}

# Prints FILE:LINE per naming line; $1 = 1: managed lines too. awk prints a line that names
# pam_totp.so as FILE:LINE, and every other module line as "?FILE:LINE<TAB>MODULE" for the
# shell to compare by file (same_file).
naming_lines() {
    stack_files | while IFS= read -r f; do
        [ -n "$f" ] || continue
        awk -v all="$1" -v base="${f#"$pamdir"/}" '
            FNR == 1 { managed = 0; common = (base ~ /^common-(auth|account|password|session|session-noninteractive)$/) }
            common && /^# here are the per-package modules \(the "Primary" block\)/ { managed = 1 }
            common && /^# end of pam-auth-update config/ { managed = 0 }
            {
                line = $0
                sub(/#.*/, "", line)
                if (!(all == 1 || !managed)) next
                if (line ~ /(^|[] \t\/])pam_totp\.so([ \t]|$)/) { print FILENAME ":" FNR; next }
                # The module field: after the type and the control (a bracketed control may
                # span blanks, and the module may follow its "]" with none).
                n = split(line, w, /[ \t]+/)
                i = 1
                if (w[i] == "") i++
                if (tolower(w[i]) !~ /^-?(auth|account|password|session)$/) next
                i++
                if (tolower(w[i]) == "include" || tolower(w[i]) == "substack") next
                if (substr(w[i], 1, 1) == "[") {
                    while (i <= n && index(w[i], "]") == 0) i++
                    rest = substr(w[i], index(w[i], "]") + 1)
                    if (rest != "") { print "?" FILENAME ":" FNR "\t" rest; next }
                }
                i++
                if (i <= n && w[i] != "") print "?" FILENAME ":" FNR "\t" w[i]
            }' "$f"
    done | while IFS= read -r out; do
        case "$out" in
            \?*) where=${out%%"$(printf '\t')"*}; name=${out#*"$(printf '\t')"}
                 if same_file "$name"; then printf '%s\n' "${where#\?}"; fi ;;
            *) printf '%s\n' "$out" ;;
        esac
    done
}

if [ "$mode" = list ]; then
    found=$(naming_lines "$all")
    [ -z "$found" ] && exit 0
    printf '%s\n' "$found"
    exit 1
fi

# --before-removal
found=$(naming_lines 0)
if [ -n "$found" ]; then
    echo "pam_totp: not removing pam_totp.so: $(printf '%s\n' "$found" | tr '\n' ' ' | sed 's/ $//') still name it (stacks pam-auth-update does not manage); delete those lines, keeping a root shell open, then try again" >&2
    exit 1
fi
if [ "$pamdir" = /etc/pam.d ] && command -v pam-auth-update >/dev/null 2>&1; then
    pam-auth-update --package --remove pam_totp
fi
found=$(naming_lines 1)
if [ -n "$found" ]; then
    echo "pam_totp: not removing pam_totp.so: $(printf '%s\n' "$found" | tr '\n' ' ' | sed 's/ $//') still name it after pam-auth-update --remove pam_totp (edited by hand?); run pam-auth-update --disable pam_totp or delete those lines, then try again" >&2
    exit 1
fi
exit 0
