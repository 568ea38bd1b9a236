# Sourced by the build scripts: compile through ccache when it is installed (scripts/setup.sh
# installs it), keyed on paths relative to the checkout, so a second clone or a second run of the
# test command rebuilds only what changed. CNNBENCH_CCACHE=0 turns it off.
if [[ "${CNNBENCH_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
  # Objects with debug information are not keyed on the build's directory: CMakeLists.txt maps
  # the checkout to "." in their debug information when the launcher is ccache.
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  # Sanitizer, release, CI and cross builds of one checkout together; the default is 5 GB.
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
fi
