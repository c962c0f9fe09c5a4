#!/usr/bin/env bash
# Download the Debian packages an air-gapped GPU host lacks, for
# scripts/gpu-check.sh to unpack there into a private prefix (never into /).
# Run on a networked Debian machine of the GPU host's release and architecture
# (bookworm, amd64 here):
#
#   bash scripts/gpu-prepare.sh            # -> .debs/*.deb + .debs/MANIFEST
#
# Then take .debs/ along (with the device tool: carry [".debs"]).
#
# The list is resolved by hand rather than by apt's solver, because the host
# has most of Debian's base already and we want only what minfer needs:
#   libopenblas0-pthread     libopenblas.so.0 (the pthread flavour: Debian's default
#                            libopenblas0 is only a meta package choosing a flavour)
#   libopenblas-pthread-dev  cblas.h, the libopenblas.so link and openblas.pc; they
#                            live in .../openblas-pthread/ subdirs because Debian
#                            normally symlinks them into place with update-alternatives,
#                            which dpkg -x does not run (libopenblas-dev itself is
#                            an empty meta package, hence not downloaded)
#   libgfortran5             runtime dependency of libopenblas0-pthread (-lgfortran)
#   libquadmath0             runtime dependency of libgfortran5
#   libcjson1, libcjson-dev  cJSON runtime; cJSON.h, libcjson.so link, libcjson.pc
#   libpcre2-8-0             PCRE2 8-bit runtime (libpcre2-dev's libpcre2-8.so points at it)
#   libpcre2-dev             pcre2.h, libpcre2-8.so link, libpcre2-8.pc
#   libpcre2-16-0, libpcre2-32-0, libpcre2-posix3
#                            libpcre2-dev's other dependencies: unused by minfer, taken
#                            so that every link the -dev package ships resolves
#   pkgconf, pkgconf-bin, libpkgconf3
#                            pkg-config itself (CMake's FindPkgConfig needs it), used
#                            only if the host has none
#   ninja-build              used only if the host has no ninja
#   libmicrohttpd12, libmicrohttpd-dev
#                            the HTTP server of `minfer serve`: runtime; microhttpd.h,
#                            libmicrohttpd.so link and libmicrohttpd.pc
# Left out on purpose (not_taken below): libgnutls28-dev, which libmicrohttpd-dev
# depends on only because libmicrohttpd.pc names gnutls in Requires.private;
# minfer links libmicrohttpd dynamically, and CMakeLists.txt finds microhttpd.h and
# the library without pkg-config when gnutls.pc is missing.
# Assumed present on the host (Debian base, and there because gcc/nvcc are):
# libc6, libc6-dev, libgcc-s1, libstdc++6, gcc-12-base, libgomp1; and libgnutls30
# (libmicrohttpd12's one dependency besides libc6), which apt itself depends on.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$root/.debs"

pkgs=(
  libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
  libcjson1 libcjson-dev
  libpcre2-8-0 libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  pkgconf pkgconf-bin libpkgconf3
  ninja-build
  libmicrohttpd12 libmicrohttpd-dev
)
# What the host is assumed to have; anything else a package depends on must be in pkgs.
assumed=(libc6 libc6-dev libc-dev libgcc-s1 libstdc++6 gcc-12-base libgomp1 libgnutls30)
# Dependencies deliberately not taken (see above).
not_taken=(libgnutls28-dev)

command -v apt-get >/dev/null || { echo "gpu-prepare: needs a Debian machine (apt-get)" >&2; exit 1; }

# Check that the hand-made list is closed under Depends (apart from the assumed base).
missing=()
for p in "${pkgs[@]}"; do
  deps=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
           --no-replaces --no-enhances "$p" 2>/dev/null |
         awk '/^ *\|?(Pre)?Depends:/ {print $2}' | tr -d '<>') ||
    { echo "gpu-prepare: apt-cache knows no package $p (apt-get update?)" >&2; exit 1; }
  for d in $deps; do
    d=${d%%:*}
    [[ " ${pkgs[*]} ${assumed[*]} ${not_taken[*]} " == *" $d "* ]] && continue
    missing+=("$p -> $d")
  done
done
if ((${#missing[@]})); then
  echo "gpu-prepare: dependencies outside the list (add them or extend 'assumed'):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

mkdir -p "$dest"
cd "$dest"
rm -f ./*.deb
if ! apt-get download "${pkgs[@]}" 2>apt.err; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "gpu-prepare: apt-get download failed; running apt-get update and retrying" >&2
    apt-get update -qq
    apt-get download "${pkgs[@]}"
  else
    cat apt.err >&2
    exit 1
  fi
fi
rm -f apt.err

{
  echo "# Debian packages for scripts/gpu-check.sh, downloaded $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# on $(. /etc/os-release && echo "$PRETTY_NAME") $(dpkg --print-architecture)"
  for f in ./*.deb; do
    printf '%s %s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(dpkg-deb -f "$f" Architecture)" "$(sha256sum "$f" | cut -c1-16)"
  done
} >MANIFEST
n=$(ls ./*.deb | wc -l)
if [[ $n -ne ${#pkgs[@]} ]]; then
  echo "gpu-prepare: expected ${#pkgs[@]} .deb files, got $n" >&2
  exit 1
fi
echo "gpu-prepare: $n packages ($(du -sh . | cut -f1)) in $dest"
cat MANIFEST
