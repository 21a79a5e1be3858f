#!/usr/bin/env bash
# The format check CI runs: every C++ file of the project must be as .clang-format writes it
# (Debian's clang-format 14, installed by scripts/install_deps.sh). Generated files (first line
# "// GENERATED ...") stay as their generator writes them. New files count before they are added
# to git (tracked and untracked ones, not ignored ones), so a new file is checked before its
# first commit.
# Usage: scripts/check_format.sh          list the files clang-format would change, exit 1 if any
#        scripts/check_format.sh --fix    rewrite them in place
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/apt_install.sh
command -v clang-format > /dev/null || apt_install_missing check_format clang-format
files=()
while IFS= read -r f; do
  [[ "$(head -c 12 "$f")" == "// GENERATED" ]] || files+=("$f")
done < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h' | sort -u)
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! clang-format --dry-run --Werror "${files[@]}" 2> "$report"; then
  echo "check_format: clang-format would change these files (run scripts/check_format.sh --fix):"
  grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$report" | cut -d: -f1 | sort -u | sed 's/^/  /'
  exit 1
fi
echo "check_format: ${#files[@]} files as .clang-format writes them"
