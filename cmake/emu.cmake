# The CPU emulator of the CUDA backend (src/cuda/emu/, docs/notes/emulator.md):
# CUDA kernel source compiled as host C++ by g++ (-DMF_CUDA_EMU
# -ffp-contract=off) against a runtime of our own; no nvcc. With
# MINFER_CUDA_EMU=ON (CMakeLists.txt sets MF_CUDA_EMU): builds the runtime
# (mf_cuda_emu) and, where the compiler offers it and the build is not an ASan
# one, a ThreadSanitizer variant (mf_cuda_emu_tsan). mf_emu_cuda_sources()
# marks .cu files to compile as C++ against it; the library's src/cuda/**/*.cu
# go through it (CMakeLists.txt), its tests are in tests/emu/.
if(NOT MF_CUDA_EMU)
  return()
endif()
enable_language(CXX)
find_package(Threads REQUIRED)
message(STATUS "minfer: CUDA kernel emulator ON (${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION})")

set(MF_EMU_DIR ${PROJECT_SOURCE_DIR}/src/cuda/emu)
file(GLOB MF_EMU_SOURCES CONFIGURE_DEPENDS ${MF_EMU_DIR}/*.cpp)

# The runtime as a static library; extra arguments are compile definitions
# (MF_EMU_TSAN for the ThreadSanitizer variant, itself uninstrumented).
function(mf_emu_runtime name)
  add_library(${name} STATIC ${MF_EMU_SOURCES})
  set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${name} PUBLIC ${MF_EMU_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${name} PUBLIC MF_CUDA_EMU=1 ${ARGN})
  target_compile_options(${name} PUBLIC -ffp-contract=off PRIVATE -Wall -Wextra)
  target_link_libraries(${name} PUBLIC PkgConfig::OPENBLAS Threads::Threads)
endfunction()
mf_emu_runtime(mf_cuda_emu)

# CUDA sources (.cu) compiled as C++ against the emulator.
function(mf_emu_cuda_sources)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-Wno-unknown-pragmas;-Wno-psabi")
endfunction()

set(MF_EMU_TSAN OFF)
if(NOT MF_SANITIZE)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
  check_cxx_source_compiles("int main() { return 0; }" MF_EMU_HAVE_TSAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(MF_EMU_HAVE_TSAN)
    mf_emu_runtime(mf_cuda_emu_tsan MF_EMU_TSAN=1)
    set(MF_EMU_TSAN ON)
  endif()
endif()

