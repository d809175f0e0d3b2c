// CPU reference quantization: per-group absmax -> scale, then every element through the shared
// codec (kernels/common/qformat.h) with Philox bits keyed by its row-major index (one Philox call
// per 4 consecutive elements: kernels/common/philox.h).
#include "quant/qtensor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/common/format_quantizer.h"

namespace eco {
namespace {

constexpr int64_t kBlock = 128;  // Granularity::Block128's tile edge

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The rectangle [r0, r1) x [c0, c1) of elements that share scale `g`.
struct GroupRect {
  int64_t r0, r1, c0, c1;
};

GroupRect group_rect(Granularity gran, int64_t rows, int64_t cols, int64_t g) {
  switch (gran) {
    case Granularity::PerRow: return {g, g + 1, 0, cols};
    case Granularity::PerTensor: return {0, rows, 0, cols};
    case Granularity::Block128: {
      const int64_t br = g / ceil_div(cols, kBlock), bc = g % ceil_div(cols, kBlock);
      return {br * kBlock, std::min(rows, (br + 1) * kBlock), bc * kBlock,
              std::min(cols, (bc + 1) * kBlock)};
    }
  }
  return {0, 0, 0, 0};
}

// fmaxf ignores NaN operands, so the result does not depend on the order of the reduction.
float absmax_rect(const float* x, int64_t cols, const GroupRect& g) {
  float m = 0.0f;
  for (int64_t r = g.r0; r < g.r1; ++r)
    for (int64_t c = g.c0; c < g.c1; ++c) m = fmaxf(m, fabsf(x[r * cols + c]));
  return m;
}

void check_layout(const QTensor& q) {
  ECO_ASSERT(q.rows >= 0 && q.cols >= 0, "QTensor shape ({}, {})", q.rows, q.cols);
  ECO_ASSERT(q.codes.dtype == DType::U8 && q.codes.numel() == code_bytes(q.format, q.numel()),
             "{} codes of a ({}, {}) QTensor: {} of {}, expected {} of u8",
             qformat_name(q.format), q.rows, q.cols, q.codes.numel(), dtype_name(q.codes.dtype),
             code_bytes(q.format, q.numel()));
  ECO_ASSERT(q.scales.dtype == DType::F32 &&
                 q.scales.numel() == num_scales(q.granularity, q.rows, q.cols),
             "{} scales of a ({}, {}) QTensor: {} of {}, expected {} of f32",
             granularity_name(q.granularity), q.rows, q.cols, q.scales.numel(),
             dtype_name(q.scales.dtype), num_scales(q.granularity, q.rows, q.cols));
  ECO_ASSERT(q.numel() == 0 || (!q.codes.empty() && !q.scales.empty()), "null QTensor buffers");
}

}  // namespace

int64_t num_scales(Granularity g, int64_t rows, int64_t cols) {
  return scale_group_count(g, rows, cols);
}

int64_t scale_index(Granularity g, int64_t /*rows*/, int64_t cols, int64_t r, int64_t c) {
  return scale_group_index(g, cols, r, c);
}

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::PerRow: return "per_row";
    case Granularity::PerTensor: return "per_tensor";
    case Granularity::Block128: return "block128";
  }
  return "?";
}

QTensor qtensor_view(QFormat format, Granularity granularity, int64_t rows, int64_t cols,
                     uint8_t* codes, float* scales) {
  QTensor q;
  q.format = format;
  q.granularity = granularity;
  q.rows = rows;
  q.cols = cols;
  q.codes.data = codes;
  q.codes.shape = {code_bytes(format, rows * cols)};
  q.codes.dtype = DType::U8;
  q.scales.data = scales;
  q.scales.shape = {num_scales(granularity, rows, cols)};
  q.scales.dtype = DType::F32;
  return q;
}

void quantize(const float* x, QTensor& q, Rounding rounding, uint64_t seed, uint64_t step,
              uint32_t tensor_id) {
  check_layout(q);
  const int64_t rows = q.rows, cols = q.cols, n = q.numel();
  if (n == 0) {
    for (int64_t g = 0; g < q.scales.numel(); ++g) q.scales.as<float>()[g] = 0.0f;
    return;
  }
  const QFormat f = q.format;
  const Granularity gran = q.granularity;
  float* scales = q.scales.as<float>();
  uint8_t* codes = q.codes.as<uint8_t>();

  // 1. One scale per group. Per tensor: per-row maxima in parallel, then their max.
  if (gran == Granularity::PerTensor) {
    std::vector<float> row_max(size_t(rows), 0.0f);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      row_max[size_t(r)] = absmax_rect(x, cols, {r, r + 1, 0, cols});
    float m = 0.0f;
    for (float v : row_max) m = fmaxf(m, v);
    scales[0] = group_scale(f, m);
  } else {
    const int64_t groups = num_scales(gran, rows, cols);
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; ++g)
      scales[g] = group_scale(f, absmax_rect(x, cols, group_rect(gran, rows, cols, g)));
  }

  // 2. Every element. Parallel over code bytes, so the two INT4 elements of a byte (which may
  // sit in different rows) are written by one thread.
  const int64_t per_byte = f == QFormat::INT4 ? 2 : 1;
  const int64_t nbytes = code_bytes(f, n);
  const FormatQuantizer fq{f, rounding, seed, step, tensor_id};
#pragma omp parallel
  {
    GroupDrawCursor<FormatQuantizer> draw{fq};  // each thread's bytes in increasing order
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nbytes; ++b) {
      uint8_t byte = 0;
      for (int64_t k = 0; k < per_byte && b * per_byte + k < n; ++k) {
        const int64_t i = b * per_byte + k, r = i / cols, c = i % cols;
        const float scale = scales[scale_index(gran, rows, cols, r, c)];
        byte = uint8_t(byte | fq.encode(x[i], scale, draw(uint64_t(i))) << (4 * k));
      }
      codes[b] = byte;
    }
  }
}

void dequantize(const QTensor& q, float* out) {
  check_layout(q);
  const int64_t rows = q.rows, cols = q.cols, n = q.numel();
  const float* scales = q.scales.as<float>();
  const uint8_t* codes = q.codes.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = dequantize_value(q.format, load_code(q.format, codes, i),
                              scales[scale_index(q.granularity, rows, cols, r, c)]);
  }
}

}  // namespace eco
