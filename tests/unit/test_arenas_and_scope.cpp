// Parameter and optimizer-state arenas (one buffer per storage kind, views inside, no overlap),
// QTensor row views, the Expert / Router roles, and the quantization scope (precision.quantize).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/config.h"
#include "base/error.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "quant/qtensor_rows.h"
#include "quant/storage_policy.h"

namespace eco {
namespace {

ModelConfig small_model(ModelFamily family) {
  ModelConfig m;
  m.set_family(family);
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 24;  // rows and biases of 24 / 72 floats: not multiples of the 64-byte alignment
  m.vocab_size = 40;
  m.seq_len = 8;
  m.mlp_hidden = 40;
  return m;
}

// Every view lies inside its arena's buffer, starts aligned, the views do not overlap, and the
// buffer holds exactly the tensors plus the stated padding.
void expect_sound_arena(const Arena& a) {
  if (a.slots.empty()) {
    EXPECT_TRUE(a.buffer.empty()) << a.name;
    return;
  }
  const int64_t esize = int64_t(dtype_size(a.buffer.dtype));
  int64_t sum = 0, prev_end = 0;
  for (size_t k = 0; k < a.slots.size(); ++k) {
    const ArenaSlot& s = a.slots[k];
    EXPECT_EQ((s.offset * esize) % kArenaAlignBytes, 0) << a.name << " " << s.name;
    EXPECT_GE(s.offset, prev_end) << a.name << " " << s.name << " overlaps the tensor before it";
    EXPECT_LE(s.offset + s.numel(), a.elements()) << a.name << " " << s.name;
    const Tensor v = a.view(k);
    EXPECT_EQ(v.as<char>(), a.buffer.as<char>() + s.offset * esize);
    EXPECT_EQ(v.shape, s.shape);
    prev_end = s.offset + s.numel();
    sum += s.numel();
  }
  EXPECT_EQ(sum + a.padding, a.elements()) << a.name;
  EXPECT_EQ(prev_end, a.elements()) << a.name << ": the buffer ends at its last tensor";
}

bool inside(const Tensor& t, const Arena& a) {
  const char* b = a.buffer.as<char>();
  return t.as<char>() >= b && t.as<char>() + t.bytes() <= b + a.buffer.bytes();
}

TEST(ParamArenas, EveryParameterIsAViewInsideItsArenaWithoutOverlap) {
  for (const char* treatment : {"fp32", "bf16-mw", "fp8-eco-sr", "fp8-mw-rtn", "int4-eco-rtn"}) {
    SCOPED_TRACE(treatment);
    auto be = make_cpu_backend();
    Transformer model(small_model(ModelFamily::Gpt2), *be, 2, treatment_from_name(treatment));
    OptimConfig o;
    o.state_dtype = StateDType::Bf16;
    Optimizer opt(o, model);
    ParamStore& store = model.store();
    const Arena& values = store.arena(ParamArena::Values);
    const Arena& codes = store.arena(ParamArena::Codes);
    const Arena& scales = store.arena(ParamArena::Scales);
    for (const Arena* a : {&values, &codes, &scales}) expect_sound_arena(*a);
    for (const Arena& a : opt.moment_arenas()) expect_sound_arena(a);
    size_t quantized = 0;
    for (size_t i = 0; i < store.size(); ++i) {
      if (!store.value(i).empty()) {
        EXPECT_TRUE(inside(store.value(i), values));
      }
      if (!store.quantized(i)) continue;
      ++quantized;
      EXPECT_TRUE(inside(store.qtensor(i).codes, codes));
      EXPECT_TRUE(inside(store.qtensor(i).scales, scales));
    }
    EXPECT_EQ(codes.slots.size(), quantized);
    EXPECT_EQ(scales.slots.size(), quantized);
    // Every checkpointed tensor lies in one of the arenas.
    for (const auto& [name, t] : opt.state()) {
      bool found = false;
      for (const Arena& a : opt.moment_arenas()) found |= inside(t, a);
      EXPECT_TRUE(found) << name;
    }
    // quantized moments in bf16, plain ones in fp32: "m f32", "v f32" (+ "m bf16", "v bf16").
    EXPECT_EQ(opt.moment_arenas().size(), quantized ? 4u : 2u);
  }
}

// The ledger has each tensor as its own entry (name, category, bytes) as separate allocations
// had, and the alignment gaps as one arena_padding line.
TEST(ParamArenas, LedgerKeepsPerTensorBytesAndShowsThePaddingOnItsOwnLine) {
  auto be = make_cpu_backend();
  Transformer model(small_model(ModelFamily::Gpt2), *be, 2, treatment_from_name("fp8-mw-rtn"));
  Optimizer opt(OptimConfig{}, model);
  const MemoryLedger& l = be->ledger();
  uint64_t weights = 0, master = 0, codes = 0, scales = 0, state = 0;
  for (const auto& s : model.table().specs) {
    const uint64_t n = uint64_t(s.numel());
    if (s.quantizable) {
      master += 4 * n;
      codes += n;  // E4M3: a byte per element
      scales += 4 * uint64_t(s.shape[0]);
    } else {
      weights += 4 * n;
    }
    state += 2 * 4 * n;  // fp32 m and v
  }
  EXPECT_EQ(l.total(MemCategory::Weights), weights);
  EXPECT_EQ(l.total(MemCategory::Master), master);
  EXPECT_EQ(l.total(MemCategory::QuantCodes), codes);
  EXPECT_EQ(l.total(MemCategory::Scales), scales);
  EXPECT_EQ(l.total(MemCategory::OptState), state);
  uint64_t padding = 0;
  for (const Arena* a : {&model.store().arena(ParamArena::Values),
                         &model.store().arena(ParamArena::Codes),
                         &model.store().arena(ParamArena::Scales)})
    padding += uint64_t(a->padding) * dtype_size(a->buffer.dtype);
  for (const Arena& a : opt.moment_arenas())
    padding += uint64_t(a.padding) * dtype_size(a.buffer.dtype);
  EXPECT_GT(padding, 0u);  // d_model 24: 96-byte rows leave gaps at 64-byte alignment
  EXPECT_EQ(l.total(MemCategory::Padding), padding);
  EXPECT_NE(l.table().find("arena_padding"), std::string::npos);
  bool named = false;
  for (const auto& e : l.entries()) named |= e.name == "h.0.attn.qkv.weight.codes";
  EXPECT_TRUE(named);
}

// A hand-made (rows, cols) QTensor over host buffers, element codes set to their index.
struct HostQ {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  QTensor q;
  HostQ(QFormat f, Granularity g, int64_t rows, int64_t cols)
      : codes(size_t(code_bytes(f, rows * cols))), scales(size_t(num_scales(g, rows, cols))) {
    for (size_t k = 0; k < codes.size(); ++k) codes[k] = uint8_t(k);
    for (size_t k = 0; k < scales.size(); ++k) scales[k] = float(k);
    q = qtensor_view(f, g, rows, cols, codes.data(), scales.data());
  }
};

TEST(QTensorRows, ViewsOffsetCodesAndScalesByGranularity) {
  {
    HostQ h(QFormat::E4M3, Granularity::PerRow, 10, 6);
    const QTensor v = qtensor_rows(h.q, 3, 7);
    check_qtensor_layout(v);
    EXPECT_EQ(v.rows, 4);
    EXPECT_EQ(v.cols, 6);
    EXPECT_EQ(v.codes.as<uint8_t>(), h.codes.data() + 18);
    EXPECT_EQ(v.scales.as<float>(), h.scales.data() + 3);
    EXPECT_EQ(v.scales.numel(), 4);
    // Element (r, c) of the view is element (r + 3, c) of the tensor, scale included.
    for (int64_t r = 0; r < v.rows; ++r)
      for (int64_t c = 0; c < v.cols; ++c) {
        EXPECT_EQ(load_code(v.format, v.codes.as<uint8_t>(), r * 6 + c),
                  load_code(h.q.format, h.codes.data(), (r + 3) * 6 + c));
        EXPECT_EQ(v.scales.as<float>()[scale_index(v.granularity, v.rows, 6, r, c)],
                  h.scales[size_t(scale_index(h.q.granularity, 10, 6, r + 3, c))]);
      }
  }
  {
    HostQ h(QFormat::INT4, Granularity::PerTensor, 9, 5);  // odd columns: rows share bytes
    const QTensor v = qtensor_rows(h.q, 2, 4);             // elements [10, 20): bytes [5, 10)
    check_qtensor_layout(v);
    EXPECT_EQ(v.codes.as<uint8_t>(), h.codes.data() + 5);
    EXPECT_EQ(v.codes.numel(), 5);
    EXPECT_EQ(v.scales.as<float>(), h.scales.data());  // the one scale, shared
    for (int64_t e = 0; e < v.numel(); ++e)
      EXPECT_EQ(load_code(QFormat::INT4, v.codes.as<uint8_t>(), e),
                load_code(QFormat::INT4, h.codes.data(), 10 + e));
    EXPECT_NO_THROW(qtensor_rows(h.q, 8, 9));  // the last row may end mid-byte
    EXPECT_THROW(qtensor_rows(h.q, 1, 4), Error);  // starts at element 5: mid-byte
    EXPECT_THROW(qtensor_rows(h.q, 2, 3), Error);  // ends at element 15: mid-byte
  }
  {
    HostQ h(QFormat::E4M3, Granularity::Block128, 300, 200);  // 3 x 2 tiles
    const QTensor v = qtensor_rows(h.q, 128, 300);
    check_qtensor_layout(v);
    EXPECT_EQ(v.codes.as<uint8_t>(), h.codes.data() + 128 * 200);
    EXPECT_EQ(v.scales.as<float>(), h.scales.data() + 2);  // tile row 1 of 2 tiles per row
    EXPECT_EQ(v.scales.numel(), 4);
    EXPECT_NO_THROW(qtensor_rows(h.q, 0, 256));
    EXPECT_THROW(qtensor_rows(h.q, 64, 128), Error);
    EXPECT_THROW(qtensor_rows(h.q, 0, 200), Error);
  }
  HostQ h(QFormat::E4M3, Granularity::PerRow, 4, 4);
  EXPECT_THROW(qtensor_rows(h.q, 2, 2), Error);
  EXPECT_THROW(qtensor_rows(h.q, 0, 5), Error);
}

// A hand-built table with the MoE roles: what the storage policy does with each.
TEST(ParamRoles, ExpertAndRouterThroughTheStoragePolicyAndTheTable) {
  EXPECT_STREQ(param_role_name(ParamRole::Expert), "expert");
  EXPECT_STREQ(param_role_name(ParamRole::Router), "router");
  EXPECT_TRUE(role_quantizable(ParamRole::Expert));
  EXPECT_TRUE(role_quantizable(ParamRole::Linear));
  EXPECT_FALSE(role_quantizable(ParamRole::Router));
  EXPECT_FALSE(role_quantizable(ParamRole::Norm));
  struct Case {
    ParamRole role;
    bool blocks_quantized, experts_quantized;
  };
  const Case cases[] = {{ParamRole::Linear, true, false},  {ParamRole::Expert, true, true},
                        {ParamRole::Router, false, false}, {ParamRole::Norm, false, false},
                        {ParamRole::Embedding, false, false}, {ParamRole::Head, false, false}};
  const Treatment eco = treatment_from_name("fp8-eco-sr");
  for (const Case& c : cases) {
    SCOPED_TRACE(param_role_name(c.role));
    const ParamKind kind{role_quantizable(c.role), c.role == ParamRole::Expert};
    const ParamStorage blocks = storage_policy(eco, QuantizeScope::Blocks, kind);
    const ParamStorage experts = storage_policy(eco, QuantizeScope::Experts, kind);
    EXPECT_EQ(blocks.quantized, c.blocks_quantized);
    EXPECT_EQ(experts.quantized, c.experts_quantized);
    EXPECT_EQ(blocks.act, c.blocks_quantized ? ActCast::E4M3Row : ActCast::None);
    EXPECT_EQ(experts.act, c.experts_quantized ? ActCast::E4M3Row : ActCast::None);
    EXPECT_EQ(experts.value, !c.experts_quantized);  // fp8-eco-sr keeps no master
  }
  // A ParamStore over a hand-built table: experts quantized, router and the rest plain, and
  // the router's weight decays (a matrix) while the table prints the roles.
  ParamTable t;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamRole role) {
    ParamSpec s{std::move(name), std::move(shape), role, role_quantizable(role),
                false, 0.02f, 0.0f, t.total};
    s.weight_decay = s.shape.size() == 2;
    t.total += s.numel();
    t.specs.push_back(std::move(s));
  };
  add("h.0.moe.router.weight", {4, 16}, ParamRole::Router);
  add("h.0.moe.experts.0.fc.weight", {32, 16}, ParamRole::Expert);
  add("h.0.moe.experts.1.fc.weight", {32, 16}, ParamRole::Expert);
  add("h.0.attn.qkv.weight", {48, 16}, ParamRole::Linear);
  add("h.0.norm1.weight", {16}, ParamRole::Norm);
  EXPECT_TRUE(t.specs[0].weight_decay);
  EXPECT_NE(t.describe().find("router"), std::string::npos);
  EXPECT_NE(t.describe().find("expert"), std::string::npos);
  for (QuantizeScope scope : {QuantizeScope::Blocks, QuantizeScope::Experts}) {
    auto be = make_cpu_backend();
    ParamStore store(t, eco, *be, scope);
    store.init(3);
    EXPECT_FALSE(store.quantized(0));
    EXPECT_TRUE(store.quantized(1));
    EXPECT_TRUE(store.quantized(2));
    EXPECT_EQ(store.quantized(3), scope == QuantizeScope::Blocks);
    EXPECT_FALSE(store.quantized(4));
    EXPECT_EQ(store.arena(ParamArena::Codes).slots.size(), scope == QuantizeScope::Blocks ? 3u : 2u);
  }
}

TEST(QuantizeScope, ConfigKeyParsesValidatesAndStaysOutOfDefaultFingerprints) {
  const std::string yaml =
      "model: {n_layer: 1}\ntrain: {max_steps: 1}\ndata: {source: synthetic}\n";
  const Config def = parse_config(yaml, "t.yaml");
  EXPECT_EQ(def.precision.quantize, QuantizeScope::Blocks);
  const Config ex = parse_config(yaml, "t.yaml", {"precision.quantize=experts"});
  EXPECT_EQ(ex.precision.quantize, QuantizeScope::Experts);
  EXPECT_EQ(model_fingerprint(def).find("quantize"), std::string::npos);
  EXPECT_NE(model_fingerprint(ex).find("quantize=experts"), std::string::npos);
  EXPECT_NE(to_yaml(ex).find("quantize: experts"), std::string::npos);
  EXPECT_EQ(to_yaml(def).find("quantize"), std::string::npos);
  EXPECT_EQ(parse_config(to_yaml(ex), "resolved").precision.quantize, QuantizeScope::Experts);
  try {
    parse_config(yaml, "t.yaml", {"precision.quantize=layers"});
    FAIL() << "no usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    const std::string what = e.what();
    EXPECT_NE(what.find("precision.quantize"), std::string::npos) << what;
    EXPECT_NE(what.find("'blocks' or 'experts'"), std::string::npos) << what;
  }
}

// A dense model has no expert: under `quantize: experts` no parameter is quantized and nothing
// is cast, so a quantized treatment trains bit for bit as fp32 storage does.
TEST(QuantizeScope, DenseModelUnderExpertsScopeTrainsExactlyAsFp32) {
  const ModelConfig m = small_model(ModelFamily::Llama);
  auto run = [&](const char* treatment, QuantizeScope scope) {
    auto be = make_cpu_backend();
    Transformer model(m, *be, 4, treatment_from_name(treatment), scope);
    OptimConfig o;
    o.lr = 1e-3;
    Optimizer opt(o, model, 7);
    model.init_weights(7);
    for (size_t i = 0; i < model.store().size(); ++i) EXPECT_FALSE(model.store().quantized(i));
    const LoaderOptions lo{4, 8, 40, 1, false};
    const DataLoader data = DataLoader::synthetic(0, lo);
    std::vector<int32_t> in(4 * 8), tgt(4 * 8);
    for (int s = 0; s < 5; ++s) {
      model.zero_grad();
      data.batch(s, in.data(), tgt.data());
      model.forward_backward(in.data(), tgt.data(), 4, 8, 1.0f);
      opt.step(o.lr, opt.grad_norm());
    }
    const Arena& values = model.store().arena(ParamArena::Values);
    std::vector<float> out(size_t(values.elements()));
    be->copy_to_host(out.data(), values.buffer);
    return out;
  };
  const std::vector<float> fp32 = run("fp32", QuantizeScope::Blocks);
  const std::vector<float> eco = run("fp8-eco-sr", QuantizeScope::Experts);
  ASSERT_EQ(fp32.size(), eco.size());
  EXPECT_EQ(std::memcmp(fp32.data(), eco.data(), fp32.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace eco
