// The int8-activation kernels of quant_int8_simd.h built twice: for AVX2 (vpmaddubsw + vpmaddwd: CPUs without
// AVX-512-VNNI and runs capped below it) and for AVX-512-VNNI (vpdpbusd / vpdpwssd on 256-bit vectors). Every
// header with inline code is included before the target pragmas, so only the kernels carry the targets (no
// std:: inline function is emitted here with instructions other TUs' callers may lack). Each target pragma
// drops the file's -ffp-contract=off for the functions it covers (GCC 12), so it is said again: mul + add
// must not fuse into FMAs, or the result would round differently from the scalar reference.
#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <vector>

#include "engine/kernels/quant_int8.h"
#include "engine/kernels/quant_int8_blocks.h"
#include "gguf/dequant.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")
#define TINKERD_INT8_VNNI 0
#define TINKERD_INT8_NS avx2_kernels
#define TINKERD_INT8_ENTRY int8_forward_rows_avx2
#include "engine/kernels/quant_int8_simd.h"  // NOLINT(build/include): included twice by design
#pragma GCC pop_options

#undef TINKERD_INT8_VNNI
#undef TINKERD_INT8_NS
#undef TINKERD_INT8_ENTRY
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#pragma GCC optimize("fp-contract=off")
#define TINKERD_INT8_VNNI 1
#define TINKERD_INT8_NS vnni_kernels
#define TINKERD_INT8_ENTRY int8_forward_rows_vnni
#include "engine/kernels/quant_int8_simd.h"  // NOLINT(build/include)
#pragma GCC pop_options
