#!/bin/bash
# Every C and C++ source and header of the project opens with a comment saying what it holds (the
# first line that is not blank is a comment), so a reader knows a room before reading it.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
missing=0
while IFS= read -r file; do
  first=$(grep -m1 -v '^[[:space:]]*$' "$file")
  case "$first" in
    //* | /\**) ;;
    *) echo "does not open with a comment saying what it holds: $file ($first)"; missing=$((missing + 1)) ;;
  esac
done < <(git ls-files '*.cpp' '*.h' '*.c' 2>/dev/null || find reactor handlers demos tests tools -name '*.cpp' -o -name '*.h' -o -name '*.c')
echo "$missing source files without an opening comment"
[ "$missing" -eq 0 ]
