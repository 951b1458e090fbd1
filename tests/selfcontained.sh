#!/usr/bin/env bash
# selfcontained.sh SOURCE_DIR BINARY_DIR — fails if the build or the tests reach outside the
# repo for their inputs (a user's clone has nothing beside it). Two checks:
#  1. no source, build or test file names a path into a sibling folder (the steering repo's fixture folder and the like);
#  2. representative tests run under strace, and every file they open or stat must lie in the
#     source tree, the build tree, a temporary directory or the system's own folders.
set -uo pipefail
src=$(realpath "$1"); bin=$(realpath "$2")
fail=0

sib=shared  # the steering repo's fixture folder, spelled apart so this line does not match itself
hits=$(grep -rnE "\\.\\./$sib|/work/$sib|LQL_${sib^^}_DIR" "$src/CMakeLists.txt" "$src/tests" \
         "$src/scripts" "$src/src" "$src/grammar" "$src/tools" "$src/.ci" 2>/dev/null)
if [ -n "$hits" ]; then
  echo "selfcontained: these lines name paths outside the repo:"; echo "$hits"; fail=1
fi

command -v strace >/dev/null || { echo "selfcontained: strace is not installed"; exit 1; }
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
# Each entry: working directory, then the command.
run() {
  local cwd=$1; shift
  local n; n=$(ls "$log" | wc -l)
  (cd "$cwd" && strace -f -qq -e trace=%file -o "$log/$n.trace" "$@" >/dev/null 2>&1)
  echo "$cwd" > "$log/$n.cwd"
}
run "$bin" "$bin/test_tokenizer"
run "$bin" "$bin/test_quant"
run "$bin" "$bin/test_container_encode"
run "$src" "$bin/lql" --test "$src/tests/lql/infer.lql"
run "$src" "$bin/lql" --test "$src/tests/lql/browse_walk.lql"

# every distinct path once, resolved by one realpath per batch (one process per path took
# most of this test's two minutes)
outside=$(for t in "$log"/*.trace; do
  cwd=$(cat "${t%.trace}.cwd")
  # the first quoted argument of every file call is a path
  # (program look-ups along PATH are not inputs)
  grep -vE '^[0-9]+ +execve\(' "$t" |
  grep -oE '^[0-9]+ +[a-z0-9_]+\((AT_FDCWD, )?"[^"]*"' | sed -E 's/.*"([^"]*)"$/\1/' |
  sort -u | while IFS= read -r p; do
    case "$p" in /*) echo "$p" ;; *) echo "$cwd/$p" ;; esac
  done
done | sort -u | xargs -d '\n' -r realpath -m -- | sort -u |
  while IFS= read -r abs; do
    [ "$abs" = / ] && continue
    case "$src/" in "$abs"/*) continue ;; esac  # the repo's own ancestors (realpath walks)
    case ":$PATH:" in *":${abs%/*}:"*) continue ;; esac  # a shell looking a program up
    case "$abs" in
      "$src"|"$src"/*|"$bin"|"$bin"/*|/tmp|/tmp/*|/usr/*|/lib*|/etc/*|/proc/*|/sys/*|/dev/*|/selinux) ;;
      /nonexistent*|/no/such*) ;;  # deliberate bad-input cases of the tests themselves
      *) echo "$abs" ;;
    esac
  done | sort -u)
if [ -n "$outside" ]; then
  echo "selfcontained: the tests touched paths outside the repo, build and system folders:"
  echo "$outside" | head -40; fail=1
fi
[ $fail -eq 0 ] && echo "selfcontained: ok (static scan and $(ls "$log"/*.trace | wc -l) traced runs)"
exit $fail
