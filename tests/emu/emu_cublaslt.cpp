// The emulated cuBLASLt (shim/cublasLt.h): the API subset kernels/cuda/gemm.cpp uses, with the
// library's semantics and refusals as NVIDIA's cuBLAS documentation states them
// (docs.nvidia.com/cuda/cublas, sections cublasLtMatmul, cublasLtMatmulDescAttributes_t,
// cublasLtMatrixLayoutAttribute_t, cublasLtMatmulPreferenceAttributes_t,
// cublasLtMatmulMatrixScale_t, "Tensor Core Usage"), computed on the host.
//
// cublasLtMatmul, column-major, for every batch entry i (X_i = X + i * STRIDED_BATCH_OFFSET):
//   D_i (m, n) = alpha * sA * sB * op(A_i) (m, k) @ op(B_i) (k, n) + beta * C_i  (+ bias (m))
// with sA, sB the A / B scale factors (FP8 only: SCALAR_32F one value, default 1 when the pointer
// is null; OUTER_VEC_32F sA[row] (m values) and sB[col] (n values)), bias broadcast over the
// columns (EPILOGUE_BIAS, a vector of m values of BIAS_DATA_TYPE, default D's type). Each element
// is summed in double over k in order (products of bf16 / fp32 / fp8 values are exact in
// double), scaled, beta * C added only when beta != 0 (C is not read otherwise: it may hold
// NaN), the bias added, and rounded once (round to nearest even) to D's type. FAST_ACCUM is
// accepted and recorded; it does not change the emulated arithmetic.
//
// Streams: everything below (validation, refusals, bounds and overlap checks, the call log) is
// done at the call, from the descriptor, layouts, algorithm and host alpha / beta as they are
// then; only the arithmetic is work on the stream (queued on a deferred one: shim/emu_streams.h).
//
// Refusals (status as the library returns it; each logged in emu::lt::refusals):
//  - attribute value of the wrong size, unknown attribute: INVALID_VALUE.
//  - compute type other than CUBLAS_COMPUTE_32F or scale type other than CUDA_R_32F:
//    NOT_SUPPORTED (the emulator's subset; FP8 requires exactly these).
//  - layouts inconsistent with op(A) (m, k), op(B) (k, n), C = D (m, n); ld < rows; different
//    batch counts; batch > 1 with D's entries overlapping; D overlapping A or B; C != D layout
//    when C and D are one buffer: INVALID_VALUE.
//  - type combinations outside the documented table for COMPUTE_32F / scale 32F:
//    A = B in {bf16 -> C = D bf16 or fp32; fp32 -> fp32; e4m3 / e5m2 (not both e5m2) -> C = D
//    bf16 or fp32}: NOT_SUPPORTED.
//  - FP8 (cublasLtMatmul: "To use FP8 kernels, the following set of requirements must be
//    satisfied"): compute capability 8.9+ (ARCH_MISMATCH below); A transposed and B not ("TN");
//    all matrix dimensions and pointers meeting the Tensor Core 16-byte rules: k, lda, ldb
//    multiples of 16 (one-byte elements), m * sizeof(C) and ldc * sizeof(C) multiples of 16, A, B,
//    C, D and every batch entry 16-byte aligned: NOT_SUPPORTED.
//  - scale modes: only for FP8 A / B; SCALAR_32F on 8.9+, OUTER_VEC_32F on 9.0+ only (Ada has no
//    outer-vector scaling), both operands in the same mode; OUTER_VEC needs both scale pointers
//    and D not FP8; other modes: NOT_SUPPORTED.
//  - epilogues: DEFAULT and BIAS only (the emulator's subset); BIAS needs a bias pointer and a
//    bias type equal to D's (bf16 for bf16 D): NOT_SUPPORTED / INVALID_VALUE.
//  - cublasLtMatmul with an algorithm the heuristic did not return for this very configuration,
//    a pointer less aligned than the preference's MIN_ALIGNMENT_*_BYTES the algorithm was picked
//    for (default 256), or a workspace smaller than the algorithm's workspaceSize: INVALID_VALUE
//    (the heuristic only returns algorithms valid for the alignments it was told).
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/math/bf16.h"
#include "base/math/qformat.h"

