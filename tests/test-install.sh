#!/bin/sh
# Installs the build into a temporary DESTDIR and builds examples/ against it
# the way a user would, through pkg-config, then runs the example.
set -eu
build=$1 src=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
pc=$(find "$dest" -name linattn.pc | head -n 1)
[ -n "$pc" ] || { echo "linattn.pc not installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
# the .pc file names the real prefix; point it into DESTDIR
prefix=$(pkg-config --variable=prefix linattn)
pc_args="--define-variable=prefix=$dest$prefix"
flags=$(pkg-config "$pc_args" --cflags --libs linattn)
echo "pkg-config linattn: $flags"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$dest/prefill_decode" "$src/examples/prefill_decode.c" $flags -lm
libdir=$(pkg-config "$pc_args" --variable=libdir linattn)
LD_LIBRARY_PATH="$libdir" "$dest/prefill_decode"
