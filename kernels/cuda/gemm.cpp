// GemmEngine (see gemm.h): row-major calls -> cuBLASLt plans (descriptors + the algorithm the
// heuristic picked, cached per key) -> cublasLtMatmul. Host code only, compiled by the host
// compiler so that argument errors can be raised as eco::Error with formatted messages.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "base/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"

namespace eco::cuda {
namespace {

struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using MatrixLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

constexpr int32_t kNoScales = -1;  // BF16 / F32 GEMMs: no operand scale mode is set

// One row-major GEMM as the entry points describe it, for i < batch:
//   C_i (M, N) = alpha * op(A_i) (M, K) @ op(B_i) (K, N) + beta * C_i   (+ bias (N) per column)
// FP8 only: row_scales multiply the rows of op(A) (M values; 1 for SCALAR), col_scales the
// columns of op(B) (N values; 1 for SCALAR).
struct RowMajorGemm {
  bool trans_a = false, trans_b = false;
  int M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int batch = 1;
  cudaDataType_t ab_type = CUDA_R_16BF, c_type = CUDA_R_16BF;
  float alpha = 1.0f, beta = 0.0f;
  int32_t scale_mode = kNoScales;
  const float* row_scales = nullptr;
  const float* col_scales = nullptr;
  bool fast_accum = false;
  const __nv_bfloat16* bias = nullptr;
};

// Everything a plan depends on, in cuBLASLt's column-major terms: D (m, n) = op(A) (m, k) @
// op(B) (k, n), D = C in place. Pointer values are not part of it, only their alignments.
// All fields are int64_t, so the key has no padding and hashes as an array of words.
struct PlanKey {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  int64_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int64_t a_type = 0, b_type = 0, c_type = 0;  // cudaDataType_t
  int64_t scale_mode = kNoScales;              // cublasLtMatmulMatrixScale_t for A and B
  int64_t fast_accum = 0;
  int64_t bias = 0;  // BIAS epilogue, bf16 vector of m values
  int64_t align_a = 0, align_b = 0, align_c = 0, align_scales = 0, align_bias = 0;  // bytes
  bool operator==(const PlanKey&) const = default;
};
static_assert(std::has_unique_object_representations_v<PlanKey>);

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    int64_t words[sizeof(PlanKey) / sizeof(int64_t)];
    std::memcpy(words, &k, sizeof k);
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t w : words) {
      h ^= uint64_t(w);
      h *= 1099511628211ull;
    }
    return size_t(h);
  }
};

struct Plan {
  MatmulDesc desc;
  MatrixLayout a, b, c;
  cublasLtMatmulAlgo_t algo{};
  bool ran = false;  // a cublasLtMatmul with this plan has succeeded
};

// The pointers of one call, in cuBLASLt's roles (A and B already swapped).
struct LtOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* scale_a = nullptr;
  const void* scale_b = nullptr;
  const void* bias = nullptr;
};

int64_t elem_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_8F_E4M3: return 1;
    case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    default: runtime_error("GemmEngine: unexpected cudaDataType_t {}", int(t));
  }
}

const char* type_name(int64_t t) {
  switch (t) {
    case CUDA_R_8F_E4M3: return "e4m3";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_32F: return "f32";
    default: return "?";
  }
}

const char* scale_mode_name(int64_t m) {
  switch (m) {
    case kNoScales: return "none";
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return "SCALAR_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return "OUTER_VEC_32F";
    default: return "?";
  }
}

// Largest power of two (at most 256) dividing the address and the batch stride in bytes: the
// alignment every batch entry of the matrix has. cuBLASLt's heuristic assumes 256 by default.
int32_t alignment(const void* p, int64_t stride_bytes = 0) {
  const uint64_t a = uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(stride_bytes) | 256u;
  return int32_t(a & (~a + 1));
}

