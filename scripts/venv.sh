#!/usr/bin/env bash
# Builds or refreshes the virtualenv that `make run` and `make test` use (called by the Makefile
# on every run; fast when nothing changed). Environment: PYTHON (the interpreter to build with),
# PYTHON_ORIGIN (make's $(origin PYTHON): "file" when the user did not choose one), VENV.
#
#   - the interpreter must be CPython 3.11 through 3.14 (pyproject.toml's requires-python);
#   - a venv built by another Python is rebuilt when PYTHON was chosen (make run PYTHON=...),
#     kept otherwise, and rebuilt if its interpreter no longer runs;
#   - requirements are installed again when a lock file or pyproject.toml is newer than the
#     last install.
set -euo pipefail
PYTHON=${PYTHON:-python3}
PYTHON_ORIGIN=${PYTHON_ORIGIN:-file}
VENV=${VENV:-.venv}
STAMP="$VENV/.switchboard-installed"
OLDEST=3.11 NEWEST=3.14

say() { echo "make: $*" >&2; }
version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
supported() {  # major.minor within OLDEST..NEWEST
    local minor=${1#3.}
    [[ $1 == 3.* ]] && ((minor >= ${OLDEST#3.} && minor <= ${NEWEST#3.}))
}
pick_another="pick another, e.g. \`make run PYTHON=python3.12\`"

if [[ -e "$VENV/bin/python" ]]; then
    built=$(version_of "$VENV/bin/python" || true)
    if [[ -z $built ]]; then
        say "$VENV no longer runs (its Python is gone?); rebuilding it with $PYTHON"
        rm -rf "$VENV"
    elif [[ $PYTHON_ORIGIN != file && $PYTHON_ORIGIN != default ]]; then
        wanted=$(version_of "$PYTHON" || true)
        if [[ -n $wanted && $wanted != "$built" ]]; then
            say "$VENV was built with Python $built; rebuilding it with $PYTHON ($wanted)"
            rm -rf "$VENV"
        fi
    fi
fi

if [[ ! -e "$VENV/bin/python" ]]; then
    if ! command -v "$PYTHON" >/dev/null 2>&1; then
        say "no \`$PYTHON\` found; Switchboard needs CPython $OLDEST through $NEWEST: $pick_another"
        exit 1
    fi
    found=$(version_of "$PYTHON" || true)
    if [[ -z $found ]]; then  # a pyenv shim of a version not selected, say
        why=$("$PYTHON" -c pass 2>&1 | head -n1 || true)
        say "\`$PYTHON\` does not run (${why:-no output}); Switchboard needs CPython $OLDEST through $NEWEST: $pick_another"
        exit 1
    fi
    if ! supported "$found"; then
        say "\`$PYTHON\` is Python $found; Switchboard supports CPython $OLDEST through $NEWEST: $pick_another"
        exit 1
    fi
    if ! "$PYTHON" -m venv "$VENV"; then
        say "\`$PYTHON -m venv\` failed (Debian/Ubuntu: apt-get install python$found-venv)"
        rm -rf "$VENV"
        exit 1
    fi
else
    built=$(version_of "$VENV/bin/python")
    if ! supported "$built"; then
        say "$VENV has Python $built; Switchboard supports CPython $OLDEST through $NEWEST: $pick_another (it rebuilds $VENV)"
        exit 1
    fi
fi

if [[ ! -e $STAMP || requirements/runtime.txt -nt $STAMP || requirements/dev.txt -nt $STAMP || pyproject.toml -nt $STAMP ]]; then
    echo "make: installing the locked requirements into $VENV (Python $(version_of "$VENV/bin/python"))" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
    touch "$STAMP"
fi
