# Finds libtorch inside the project's Python virtual environment (PyPI's `torch` wheel, installed by
# scripts/install-deps.sh) and defines the interface target `tinkerd_torch`.
#   default (CPU): links libtorch_cpu + libc10 only, so neither nvcc nor the CUDA libraries are needed.
#   TINKERD_CUDA=ON: find_package(Torch) through torch.utils.cmake_prefix_path, with the wheel's CUDA
#                    libtorch and the installed CUDA toolkit (compiles and links without a GPU); every target
#                    links the CUDA libraries (scripts/gpu-check.sh builds the GPU machine's pack this way).
#   tinkerd_torch_cuda: where the wheel has CUDA libraries, the CPU build's objects linked once more with
#                    libtorch_cuda (target tinkerd-cuda, `make build-cuda`): no second compile, no toolkit.
set(TINKERD_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python of the virtual environment that holds the torch wheel (scripts/install-deps.sh)")
if(NOT EXISTS "${TINKERD_PYTHON}")
  message(FATAL_ERROR "tinkerd: ${TINKERD_PYTHON} not found; run scripts/install-deps.sh (or make deps) first")
endif()
execute_process(
  COMMAND "${TINKERD_PYTHON}" -c
          "import os, torch.utils; print(os.path.dirname(torch.__file__)); print(torch.utils.cmake_prefix_path); print(torch.__version__)"
  OUTPUT_VARIABLE _torch_out RESULT_VARIABLE _torch_rc ERROR_VARIABLE _torch_err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "tinkerd: cannot import torch with ${TINKERD_PYTHON}: ${_torch_err}")
endif()
string(REPLACE "\n" ";" _torch_out "${_torch_out}")
list(GET _torch_out 0 TINKERD_TORCH_ROOT)
list(GET _torch_out 1 TINKERD_TORCH_CMAKE_PREFIX)
list(GET _torch_out 2 TINKERD_TORCH_VERSION)
message(STATUS "tinkerd: torch ${TINKERD_TORCH_VERSION} from ${TINKERD_TORCH_ROOT}")

# libtorch_cuda's own dependencies (NCCL, cuBLAS, cuDNN, ...) come from the wheel's nvidia-* packages,
# which python preloads; a C++ binary must find them itself. Link against those (not the toolkit's older
# NCCL) and record them as DT_RPATH, which, unlike DT_RUNPATH, also serves libtorch_cuda's lookups.
function(tinkerd_nvidia_rpaths target)
  file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${TINKERD_TORCH_ROOT}/../nvidia/*/lib")
  foreach(_dir ${_nvidia_lib_dirs})
    target_link_options(${target} INTERFACE "LINKER:-rpath-link,${_dir}" "LINKER:-rpath,${_dir}")
  endforeach()
  target_link_options(${target} INTERFACE "LINKER:--disable-new-dtags")
endfunction()

add_library(tinkerd_torch INTERFACE)
if(TINKERD_CUDA)
  # tinkerd compiles no CUDA kernels of its own; a fixed list skips Caffe2's probe for installed GPUs
  # (a try_run that fails on machines without one). Override with -DTORCH_CUDA_ARCH_LIST=...
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;8.6;9.0")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${TINKERD_TORCH_CMAKE_PREFIX}")
  find_package(Torch REQUIRED)
  target_link_libraries(tinkerd_torch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(tinkerd_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  tinkerd_nvidia_rpaths(tinkerd_torch)
else()
  foreach(_lib torch_cpu c10)
    find_library(TINKERD_LIB_${_lib} ${_lib} PATHS "${TINKERD_TORCH_ROOT}/lib" NO_DEFAULT_PATH REQUIRED)
    target_link_libraries(tinkerd_torch INTERFACE "${TINKERD_LIB_${_lib}}")
  endforeach()
  target_include_directories(tinkerd_torch SYSTEM INTERFACE "${TINKERD_TORCH_ROOT}/include"
                             "${TINKERD_TORCH_ROOT}/include/torch/csrc/api/include")
  # The CUDA binary: nothing in the engine is compiled for CUDA (its kernels are libtorch's), so linking
  # libtorch_cuda, whose load registers the CUDA hooks and kernels, is all that differs. --no-as-needed keeps
  # the libraries nothing names directly; push/pop-state leaves the linker's own default for the rest.
  find_library(TINKERD_LIB_torch_cuda torch_cuda PATHS "${TINKERD_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  find_library(TINKERD_LIB_c10_cuda c10_cuda PATHS "${TINKERD_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  if(TINKERD_LIB_torch_cuda AND TINKERD_LIB_c10_cuda)
    add_library(tinkerd_torch_cuda INTERFACE)
    target_link_libraries(tinkerd_torch_cuda INTERFACE -Wl,--push-state,--no-as-needed "${TINKERD_LIB_torch_cuda}"
                          "${TINKERD_LIB_c10_cuda}" -Wl,--pop-state)
    tinkerd_nvidia_rpaths(tinkerd_torch_cuda)
  endif()
endif()
# at::parallel_for's OpenMP backend (the wheels' AT_PARALLEL_OPENMP) is inline code in ATen/ParallelOpenMP.h:
# a TU compiled without -fopenmp runs every at::parallel_for of its own on one thread. -fopenmp makes the
# engine's kernels parallel; the wheel's libgomp.so.1 (same SONAME, found first through torch/lib's rpath)
# is the one runtime loaded, shared with libtorch_cpu.
target_compile_options(tinkerd_torch INTERFACE -fopenmp)
target_link_options(tinkerd_torch INTERFACE -fopenmp)
# The wheels are built with the C++11 ABI (as Debian's g++ defaults to).
target_compile_definitions(tinkerd_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