std::string describe(const PlanKey& k, const char* label) {
  return fmt::format(
      "{} | cuBLASLt column-major m={} n={} k={} op(A)={} op(B)={} lda={} ldb={} ldc={} "
      "batch={} strides={},{},{} types {}x{}->{} scales={} fast_accum={} epilogue={} "
      "alignments A={} B={} C={} scales={} bias={}",
      label, k.m, k.n, k.k, k.trans_a == CUBLAS_OP_T ? "T" : "N",
      k.trans_b == CUBLAS_OP_T ? "T" : "N", k.lda, k.ldb, k.ldc, k.batch, k.stride_a, k.stride_b,
      k.stride_c, type_name(k.a_type), type_name(k.b_type), type_name(k.c_type),
      scale_mode_name(k.scale_mode), k.fast_accum, k.bias ? "BIAS(bf16)" : "DEFAULT", k.align_a,
      k.align_b, k.align_c, k.align_scales, k.align_bias);
}

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value,
              const char* attr_name, const std::string& ctx) {
  ECO_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value),
                   (ctx + " | setting " + attr_name).c_str());
}

// The per-call pointer attributes (operand scales, bias). Set before the heuristic too: it reads
// their values to infer alignment. The context string is only built on failure.
void set_pointers(cublasLtMatmulDesc_t d, const PlanKey& key, const LtOperands& ops,
                  const char* label) {
  const auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* ptr, const char* name) {
    ECO_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(d, attr, &ptr, sizeof ptr),
                     (describe(key, label) + " | setting " + name).c_str());
  };
  if (key.scale_mode != kNoScales) {
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ops.scale_a, "A_SCALE_POINTER");
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, ops.scale_b, "B_SCALE_POINTER");
  }
  if (key.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, ops.bias, "BIAS_POINTER");
}

MatrixLayout make_layout(int64_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                         int64_t stride, const std::string& ctx) {
  cublasLtMatrixLayout_t raw = nullptr;
  ECO_CHECK_CUBLAS(
      cublasLtMatrixLayoutCreate(&raw, cudaDataType_t(type), uint64_t(rows), uint64_t(cols), ld),
      ctx.c_str());
  MatrixLayout layout(raw);
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    ECO_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &count, sizeof count),
                     ctx.c_str());
    ECO_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
                         raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                     ctx.c_str());
  }
  return layout;
}

template <class T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<__nv_bfloat16>() {
  return CUDA_R_16BF;
}
template <>
constexpr cudaDataType_t cuda_type<float>() {
  return CUDA_R_32F;
}

}  // namespace

struct GemmEngine::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  DeviceBuffer bias_bf16;  // bf16 copy of the current bias (grown to the largest OC seen)
  DeviceBuffer partials;   // column-sum scratch of the bias gradient (grown)
  DeviceBuffer fp8_acc;    // fp32 sums of the row-scaled FP8 GEMM on sm_89 (grown or reserved)
  DeviceBuffer unit_scale;  // one fp32 1.0f: the unit per-tensor scales of that route
  bool rowwise_epilogue = false;
  int cc = 0;
  int64_t heuristic_queries = 0;
  int64_t bias_fallbacks = 0;
  // A null plan marks a key cuBLASLt refused (only BIAS-epilogue keys, which have a fallback).
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;

  ~Impl() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
  }

  // Grows a scratch buffer. Only on first use of a larger shape; it waits for queued work that
  // may still read the old buffer (so do not first-call a new shape inside graph capture).
  static void reserve(DeviceBuffer& buf, size_t bytes) {
    if (buf.bytes() >= bytes) return;
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    buf = DeviceBuffer(bytes);
  }

  const __nv_bfloat16* bias_as_bf16(const float* bias, int n, cudaStream_t s) {
    if (bias == nullptr) return nullptr;
    reserve(bias_bf16, size_t(n) * sizeof(__nv_bfloat16));
    ECO_CHECK_CUDA(f32_to_bf16(bias_bf16.get<__nv_bfloat16>(), bias, n, s));
    return bias_bf16.get<__nv_bfloat16>();
  }

  Plan* plan(const PlanKey& key, const LtOperands& ops, const char* label, bool refusal_ok);
  cublasStatus_t cublaslt_matmul(Plan& p, const PlanKey& key, const LtOperands& ops, float alpha,
                                 float beta, cudaStream_t s, const char* label);
  void run(const RowMajorGemm& g, cudaStream_t s, const char* label);
};

