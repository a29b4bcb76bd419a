# The CUDA backend: sources under src/cuda/*.cu join the library when TRIAD_CUDA resolves
# to ON. AUTO resolves to ON when nvcc is found. Without it, the CPU build stands alone and
# asking for a cuda device fails with a clear message (src/tensor/device_runtime.cpp).
#
# Files under src/cuda/: *.cu include CUDA headers and are built only with the backend;
# *.cpp are plain C++ (the allocator's bookkeeping, error reporting) built always;
# stub/*.cpp stand in for what is not built. The NCCL communicator
# (src/cuda/nccl_communicator.cu) is built when NCCL is found too, else its stub is.
include(CheckLanguage)
set(TRIAD_CUDA_ENABLED OFF)
set(TRIAD_NCCL_ENABLED OFF)
if(TRIAD_CUDA STREQUAL "ON" OR TRIAD_CUDA STREQUAL "AUTO")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(TRIAD_CUDA_ENABLED ON)
  elseif(TRIAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TRIAD_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
elseif(NOT TRIAD_CUDA STREQUAL "OFF")
  message(FATAL_ERROR "TRIAD_CUDA must be AUTO, ON or OFF, got '${TRIAD_CUDA}'")
endif()

if(TRIAD_CUDA_ENABLED)
  # The GPUs' architectures: those of the GPUs this machine sees (nvidia-smi), else Hopper
  # (sm_90, the cards triad is tuned for). Each architecture compiles every kernel once more
  # (a third of the .cu files' compile time is the second one), so a build is for the cards
  # it will run on: name others with -DCMAKE_CUDA_ARCHITECTURES="80;90" (Ampere and Hopper).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                    RESULT_VARIABLE smi_status OUTPUT_VARIABLE smi_caps ERROR_QUIET)
    set(visible_archs)
    if(smi_status EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" smi_caps "${smi_caps}")
      foreach(cap ${smi_caps})
        string(REPLACE "." "" cap "${cap}")
        list(APPEND visible_archs ${cap})
      endforeach()
      list(REMOVE_DUPLICATES visible_archs)
    endif()
    if(visible_archs)
      set(CMAKE_CUDA_ARCHITECTURES ${visible_archs})
    else()
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
  endif()
  message(STATUS "triad: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  # The .cu files include triad's C++20 headers. CMake 3.25 does not know nvcc's flag for
  # C++20 (nvcc 12 and later take -std=c++20), so it is named here.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # NCCL ships with the toolkit on our machines, or elsewhere under NCCL_HOME.
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(TRIAD_NCCL_ENABLED ON)
    message(STATUS "triad: NCCL communicator ON (${NCCL_LIBRARY})")
  else()
    message(STATUS "triad: NCCL communicator OFF: nccl.h or libnccl not found (set NCCL_HOME); "
                   "asking for it fails with a clear message")
  endif()
endif()
message(STATUS "triad: CUDA backend ${TRIAD_CUDA_ENABLED}")

# The cuda layer (cmake/layers.cmake): src/cuda/*.cpp always; with the backend its .cu files
# replace the stubs (stub/nccl_communicator.cpp stays where NCCL is not found), and
# register_runtime.cu, which nothing references, is linked into every program that links
# triad as an object of its own (triad_cuda_registration) rather than from the archive.
function(triad_cuda_layer)
  file(GLOB cpp_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cpp)
  if(NOT TRIAD_CUDA_ENABLED)
    file(GLOB stubs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/stub/*.cpp)
    triad_layer(cuda DEPENDS parallel SOURCES ${cpp_sources} ${stubs})
    return()
  endif()
  file(GLOB_RECURSE cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
  list(FILTER cuda_sources EXCLUDE REGEX "/src/cuda/register_runtime\\.cu$")
  if(NOT TRIAD_NCCL_ENABLED)
    list(FILTER cuda_sources EXCLUDE REGEX "/src/cuda/nccl_communicator\\.cu$")
    list(APPEND cuda_sources ${PROJECT_SOURCE_DIR}/src/cuda/stub/nccl_communicator.cpp)
  endif()
  triad_cuda_host_sources(${cuda_sources} ${PROJECT_SOURCE_DIR}/src/cuda/register_runtime.cu)
  triad_layer(cuda DEPENDS parallel SOURCES ${cpp_sources} ${cuda_sources})
  target_compile_definitions(triad_cuda PUBLIC TRIAD_HAVE_CUDA=1)
  set(cuda_warnings $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  target_compile_options(triad_cuda PRIVATE ${cuda_warnings})
  target_link_libraries(triad_cuda PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)
  if(TRIAD_NCCL_ENABLED)
    target_include_directories(triad_cuda PRIVATE ${NCCL_INCLUDE_DIR})
    target_link_libraries(triad_cuda PRIVATE ${NCCL_LIBRARY})
  endif()
  add_library(triad_cuda_registration OBJECT ${PROJECT_SOURCE_DIR}/src/cuda/register_runtime.cu)
  target_include_directories(triad_cuda_registration PRIVATE ${TRIAD_LAYER_ROOT}/cuda)
  target_link_libraries(triad_cuda_registration PRIVATE triad_cuda)
  target_compile_options(triad_cuda_registration PRIVATE ${cuda_warnings} $<$<COMPILE_LANGUAGE:CXX>:${TRIAD_WARNINGS}>)
endfunction()

# A .cu file with no device code (no kernel, no __device__ function, no launch, no .cuh
# header: the runtime's pieces under src/cuda/, streams, the allocator, transfers, cuBLASLt,
# NCCL) is host code calling CUDA's runtime: the host compiler builds it as C++ with CUDA's
# headers, in a fifth of nvcc's time (nvcc would also parse it once per GPU architecture
# and compile it for none). Each on its own, out of the unity batches (their file-local
# names were never kept apart). Editing such a file reconfigures, so one that gains device
# code goes back to nvcc.
function(triad_cuda_host_sources)
  foreach(file ${ARGN})
    if(NOT file MATCHES "\\.cu$")
      continue()
    endif()
    file(STRINGS ${file} device_code REGEX "__global__|__device__|<<<|\\.cuh[\">]")
    if(NOT device_code)
      set_source_files_properties(${file} PROPERTIES LANGUAGE CXX SKIP_UNITY_BUILD_INCLUSION ON)
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
    endif()
  endforeach()
endfunction()
