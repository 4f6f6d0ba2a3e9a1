#!/bin/bash
# The library as a user gets it (label `install`, on the host): `cmake --install` into a temporary
# prefix must lay out the public headers (and no internal one), the shared library with its
# SOVERSION, the static library, the CMake package and evrdma.pc; every installed header must
# compile on its own (the C API's, evrdma.h, as C99 too); a C99 program of the C API must build
# through pkg-config; and a small consumer (consumer.cpp) must build three ways: find_package,
# pkg-config, add_subdirectory (where evrdma must leave the parent's cache alone and build neither
# its tests nor its demos). The README's example is built from the README itself, with pkg-config.
# Then the Debian packages (make deb): libevrdma and libevrdma-dev, unpacked, must give the same
# consumer through pkg-config and find_package.
# The programs land in BUILD/consumers/bin; installed_consumers_test.sh runs them over RDMA (and
# installs the packages for real in the test bed's throw-away guest).
#   usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
out=$build/consumers prefix=$build/consumers/prefix
rm -rf "$out"
mkdir -p "$out/bin"
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }
jobs=$(nproc 2>/dev/null || echo 2)

echo "--- cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" | tee "$out/install.log"

libdir=$(find "$prefix" -name 'libevrdma.a' -printf '%h\n')
[ -n "$libdir" ] || fail "no libevrdma.a installed"
for f in include/evrdma/Reactor.h include/evrdma/Connection.h include/evrdma/Client.h include/evrdma/Listener.h \
         include/evrdma/Callbacks.h include/evrdma/Watch.h include/evrdma/MemoryRegion.h; do
    [ -f "$prefix/$f" ] || fail "$f not installed"
done
for f in libevrdma.so libevrdma.a pkgconfig/evrdma.pc cmake/evrdma/evrdmaConfig.cmake \
         cmake/evrdma/evrdmaConfigVersion.cmake cmake/evrdma/evrdmaTargets.cmake; do
    [ -e "$libdir/$f" ] || fail "${libdir#"$prefix"/}/$f not installed"