// The cached plan of `key`, made on first use (the only heuristic query for this key). When
// cuBLASLt has no algorithm: nullptr if refusal_ok (cached as such), else an error.
Plan* GemmEngine::Impl::plan(const PlanKey& key, const LtOperands& ops, const char* label,
                             bool refusal_ok) {
  if (auto it = plans.find(key); it != plans.end()) return it->second.get();
  const std::string ctx = describe(key, label);
  auto p = std::make_unique<Plan>();

  cublasLtMatmulDesc_t desc = nullptr;
  ECO_CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), ctx.c_str());
  p->desc.reset(desc);
  // Attribute value types as cublasLt.h documents them: int32_t, int8_t, uint32_t.
  const int32_t trans_a = int32_t(key.trans_a), trans_b = int32_t(key.trans_b);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_a, "TRANSA", ctx);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_b, "TRANSB", ctx);
  if (key.scale_mode != kNoScales) {
    const int32_t mode = int32_t(key.scale_mode);
    set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode, "A_SCALE_MODE", ctx);
    set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode, "B_SCALE_MODE", ctx);
    const int8_t fast = int8_t(key.fast_accum);
    set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast, "FAST_ACCUM", ctx);
  }
  if (key.bias) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE", ctx);
    const int32_t bias_type = CUDA_R_16BF;
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "BIAS_DATA_TYPE", ctx);
  }
  set_pointers(desc, key, ops, label);

  const bool ta = key.trans_a == CUBLAS_OP_T, tb = key.trans_b == CUBLAS_OP_T;
  p->a = make_layout(key.a_type, ta ? key.k : key.m, ta ? key.m : key.k, key.lda, key.batch,
                     key.stride_a, ctx);
  p->b = make_layout(key.b_type, tb ? key.n : key.k, tb ? key.k : key.n, key.ldb, key.batch,
                     key.stride_b, ctx);
  p->c = make_layout(key.c_type, key.m, key.n, key.ldc, key.batch, key.stride_c, ctx);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  ECO_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&raw_pref), ctx.c_str());
  Preference pref(raw_pref);
  const uint64_t ws = workspace.bytes();
  ECO_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
                       raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                   ctx.c_str());
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(key.align_a)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(key.align_b)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(key.align_c)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(key.align_c)}};
  for (const auto& [attr, bytes] : aligns)
    ECO_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(raw_pref, attr, &bytes, sizeof bytes),
                     ctx.c_str());

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ++heuristic_queries;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle, desc, p->a.get(), p->b.get(), p->c.get(), p->c.get(), raw_pref, 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
    if (refusal_ok) return plans.emplace(key, nullptr).first->second.get();
    runtime_error(
        "cuBLASLt has no algorithm for this GEMM (cublasLtMatmulAlgoGetHeuristic: {}): {}",
        cublasLtGetStatusName(st), ctx);
  }
  ECO_CHECK_CUBLAS(st, ("cublasLtMatmulAlgoGetHeuristic | " + ctx).c_str());
  if (result.state != CUBLAS_STATUS_SUCCESS)
    runtime_error("cuBLASLt heuristic result state {}: {}", cublasLtGetStatusName(result.state),
                  ctx);
  p->algo = result.algo;
  return plans.emplace(key, std::move(p)).first->second.get();
}

