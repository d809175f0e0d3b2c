// The --plan report: a planning backend records every allocation the run would make.
#include "train/plan_report.h"

#include <fmt/format.h>

#include "model/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"

namespace eco {

std::string plan_report(const Config& cfg) {
  auto be = make_planning_backend(cfg.device);
  Transformer model(cfg.model, *be, cfg.train.batch_size, cfg.precision.treatment,
                    cfg.precision.quantize);
  Optimizer opt(cfg.optim, model);
  const auto& ledger = be->ledger();
  const int64_t q = model.store().count_in_scope();
  std::string s = model.table().describe() + "\n" + ledger.table();
  s += fmt::format("treatment {}, optimizer {} with {} state\n", cfg.precision.treatment.name,
                   cfg.optim.name, cfg.optim.state_dtype);
  s += fmt::format("quantize {} ({})\n", cfg.precision.quantize,
                   cfg.precision.quantize == QuantizeScope::Blocks
                       ? "the treatment applies to every block linear"
                       : "the treatment applies to the experts' weights only");
  s += fmt::format("static bytes per parameter: {:.2f}\n",
                   double(ledger.static_bytes()) / double(model.table().total));
  if (q > 0)
    s += fmt::format("static bytes per quantized parameter: {:.3f}  ({} quantized parameters)\n",
                     double(ledger.static_bytes_quantizable()) / double(q), q);
  for (const std::string& note : be->plan_notes()) s += note + "\n";
  return s;
}

}  // namespace eco
