# CMake toolchain file: cross-compiles for 64-bit ARM Linux with Debian's aarch64-linux-gnu GCC,
# against the arm64 multiarch packages in /usr/lib/aarch64-linux-gnu (dpkg --add-architecture arm64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# No sysroot: headers are shared in /usr/include and CMake looks for libraries and package
# configs under lib/aarch64-linux-gnu (CMAKE_LIBRARY_ARCHITECTURE), never in the host's x86_64 dirs.
# pkg-config must read the arm64 .pc files, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
unset(ENV{PKG_CONFIG_PATH})

# try_run and test discovery run target programs through qemu-user.
find_program(CNNBENCH_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(CNNBENCH_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CNNBENCH_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