cublasStatus_t GemmEngine::Impl::cublaslt_matmul(Plan& p, const PlanKey& key, const LtOperands& ops,
                                                 float alpha, float beta, cudaStream_t s,
                                                 const char* label) {
  set_pointers(p.desc.get(), key, ops, label);
  const cublasStatus_t st =
      cublasLtMatmul(handle, p.desc.get(), &alpha, ops.a, p.a.get(), ops.b, p.b.get(), &beta, ops.c,
                     p.c.get(), ops.c, p.c.get(), &p.algo, workspace.get(), workspace.bytes(), s);
  if (st == CUBLAS_STATUS_SUCCESS) p.ran = true;
  return st;
}

void GemmEngine::Impl::run(const RowMajorGemm& g, cudaStream_t s, const char* label) {
  // Argument checks in the caller's row-major terms.
  if (g.M < 0 || g.N < 0 || g.K < 1 || g.batch < 1)
    runtime_error("{}: need M, N >= 0, K >= 1, batch >= 1", label);
  if (g.M == 0 || g.N == 0) return;
  const int64_t a_cols = g.trans_a ? g.M : g.K, b_cols = g.trans_b ? g.K : g.N;
  if (g.lda < a_cols || g.ldb < b_cols || g.ldc < g.N)
    runtime_error(
        "{}: leading dimensions too small: lda {} (need >= {}), ldb {} (>= {}), ldc {} "
        "(>= {})",
        label, g.lda, a_cols, g.ldb, b_cols, g.ldc, g.N);
  if (g.batch > 1 && (g.stride_a < 0 || g.stride_b < 0 || g.stride_c <= 0))
    runtime_error("{}: batch strides must be >= 0 (C's > 0): {}, {}, {}", label, g.stride_a,
                  g.stride_b, g.stride_c);
  if (g.A == nullptr || g.B == nullptr || g.C == nullptr)
    runtime_error("{}: null matrix pointer", label);
  if (g.bias && (g.beta != 0.0f || g.c_type != CUDA_R_16BF || g.batch != 1))
    runtime_error("{}: internal: bias only for single bf16 outputs with beta = 0", label);

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's A is our B (its
  // rows are C's columns), its B is our A. A row-major matrix stored untransposed is, read
  // column-major, already the transpose the swapped product needs: op stays N; stored
  // transposed, it becomes T.
  PlanKey key;
  key.m = g.N;
  key.n = g.M;
  key.k = g.K;
  key.trans_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  key.trans_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  key.lda = g.ldb;
  key.ldb = g.lda;
  key.ldc = g.ldc;
  key.batch = g.batch;
  if (g.batch > 1) {
    key.stride_a = g.stride_b;
    key.stride_b = g.stride_a;
    key.stride_c = g.stride_c;
  }
  key.a_type = key.b_type = g.ab_type;
  key.c_type = g.c_type;
  key.scale_mode = g.scale_mode;
  key.fast_accum = g.fast_accum ? 1 : 0;
  key.bias = g.bias ? 1 : 0;
  const int64_t ab = elem_bytes(g.ab_type), cb = elem_bytes(g.c_type);
  key.align_a = alignment(g.B, key.stride_a * ab);
  key.align_b = alignment(g.A, key.stride_b * ab);
  key.align_c = alignment(g.C, key.stride_c * cb);

  LtOperands ops;
  ops.a = g.B;
  ops.b = g.A;
  ops.c = g.C;
  ops.scale_a = g.col_scales;  // cuBLASLt's A rows = our columns
  ops.scale_b = g.row_scales;
  ops.bias = g.bias;
  if (g.scale_mode != kNoScales)
    key.align_scales = std::min(alignment(ops.scale_a), alignment(ops.scale_b));
  if (g.bias) key.align_bias = alignment(g.bias);

  float beta = g.beta;
  if (g.bias) {
    // The BIAS epilogue where cuBLASLt offers it. Where it does not (no algorithm, or the first
    // cublasLtMatmul refuses the combination: validation errors return before any launch), the
    // same result without it: the bias broadcast into C, then beta = 1. Both round once:
    // out = bf16(acc + bias_bf16).
    if (Plan* p = plan(key, ops, label, /*refusal_ok=*/true)) {
      const cublasStatus_t st = cublaslt_matmul(*p, key, ops, g.alpha, beta, s, label);
      if (st == CUBLAS_STATUS_SUCCESS) return;
      if (p->ran) ECO_CHECK_CUBLAS(st, ("cublasLtMatmul | " + describe(key, label)).c_str());
      plans[key] = nullptr;
    }
    ++bias_fallbacks;
    ECO_CHECK_CUDA(
        fill_rows_with_bias(static_cast<__nv_bfloat16*>(g.C), g.bias, g.M, g.N, g.ldc, s));
    key.bias = 0;
    key.align_bias = 0;
    ops.bias = nullptr;
    beta = 1.0f;
  }
  Plan* p = plan(key, ops, label, /*refusal_ok=*/false);
  ECO_CHECK_CUBLAS(cublaslt_matmul(*p, key, ops, g.alpha, beta, s, label),
                   describe(key, label).c_str());
}