struct cublasLtContext {
  uint64_t magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque_t {
  int compute = 0, scale_type = 0;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t bias_type = -1;  // -1: D's type
  const void* bias = nullptr;
  const void* scale_ptr[4] = {};     // A, B, C, D
  int32_t scale_mode[2] = {-1, -1};  // A, B; -1 not set (SCALAR_32F by default)
  int8_t fast_accum = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  int type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t min_align[4] = {256, 256, 256, 256};  // A, B, C, D (the documented default)
};

namespace {

constexpr uint64_t kAlgoMagic = 0x656d752d6c74ull;  // "emu-lt"

cublasStatus_t refuse(cublasStatus_t st, const char* call, const std::string& why) {
  emu::lt::refusals.push_back({st, call, why});
  return st;
}

int type_bytes(int t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F: return 2;
    case CUDA_R_16BF: return 2;
    case CUDA_R_8F_E4M3: return 1;
    case CUDA_R_8F_E5M2: return 1;
    default: return 0;
  }
}
bool is_fp8(int t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

template <class T>
cublasStatus_t read_attr(T& dst, const void* buf, size_t size, const char* call, const char* name) {
  if (buf == nullptr || size != sizeof(T))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  std::string(name) + ": attribute value of " + std::to_string(size) +
                      " bytes, the attribute's type has " + std::to_string(sizeof(T)));
  std::memcpy(&dst, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

// Largest power of two (up to 256) dividing p and the batch stride in bytes: every batch entry's
// alignment.
uint32_t alignment_of(const void* p, int64_t stride_bytes, int batch) {
  uint64_t a = uint64_t(reinterpret_cast<uintptr_t>(p)) | 256u;
  if (batch > 1) a |= uint64_t(stride_bytes);
  return uint32_t(a & (~a + 1));
}

// The configuration the heuristic validates and the algorithm is tied to (no pointers).
struct Config {
  int64_t m, n, k, batch;
  int trans_a, trans_b;
  int a_type, b_type, c_type;
  int32_t mode_a, mode_b;
  bool bias;
  int bias_type;
};

// Everything checkable without pointers, in the order the documentation lists it.
cublasStatus_t validate(const char* call, const cublasLtMatmulDescOpaque_t* desc,
                        const cublasLtMatrixLayoutOpaque_t* a,
                        const cublasLtMatrixLayoutOpaque_t* b,
                        const cublasLtMatrixLayoutOpaque_t* c,
                        const cublasLtMatrixLayoutOpaque_t* d, Config* cfg) {
  if (!desc || !a || !b || !c || !d)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null descriptor or layout");
  if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale_type != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "emulated: compute type CUBLAS_COMPUTE_32F with scale type CUDA_R_32F only");
  for (int32_t t : {desc->trans_a, desc->trans_b})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "TRANSA / TRANSB must be N or T");
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  const int64_t m = int64_t(d->rows), n = int64_t(d->cols);
  const int64_t k = int64_t(ta ? a->rows : a->cols);
  if (int64_t(ta ? a->cols : a->rows) != m || int64_t(tb ? b->cols : b->rows) != k ||
      int64_t(tb ? b->rows : b->cols) != n || c->rows != d->rows || c->cols != d->cols)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "layouts inconsistent: op(A) must be (m, k), op(B) (k, n), C and D (m, n)");
  for (const auto* l : {a, b, c, d})
    if (l->ld < std::max<int64_t>(1, int64_t(l->rows)))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "leading dimension " + std::to_string(l->ld) + " smaller than the rows " +
                        std::to_string(l->rows) + " (column-major: ld >= rows)");
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch || d->batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "BATCH_COUNT differs between A, B, C, D");
  if (c->type != d->type || c->ld != d->ld || c->stride != d->stride)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "emulated: C and D of one type and layout (the in-place form gemm.cpp uses)");

  // Types (cublasLtMatmul's table for CUBLAS_COMPUTE_32F, scale CUDA_R_32F).
  const int at = a->type, bt = b->type, ct = d->type;
  bool types_ok = false;
  if (at == CUDA_R_16BF && bt == CUDA_R_16BF) types_ok = ct == CUDA_R_16BF || ct == CUDA_R_32F;
  if (at == CUDA_R_32F && bt == CUDA_R_32F) types_ok = ct == CUDA_R_32F;
  const bool fp8 = is_fp8(at) || is_fp8(bt);
  if (fp8)
    types_ok = is_fp8(at) && is_fp8(bt) && !(at == CUDA_R_8F_E5M2 && bt == CUDA_R_8F_E5M2) &&
               (ct == CUDA_R_16BF || ct == CUDA_R_32F);
  if (!types_ok)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "type combination A " + std::to_string(at) + " B " + std::to_string(bt) +
                      " C/D " + std::to_string(ct) + " not supported with CUBLAS_COMPUTE_32F");

  // Scale modes.
  const int32_t mode_a = desc->scale_mode[0], mode_b = desc->scale_mode[1];
  const bool scales_set = mode_a >= 0 || mode_b >= 0 || desc->scale_ptr[0] || desc->scale_ptr[1];
  if (!fp8 && scales_set)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "A / B scale modes and pointers apply to FP8 operands only");
  if (desc->scale_ptr[2] || desc->scale_ptr[3])
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "C / D scale pointers apply to FP8 C / D only (not emulated)");
  const int32_t ma = mode_a < 0 ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F : mode_a;
  const int32_t mb = mode_b < 0 ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F : mode_b;
  const int cc = emu::device_cc;
  if (fp8) {
    if (cc < 89)
      return refuse(
          CUBLAS_STATUS_ARCH_MISMATCH, call,
          "FP8 matmul needs compute capability 8.9+ (device is sm_" + std::to_string(cc) + ")");
    if (!(ta && !tb))
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "FP8: A must be transposed and B non-transposed (the \"TN\" format)");
    if (k % 16 || a->ld % 16 || b->ld % 16 || (m * type_bytes(ct)) % 16 ||
        (d->ld * type_bytes(ct)) % 16)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "FP8: dimensions must meet the Tensor Core 16-byte rules: k, lda, ldb "
                    "multiples of 16, m * sizeof(C) and ldc * sizeof(C) multiples of 16 (k=" +
                        std::to_string(k) + " lda=" + std::to_string(a->ld) +
                        " ldb=" + std::to_string(b->ld) + " m=" + std::to_string(m) +
                        " ldc=" + std::to_string(d->ld) + ")");
    if (ma != mb)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "emulated: A and B in the same scale mode");
    if (ma == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) {
      if (cc < 90)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                      "OUTER_VEC_32F scaling needs compute capability 9.0+ (device is sm_" +
                          std::to_string(cc) + ")");
    } else if (ma != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "emulated: scale modes SCALAR_32F and OUTER_VEC_32F only");
    }
  }
  // Epilogue.
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !bias)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "emulated: epilogues DEFAULT and BIAS only");
  const int bias_type = desc->bias_type < 0 ? ct : desc->bias_type;
  if (bias && bias_type != ct)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "BIAS_DATA_TYPE must be D's type here (bias " + std::to_string(bias_type) +
                      ", D " + std::to_string(ct) + ")");
  if (bias && emu::lt::refuse_bias_epilogue)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "BIAS epilogue refused (test knob)");
  *cfg = {m, n, k, d->batch, desc->trans_a, desc->trans_b, at, bt, ct, ma, mb, bias, bias_type};
  return CUBLAS_STATUS_SUCCESS;
}

