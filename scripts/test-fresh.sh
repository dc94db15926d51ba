#!/bin/bash
# The README on a fresh machine: debootstraps a minimal Debian 12 (bookworm)
# into a temporary directory and runs, inside it as root, exactly what the
# README tells a new user to run:
#   1. the first quick-start command (install-deps, meson setup, build, bench);
#   2. the second (install-deps --test, scripts/test-all.sh), in the same
#      checkout, so that a reconfiguration after new packages is tested too;
#   3. the Python section: its apt line, venv + pip install line, snippet.
# Needs root and debootstrap; reaches the Debian mirror (MIRROR to change).
# The host's apt cache (/var/cache/apt/archives) seeds the fresh root's, so
# packages already downloaded here are not downloaded again. A fuzzer's
# finding (crash-*, leak-*, timeout-*, with the fuzz logs) is copied into
# fuzz-findings/ of this checkout before the root is removed.
#   scripts/test-fresh.sh            all three
#   FRESH_STEPS="1 3" scripts/test-fresh.sh   a subset (for quick checks)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mirror=${MIRROR:-http://deb.debian.org/debian}
steps=${FRESH_STEPS:-1 2 3}

if [ "$(id -u)" -ne 0 ]; then
    echo "test-fresh.sh: run as root (debootstrap, chroot)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "test-fresh.sh: needs debootstrap" >&2; exit 1; }

root=$(mktemp -d "${TMPDIR:-/var/tmp}/linattn-fresh.XXXXXX")
mounted=()
cleanup() {
    # A fuzzer's finding outlives the root: its input is what replays it
    # (a finding whose input went with the root could not be reproduced).
    local i f fuzz="$root/root/linattn/build-fuzz"
    for f in "$fuzz"/{crash,leak,timeout}-*; do
        [ -f "$f" ] || continue
        mkdir -p "$here/fuzz-findings"
        cp "$f" "$fuzz"/fuzz-*.log "$here/fuzz-findings/" 2>/dev/null || true
        echo "test-fresh.sh: kept $(basename "$f") and the fuzz logs in $here/fuzz-findings" >&2
    done
    # Unmount in reverse order before removing anything: rm -rf through a
    # live /proc or /dev bind would reach the host.
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[i]}" 2>/dev/null || true
    done
    if ! grep -q " $root/" /proc/mounts; then
        rm -rf "$root"
    else
        echo "test-fresh.sh: $root still has mounts; left in place" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(date +%s)
seed_cache() { # the host's .debs into the fresh root's apt cache (hard links)
    [ -d /var/cache/apt/archives ] || return 0
    mkdir -p "$root/var/cache/apt/archives"
    find /var/cache/apt/archives -maxdepth 1 -name '*.deb' \
        -exec cp -nl {} "$root/var/cache/apt/archives/" \; 2>/dev/null ||
        find /var/cache/apt/archives -maxdepth 1 -name '*.deb' \
            -exec cp -n {} "$root/var/cache/apt/archives/" \;
}
echo "== debootstrap bookworm (minbase) into $root =="
seed_cache  # debootstrap takes matching .debs from here...
debootstrap --variant=minbase bookworm "$root" "$mirror"
seed_cache  # ...and empties it at the end: again, for apt-get install
t_boot=$(date +%s)

for fs in proc sys dev; do
    mount --rbind "/$fs" "$root/$fs"
    mount --make-rslave "$root/$fs"
    mounted+=("$root/$fs")
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The checkout as a new user gets it: tracked files only (git archive of the
# working tree's HEAD plus uncommitted changes would not be what a user sees).
mkdir -p "$root/root/linattn"
git -C "$here" ls-files -z | (cd "$here" && xargs -0 tar cf -) | tar xf - -C "$root/root/linattn"

in_root() { # in_root 'commands': run as root in the fresh system's checkout
    chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 CI="${CI:-}" /bin/bash -ec "cd /root/linattn && $1" </dev/null
}
# The README's commands, read from the README itself so the test follows it.
readme_cmd() { # readme_cmd PATTERN: the indented command line containing it
    grep -E "^    .*$1" "$here/README.md" | head -n 1 | sed 's/^    //'
}
cmd1=$(readme_cmd 'install-deps.sh &&')
cmd2=$(readme_cmd 'install-deps.sh --test &&')
[ -n "$cmd1" ] && [ -n "$cmd2" ] || { echo "test-fresh.sh: README commands not found" >&2; exit 1; }

timing=""
run_step() { # run_step NAME COMMANDS
    local s
    s=$(date +%s)
    echo "== fresh root: $1 =="
    echo "\$ $2"
    in_root "$2"
    timing="$timing$(printf '  %-34s %5ss' "$1" $(($(date +%s) - s)))"$'\n'
}
for step in $steps; do
    case $step in
    1) run_step "quick start, first command" "$cmd1" ;;
    2) run_step "quick start, second command" "$cmd2" ;;
    3)
        py_apt=$(grep -oE 'apt-get install python3[^`]*' "$here/README.md" | head -n 1)
        run_step "Python install (README)" \
            "$py_apt -y && python3 -m venv --system-site-packages V && V/bin/pip install --no-build-isolation ."
        # The README's snippet, run as written from outside the checkout.
        snippet=$(awk '/^```python$/ {p = 1; next} /^```$/ {if (p) exit} p' "$here/README.md")
        printf '%s\n' "$snippet" >"$root/tmp/readme_snippet.py"
        run_step "Python snippet (README)" \
            "cd /tmp && /root/linattn/V/bin/python readme_snippet.py && echo snippet ok"
        ;;
    *) echo "test-fresh.sh: unknown step $step" >&2; exit 2 ;;
    esac
done

echo "== test-fresh.sh: wall time =="
printf '  %-34s %5ss\n' "debootstrap" $((t_boot - t0))
printf '%s' "$timing"
printf '  %-34s %5ss\n' "total" $(($(date +%s) - t0))
