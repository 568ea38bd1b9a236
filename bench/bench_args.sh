# The checks the bench scripts make of their arguments, sourced by them: the cnnbench binary they
# time (a sanitizer build would time the sanitizer), integer options, and outputs they would
# overwrite. Each prints "SCRIPT: what is wrong" to stderr and exits 2.

bench_script=$(basename "$0")
check_args_script=$bench_script
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/check_args.sh"

bench_usage_error() {
  check_args_fail "$@"
}

# The cnnbench to time: PATH, which must run and must not be a sanitizer build (its --version
# says "sanitizers ..." then). Prints the first line of what the binary says of its build.
bench_check_cli() {
  local cli=$1 version
  [[ -x "$cli" ]] || bench_usage_error "no cnnbench at $cli (build it: cmake --preset release && cmake --build --preset release --target cnnbench_cli; or pass --cli PATH)"
  version=$("$cli" --version) || bench_usage_error "$cli --version failed"
  if grep -q 'sanitizers' <<<"$version"; then
    bench_usage_error "$cli is a sanitizer build ($(grep -o 'sanitizers .*' <<<"$version")): its times measure the sanitizer; pass a release build with --cli"
  fi
}

# NAME VALUE MIN MAX: VALUE must be a decimal whole number in [MIN, MAX] (check_int).
bench_check_int() {
  check_int "$@"
}

# PATH FORCE: refuses to overwrite PATH unless FORCE is 1.
bench_check_output() {
  local path=$1 force=$2
  if [[ -e "$path" && "$force" != 1 ]]; then
    bench_usage_error "$path exists; pass --force to overwrite it"
  fi
}