// ---- GemmEngine ------------------------------------------------------------------------------

GemmEngine::GemmEngine() : impl_(std::make_unique<Impl>()) {
  int dev = 0, major = 0, minor = 0;
  ECO_CHECK_CUDA(cudaGetDevice(&dev));
  ECO_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  ECO_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  impl_->cc = 10 * major + minor;
  ECO_CHECK_CUBLAS(cublasLtCreate(&impl_->handle), "GemmEngine: creating the cuBLASLt handle");
  impl_->workspace = DeviceBuffer(kWorkspaceBytes);
  if (reinterpret_cast<uintptr_t>(impl_->workspace.get()) % 256 != 0)
    runtime_error("GemmEngine: cuBLASLt workspace is not 256-byte aligned");
  impl_->rowwise_epilogue = impl_->cc < 90;
  if (impl_->cc >= 89) {
    const float one = 1.0f;
    impl_->unit_scale = DeviceBuffer(sizeof one);
    ECO_CHECK_CUDA(cudaMemcpy(impl_->unit_scale.get(), &one, sizeof one, cudaMemcpyHostToDevice));
  }
}

bool GemmEngine::rowwise_fp8_epilogue() const { return impl_->rowwise_epilogue; }
void GemmEngine::set_rowwise_fp8_epilogue(bool on) {
  impl_->rowwise_epilogue = on || impl_->cc < 90;
}
size_t GemmEngine::reserve_fp8_accumulator(size_t elems) {
  Impl::reserve(impl_->fp8_acc, elems * sizeof(float));
  return impl_->fp8_acc.bytes();
}

GemmEngine::~GemmEngine() = default;
GemmEngine::GemmEngine(GemmEngine&&) noexcept = default;
GemmEngine& GemmEngine::operator=(GemmEngine&&) noexcept = default;

int64_t GemmEngine::heuristic_queries() const { return impl_->heuristic_queries; }
int64_t GemmEngine::cached_plans() const { return int64_t(impl_->plans.size()); }
int64_t GemmEngine::bias_epilogue_fallbacks() const { return impl_->bias_fallbacks; }
int GemmEngine::compute_capability() const { return impl_->cc; }

void GemmEngine::matmul_forward(__nv_bfloat16* out, const __nv_bfloat16* inp,
                                const __nv_bfloat16* weight, const float* bias, int N, int C,
                                int OC, cudaStream_t s) {
  char label[128];
  std::snprintf(label, sizeof label, "matmul_forward (bf16) N=%d C=%d OC=%d bias=%s", N, C, OC,
                bias ? "yes" : "no");
  if (N < 0 || C < 1 || OC < 0) runtime_error("{}: need N, OC >= 0 and C >= 1", label);
  if (N == 0 || OC == 0) return;
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T
  impl_->run({.trans_b = true, .M = N, .N = OC, .K = C, .A = inp, .lda = C, .B = weight, .ldb = C,
              .C = out, .ldc = OC, .bias = impl_->bias_as_bf16(bias, OC, s)},
             s, label);
}

