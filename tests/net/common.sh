# Sourced by the tests in tests/net: how they skip (exit 77, which CTest reports as skipped) and
# fail, and the check that this machine can make emulated hosts at all.
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, veth pairs, tc)"
for tool in ip tc mpirun; do
  command -v "$tool" >/dev/null 2>&1 || skip "'$tool' is not installed"
done
