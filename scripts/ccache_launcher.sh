# Sourced by the build scripts (build.sh, cross-aarch64.sh, fuzz.sh): sets `launcher`, the
# CMake arguments that compile through ccache when it is installed (scripts/deps.sh brings
# it; MXMOE_NO_CCACHE=1 turns it off). ccache reuses objects compiled before, also from another
# clone: paths are made relative to the repository root (CCACHE_BASEDIR) and the working
# directory is left out of the hash, so a fresh clone in another folder (CI's) hits the objects
# a session compiled, for the native, sanitizer, cross and fuzzing builds alike.
#   source scripts/ccache_launcher.sh ROOT
# The settings travel inside the launcher (`env CCACHE_BASEDIR=ROOT CCACHE_NOHASHDIR=1 ccache`),
# so a later `cmake --build` or `ninja` run by hand caches the same way as the script: a build
# without them once filled the cache with objects keyed by absolute paths, which no other clone
# could reuse. The sloppiness (pch_defines, time_macros: no source uses __DATE__ or __TIME__)
# is what ccache's manual asks for objects compiled with a precompiled header (the mxmoe
# command's, CMakeLists.txt); without it they are compiled each time. The check that skips a
# header modified during the compile stays on.
launcher=()
if command -v ccache >/dev/null 2>&1 && [ "${MXMOE_NO_CCACHE:-0}" != 1 ]; then
  ccache_launcher="env;CCACHE_BASEDIR=$1;CCACHE_NOHASHDIR=1;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$ccache_launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$ccache_launcher")
fi
