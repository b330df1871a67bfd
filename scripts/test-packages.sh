#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages' round trip, from a finished build (no second compile):
#   1. cpack makes locksmith, liblocksmith<N> and liblocksmith-dev (cmake/LocksmithPackaging.cmake);
#      dpkg-deb lists what each ships; lintian must find no error (warnings are printed);
#   2. apt-get installs locksmith alone: /usr/bin/locksmith runs (--version, `run -n`, as root
#      and as nobody, in an empty environment as cron gives) and checks the example config;
#   3. apt-get installs them all (./*.deb); the build tree's programs still load the build
#      tree's library, not the installed one (their run paths); scripts/test-install.sh --system
#      builds README.md's example, a pkg-config program and the example plugin (find_package,
#      its conformance run) against the installed -dev package, and loads the modules;
#   4. apt-get purge removes them, and nothing of ours is left: no file dpkg -L listed, and
#      nothing new named *locksmith* under /etc, /usr/lib, /usr/include, /usr/share/doc, ...
# Needs root (runuser, and files written into the packaged module folder) and lintian. The
# packages are installed only between 2 and 4, and purged on any failure; one run at a time per
# machine (flock).
# Usage: scripts/test-packages.sh [BUILD_DIR]   (default build; it must be built)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(cd "${1:-build}" && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
apt=($sudo apt-get -o DPkg::Lock::Timeout=600 -y -qq)
t0=$SECONDS
step() { printf '== %s (%d s)\n' "$*" $((SECONDS - t0)); }
tmp=$(mktemp -d)
chmod 755 "$tmp"  # nobody reads the packages from here
packages=()
cleanup() {
  local rc=$?
  local p installed=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -E ' (installed|config-files)$' >/dev/null &&
      installed+=("$p")
  done
  if [ ${#installed[@]} -gt 0 ]; then
    echo "test-packages: purging ${installed[*]} after a failure" >&2
    "${apt[@]}" purge "${installed[@]}" >/dev/null || true
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT

step "cpack -G DEB ($build)"
cpack --config "$build/CPackConfig.cmake" -B "$tmp/cpack" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log" >&2; exit 1; }
mkdir "$tmp/debs"
mv "$tmp"/cpack/*.deb "$tmp/debs/"
chmod 644 "$tmp"/debs/*.deb
for deb in "$tmp"/debs/*.deb; do
  packages+=("$(dpkg-deb -f "$deb" Package)")
  echo "-- $(basename "$deb")"
  dpkg-deb -f "$deb" Package Version Section Priority Depends Recommends Suggests | sed 's/^/   /'
  dpkg-deb -c "$deb" | awk '{ print "   " $1 " " $6 ($7 ? " " $7 " " $8 : "") }'
done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
dpkg-deb -c "$tmp"/debs/liblocksmith[0-9]*.deb | grep " \./usr/lib/$multiarch/liblocksmith\.so\." >/dev/null || {
  echo "the library is not in /usr/lib/$multiarch: configure the build afresh (CMAKE_INSTALL_LIBDIR)" >&2
  exit 1
}

step "lintian"
lintian --fail-on error "$tmp"/debs/*.deb

# What was there before, to tell what the packages leave behind.
places=(/etc /usr/bin /usr/lib /usr/include /usr/share/doc /usr/share/man/man1
  /usr/share/bash-completion /usr/share/zsh /usr/share/fish /usr/share/lintian/overrides
  /var/lib/dpkg/info)
snapshot() { find "${places[@]}" -name '*locksmith*' 2>/dev/null | sort; }

exec 9>/run/locksmith-test-packages.lock  # root's own folder: no one can plant a link there
flock 9
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -E ' (installed|config-files)$' >/dev/null; then
    echo "$p is installed already: this check needs a system without it" >&2
    packages=()
    exit 1
  fi
done
snapshot >"$tmp/before"

step "apt-get install ./locksmith_*.deb alone: /usr/bin/locksmith, as root and as nobody, in an empty environment"
(cd "$tmp/debs" && "${apt[@]}" install ./locksmith_*.deb >/dev/null)
for p in "${packages[@]}"; do
  [ "$p" = locksmith ] || ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep ' installed$' >/dev/null ||
    { echo "installing locksmith installed $p too" >&2; exit 1; }
done
version=$(dpkg-deb -f "$tmp"/debs/locksmith_*.deb Version)
clean=(env -i PATH=/usr/bin:/bin)
"${clean[@]}" /usr/bin/locksmith --version | tee "$tmp/version"
head -n 1 "$tmp/version" | grep -qx "locksmith ${version%-*}"
"${clean[@]}" /usr/bin/locksmith run -n "test-packages-$$" -- true
(cd / && runuser -u nobody -- "${clean[@]}" /usr/bin/locksmith run -n "test-packages-$$" -- \
  sh -c 'test "$(id -un)" = nobody && test -n "$LOCKSMITH_STRATEGY"')
"${clean[@]}" /usr/bin/locksmith config check /usr/share/doc/locksmith/examples/config.json
test -s /usr/share/bash-completion/completions/locksmith
test -s /usr/share/zsh/vendor-completions/_locksmith
test -s /usr/share/fish/vendor_completions.d/locksmith.fish
# Each completion loads where its shell is installed (tests/cli/cli_manual_test.cpp checks what
# they offer).
bash -c 'source /usr/share/bash-completion/completions/locksmith && complete -p locksmith' >/dev/null
! command -v zsh >/dev/null || zsh -n /usr/share/zsh/vendor-completions/_locksmith
! command -v fish >/dev/null || fish -n /usr/share/fish/vendor_completions.d/locksmith.fish
zcat /usr/share/man/man1/locksmith.1.gz | grep '^\.TH LOCKSMITH 1' >/dev/null

step "apt-get install ./*.deb"
(cd "$tmp/debs" && "${apt[@]}" install ./*.deb >/dev/null)
for p in "${packages[@]}"; do dpkg -L "$p"; done | sort -u >"$tmp/listed"

step "the build tree's programs load the build tree's library"
checked=0
while IFS= read -r -d '' f; do
  readelf -d "$f" 2>/dev/null | grep 'NEEDED.*\[liblocksmith' >/dev/null || continue
  checked=$((checked + 1))
  if ldd "$f" | grep 'liblocksmith' | grep -v "=> $build/" >/dev/null; then
    echo "$f loads the installed library:" >&2
    ldd "$f" | grep liblocksmith >&2
    exit 1
  fi
done < <(find "$build" -type f \( -perm -u+x -o -name '*.so*' \) -not -path '*/CMakeFiles/*' -print0)
echo "$checked build-tree programs and libraries need liblocksmith: each loads $build's"

step "scripts/test-install.sh --system"
bash "$root/scripts/test-install.sh" --system

step "apt-get purge"
"${apt[@]}" purge "${packages[@]}" >/dev/null
left=()
while IFS= read -r path; do
  [ -e "$path" ] || [ -L "$path" ] || continue
  # Folders the system shares (/usr/lib/<multiarch>, /usr/share/doc) stay; ours must not.
  if [ -d "$path" ] && [ ! -L "$path" ] && [[ $path != *locksmith* ]]; then continue; fi
  left+=("$path")
done <"$tmp/listed"
mapfile -t new < <(snapshot | comm -13 "$tmp/before" -)
left+=("${new[@]}")
if dpkg -l "${packages[@]}" 2>/dev/null | grep '^[a-z][a-z] ' >/dev/null; then
  left+=("dpkg still knows: $(dpkg -l "${packages[@]}" 2>/dev/null | grep '^[a-z][a-z] ' | awk '{print $1, $2}' | tr '\n' ' ')")
fi
if [ ${#left[@]} -gt 0 ]; then
  echo "left behind after the purge:" >&2
  printf '  %s\n' "${left[@]}" >&2
  exit 1
fi
packages=()
step "packages passed: $(wc -l <"$tmp/listed") paths installed, none left after the purge"
