#!/usr/bin/env bash
# What minfer needs on a Debian machine, in one place, and installing what is
# missing. Used by scripts/run.sh (build), scripts/test.sh (build + python) and
# .ci/run (build + python + ci).
#
#   bash scripts/deps.sh [--python] [--ci]
#
#   build   (always)  Debian: the compiler, CMake, Ninja, pkg-config, OpenBLAS,
#                     cJSON, PCRE2, libmicrohttpd (-dev), python3 + pip
#   --python          Python: numpy, pytest, ml_dtypes (the binding's tests), matplotlib (the plots' test),
#                     transformers + jinja2 (the chat templates' test renders the real templates with them),
#                     openai (the server's tests: the official client)
#   --ci              Debian: valgrind, clang + libclang-rt-dev (libFuzzer), CI only
#
# Only what is missing is installed; nothing already installed is touched.
# Debian packages: apt-get as root, else through `sudo -n` when sudo works
# without a password. Python packages: pip (as root, or --user), retried with
# --break-system-packages when pip refuses for PEP 668 (Debian marks its
# python3 externally managed). Not root and no sudo while Debian packages are
# missing: one line naming them and the command to run, exit 2.
# On a machine without dpkg the Debian check is skipped (CMake then says
# what it cannot find).
#
# MF_DEPS_PRETEND_MISSING="pkg ..." treats those packages (Debian or Python
# names) as missing, to try the paths above on a machine that has them all.
set -euo pipefail

deb_build=(build-essential cmake ninja-build pkg-config libopenblas-dev libcjson-dev libpcre2-dev libmicrohttpd-dev
           python3 python3-pip)
deb_ci=(valgrind clang libclang-rt-dev)
py_test=(numpy pytest ml_dtypes matplotlib transformers jinja2 openai)

want_py=0 want_ci=0
for a in "$@"; do
  case $a in
    --python) want_py=1 ;;
    --ci) want_ci=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "scripts/deps.sh: unknown option '$a' (--python, --ci)" >&2; exit 2 ;;
  esac
done

pretend=" ${MF_DEPS_PRETEND_MISSING:-} "
pretending() { [[ $pretend == *" $1 "* ]]; }

deb=("${deb_build[@]}")
((want_ci)) && deb+=("${deb_ci[@]}")
missing_deb=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${deb[@]}"; do
    if pretending "$p" || ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing_deb+=("$p")
    fi
  done
else
  echo "deps: no dpkg here: not checking Debian packages (CMake says what it cannot find)"
fi

missing_py=()
if ((want_py)); then
  for m in "${py_test[@]}"; do
    if pretending "$m" || ! python3 -c "import $m" >/dev/null 2>&1; then missing_py+=("$m"); fi
  done
fi

if ((${#missing_deb[@]} == 0 && ${#missing_py[@]} == 0)); then
  if ((want_py)); then
    echo "deps: all present (${#deb[@]} Debian packages; Python: ${py_test[*]})"
  else
    echo "deps: all present (${#deb[@]} Debian packages)"
  fi
  exit 0
fi

# Who may install Debian packages: root, or sudo without a password.
sudo_=()
can_apt=0
if [[ $(id -u) -eq 0 ]]; then
  can_apt=1
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  can_apt=1 sudo_=(sudo -n)
fi

if ((${#missing_deb[@]})) && ((!can_apt)); then
  cmd="apt-get install -y ${missing_deb[*]}"
  ((${#missing_py[@]})) && cmd+=" && python3 -m pip install ${missing_py[*]}"
  echo "deps: missing Debian packages: ${missing_deb[*]}${missing_py:+; Python: ${missing_py[*]}}." \
       "Not root and no sudo: as root, run: $cmd" >&2
  exit 2
fi

if ((${#missing_deb[@]})); then
  echo "deps: installing Debian packages: ${missing_deb[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! { "${sudo_[@]}" apt-get update -qq && "${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -qq --no-install-recommends "${missing_deb[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "deps: apt-get failed (above) installing: ${missing_deb[*]}" >&2
    exit 1
  fi
  rm -f "$log"
fi

if ((${#missing_py[@]})); then
  echo "deps: installing Python packages with pip: ${missing_py[*]}"
  pipargs=(install --quiet --disable-pip-version-check --no-warn-script-location)
  if [[ $(id -u) -eq 0 ]]; then pipargs+=(--root-user-action=ignore); else pipargs+=(--user); fi
  pipargs+=("${missing_py[@]}")
  if ! out=$(python3 -m pip "${pipargs[@]}" 2>&1); then
    if grep -q externally-managed-environment <<<"$out"; then
      python3 -m pip "${pipargs[@]}" --break-system-packages
    else
      echo "$out" >&2
      echo "deps: pip failed (above) installing: ${missing_py[*]}" >&2
      exit 1
    fi
  fi
fi
echo "deps: done"
