// The planning backend (--plan): records allocations without making them. For device: cuda it
// lays the model out as the CUDA backend does, asking kernels/cuda/workspace_plan.h (the CUDA
// backend's own source of those decisions), so it runs in builds without CUDA.
#include <cstdlib>
#include <memory>

#include "base/math/attention_mma_shapes.h"
#include "kernels/cuda/cuda_attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/workspace_plan.h"

namespace eco {
namespace {

// Every tensor points at one dummy byte that no operation may touch (plan_report never runs an
// op); the operations are the CPU reference's only so that the class is complete. With
// cuda_layout it reports the CUDA backend's dtypes, shapes and workspaces (the same names and
// bytes CudaBackend records), except its small scratches (the fp32 scratch of some kernels,
// which grows on first use, and sum_squares_segments' table and partials, 16 and 8 bytes a
// segment, grown on first use) and what depends on the GPU found at run time
// (sm_89's fp32 accumulator for the FP8 GEMMs: the plan is an sm_90 plan; plan_notes() says
// it).
class PlanningBackend final : public CpuBackend<float> {
 public:
  explicit PlanningBackend(bool cuda_layout) : cuda_layout_(cuda_layout) {}
  std::string name() const override { return cuda_layout_ ? "plan-cuda" : "plan"; }
  DType act_dtype() const override {
    return cuda_layout_ ? cuda_ws::kActivationDType : CpuBackend<float>::act_dtype();
  }
  int logits_stride(int V, int C) const override {
    return cuda_layout_ ? cuda_ws::logits_stride(V, C) : CpuBackend<float>::logits_stride(V, C);
  }
  int moe_row_align() const override {
    return cuda_layout_ ? cuda_ws::kMoeRowAlign : CpuBackend<float>::moe_row_align();
  }
  std::vector<int64_t> attention_state_shape(int B, int NH, int Tn) const override {
    if (cuda_layout_) return cuda_ws::attention_state_shape(B, NH, Tn);
    return CpuBackend<float>::attention_state_shape(B, NH, Tn);
  }
  void reserve_workspaces(const WorkspaceShapes& shapes) override {
    if (!cuda_layout_) return;
    const cuda_ws::Reservation r = cuda_ws::reservation(shapes);
    ledger_.record(cuda_ws::kCublasLtWorkspaceName, MemCategory::Workspace,
                   cuda_ws::kCublasLtWorkspaceBytes);
    auto rec = [&](const char* name, size_t bytes) {
      if (bytes) ledger_.record(name, MemCategory::Workspace, bytes);
    };
    // As CudaBackend: the GEMM path's score scratch unless ECO_CUDA_ATTENTION picks the mma path
    // and it takes the model's shapes.
    if (cuda_ws::reserves_attention_scores(
            parse_cuda_attention(std::getenv("ECO_CUDA_ATTENTION")),
            attention_mma_shape_ok(1, shapes.seq_len, shapes.attention_width(), shapes.n_head)))
      rec(cuda_ws::kAttentionScoresName, r.attention_scores);
    rec(cuda_ws::kWeightBf16Name, r.weight_bf16);
    rec(cuda_ws::kFp8ActivationsName, r.fp8_activations);
    fp8_accumulator_sm89_ = r.fp8_accumulator_sm89;
  }
  // What this sm_90 plan cannot know: the GPU found at run time.
  std::vector<std::string> plan_notes() const override {
    if (!cuda_layout_ || !fp8_accumulator_sm89_) return {};
    return {fmt::format("on sm_89 GPUs the FP8 forward also reserves an fp32 accumulator of "
                        "{:.1f} MiB (workspace, not in the table above)",
                        double(fp8_accumulator_sm89_) / double(1 << 20))};
  }
  Tensor alloc(const std::string& name, std::vector<int64_t> shape, DType dtype,
               MemCategory category, bool quantizable_param) override {
    static char dummy;
    Tensor t;
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.data = &dummy;
    ledger_.record(name, category, t.bytes(), quantizable_param);
    return t;
  }

 private:
  bool cuda_layout_;
  size_t fp8_accumulator_sm89_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_planning_backend(Device device) {
  return std::make_unique<PlanningBackend>(device == Device::Cuda);
}

}  // namespace eco
