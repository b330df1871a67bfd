#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The consumer's view of locksmith: install a build into a temporary prefix, then build against
# that prefix only, as someone outside this repository would:
#   1. pkg-config --cflags --libs locksmith compiles and links a program, which runs; so does
#      README.md's example program; the installed library finds its strategy modules, and
#      with a client library hidden (as root, in a private mount namespace) only the strategy
#      that needs it fails, naming it;
#   2. find_package(locksmith): the out-of-tree example plugin (examples/plugin), its demo
#      program and its conformance run (ctest in the plugin's own build);
#   3. the installed locksmith command (linked statically) loads the plugin from its config,
#      runs a command under a plugin lock, reports contention, and reports options the plugin
#      rejects as a config error; named by file name alone, the plugin is found in the module
#      folder (put there for the check, removed after).
# Usage: scripts/test-install.sh [BUILD_DIR]   (default build, where scripts/test.sh builds; it must be built)
#        scripts/test-install.sh --system      the same checks on the locksmith installed in /usr
#                                              (the Debian packages: scripts/test-packages.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 700 "$tmp"  # plugins are refused in folders others may write to
step() { printf '== %s\n' "$*"; }

if [ "${1:-}" = --system ]; then
  prefix=/usr
  pcdir=$(pkg-config --variable=pcfiledir locksmith) || { echo "no locksmith.pc installed" >&2; exit 1; }
else
  build=${1:-build}
  prefix=$tmp/prefix
  step "cmake --install $build --prefix <tmp>"
  cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
  pc=$(find "$prefix" -name locksmith.pc)
  [ -n "$pc" ] || { echo "locksmith.pc was not installed" >&2; exit 1; }
  pcdir=$(dirname "$pc")
fi
export PKG_CONFIG_PATH=$pcdir
libdir=$(realpath "$(pkg-config --variable=libdir locksmith)")

step "one version: pkg-config, version.hpp, the manual page and --version agree"
version=$(pkg-config --modversion locksmith)
grep -q "version = \"$version\";" "$prefix/include/locksmith/version.hpp"
zcat "$prefix/share/man/man1/locksmith.1.gz" | grep "^\.TH LOCKSMITH 1 .*\"locksmith $version\"" >/dev/null
"$prefix/bin/locksmith" --version >"$tmp/version"
head -n 1 "$tmp/version" | grep -qx "locksmith $version"
[ ! -e "$prefix/include/locksmith/version.hpp.in" ]

step "pkg-config --cflags --libs locksmith"
cat >"$tmp/pc_program.cpp" <<'CPP'
#include <iostream>
#include <locksmith/locksmith.hpp>
int main() {
    locksmith::lock_factory factory(locksmith::config::parse(R"({"strategies": {"file": {"priority": 99}}})"));
    auto lock = factory.create_lock("pkg-config-check");
    if (!lock.try_lock()) return 1;
    std::cout << "pkg-config program: locked on " << lock.strategy() << '\n';
    return 0;
}
CPP
flags=$(pkg-config --cflags --libs locksmith)
c++ -std=c++20 "$tmp/pc_program.cpp" $flags -Wl,-rpath,"$libdir" -o "$tmp/pc_program"
"$tmp/pc_program"

step "pkg-config: README.md's example program"
awk '/^```cpp$/ { on = 1; next } on && /^```$/ { exit } on' README.md >"$tmp/readme_example.cpp"
grep -q 'int main' "$tmp/readme_example.cpp" || { echo "README.md: no \`\`\`cpp program" >&2; exit 1; }
c++ -std=c++20 "$tmp/readme_example.cpp" $flags -Wl,-rpath,"$libdir" -o "$tmp/readme_example"
"$tmp/readme_example"

step "the installed library finds its strategy modules in $libdir/locksmith-modules"
cat >"$tmp/modules.cpp" <<'CPP'
#include <filesystem>
#include <iostream>
#include <locksmith/locksmith.hpp>
// Each module strategy of the default registry: where the library looks for it, and whether it
// loads there (support_status says why not).
int main(int, char** argv) {
    namespace fs = std::filesystem;
    const fs::path expected = fs::canonical(argv[1]);
    int modules = 0, bad = 0;
    auto& registry = locksmith::default_registry();
    for (const auto& name : registry.names()) {
        const auto d = registry.find(name);
        if (!d || d->origin.rfind("module ", 0) != 0) continue;
        ++modules;
        const auto file = d->origin.substr(7, d->origin.find(' ', 7) - 7);
        const auto status = d->supported ? d->supported() : locksmith::support_status::yes();
        std::cout << name << ": " << file << ": " << (status.supported ? "loads" : status.reason) << '\n';
        std::error_code ec;
        if (!status.supported || fs::canonical(file, ec).parent_path() != expected) ++bad;
    }
    std::cout << modules << " modules, " << bad << " not found or not loading\n";
    return bad == 0 ? 0 : 1;
}
CPP
c++ -std=c++20 "$tmp/modules.cpp" $flags -Wl,-rpath,"$libdir" -o "$tmp/modules"
"$tmp/modules" "$libdir/locksmith-modules" | tee "$tmp/modules.out"

