// CPU reference quantization: per-group absmax -> scale, then every element through the shared
// codec (src/base/math/qformat.h) with Philox bits keyed by its row-major index (one Philox call
// per 4 consecutive elements: src/base/math/philox.h). Scale groups are scale_groups.h's.
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/math/format_quantizer.h"
#include "kernels/cpu/quantized_update_simd.h"

namespace eco {
namespace {

// fmaxf ignores NaN operands, so the result does not depend on the order of the reduction.
float absmax_span(const float* x, const GroupSpan& g) {
  float m = 0.0f;
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) m = fmaxf(m, fabsf(x[g.index(r, c)]));
  return m;
}

}  // namespace

void quantize(const float* x, QTensor& q, Rounding rounding, uint64_t seed, uint64_t step,
              uint32_t tensor_id) {
  check_qtensor_layout(q);
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
      row_max[size_t(r)] = absmax_span(x, scale_group_span(Granularity::PerRow, rows, cols, r));
    float m = 0.0f;
    for (float v : row_max) m = fmaxf(m, v);
    scales[0] = group_scale(f, m);
  } else {
    const int64_t groups = num_scales(gran, rows, cols);
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; ++g)
      scales[g] = group_scale(f, absmax_span(x, scale_group_span(gran, rows, cols, g)));
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

// E4M3 and INT4 on the vector lanes (cpu_simd::active_isa()), one row at a time, each run of
// columns that shares a scale (the whole row, or a 128-column tile) split as the lanes take it:
// an INT4 run's odd first element and the tail through the scalar codec. Other formats, and the
// scalar path (the reference), element by element.
void dequantize(const QTensor& q, float* out) {
  check_qtensor_layout(q);
  const int64_t rows = q.rows, cols = q.cols, n = q.numel();
  const float* scales = q.scales.as<float>();
  const uint8_t* codes = q.codes.as<uint8_t>();
  const cpu_simd::Isa isa = cpu_simd::active_isa();
  if (isa != cpu_simd::Isa::Scalar && (q.format == QFormat::E4M3 || q.format == QFormat::INT4)) {
    const int64_t width = cpu_simd::isa_lanes(isa);
    const int64_t run = q.granularity == Granularity::Block128 ? kScaleBlock : cols;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < cols; c0 += run) {
        const float scale = scales[scale_index(q.granularity, rows, cols, r, c0)];
        const int64_t i0 = r * cols + c0, i1 = r * cols + std::min(c0 + run, cols);
        const int64_t a = q.format == QFormat::INT4 && (i0 & 1) ? i0 + 1 : i0;
        const int64_t body = a < i1 ? (i1 - a) / width * width : 0;
        for (int64_t i = i0; i < a && i < i1; ++i)
          out[i] = dequantize_value(q.format, load_code(q.format, codes, i), scale);
        if (body > 0) cpu_simd::dequantize(isa, q.format, codes, a, body, scale, out);
        for (int64_t i = a + body; i < i1; ++i)
          out[i] = dequantize_value(q.format, load_code(q.format, codes, i), scale);
      }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = dequantize_value(q.format, load_code(q.format, codes, i),
                              scales[scale_index(q.granularity, rows, cols, r, c)]);
  }
}

namespace cpu {

// E4M3, one scale per token row, round to nearest (the paper's activation recipe).
void cast_rows_e4m3(float* out, const float* x, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; ++r) {
    const float* row = x + int64_t(r) * C;
    float* orow = out + int64_t(r) * C;
    float absmax = 0.0f;
    for (int c = 0; c < C; ++c) absmax = std::max(absmax, std::fabs(row[c]));
    const float scale = group_scale(QFormat::E4M3, absmax);
    for (int c = 0; c < C; ++c)
      orow[c] = dequantize_value(QFormat::E4M3,
                                 quantize_value(QFormat::E4M3, Rounding::RTN, row[c], scale, 0),
                                 scale);
  }
}

}  // namespace cpu
}  // namespace eco
