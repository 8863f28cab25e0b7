#!/bin/sh
# pkill for the vm-killer image (busybox has none): pkill [-SIGNAL] [-f] PATTERN
# Signals every process but itself whose name (with -f: whole command line) contains PATTERN,
# as procps's pkill does for a plain pattern; exits 1 when none matched.
signal=TERM full=
while [ $# -gt 1 ]; do
    case $1 in
    -f) full=1 ;;
    -[0-9]* | -[A-Z]*) signal=${1#-} ;;
    *) break ;;
    esac
    shift
done
pattern=$1
[ -n "$pattern" ] || { echo "usage: pkill [-SIGNAL] [-f] PATTERN" >&2; exit 2; }
matched=1
for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = $$ ] && continue
    if [ -n "$full" ]; then
        text=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null)
    else
        text=$(cat "$dir/comm" 2>/dev/null)
    fi
    case $text in
    *"$pattern"*) kill -"$signal" "$pid" 2>/dev/null && matched=0 ;;
    esac
done
exit $matched
