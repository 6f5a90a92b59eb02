# The library's layers, enforced by the build (docs/architecture.md draws them).
#
# Each layer is a folder of src/ compiled as its own object library, plus the public headers it
# owns. A layer's code sees only its own folder and headers and those of the layers it names in
# SEES: its include path is a folder of links (build/layers/<layer>/) holding exactly those, so an
# upward #include is a compile error ("ops/dispatch.h: No such file or directory" in a kernel), not
# a review comment. The ember library is the union of the layers' objects.
#
#   ember_layer(<name> [SEES <layer>...] [HEADERS <public header or folder>...] [GRANTS <file>...])
#
# GRANTS gives single files of a layer above to this one: ops see autograd's recording interface
# (autograd/function.h and ember/autograd.h), because an op records its node while the autograd
# engine above runs vjps made of ops (the one mutual dependency, named here).

set(EMBER_LAYER_ROOT ${PROJECT_BINARY_DIR}/layers)
set(EMBER_LAYERS "")

function(ember_layer name)
  cmake_parse_arguments(LAYER "" "" "SEES;HEADERS;GRANTS" ${ARGN})
  set(EMBER_LAYER_SEES_${name} ${LAYER_SEES} PARENT_SCOPE)
  set(EMBER_LAYER_HEADERS_${name} ${LAYER_HEADERS} PARENT_SCOPE)
  set(EMBER_LAYER_GRANTS_${name} ${LAYER_GRANTS} PARENT_SCOPE)
  set(EMBER_LAYERS ${EMBER_LAYERS} ${name} PARENT_SCOPE)
endfunction()

# Links `target` at `link` (replacing what was there).
function(ember_link target link)
  get_filename_component(parent ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  file(REMOVE_RECURSE ${link})
  file(CREATE_LINK ${target} ${link} SYMBOLIC)
endfunction()

# Makes the object library of every declared layer (or of those named in LAYERS) and returns their
# objects in `out`; sources whose path under src/ matches EXCLUDE are left out (the WebAssembly
# build's subset, cmake/EmberWasm.cmake).
#
#   ember_build_layers(<out> [LAYERS <layer>...] [EXCLUDE <regex>])
function(ember_build_layers out)
  cmake_parse_arguments(BUILD "" "EXCLUDE" "LAYERS" ${ARGN})
  if(NOT BUILD_LAYERS)
    set(BUILD_LAYERS ${EMBER_LAYERS})
  endif()
  set(objects "")
  foreach(name ${BUILD_LAYERS})
    set(view ${EMBER_LAYER_ROOT}/${name})
    file(REMOVE_RECURSE ${view})
    foreach(seen ${name} ${EMBER_LAYER_SEES_${name}})
      if(NOT DEFINED EMBER_LAYER_HEADERS_${seen})
        message(FATAL_ERROR "ember layer ${name} sees ${seen}, which is not a layer declared before it")
      endif()
      ember_link(${PROJECT_SOURCE_DIR}/src/${seen} ${view}/src/${seen})
      foreach(header ${EMBER_LAYER_HEADERS_${seen}})
        ember_link(${PROJECT_SOURCE_DIR}/include/ember/${header} ${view}/include/ember/${header})
      endforeach()
    endforeach()
    foreach(grant ${EMBER_LAYER_GRANTS_${name}})
      if(grant MATCHES "^ember/")
        ember_link(${PROJECT_SOURCE_DIR}/include/${grant} ${view}/include/${grant})
      else()
        ember_link(${PROJECT_SOURCE_DIR}/src/${grant} ${view}/src/${grant})
      endif()
    endforeach()

    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
    if(EMBER_WITH_CUDA)
      file(GLOB_RECURSE cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cu)
      list(APPEND sources ${cuda_sources})
    endif()
    if(BUILD_EXCLUDE)
      list(FILTER sources EXCLUDE REGEX "^${PROJECT_SOURCE_DIR}/src/(${BUILD_EXCLUDE})$")
    endif()
    add_library(ember_${name} OBJECT ${sources})
    # Unity batches save parsing the same headers again; the kernels' time goes to generating code
    # (their files take minutes each, and a batch of them would be one job of many minutes).
    if(EMBER_UNITY AND NOT name STREQUAL "kernels")
      set_target_properties(ember_${name} PROPERTIES UNITY_BUILD ON)
      # Highway's per-target files include themselves once per instruction set: each compiles alone.
      foreach(source ${sources})
        file(STRINGS ${source} per_target REGEX "hwy/foreach_target\\.h")
        if(per_target)
          set_source_files_properties(${source} TARGET_DIRECTORY ember_${name} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
        endif()
      endforeach()
    endif()
    target_include_directories(ember_${name} PRIVATE ${view}/src ${view}/include)
    # The warnings are the host compiler's; nvcc's front-end output for .cu files is not held to them.
    target_compile_options(ember_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${EMBER_WARNINGS}>)
    target_compile_definitions(ember_${name} PRIVATE EMBER_VERSION="${PROJECT_VERSION}"
                                                     EMBER_BUILD_TYPE="${CMAKE_BUILD_TYPE}")
    set_target_properties(ember_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    list(APPEND objects $<TARGET_OBJECTS:ember_${name}>)
  endforeach()
  set(${out} ${objects} PARENT_SCOPE)
endfunction()