# The client libraries are the packages' Recommends: apt-get --no-install-recommends leaves them
# out. Taken away here in a private mount namespace (the file hidden under /dev/null), so that
# nothing else on the machine sees it.
step "a client library missing: its strategy says which package to install, the others work"
hiredis=$(ldd "$libdir/locksmith-modules/liblocksmith_redis.so" 2>/dev/null | awk '/libhiredis/ { print $3 }')
# awk reads to the end: leaving early would end ldconfig with SIGPIPE, and pipefail the script.
libpq=$(ldconfig -p | awk '$1 == "libpq.so.5" && !found { print $NF; found = 1 }')
if [ "$(id -u)" != 0 ] || [ -z "$hiredis" ] || [ -z "$libpq" ]; then
  echo "SKIPPED: needs root (a private mount namespace), the redis module and libpq.so.5"
  [ "${CI:-}" != true ] || exit 1
else
  hide() { unshare -m sh -c 'mount --bind /dev/null "$1" && shift && exec "$@"' sh "$@"; }
  set +e
  out=$(hide "$hiredis" "$tmp/modules" "$libdir/locksmith-modules" 2>&1)
  code=$?
  set -e
  printf '%s\n' "$out"
  loads=$(grep -c ': loads$' "$tmp/modules.out")
  [ "$code" = 1 ] && grep -E '^redis: .*libhiredis' <<<"$out" >/dev/null &&
    [ "$(grep -c ': loads$' <<<"$out")" = $((loads - 1)) ] ||
    { echo "without $hiredis: expected redis alone to fail, naming it" >&2; exit 1; }
  set +e
  out=$(LOCKSMITH_CONFIG='{"strategies": {"pg_advisory": {"options": {"dsn": "postgresql://u@127.0.0.1:1/db"}}}}' \
    hide "$libpq" "$prefix/bin/locksmith" run -n install-check -- true 2>&1)
  code=$?
  set -e
  printf '%s\n' "$out"
  [ "$code" = 69 ] && grep 'install the package libpq5' <<<"$out" >/dev/null ||
    { echo "without $libpq: expected exit 69 naming libpq5, got $code" >&2; exit 1; }
fi

step "find_package(locksmith): examples/plugin"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S examples/plugin -B "$tmp/plugin-build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/plugin-configure.log"
cmake --build "$tmp/plugin-build" >"$tmp/plugin-build.log"
ctest --test-dir "$tmp/plugin-build" --output-on-failure

step "the installed locksmith command loads the plugin"
mkdir -m 700 "$tmp/plugins" "$tmp/locks"
cp "$tmp/plugin-build/libflockdir.so" "$tmp/plugins/"
cat >"$tmp/config.json" <<JSON
{"plugins": ["$tmp/plugins/libflockdir.so"],
 "strategies": {"flockdir": {"priority": 95, "options": {"directory": "$tmp/locks"}}}}
JSON
locksmith() { "$prefix/bin/locksmith" --config "$tmp/config.json" "$@"; }
locksmith strategies | grep -E "^flockdir .*plugin $tmp/plugins/libflockdir.so \(flockdir 1.0.0\)$"
locksmith config check "$tmp/config.json"
locksmith run -n nightly -- sh -c 'test "$LOCKSMITH_STRATEGY" = flockdir'
# Held by the outer run, so the inner -n run must report the conflict (exit 1).
set +e
locksmith run nightly -- "$prefix/bin/locksmith" --config "$tmp/config.json" run -n nightly -- true
code=$?
set -e
[ "$code" = 1 ] || { echo "contention: expected exit 1, got $code" >&2; exit 1; }
ls "$tmp/locks" | grep -qx 'nightly.flock'
# The plugin's validator throws inside the plugin (its own libstdc++); the command must catch it.
sed -i 's|"directory": "[^"]*"|"directory": "relative"|' "$tmp/config.json"
set +e
out=$(locksmith run nightly -- true 2>&1)
code=$?
set -e
[ "$code" = 78 ] || { echo "rejected options: expected exit 78, got $code: $out" >&2; exit 1; }
grep -q '/strategies/flockdir/options/directory' <<<"$out" || { echo "$out" >&2; exit 1; }

# The folder compiled into the command (LOCKSMITH_LIBDIR), which pkg-config's moduledir and
# find_package's locksmith_MODULE_DIR name too.
moduledir=$(realpath "$(pkg-config --variable=moduledir locksmith)")
step "the command finds a plugin named by file name alone in $moduledir"
install -m 644 "$tmp/plugin-build/libflockdir.so" "$moduledir/"
trap 'rm -f "$moduledir/libflockdir.so"; rm -rf "$tmp"' EXIT
cat >"$tmp/bare.json" <<JSON
{"plugins": ["libflockdir.so"],
 "strategies": {"flockdir": {"priority": 95, "options": {"directory": "$tmp/locks"}}}}
JSON
"$prefix/bin/locksmith" --config "$tmp/bare.json" strategies |
  grep -E "^flockdir .*plugin $moduledir/libflockdir.so \(flockdir 1.0.0\)$"
"$prefix/bin/locksmith" --config "$tmp/bare.json" run -n bare -- sh -c 'test "$LOCKSMITH_STRATEGY" = flockdir'
rm "$moduledir/libflockdir.so"
step "install test passed"
