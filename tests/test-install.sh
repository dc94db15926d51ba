#!/bin/sh
# Installs the build into a temporary DESTDIR and uses it the way a user
# would: builds examples/prefill_decode.c through pkg-config and through
# CMake's find_package(linattn), runs both, and runs the installed
# linattn-bench with no library path set (it finds the library by rpath).
#   sh tests/test-install.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
pc=$(find "$dest" -name linattn.pc | head -n 1)
[ -n "$pc" ] || { echo "linattn.pc not installed"; exit 1; }

# linattn.pc: no absolute paths but the prefix, no flag twice.
echo "--- $pc"
cat "$pc"
if grep -E '^(Libs|Cflags)' "$pc" | grep -q -E '(^|[ :])/'; then
    echo "linattn.pc names an absolute path"; exit 1
fi
for field in Libs Libs.private Cflags; do
    dup=$(sed -n "s/^$field: //p" "$pc" | tr ' ' '\n' | sed '/^$/d' | sort | uniq -d)
    [ -z "$dup" ] || { echo "linattn.pc: $field repeats $dup"; exit 1; }
done

# pkg-config: the .pc file names the real prefix; point it into DESTDIR.
export PKG_CONFIG_PATH="$(dirname "$pc")"
prefix=$(pkg-config --variable=prefix linattn)
pc_args="--define-variable=prefix=$dest$prefix"
flags=$(pkg-config "$pc_args" --cflags --libs linattn)
echo "pkg-config linattn: $flags"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$dest/prefill_decode" "$src/examples/prefill_decode.c" $flags -lm
libdir=$(pkg-config "$pc_args" --variable=libdir linattn)
LD_LIBRARY_PATH="$libdir" "$dest/prefill_decode"

# CMake: find_package(linattn 0.2) and the imported target linattn::linattn.
if command -v cmake >/dev/null 2>&1; then
    mkdir "$dest/cmake-consumer"
    cat >"$dest/cmake-consumer/CMakeLists.txt" <<EOT
cmake_minimum_required(VERSION 3.16)
project(linattn_consumer C)
find_package(linattn 0.2 REQUIRED)
message(STATUS "linattn \${linattn_VERSION} from \${linattn_DIR}")
add_executable(prefill_decode "$src/examples/prefill_decode.c")
set_property(TARGET prefill_decode PROPERTY C_STANDARD 11)
target_link_libraries(prefill_decode PRIVATE linattn::linattn m)
EOT
    cmake -S "$dest/cmake-consumer" -B "$dest/cmake-build" -DCMAKE_PREFIX_PATH="$dest$prefix" \
        -DCMAKE_C_COMPILER="${CC:-cc}" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" \
        >"$dest/cmake.log" 2>&1 || { cat "$dest/cmake.log"; exit 1; }
    grep 'linattn' "$dest/cmake.log"
    cmake --build "$dest/cmake-build" >/dev/null
    echo "find_package(linattn): built; running"
    LD_LIBRARY_PATH="$libdir" "$dest/cmake-build/prefill_decode"
else
    echo "cmake not installed: find_package(linattn) not tested"
fi

# The installed bench, straight after install: no LD_LIBRARY_PATH.
bench=$(find "$dest" -type f -name linattn-bench | head -n 1)
[ -n "$bench" ] || { echo "linattn-bench not installed"; exit 1; }
env -u LD_LIBRARY_PATH "$bench" --quick --isa scalar --kernel step >/dev/null
echo "installed linattn-bench runs: $bench"
