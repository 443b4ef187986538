#!/usr/bin/env bash
# A downstream user's afternoon: install mxmoe into a fresh prefix, generate a checkpoint with
# the installed command, then build and run the C example through pkg-config and the C++
# example through find_package(mxmoe CONFIG), both against the installed prefix only. Before
# that, each installed header compiles alone against the prefix: none may need a header that
# is not installed.
#   run.sh BUILD_DIR SOURCE_DIR C_COMPILER CMAKE CXX_COMPILER
set -euo pipefail
build=$1 src=$2 cc=$3 cmake=$4 cxx=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

"$cmake" --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/mxmoe/mxmoe.h"
test -n "$(find "$prefix" -name mxmoeConfig.cmake)"
pcdir=$(dirname "$(find "$prefix" -name mxmoe.pc)")

echo "== each installed header alone"
for header in "$prefix"/include/mxmoe/*; do
  name=mxmoe/$(basename "$header")
  # (a declaration after it: export.h alone is an empty translation unit, which C refuses)
  unit=$(printf '#include "%s"\ntypedef int mxmoe_header_alone;\n' "$name")
  case $name in
    *.h) "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I "$prefix/include" -x c - \
           <<<"$unit" || { echo "installed $name does not compile alone as C"; exit 1; } ;;
  esac
  "$cxx" -std=c++20 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I "$prefix/include" -x c++ - \
    <<<"$unit" || { echo "installed $name does not compile alone"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name "libmxmoe.so")")

"$prefix/bin/mxmoe" synth --preset qwen3-30b-a3b --experts 8 --top-k 2 --hidden 128 \
  --intermediate 64 --layers 2 --out "$work/ckpt" 2>/dev/null

echo "== C through pkg-config"
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs mxmoe)
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror "$src/examples/c/moe_layer.c" $flags \
  -Wl,-rpath,"$libdir" -o "$work/moe_layer"
"$work/moe_layer" "$work/ckpt" 1

echo "== C++ through find_package"
"$cmake" -S "$src/examples/cpp" -B "$work/cpp" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
"$cmake" --build "$work/cpp" >/dev/null
"$work/cpp/moe_model" "$work/ckpt"