done
soname=$(objdump -p "$libdir/libevrdma.so" | awk '/SONAME/ {print $2}')
[[ "$soname" =~ ^libevrdma\.so\.[0-9]+\.[0-9]+$ ]] || fail "libevrdma.so has SONAME '$soname', expected libevrdma.so.MAJOR.MINOR"
[ -f "$libdir/$soname" ] || fail "$soname (the SONAME) not installed"
for h in "$src"/reactor/src/*.h "$src"/handlers/src/*.h; do
    [ ! -e "$prefix/include/evrdma/$(basename "$h")" ] || fail "internal header $(basename "$h") was installed"
done
installed=$(find "$prefix/include" -name '*.h' | wc -l)
echo "--- every one of the $installed installed headers compiles on its own"
for h in "$prefix"/include/evrdma/*.h; do
    echo "#include <evrdma/$(basename "$h")>" | g++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" -x c++ - ||
        fail "evrdma/$(basename "$h") does not compile on its own"
done

echo "--- the C API's header compiles as C99 on its own"
echo '#include <evrdma/evrdma.h>' | cc -std=c99 -Wall -Wextra -Werror -pedantic -fsyntax-only -I"$prefix/include" -x c - ||
    fail "evrdma/evrdma.h does not compile as C99"

echo "--- 1. find_package(evrdma CONFIG)"
cmake -S "$src/tests/consumer" -B "$out/find-package" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$out/find-package" -j"$jobs"
cp "$out/find-package/evrdma-consumer" "$out/bin/consumer-find-package"
cp "$out/find-package/evrdma-consumer-static" "$out/bin/consumer-find-package-static"

echo "--- 2. pkg-config evrdma"
export PKG_CONFIG_PATH=$libdir/pkgconfig
pkg-config --modversion evrdma
# The README's command line, as it stands there (app.cpp: the consumer), and the same without the
# run-time path it explains (installed_consumers_test checks that one fails to start).
readme_line=$(sed -n 's/^    \(g++ -std=c++17 app\.cpp \$(pkg-config .*\)$/\1/p' "$src/README.md" | head -n 1)
[[ $readme_line == *-rpath* ]] || fail "no pkg-config command line with -rpath in README.md's install section"
(cd "$out" && cp "$src/tests/consumer/consumer.cpp" app.cpp && eval "$readme_line -Wall -Wextra -Werror -o bin/consumer-pkg-config")
# shellcheck disable=SC2046
g++ -std=c++17 -Wall -Wextra -Werror "$src/tests/consumer/consumer.cpp" -o "$out/bin/consumer-pkg-config-no-rpath" \
    $(pkg-config --cflags --libs evrdma)
echo "$libdir" >"$out/bin/libdir"
echo "--- a C99 program of the C API, through pkg-config"
# shellcheck disable=SC2046
cc -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror "$src/tests/rdma/stream_c_api_test.c" \
    -o "$out/bin/c-api-pkg-config" $(pkg-config --cflags --libs evrdma) -Wl,-rpath,"$libdir"
echo "--- the README's example, as the README shows it"
awk '/^```cpp$/ {inside=1; next} /^```$/ && inside {exit} inside' "$src/README.md" >"$out/readme_example.cpp"
[ -s "$out/readme_example.cpp" ] || fail "no \`\`\`cpp block in README.md"
diff -u "$src/demos/samples/hello_embedded.cpp" "$out/readme_example.cpp" ||
    fail "the README's example is not demos/samples/hello_embedded.cpp"
# shellcheck disable=SC2046
g++ -std=c++17 -Wall -Wextra -Werror "$out/readme_example.cpp" -o "$out/bin/readme-example" \
    $(pkg-config --cflags --libs evrdma) -Wl,-rpath,"$libdir"

echo "--- the README's C example, as the README shows it"
awk '/^```c$/ {inside=1; next} /^```$/ && inside {exit} inside' "$src/README.md" >"$out/readme_example.c"
[ -s "$out/readme_example.c" ] || fail "no \`\`\`c block in README.md"
diff -u "$src/demos/samples/hello_stream.c" "$out/readme_example.c" ||
    fail "the README's C example is not demos/samples/hello_stream.c"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -Werror "$out/readme_example.c" -o "$out/bin/readme-example-c" \
    $(pkg-config --cflags --libs evrdma) -Wl,-rpath,"$libdir"

echo "--- 3. add_subdirectory(evrdma)"
cmake -S "$src/tests/consumer" -B "$out/subproject" -DEVRDMA_SOURCE_DIR="$src" >/dev/null
grep -q '^CMAKE_BUILD_TYPE:STRING=$' "$out/subproject/CMakeCache.txt" ||
    fail "as a subproject evrdma changed the parent's CMAKE_BUILD_TYPE: $(grep '^CMAKE_BUILD_TYPE' "$out/subproject/CMakeCache.txt")"
targets=$(cmake --build "$out/subproject" --target help)
if grep -qE '^\.\.\. (pingpong|blast|unit_|rdma_)' <<<"$targets"; then fail "as a subproject evrdma builds its demos or tests"; fi
cmake --build "$out/subproject" -j"$jobs"
cp "$out/subproject/evrdma-consumer" "$out/bin/consumer-add-subdirectory"

echo "--- 4. the Debian packages (make deb)"
(cd "$build" && cpack -B "$out/packages" >/dev/null)
runtime=$(ls "$out"/packages/libevrdma_*.deb) dev=$(ls "$out"/packages/libevrdma-dev_*.deb)
dpkg-deb -f "$runtime" Package Version Depends
dpkg-deb -f "$dev" Package Version Depends
dpkg-deb -f "$dev" Depends | grep -q 'libevrdma (= ' || fail "libevrdma-dev does not depend on its libevrdma"
dpkg-deb -f "$runtime" Depends | grep -q 'librdmacm1' || fail "libevrdma does not depend on librdmacm1"
grep -q "usr/lib/$soname " <<<"$(dpkg-deb -c "$runtime")" || fail "libevrdma lacks $soname"
grep -q 'usr/include/evrdma/Connection.h' <<<"$(dpkg-deb -c "$dev")" || fail "libevrdma-dev lacks the headers"
root=$out/deb-root
dpkg-deb -x "$runtime" "$root"
dpkg-deb -x "$dev" "$root"
# shellcheck disable=SC2046
g++ -std=c++17 -Wall -Wextra -Werror "$src/tests/consumer/consumer.cpp" -o "$out/bin/consumer-deb" \
    $(PKG_CONFIG_PATH=$root/usr/lib/pkgconfig pkg-config --cflags --libs evrdma)  # no rpath: runs once installed
LD_LIBRARY_PATH=$root/usr/lib "$out/bin/consumer-deb" --help >/dev/null || fail "consumer-deb does not load"
cmake -S "$src/tests/consumer" -B "$out/deb-find-package" -DCMAKE_PREFIX_PATH="$root/usr" >/dev/null
cmake --build "$out/deb-find-package" -j"$jobs" >/dev/null

ls -l "$out/bin"
echo "install_test: installed $installed headers; consumers built three ways (find_package, pkg-config, add_subdirectory) and from the Debian packages"
