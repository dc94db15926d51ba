#!/bin/sh
# Builds the Python package with pip (meson-python, offline, Debian's numpy),
# installs it into a throwaway virtual environment that sees the system's
# packages, and runs its pytest suite. Exits non-zero on any failure,
# including a run that collects no tests.
#   scripts/test-python.sh [pytest args...]
# Needs: python3-mesonpy python3-numpy python3-pytest python3-venv (Debian);
# python3-torch is optional (its tests are skipped without it).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3  # Debian's interpreter: the one its python3-* packages serve
work=$(mktemp -d "${TMPDIR:-/tmp}/linattn-py.XXXXXX")
# meson-python 0.12 writes this file into the source tree; keep it clean.
native="$here/.mesonpy-native-file.ini"
keep_native=0
[ -e "$native" ] && keep_native=1
cleanup() {
    rm -rf "$work"
    [ "$keep_native" -eq 1 ] || rm -f "$native"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$py" -m venv --system-site-packages "$work/venv"
# --no-build-isolation: build with the installed meson-python, no downloads.
"$work/venv/bin/python" -m pip install --quiet --no-index --no-deps \
    --no-build-isolation "$here"

# Run from outside the source tree so that `import linattn` is the installed
# package, not python/linattn without its extension.
cd "$work"
set +e
"$work/venv/bin/python" -m pytest -v -p no:cacheprovider "$here/python/tests" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test-python: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
