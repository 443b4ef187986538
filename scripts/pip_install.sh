# Sourced by the venv scripts (python_env.sh, vllm_env.sh): `pip_install VENV ARGS...` runs the
# venv's pip with the settings both need, and `require_free_space DIR GIB WHAT` refuses early,
# naming the shortfall, when DIR's filesystem cannot hold what is about to be installed.
# - Wheels are unpacked under DIR/.pip-tmp, not in $TMPDIR: a CI machine's /tmp may be a small
#   tmpfs, and torch's wheels alone unpack to several GB (a CI run once died 45 s in with
#   "[Errno 28] No space left on device" from pip).
# - A venv that exists only needs room for what changed: 2 GiB is asked then, the whole
#   amount only for a new one (venv_room).
# - No wheel cache (--no-cache-dir): the cache would hold a second, compressed copy of every
#   wheel (about 4 GB per torch version), and the venvs are made once per checkout.
#   source scripts/pip_install.sh
require_free_space() {
  local dir=$1 gib=$2 what=$3 avail_kib
  mkdir -p "$dir"
  avail_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
  if [ "$avail_kib" -lt $(( gib * 1024 * 1024 )) ]; then
    echo "error: $what needs about $gib GiB free on the filesystem of $dir;" \
         "it has $(( avail_kib / 1024 )) MiB. Free some space (or build elsewhere) and run again." >&2
    exit 1
  fi
}

# The GiB a venv at VENV needs free for an install: NEW_GIB when it does not exist yet, else 2.
venv_room() {
  if [ -x "$1/bin/python" ]; then echo 2; else echo "$2"; fi
}

pip_install() {
  local venv=$1 rc=0
  shift
  rm -rf "$venv/.pip-tmp"  # a run killed before its cleanup
  mkdir -p "$venv/.pip-tmp"
  TMPDIR="$venv/.pip-tmp" PIP_NO_CACHE_DIR=1 \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2 || rc=$?
  rm -rf "$venv/.pip-tmp"
  return "$rc"
}
