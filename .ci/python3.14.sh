#!/usr/bin/env bash
# Provides a CPython 3.14 for CI and prints its path; exits non-zero, saying why on stderr, when
# none can be had. This machine reaches only PyPI, npm and Debian: no python.org, no GitHub, so
# no pyenv build and no python-build-standalone. Debian unstable packages 3.14 (bookworm, the
# machine's release, stops at 3.11), built against a newer glibc than bookworm's: its .debs and
# the libraries they need (glibc included) are unpacked into a cache folder outside git, and the
# interpreter is pointed at that folder's loader and libraries with patchelf. Nothing is
# installed into the system but patchelf. See docs/design.md ("Python versions").
set -euo pipefail
CACHE=${SWITCHBOARD_CI_CACHE:-$HOME/.cache/switchboard-ci}
ROOT=$CACHE/python3.14
PYTHON=$ROOT/usr/bin/python3.14
PACKAGES=(python3.14-minimal libpython3.14-minimal libpython3.14-stdlib libc6 libssl3t64
    libexpat1 zlib1g libffi8 libsqlite3-0 libbz2-1.0 liblzma5 libzstd1 libuuid1 libncursesw6
    libtinfo6 libreadline8t64 libdb5.3t64 libgcc-s1 libstdc++6)

works() { "$PYTHON" -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, decimal, venv' 2>/dev/null; }

if [[ -x $PYTHON ]] && works; then
    echo "$PYTHON"
    exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "no apt-get/dpkg-deb here (not Debian)" >&2
    exit 1
fi
if ! command -v patchelf >/dev/null; then
    { apt-get install -y -qq patchelf || { apt-get update -qq && apt-get install -y -qq patchelf; }; } \
        >/dev/null 2>&1 || { echo "cannot install patchelf (Debian's package)" >&2; exit 1; }
fi

APT=$CACHE/apt
rm -rf "$ROOT" "$APT"
mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$APT/debs" "$ROOT"
echo "deb http://deb.debian.org/debian unstable main" >"$APT/sources.list"
apt_() {
    apt-get -qq -o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT" "$@"
}
if ! apt_ update >"$APT/log" 2>&1; then
    echo "apt-get update of Debian unstable failed: $(tail -n1 "$APT/log")" >&2
    exit 1
fi
if ! (cd "$APT/debs" && apt_ download "${PACKAGES[@]}") >>"$APT/log" 2>&1; then
    echo "downloading Debian unstable's python3.14 failed: $(grep -m1 -E '^E:' "$APT/log" || tail -n1 "$APT/log")" >&2
    exit 1
fi
for deb in "$APT"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
loader=$(find "$ROOT/usr/lib" -maxdepth 2 -name 'ld-linux*.so.*' | head -n1)
if [[ -z $loader ]]; then
    echo "no dynamic loader in Debian unstable's libc6 package" >&2
    exit 1
fi
patchelf --set-interpreter "$loader" --force-rpath --set-rpath "$(dirname "$loader")" "$PYTHON"
rm -rf "$APT"
if ! works; then
    echo "Debian unstable's python3.14 does not run here: $("$PYTHON" -c 'import ssl, sqlite3, ctypes' 2>&1 | tail -n1)" >&2
    exit 1
fi
echo "$PYTHON"
