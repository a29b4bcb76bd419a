# The layers of src/ (DESIGN.md), each a static library triad_<layer> that links only the
# layers below it, and the build enforces the order: a layer's sources see, on their include
# path, their own folder and the folders of the layers below them and nothing else. That
# path is a folder of links made here (build/layers/<layer>/<folder> -> src/<folder>), so an
# include of a folder above the layer fails to compile ("No such file or directory").
# Third-party headers are given only to the layers that use them (mpi.h: parallel and io).
#
# triad_layer(<name> [ORCHESTRATION] [DEPENDS <layers below>...] [SOURCES <files>...]):
# src/<name>/ as triad_<name>, built from its .cpp files or, where given, SOURCES.
# ORCHESTRATION: a layer that reads configs, drives the layers below and writes results is
# built -O1 (TRIAD_ORCHESTRATION_OPT), as the programs of apps/ are: its own loops run over
# batches, sequences and layers, never over a model's weights or activations, so its time
# is spent in the layers below, and -O1 compiles it in about two thirds of -O3's time
# (triad_checkpoint 45 CPU-s at -O3, 34 at -O1; triad_rlhf's four batches 63 and 43).

set(TRIAD_LAYER_ROOT ${CMAKE_BINARY_DIR}/layers)
file(REMOVE_RECURSE ${TRIAD_LAYER_ROOT})

set(TRIAD_WARNINGS -Wall -Wextra -Wno-unused-parameter -fno-math-errno -fno-trapping-math)
if(TRIAD_UNITY_BUILD)
  # In a unity batch each source is an included file, so GCC takes a class of it that holds
  # a type of its anonymous namespace (a pimpl's Impl) for a header's: a warning that is right
  # for headers and wrong for these files.
  list(APPEND TRIAD_WARNINGS -Wno-subobject-linkage)
endif()
# -fno-math-errno and -fno-trapping-math let loops with math and clamps vectorize (triad does
# not read errno or floating-point exception flags); IEEE results are unchanged.

set(TRIAD_ORCHESTRATION_OPT -O1)

function(triad_layer name)
  cmake_parse_arguments(L "ORCHESTRATION" "" "DEPENDS;SOURCES" ${ARGN})
  # The folders this layer may include: its own and, transitively, those of its dependencies.
  set(visible ${name})
  foreach(dep ${L_DEPENDS})
    get_property(below GLOBAL PROPERTY TRIAD_LAYER_VISIBLE_${dep})
    if(NOT below)
      message(FATAL_ERROR "layer ${name} depends on ${dep}, which is not a layer below it")
    endif()
    list(APPEND visible ${below})
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set_property(GLOBAL PROPERTY TRIAD_LAYER_VISIBLE_${name} ${visible})
  foreach(folder ${visible})
    file(MAKE_DIRECTORY ${TRIAD_LAYER_ROOT}/${name})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${TRIAD_LAYER_ROOT}/${name}/${folder} SYMBOLIC)
  endforeach()

  set(sources ${L_SOURCES})
  if(NOT sources)
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  endif()
  add_library(triad_${name} STATIC ${sources})
  set_target_properties(triad_${name} PROPERTIES UNITY_BUILD ${TRIAD_UNITY_BUILD} UNITY_BUILD_BATCH_SIZE ${TRIAD_UNITY_BATCH})
  target_include_directories(triad_${name} PRIVATE ${TRIAD_LAYER_ROOT}/${name})
  list(TRANSFORM L_DEPENDS PREPEND triad_ OUTPUT_VARIABLE dep_targets)
  target_link_libraries(triad_${name} PUBLIC ${dep_targets} OpenMP::OpenMP_CXX nlohmann_json::nlohmann_json)
  target_compile_options(triad_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TRIAD_WARNINGS}>)
  if(TRIAD_NATIVE)
    target_compile_options(triad_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(L_ORCHESTRATION)
    target_compile_options(triad_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TRIAD_ORCHESTRATION_OPT}>)
  endif()
endfunction()

# mpi.h without its deprecated C++ bindings (triad uses the C API).
function(triad_layer_uses_mpi name)
  target_compile_definitions(triad_${name} PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  target_link_libraries(triad_${name} PRIVATE MPI::MPI_C)
endfunction()
