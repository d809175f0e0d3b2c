// Host emulation (tests/emu) of the cuBLASLt subset kernels/cuda/gemm.cpp uses: handles, matmul
// descriptors, matrix layouts (column-major, ld, batch count, strided batch offset), preferences
// (workspace, minimum alignments), the heuristic (one algorithm) and cublasLtMatmul, computed on
// the host in double in a fixed order and rounded once to the output type. What the library
// refuses per NVIDIA's cuBLAS documentation (cublasLtMatmul's FP8 requirements, the Tensor Core
// usage rules, the scale modes per architecture, attribute sizes, ld < rows, ...) is refused here
// with the status the library returns, and each refusal is logged with its reason
// (emu::lt::refusals). cublasLtMatmul checks and reads its arguments at the call; its arithmetic
// is work on its stream (queued when a test deferred the stream: emu_streams.h). Implementation
// and the rules with their sources: tests/emu/emu_cublaslt.cpp.
// The enum values are cublasLt.h's / library_types.h's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_runtime.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70
} cublasComputeType_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_TRANSC = 5,
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,
  CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
  CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19,
  CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,
  CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,
  CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
  CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31,
  CUBLASLT_MATMUL_DESC_B_SCALE_MODE = 32,
  CUBLASLT_MATMUL_DESC_C_SCALE_MODE = 33,
  CUBLASLT_MATMUL_DESC_D_SCALE_MODE = 34
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F = 0,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 = 1,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 = 2,
  CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F = 3,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F = 4,
  CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F = 5
} cublasLtMatmulMatrixScale_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU = 32
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,
  CUBLASLT_MATRIX_LAYOUT_LD = 4,
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

struct cublasLtContext;
struct cublasLtMatmulDescOpaque_t;
struct cublasLtMatrixLayoutOpaque_t;
struct cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtContext* cublasLtHandle_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t a,
                              const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D,
                              cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream);

// ---- what the tests see and steer --------------------------------------------------------------
namespace emu::lt {
// One cublasLtMatmul that ran (in cuBLASLt's column-major terms).
struct MatmulCall {
  int64_t m, n, k, batch;
  int trans_a, trans_b;                // cublasOperation_t
  int a_type, c_type;                  // cudaDataType_t (B = A's type here; D = C's)
  int scale_mode;                      // -1: none set; else cublasLtMatmulMatrixScale_t of A (= B)
  bool fast_accum, bias;
  float alpha, beta;
};
struct Refusal {
  cublasStatus_t status;
  std::string call;  // "cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic", ...
  std::string why;   // the rule, as the documentation states it
};
inline std::vector<MatmulCall> calls;        // every successful cublasLtMatmul
inline std::vector<Refusal> refusals;        // every refused call, with its reason
inline long heuristic_queries = 0;           // cublasLtMatmulAlgoGetHeuristic calls
inline long handles_alive = 0, descs_alive = 0, layouts_alive = 0, prefs_alive = 0;
// Test knob: refuse the BIAS epilogue (NOT_SUPPORTED from the heuristic), to drive a caller's
// fallback. Off by default (the library offers BIAS for every combination used here).
inline bool refuse_bias_epilogue = false;
// Workspace the emulated algorithm asks for (at most the preference's MAX_WORKSPACE_BYTES).
inline size_t algo_workspace_bytes = size_t(4) << 20;
inline void reset_log() {
  calls.clear();
  refusals.clear();
  heuristic_queries = 0;
}
}  // namespace emu::lt
