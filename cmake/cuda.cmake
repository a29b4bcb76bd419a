# The CUDA backend: sources under src/cuda/*.cu join the library when TRIAD_CUDA resolves
# to ON. AUTO resolves to ON when nvcc is found. Without it, the CPU build stands alone and
# asking for a cuda device fails with a clear message (src/tensor/backend.cpp).
include(CheckLanguage)
set(TRIAD_CUDA_ENABLED OFF)
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
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)   # Ampere and Hopper
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)  # what CMake 3.25 knows how to ask nvcc for
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "triad: CUDA backend ${TRIAD_CUDA_ENABLED}")

function(triad_add_cuda target)
  if(NOT TRIAD_CUDA_ENABLED)
    return()
  endif()
  file(GLOB_RECURSE cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
  target_sources(${target} PRIVATE ${cuda_sources})
  target_compile_definitions(${target} PUBLIC TRIAD_HAVE_CUDA=1)
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublasLt)
endfunction()
