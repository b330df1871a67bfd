#!/usr/bin/env bash
# Fails when a C++ file of the repository does not follow .clang-format (Debian 12's
# clang-format 14, installed when missing), and names each such file. Fix with:
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
