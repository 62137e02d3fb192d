# CPU code paths: the same test binary once more under each capped instruction set, so one machine runs
# what a CPU of the other vendor (or an older one) would run. The product picks its kernels at run time
# from the CPU it finds: our bf16 kernels (TINKERD_MATMUL_KERNELS), ATen's vectorised ops
# (ATEN_CPU_CAPABILITY), MKL's BLAS (MKL_ENABLE_INSTRUCTIONS caps it on Intel; MKL_CBWR pins its code branch
# on any vendor: on AMD, MKL ignores the former) and oneDNN (ONEDNN_MAX_CPU_ISA).
#   avx2:    an AVX2-only CPU (Intel before AVX-512, AMD Zen 1-3), and MKL's AVX2 branch everywhere.
#   generic: no SIMD kernel of ours, ATen's default (non-vectorised) kernels, MKL's SSE2 ("COMPATIBLE") branch.
# The default path (the best the CPU has) is the plain ctest run of the same binary.
set(TINKERD_CPU_PATH_avx2
    "TINKERD_MATMUL_KERNELS=avx2;ATEN_CPU_CAPABILITY=avx2;MKL_ENABLE_INSTRUCTIONS=AVX2;MKL_CBWR=AVX2;ONEDNN_MAX_CPU_ISA=AVX2")
set(TINKERD_CPU_PATH_generic
    "TINKERD_MATMUL_KERNELS=generic;ATEN_CPU_CAPABILITY=default;MKL_ENABLE_INSTRUCTIONS=SSE4_2;MKL_CBWR=COMPATIBLE;ONEDNN_MAX_CPU_ISA=SSE41")

# add_cpu_path_tests(target PATHS avx2 generic [FILTER gtest-filter] [TIMEOUT s]): one ctest test per path,
# named <target>@<path>, label cpu-paths, running the whole binary (or the filtered cases) under that path.
function(add_cpu_path_tests target)
  cmake_parse_arguments(C "" "FILTER;TIMEOUT" "PATHS" ${ARGN})
  if(NOT C_FILTER)
    set(C_FILTER "*")
  endif()
  if(NOT C_TIMEOUT)
    set(C_TIMEOUT 900)
  endif()
  foreach(path IN LISTS C_PATHS)
    add_test(NAME ${target}@${path} COMMAND ${target} --gtest_filter=${C_FILTER} --gtest_brief=1)
    set_tests_properties(${target}@${path} PROPERTIES LABELS cpu-paths TIMEOUT ${C_TIMEOUT}
      ENVIRONMENT "TINKERD_SOURCE_DIR=${PROJECT_SOURCE_DIR};TINKERD_CPU_PATH=${path};${TINKERD_CPU_PATH_${path}}")
  endforeach()
endfunction()
