# Argument checks shared by the shell scripts (sourced): whole numbers within a range, decimals
# within a range, and an option's value being there at all. Each refusal is one line on stderr,
# "SCRIPT: what is wrong", and exit 2, before the script has changed anything. A value is shown
# with its unprintable bytes as '?' and cut at 60 characters, so a refusal never writes raw
# control bytes to the terminal.
# The caller may set check_args_script (default: the script's file name).

check_args_script=${check_args_script:-$(basename "$0")}

check_args_fail() {
  echo "$check_args_script: $*" >&2
  exit 2
}

# The value as it may be shown on a terminal.
check_args_shown() {
  local value=${1//[^[:print:]]/?}
  ((${#value} <= 60)) || value="${value:0:57}..."
  printf '%s' "$value"
}

# NAME VALUE MIN MAX: VALUE must be a decimal whole number in [MIN, MAX]. At most 18 digits
# (leading zeros are decimal, not octal), so that bash's 64-bit arithmetic cannot wrap a huge
# number into the range.
check_int() {
  local name=$1 value=$2 min=$3 max=$4
  if ! [[ $value =~ ^[0-9]{1,18}$ ]] || ((10#$value < min || 10#$value > max)); then
    check_args_fail "$name takes a whole number from $min to $max, not '$(check_args_shown "$value")'"
  fi
}

# NAME VALUE MIN MAX: VALUE must be a plain decimal number (digits, at most one point) in
# [MIN, MAX].
check_decimal() {
  local name=$1 value=$2 min=$3 max=$4
  if ! [[ $value =~ ^[0-9]{1,9}(\.[0-9]{1,9})?$ ]] ||
     ! awk -v v="$value" -v lo="$min" -v hi="$max" 'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }'; then
    check_args_fail "$name takes a number from $min to $max, not '$(check_args_shown "$value")'"
  fi
}

# OPTION ARGC: an option that takes a value must have one after it (call with "$1" "$#").
check_has_value() {
  (($2 >= 2)) || check_args_fail "$1 needs a value"
}

# FILE: prints FILE's opening comment (after the #! line, up to the first line that is not a
# comment) without its '# ', as a script's answer to -h/--help.
script_help() {
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$1"
}

# ARGS...: a first argument of -h or --help prints the script's opening comment and exits 0.
answer_help() {
  case ${1:-} in
    -h | --help) script_help "$0"; exit 0 ;;
  esac
}