void GemmEngine::matmul_backward(__nv_bfloat16* dinp, float* dweight, float* dbias,
                                 const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                 const __nv_bfloat16* weight, int N, int C, int OC,
                                 bool accumulate_dinp, cudaStream_t s) {
  char label[128];
  if (N < 0 || C < 0 || OC < 0)
    runtime_error("matmul_backward: negative shape N={} C={} OC={}", N, C, OC);
  if (N == 0 || C == 0 || OC == 0) return;
  if (dinp) {
    std::snprintf(label, sizeof label, "matmul_backward dinp (bf16) N=%d C=%d OC=%d beta=%d", N, C,
                  OC, accumulate_dinp ? 1 : 0);
    // dinp (N, C) = dout (N, OC) @ weight (OC, C) [+ dinp]
    impl_->run({.M = N, .N = C, .K = OC, .A = dout, .lda = OC, .B = weight, .ldb = C, .C = dinp,
                .ldc = C, .beta = accumulate_dinp ? 1.0f : 0.0f},
               s, label);
  }
  std::snprintf(label, sizeof label,
                "matmul_backward dweight (bf16 -> f32, beta=1) N=%d C=%d OC=%d", N, C, OC);
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  impl_->run({.trans_a = true, .M = OC, .N = C, .K = N, .A = dout, .lda = OC, .B = inp, .ldb = C,
              .C = dweight, .ldc = C, .c_type = CUDA_R_32F, .beta = 1.0f},
             s, label);
  if (dbias) {
    Impl::reserve(impl_->partials, size_t(column_sum_partials(N, OC)) * sizeof(float));
    ECO_CHECK_CUDA(column_sums_accumulate(dbias, impl_->partials.get<float>(), dout, N, OC, s));
  }
}

void GemmEngine::matmul_forward_fp8(__nv_bfloat16* out, const uint8_t* x_codes,
                                    const float* x_scales, const uint8_t* w_codes,
                                    const float* w_scales, const float* bias, int N, int C, int OC,
                                    Granularity scales, cudaStream_t s) {
  char label[160];
  std::snprintf(label, sizeof label, "matmul_forward_fp8 (e4m3, %s scales) N=%d C=%d OC=%d bias=%s",
                scales == Granularity::PerRow      ? "per-row"
                : scales == Granularity::PerTensor ? "per-tensor"
                                                   : "block128",
                N, C, OC, bias ? "yes" : "no");
  // Shape and pointer checks first (they hold on every GPU), then what this GPU can do.
  if (N < 0 || C < 16 || OC < 0 || N % 16 != 0 || C % 16 != 0 || OC % 16 != 0)
    runtime_error(
        "{}: N, C and OC must be multiples of 16 (C >= 16) for cuBLASLt FP8; pad the "
        "token rows / channels",
        label);
  const auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  if (misaligned(x_codes) || misaligned(w_codes) || misaligned(out))
    runtime_error("{}: x_codes ({}), w_codes ({}) and out ({}) must be 16-byte aligned", label,
                  static_cast<const void*>(x_codes), static_cast<const void*>(w_codes),
                  static_cast<const void*>(out));
  if (x_scales == nullptr || w_scales == nullptr) runtime_error("{}: null scales", label);
  if (scales == Granularity::Block128)
    runtime_error("{}: 128x128 block scales are not supported by this GEMM (PerRow or PerTensor)",
                  label);
  if (impl_->cc < 89)
    runtime_error("{}: FP8 GEMM needs compute capability 8.9+ (this GPU is sm_{})", label,
                  impl_->cc);
  if (N == 0 || OC == 0) return;
  if (scales == Granularity::PerRow && impl_->rowwise_epilogue) {
    // sm_89: acc (N, OC) fp32 = x_codes @ w_codes^T with unit per-tensor scales, then
    // out = bf16(acc * x_scales[n] * w_scales[oc] + bf16(bias)).
    Impl::reserve(impl_->fp8_acc, size_t(N) * size_t(OC) * sizeof(float));
    float* acc = impl_->fp8_acc.get<float>();
    const float* one = impl_->unit_scale.get<float>();
    impl_->run({.trans_b = true, .M = N, .N = OC, .K = C, .A = x_codes, .lda = C, .B = w_codes,
                .ldb = C, .C = acc, .ldc = OC, .ab_type = CUDA_R_8F_E4M3, .c_type = CUDA_R_32F,
                .scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, .row_scales = one,
                .col_scales = one, .fast_accum = true},
               s, label);
    ECO_CHECK_CUDA(scale_outer_to_bf16(out, acc, x_scales, w_scales,
                                       impl_->bias_as_bf16(bias, OC, s), N, OC, s));
    return;
  }

  // out (N, OC) = x (N, C) @ w (OC, C)^T, both K-major (cuBLASLt "TN"); x_scales scale the rows
  // of x (one per token, or one), w_scales the columns of w^T (one per output channel, or one).
  const int32_t mode = scales == Granularity::PerRow ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                     : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  impl_->run({.trans_b = true, .M = N, .N = OC, .K = C, .A = x_codes, .lda = C, .B = w_codes,
              .ldb = C, .C = out, .ldc = OC, .ab_type = CUDA_R_8F_E4M3, .scale_mode = mode,
              .row_scales = x_scales, .col_scales = w_scales, .fast_accum = true,
              .bias = impl_->bias_as_bf16(bias, OC, s)},
             s, label);
}

