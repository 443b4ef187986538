# Cross-compiling mxmoe for 64-bit Arm Linux with Debian's cross toolchain
# (g++-aarch64-linux-gnu) and arm64 libraries from multiarch (libfmt-dev:arm64,
# libgtest-dev:arm64); tests run under qemu-user. See scripts/cross-aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Header-only packages (nlohmann-json, CLI11) are found under /usr/share; libraries only in
# the aarch64 multiarch directories, so an x86-64 library can never be picked.
# Programs run with the multiarch arm64 runtime (libc6:arm64: /lib/ld-linux-aarch64.so.1 and
# /lib/aarch64-linux-gnu), never with the cross toolchain's copy under /usr/aarch64-linux-gnu:
# the two are different glibc builds, and an ld.so of one with the libc.so.6 of the other
# hangs in the first pthread_create (the multiarch libraries win the search either way).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
# pkg-config (PCRE2, ICU) reads only the arm64 multiarch .pc files, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
