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
# up_or_skip SCRIPT N DIR: brings N emulated hosts up in DIR (left up), skipping the test when this
# machine cannot (emulate-hosts.sh exits 2: no namespaces, no veth) and failing on any other error.
up_or_skip() {
  local status=0 said
  said=$(timeout 60 "$1" up "$2" --dir "$3" 2>&1) || status=$?
  [[ $status -ne 2 ]] || skip "$said"
  [[ $status -eq 0 ]] || fail "up $2: exit $status: $said"
}