template <class AB, class CD>
void GemmEngine::gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                      const AB* A, int64_t lda, int64_t stride_a, const AB* B,
                                      int64_t ldb, int64_t stride_b, float beta, CD* C, int64_t ldc,
                                      int64_t stride_c, int batch, cudaStream_t s) {
  char label[192];
  std::snprintf(label, sizeof label,
                "gemm_strided_batched (%s x %s -> %s) %s%s M=%d N=%d K=%d lda=%lld ldb=%lld "
                "ldc=%lld batch=%d",
                type_name(cuda_type<AB>()), type_name(cuda_type<AB>()), type_name(cuda_type<CD>()),
                trans_a ? "T" : "N", trans_b ? "T" : "N", M, N, K, static_cast<long long>(lda),
                static_cast<long long>(ldb), static_cast<long long>(ldc), batch);
  impl_->run({.trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N, .K = K, .A = A, .lda = lda,
              .stride_a = stride_a, .B = B, .ldb = ldb, .stride_b = stride_b, .C = C, .ldc = ldc,
              .stride_c = stride_c, .batch = batch, .ab_type = cuda_type<AB>(),
              .c_type = cuda_type<CD>(), .alpha = alpha, .beta = beta},
             s, label);
}

template void GemmEngine::gemm_strided_batched<__nv_bfloat16, __nv_bfloat16>(
    bool, bool, int, int, int, float, const __nv_bfloat16*, int64_t, int64_t, const __nv_bfloat16*,
    int64_t, int64_t, float, __nv_bfloat16*, int64_t, int64_t, int, cudaStream_t);
template void GemmEngine::gemm_strided_batched<__nv_bfloat16, float>(
    bool, bool, int, int, int, float, const __nv_bfloat16*, int64_t, int64_t, const __nv_bfloat16*,
    int64_t, int64_t, float, float*, int64_t, int64_t, int, cudaStream_t);
template void GemmEngine::gemm_strided_batched<float, float>(bool, bool, int, int, int, float,
                                                             const float*, int64_t, int64_t,
                                                             const float*, int64_t, int64_t, float,
                                                             float*, int64_t, int64_t, int,
                                                             cudaStream_t);

}  // namespace eco::cuda
