# The WebAssembly build (emcmake cmake -S . -B build-wasm; scripts/build-wasm): the inference subset
# of the library, compiled with Emscripten, and wasm/'s JavaScript module around it.
#
# The subset is every layer an inference needs: tensors, ops and their kernels, autograd (ops
# record into it), nn, the graph compiler and its executor, safetensors/GGUF/npy loading, and the
# MNIST models. Left out: training-only layers (optim, data, dist), ONNX import (protobuf), the
# models other than MNIST (tokenizers: utf8proc), and the CUDA sources (the cuda layer's CPU side
# stays: it reports that no device exists).
#
# Highway: Debian's libhwy-dev (1.0.3) has no double vectors on WebAssembly, which the kernels
# use throughout, so this build compiles Highway 1.3.0 from source: the copy NumPy 2.4.6 vendors,
# which `scripts/setup --wasm` extracts from its pinned source distribution into .deps/highway.
# Kernels are compiled for WASM (SIMD128) with EMBER_WASM_SIMD=ON, for EMU128 (plain scalar code
# over 128-bit arrays) without. nlohmann-json comes from the host's headers (header-only), seen
# through a folder of links so the host's other headers (glibc's) stay out of the sysroot's way.
# Threads: one. (A pthreads build with Emscripten 3.1.6 runs the CNN on two threads, but there an
# ember::Error is no longer caught by its type, only by catch (...): not offered.)

option(EMBER_WASM_SIMD "Compile the kernels for WebAssembly SIMD128 (-msimd128)" ON)
set(EMBER_HIGHWAY_SOURCE ${PROJECT_SOURCE_DIR}/.deps/highway CACHE PATH "Highway 1.3 sources (scripts/setup --wasm)")
if(NOT EXISTS ${EMBER_HIGHWAY_SOURCE}/hwy/highway.h)
  message(FATAL_ERROR "no Highway sources at ${EMBER_HIGHWAY_SOURCE}: run scripts/setup --wasm")
endif()

set(EMBER_WASM_FLAGS -fwasm-exceptions)
if(EMBER_WASM_SIMD)
  list(APPEND EMBER_WASM_FLAGS -msimd128)
endif()
add_compile_options(${EMBER_WASM_FLAGS})
add_link_options(${EMBER_WASM_FLAGS})

# Highway's runtime (target selection, aligned allocation, abort), and its header-only contrib.
add_library(hwy STATIC)
foreach(source abort aligned_allocator per_target print targets timer)
  target_sources(hwy PRIVATE ${EMBER_HIGHWAY_SOURCE}/hwy/${source}.cc)
endforeach()
target_include_directories(hwy SYSTEM PUBLIC ${EMBER_HIGHWAY_SOURCE})
target_compile_definitions(hwy PUBLIC HWY_STATIC_DEFINE)
add_library(hwy::hwy ALIAS hwy)
add_library(hwy_contrib INTERFACE)
target_link_libraries(hwy_contrib INTERFACE hwy)
add_library(hwy::hwy_contrib ALIAS hwy_contrib)

find_path(EMBER_JSON_INCLUDE nlohmann/json.hpp PATHS /usr/include NO_CMAKE_FIND_ROOT_PATH REQUIRED)
set(EMBER_HOST_INCLUDE ${PROJECT_BINARY_DIR}/host_include)
ember_link(${EMBER_JSON_INCLUDE}/nlohmann ${EMBER_HOST_INCLUDE}/nlohmann)
add_library(nlohmann_json INTERFACE)
target_include_directories(nlohmann_json SYSTEM INTERFACE ${EMBER_HOST_INCLUDE})
add_library(nlohmann_json::nlohmann_json ALIAS nlohmann_json)

# Of train/, the checkpoint contract alone (the module reads `ember train mnist` checkpoints and
# `ember quantize` files: a new file of train/ joins the list below unless the module needs it); PNG
# files are not needed in a browser.
ember_build_layers(EMBER_OBJECTS
  LAYERS base kernels core cuda ops autograd profiler graph nn io models train
  EXCLUDE "io/onnx/.*|io/png\\.cpp|models/(bert|chat|diffusion|gpt|language_model|llama|mamba)\\.cpp|train/(serve_api|serve_engine|diffusion_sample|diffusion_task|evaluate|loop|mnist_task|nas|quantize|registry|resume|step|text_task)\\.cpp")
foreach(layer kernels profiler)
  target_link_libraries(ember_${layer} PRIVATE hwy::hwy)
endforeach()
foreach(layer profiler io models train)
  target_link_libraries(ember_${layer} PRIVATE nlohmann_json::nlohmann_json)
endforeach()

add_library(ember STATIC ${EMBER_OBJECTS})
add_library(ember::ember ALIAS ember)
target_include_directories(ember PUBLIC ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(ember PUBLIC hwy::hwy)

add_subdirectory(wasm)