uint64_t fingerprint(const Config& c, const cublasLtMatrixLayoutOpaque_t* a,
                     const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* d,
                     const uint32_t* align) {
  const int64_t words[] = {c.m,         c.n,      c.k,      c.batch,  c.trans_a, c.trans_b,
                           c.a_type,    c.b_type, c.c_type, c.mode_a, c.mode_b,  c.bias,
                           c.bias_type, a->ld,    b->ld,    d->ld,    a->stride, b->stride,
                           d->stride,   align[0], align[1], align[2], align[3],  emu::device_cc};
  uint64_t h = 1469598103934665603ull;
  for (int64_t w : words) {
    h ^= uint64_t(w);
    h *= 1099511628211ull;
  }
  return h;
}

double load(const void* p, int type, int64_t idx) {
  switch (type) {
    case CUDA_R_32F: return double(static_cast<const float*>(p)[idx]);
    case CUDA_R_16BF: return double(eco::bf16_to_float(static_cast<const uint16_t*>(p)[idx]));
    case CUDA_R_8F_E4M3: return double(eco::fp8_e4m3_decode(static_cast<const uint8_t*>(p)[idx]));
    case CUDA_R_8F_E5M2: return double(eco::fp8_e5m2_decode(static_cast<const uint8_t*>(p)[idx]));
  }
  std::abort();
}

