// The treatment table: names -> storage, master copy, update rule, forward casts.
#include "base/treatment.h"

#include "base/error.h"

namespace eco {

const std::vector<std::string>& treatment_names() {
  static const std::vector<std::string> names = {
      "fp32",          "bf16-mw",      "fp8-mw-rtn",    "fp8-mw-sr",    "fp8-naive-rtn",
      "fp8-naive-sr",  "fp8-eco-rtn",  "fp8-eco-sr",    "int4-mw-rtn",  "int4-mw-sr",
      "int4-naive-rtn", "int4-naive-sr", "int4-eco-rtn", "int4-eco-sr"};
  return names;
}

Treatment treatment_from_name(const std::string& name) {
  Treatment t;
  t.name = name;
  if (name == "fp32") return t;
  if (name == "bf16-mw") {
    t.master = true;
    t.bf16_weights = true;
    t.act = ActCast::Bf16;
    return t;
  }
  // <format>-<policy>-<rounding>
  const auto a = name.find('-'), b = name.rfind('-');
  if (a != std::string::npos && b != a) {
    const std::string fmt_s = name.substr(0, a), pol = name.substr(a + 1, b - a - 1),
                      rnd = name.substr(b + 1);
    const bool fmt_ok = fmt_s == "fp8" || fmt_s == "int4";
    const bool pol_ok = pol == "mw" || pol == "naive" || pol == "eco";
    const bool rnd_ok = rnd == "rtn" || rnd == "sr";
    if (fmt_ok && pol_ok && rnd_ok) {
      t.quantized = true;
      t.master = pol == "mw";
      t.policy = pol == "mw" ? UpdatePolicy::Master
                 : pol == "naive" ? UpdatePolicy::Naive
                                  : UpdatePolicy::Eco;
      t.rounding = rnd == "sr" ? Rounding::SR : Rounding::RTN;
      if (fmt_s == "fp8") {  // the paper's pre-training recipe
        t.format = QFormat::E4M3;
        t.granularity = Granularity::PerRow;
        t.act = ActCast::E4M3Row;
      } else {  // the paper's fine-tuning recipe: weight-only INT4, one scale per tensor
        t.format = QFormat::INT4;
        t.granularity = Granularity::PerTensor;
        t.act = ActCast::None;
      }
      return t;
    }
  }
  std::string list;
  for (const auto& n : treatment_names()) list += (list.empty() ? "" : ", ") + n;
  usage_error("precision.treatment '{}' is unknown (expected one of: {})", name, list);
}

}  // namespace eco
