#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fails when a C++ file of the repository does not follow .clang-format (Debian 12's
# clang-format 14, installed when missing), or when a source file lacks its licence line (SPDX,
# as the Debian packages' copyright file relies on), and names each such file. Fix with:
#   git ls-files '*.cpp' '*.hpp' | xargs clang-format -i
# Re-check tests/mutants/faults.txt afterwards: its `find:` lines must still match.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command -v clang-format >/dev/null || "$root/scripts/install-deps.sh" <(echo clang-format)
cd "$root"
# One clang-format per batch of files, two batches at a time; the files it complains about are
# the ones its warnings name.
mapfile -t bad < <(git ls-files '*.cpp' '*.hpp' '*.h' |
  xargs -r -P 2 -n 20 clang-format --dry-run -Werror 2>&1 |
  sed -n 's/^\([^ :]*\.\(cpp\|hpp\|h\)\):[0-9]*:[0-9]*: .*/\1/p' | sort -u)
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) do not follow .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: every C++ file follows .clang-format"

# Every source, build and script file says its licence in its first lines (after a #! line).
mapfile -t unlicensed < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.in' '*.cmake' '*CMakeLists.txt' \
  '*.sh' '*.bash' '*.py' '*.php' '*.supp' '*.1' .ci/run |
  while read -r f; do head -3 "$f" | grep -q 'SPDX-License-Identifier: MIT' || echo "$f"; done)
if [ ${#unlicensed[@]} -gt 0 ]; then
  echo "check-format: ${#unlicensed[@]} file(s) lack 'SPDX-License-Identifier: MIT' in their first lines:" >&2
  printf '  %s\n' "${unlicensed[@]}" >&2
  exit 1
fi
echo "check-format: every source file names its licence"