// double -> float rounded to odd (exact, or the truncation with its last bit set): a following
// round-to-nearest-even to bf16 then equals the direct rounding of the double.
float round_to_odd_float(double x) {
  float f = float(x);
  if (double(f) == x || !std::isfinite(f)) return f;
  if (std::fabs(double(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}

void store(void* p, int type, int64_t idx, double v) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(p)[idx] = float(v);
  } else {  // CUDA_R_16BF
    static_cast<uint16_t*>(p)[idx] = eco::float_to_bf16(round_to_odd_float(v));
  }
}

// An operand's bytes [p, p + bytes) must lie inside the cudaMalloc allocation p points into (not
// checked for host memory): a read or write past it would fault or corrupt on the GPU.
void check_bounds(const void* p, uint64_t bytes, const char* what) {
  const auto [start, size] = emu::allocation_of(p);
  if (size == 0) return;
  const uint64_t end = uint64_t(reinterpret_cast<uintptr_t>(p)) + bytes;
  if (end > uint64_t(start) + size) {
    std::fprintf(stderr,
                 "emulated cublasLtMatmul: %s reaches %llu bytes past its cudaMalloc allocation "
                 "of %zu bytes\n",
                 what, static_cast<unsigned long long>(end - start - size), size);
    emu::die("emulated cublasLtMatmul: operand out of its allocation");
  }
}
uint64_t footprint_bytes(const cublasLtMatrixLayoutOpaque_t* l, int64_t batch) {
  if (l->rows == 0 || l->cols == 0) return 0;
  const int64_t elems = (batch - 1) * l->stride + int64_t(l->cols - 1) * l->ld + int64_t(l->rows);
  return uint64_t(elems) * uint64_t(type_bytes(l->type));
}

// Element offsets (within one batch entry) a layout's (rows, cols) window covers.
int64_t offset(const cublasLtMatrixLayoutOpaque_t* l, int64_t r, int64_t c) {
  return r + c * l->ld;
}

// One cublasLtMatmul's arithmetic, from what the call read: it may run later, on a deferred
// stream, after the caller changed its descriptor, layouts or alpha / beta.
struct Product {
  Config cfg;
  cublasLtMatrixLayoutOpaque_t a, b, c, d;
  const void *A, *B, *C;
  void* D;
  float alpha, beta;
  bool outer;            // OUTER_VEC_32F scales
  const float *sa, *sb;  // A / B scale pointers
  const void* bias;      // with cfg.bias
};

void multiply(const Product& g) {
  const Config& cfg = g.cfg;
  const cublasLtMatrixLayoutOpaque_t *a = &g.a, *b = &g.b, *c = &g.c, *d = &g.d;
  const void *A = g.A, *B = g.B, *C = g.C, *bias = g.bias;
  void* D = g.D;
  const float alpha = g.alpha, beta = g.beta, *sa = g.sa, *sb = g.sb;
  const bool outer = g.outer;
  const int64_t m = cfg.m, n = cfg.n, k = cfg.k;
  const int batch = int(cfg.batch);
  const bool ta = cfg.trans_a == CUBLAS_OP_T, tb = cfg.trans_b == CUBLAS_OP_T;
  // op(A) as (k, m) and op(B) as (n, k) in double, then per block of 8 columns of D and 64 rows,
  // acc[j][r] += opA[p][r] * opB[j][p] for p = 0 .. k-1 in order (each element's sum in k order).
  std::vector<double> opA(size_t(k * m)), opB(size_t(n * k));
  for (int i = 0; i < batch; ++i) {
    const int64_t a0 = i * a->stride, b0 = i * b->stride, d0 = i * d->stride;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t r = 0; r < m; ++r)
        opA[size_t(p * m + r)] = load(A, a->type, a0 + (ta ? offset(a, p, r) : offset(a, r, p)));
    for (int64_t col = 0; col < n; ++col)
      for (int64_t p = 0; p < k; ++p)
        opB[size_t(col * k + p)] =
            load(B, b->type, b0 + (tb ? offset(b, col, p) : offset(b, p, col)));
    constexpr int64_t kJ = 8, kR = 64;
    double tile[kJ][kR];
    for (int64_t j0 = 0; j0 < n; j0 += kJ) {
      const int64_t nj = std::min(kJ, n - j0);
      for (int64_t r0 = 0; r0 < m; r0 += kR) {
        const int64_t nr = std::min(kR, m - r0);
        for (int64_t j = 0; j < nj; ++j)
          for (int64_t r = 0; r < kR; ++r) tile[j][r] = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double* arow = &opA[size_t(p * m + r0)];
          for (int64_t j = 0; j < nj; ++j) {
            const double bv = opB[size_t((j0 + j) * k + p)];
            double* t = tile[j];
            for (int64_t r = 0; r < nr; ++r) t[r] += arow[r] * bv;
          }
        }
        for (int64_t j = 0; j < nj; ++j)
          for (int64_t r = 0; r < nr; ++r) {
            const int64_t row = r0 + r, col = j0 + j;
            double scale = double(alpha);
            if (outer)
              scale *= double(sa[row]) * double(sb[col]);
            else if (is_fp8(cfg.a_type))
              scale *= double(sa ? *sa : 1.0f) * double(sb ? *sb : 1.0f);
            double v = scale * tile[j][r];
            const int64_t di = d0 + offset(d, row, col);
            if (beta != 0.0f) v += double(beta) * load(C, c->type, di);
            if (cfg.bias) v += load(bias, cfg.bias_type, row);
            store(D, d->type, di, v);
          }
      }
    }
  }
}

}  // namespace

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_?";
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
  static thread_local std::string msg;
  msg = std::string(cublasLtGetStatusName(s)) + " (emulated cuBLASLt";
  if (s != CUBLAS_STATUS_SUCCESS && !emu::lt::refusals.empty())
    msg += ": " + emu::lt::refusals.back().why;
  msg += ")";
  return msg.c_str();
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (!h) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "null handle pointer");
  *h = new cublasLtContext;
  ++emu::lt::handles_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  --emu::lt::handles_alive;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (!desc) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "null pointer");
  *desc = new cublasLtMatmulDescOpaque_t;
  (*desc)->compute = compute;
  (*desc)->scale_type = scale_type;
  ++emu::lt::descs_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  if (desc) --emu::lt::descs_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  const char* call = "cublasLtMatmulDescSetAttribute";
  if (!d) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null descriptor");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return read_attr(d->trans_a, buf, size, call, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return read_attr(d->trans_b, buf, size, call, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attr(d->epilogue, buf, size, call, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attr(d->bias, buf, size, call, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return read_attr(d->bias_type, buf, size, call, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return read_attr(d->scale_ptr[0], buf, size, call, "A_SCALE_POINTER");
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return read_attr(d->scale_ptr[1], buf, size, call, "B_SCALE_POINTER");
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
      return read_attr(d->scale_ptr[2], buf, size, call, "C_SCALE_POINTER");
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
      return read_attr(d->scale_ptr[3], buf, size, call, "D_SCALE_POINTER");
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
      return read_attr(d->scale_mode[0], buf, size, call, "A_SCALE_MODE");
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
      return read_attr(d->scale_mode[1], buf, size, call, "B_SCALE_MODE");
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
      return read_attr(d->fast_accum, buf, size, call, "FAST_ACCUM");
    default:
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "emulated: attribute " + std::to_string(int(attr)) + " not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  const char* call = "cublasLtMatrixLayoutCreate";
  if (!l) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null pointer");
  if (type_bytes(type) == 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "emulated: data type not emulated");
  *l = new cublasLtMatrixLayoutOpaque_t{int(type), rows, cols, ld, 1, 0};
  ++emu::lt::layouts_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  if (l) --emu::lt::layouts_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  if (!l) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null layout");
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return read_attr(l->batch, buf, size, call, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read_attr(l->stride, buf, size, call, "STRIDED_BATCH_OFFSET");
    case CUBLASLT_MATRIX_LAYOUT_LD: return read_attr(l->ld, buf, size, call, "LD");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return read_attr(l->rows, buf, size, call, "ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return read_attr(l->cols, buf, size, call, "COLS");
    default:
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "emulated: layout attribute " + std::to_string(int(attr)) + " not emulated");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  if (!p)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "null pointer");
  *p = new cublasLtMatmulPreferenceOpaque_t;
  ++emu::lt::prefs_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  if (p) --emu::lt::prefs_alive;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  const char* call = "cublasLtMatmulPreferenceSetAttribute";
  if (!p) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null preference");
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attr(p->max_workspace, buf, size, call, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return read_attr(p->min_align[0], buf, size, call, "MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return read_attr(p->min_align[1], buf, size, call, "MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return read_attr(p->min_align[2], buf, size, call, "MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attr(p->min_align[3], buf, size, call, "MIN_ALIGNMENT_D_BYTES");
    default:
      return refuse(
          CUBLAS_STATUS_INVALID_VALUE, call,
          "emulated: preference attribute " + std::to_string(int(attr)) + " not emulated");
  }
}

// One algorithm, valid for the configuration and the alignments the preference states. FP8
// needs 16-byte alignment (the Tensor Core rules), so a preference promising less gets none.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  ++emu::lt::heuristic_queries;
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "null handle");
  if (!pref || requested < 1 || !results || !returned)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null preference / results or requested < 1");
  *returned = 0;
  Config cfg{};
  if (const cublasStatus_t st = validate(call, desc, a, b, c, d, &cfg); st != CUBLAS_STATUS_SUCCESS)
    return st == CUBLAS_STATUS_INVALID_VALUE ? st : CUBLAS_STATUS_NOT_SUPPORTED;
  if (is_fp8(cfg.a_type))
    for (int i = 0; i < 4; ++i)
      if (pref->min_align[i] < 16)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                      "FP8: pointers must be 16-byte aligned; the preference allows " +
                          std::to_string(pref->min_align[i]) + " for " + "ABCD"[i]);
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = fingerprint(cfg, a, b, d, pref->min_align);
  for (int i = 0; i < 4; ++i) r.algo.data[2 + i] = pref->min_align[i];
  r.workspaceSize = std::min<uint64_t>(pref->max_workspace, emu::lt::algo_workspace_bytes);
  r.algo.data[6] = r.workspaceSize;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha_p,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta_p, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "null handle");
  Config cfg{};
  if (const cublasStatus_t st = validate(call, desc, a, b, c, d, &cfg); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (!alpha_p || !beta_p || !A || !B || !D)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null alpha, beta, A, B or D");
  const float alpha = *static_cast<const float*>(alpha_p),
              beta = *static_cast<const float*>(beta_p);
  if (beta != 0.0f && !C) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "beta != 0, C null");
  // The algorithm: one the heuristic returned for this configuration and these alignments.
  if (!algo || algo->data[0] != kAlgoMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "algorithm not from the heuristic");
  uint32_t align[4];
  for (int i = 0; i < 4; ++i) align[i] = uint32_t(algo->data[2 + i]);
  if (algo->data[1] != fingerprint(cfg, a, b, d, align))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "algorithm obtained for another configuration (shape, layout, types, scale "
                  "mode, epilogue, alignment or device)");
  if (workspace_bytes < algo->data[6] || (algo->data[6] > 0 && workspace == nullptr))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "workspace of " + std::to_string(workspace_bytes) +
                      " bytes, smaller than the algorithm's " + std::to_string(algo->data[6]));
  const int batch = int(cfg.batch);
  const uint32_t have[4] = {alignment_of(A, a->stride * type_bytes(a->type), batch),
                            alignment_of(B, b->stride * type_bytes(b->type), batch),
                            C ? alignment_of(C, c->stride * type_bytes(c->type), batch) : 256u,
                            alignment_of(D, d->stride * type_bytes(d->type), batch)};
  for (int i = 0; i < 4; ++i)
    if (have[i] < align[i])
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    std::string("pointer ") + "ABCD"[i] + " (with its batch stride) is " +
                        std::to_string(have[i]) + "-byte aligned; the algorithm was picked for " +
                        std::to_string(align[i]) + " (MIN_ALIGNMENT preference)");
  const bool outer = cfg.mode_a == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const float* sa = static_cast<const float*>(desc->scale_ptr[0]);
  const float* sb = static_cast<const float*>(desc->scale_ptr[1]);
  if (outer && (!sa || !sb))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "OUTER_VEC_32F without scale pointers");
  if (cfg.bias && !desc->bias)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "BIAS epilogue without a bias pointer");
  if (C && C != D)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "emulated: C and D the same buffer only");

  const int64_t m = cfg.m, n = cfg.n, k = cfg.k;
  check_bounds(A, footprint_bytes(a, batch), "A");
  check_bounds(B, footprint_bytes(b, batch), "B");
  check_bounds(D, footprint_bytes(d, batch), "C / D");
  if (is_fp8(cfg.a_type)) {
    if (sa) check_bounds(sa, uint64_t(outer ? m : 1) * 4, "the A scales");
    if (sb) check_bounds(sb, uint64_t(outer ? n : 1) * 4, "the B scales");
  }
  if (cfg.bias)
    check_bounds(desc->bias, uint64_t(m) * uint64_t(type_bytes(cfg.bias_type)), "the bias");
  // D's entries must not overlap one another (the GPU would race), nor A's or B's.
  {
    const int db = type_bytes(d->type);
    const auto d_addr = [&](int64_t i, int64_t r, int64_t col) {
      return reinterpret_cast<uintptr_t>(D) + uintptr_t((i * d->stride + offset(d, r, col)) * db);
    };
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < batch; ++i) {
      lo = std::min(lo, d_addr(i, 0, 0));
      hi = std::max(hi, d_addr(i, m - 1, n - 1) + uintptr_t(db));
    }
    std::vector<uint8_t> mark(hi - lo, 0);
    for (int i = 0; i < batch; ++i)
      for (int64_t col = 0; col < n; ++col)
        for (int64_t r = 0; r < m; ++r) {
          uint8_t* q = &mark[d_addr(i, r, col) - lo];
          for (int byte = 0; byte < db; ++byte)
            if (q[byte]++) {
              emu::die("emulated cublasLtMatmul: D's batch entries overlap (a race on the GPU)");
            }
        }
    const auto check_input = [&](const void* X, const cublasLtMatrixLayoutOpaque_t* l,
                                 const char* name) {
      const int xb = type_bytes(l->type);
      for (int i = 0; i < batch; ++i)
        for (uint64_t col = 0; col < l->cols; ++col)
          for (uint64_t r = 0; r < l->rows; ++r) {
            const uintptr_t p =
                reinterpret_cast<uintptr_t>(X) +
                uintptr_t((i * l->stride + offset(l, int64_t(r), int64_t(col))) * xb);
            for (int byte = 0; byte < xb; ++byte)
              if (p + uintptr_t(byte) >= lo && p + uintptr_t(byte) < hi && mark[p + byte - lo]) {
                std::fprintf(stderr, "emulated cublasLtMatmul: %s overlaps D\n", name);
                emu::die("emulated cublasLtMatmul: an input overlaps the output");
              }
          }
    };
    check_input(A, a, "A");
    check_input(B, b, "B");
  }

  // The arithmetic runs on the stream (queued on a deferred one) from what this call read:
  // layouts, descriptor fields, alpha and beta as they are now.
  const Product p{cfg, *a, *b, *c, *d, A, B, C, D, alpha, beta, outer, sa, sb, desc->bias};
  emu::on_stream(stream, [p] { multiply(p); });
  int32_t mode = -1;
  if (is_fp8(cfg.a_type)) mode = cfg.mode_a;
  emu::lt::calls.push_back({m, n, k, cfg.batch, cfg.trans_a, cfg.trans_b, cfg.a_type, cfg.c_type,
                            mode, desc->fast_accum != 0, cfg.bias, alpha, beta});
  return CUBLAS_STATUS_SUCCESS;
}
