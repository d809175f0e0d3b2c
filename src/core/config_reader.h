// The config loader's reading tools, shared by the sections' parsers (config.cpp, moe_config.cpp):
// the config names of every enum, a section reader that remembers which keys it consumed (so
// unknown keys can be named), and the one-line usage errors they raise.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>

#include "core/config.h"
#include "base/error.h"

namespace eco::config_reader {


inline const char* kind_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "null";
    default: return "a scalar";
  }
}

// The config names of an enum's values, in declaration order.
template <class E, size_t N>
struct EnumNames {
  const char* names[N];
  const char* operator()(E v) const { return size_t(v) < N ? names[size_t(v)] : "?"; }
};
inline constexpr EnumNames<ModelFamily, 3> kFamilyNames{{"gpt2", "llama", "gemma3"}};
inline constexpr EnumNames<NormKind, 2> kNormNames{{"layernorm", "rmsnorm"}};
inline constexpr EnumNames<MlpKind, 3> kMlpNames{{"gelu", "swiglu", "geglu"}};
inline constexpr EnumNames<PositionKind, 2> kPositionNames{{"learned", "rope"}};
inline constexpr EnumNames<OptimizerKind, 2> kOptimizerNames{{"adamw", "sgdm"}};
inline constexpr EnumNames<LrSchedule, 3> kScheduleNames{{"cosine", "linear", "constant"}};
inline constexpr EnumNames<StateDType, 2> kStateDTypeNames{{"fp32", "bf16"}};
inline constexpr EnumNames<DataSource, 2> kDataSourceNames{{"shards", "synthetic"}};
inline constexpr EnumNames<Device, 2> kDeviceNames{{"cpu", "cuda"}};
inline constexpr EnumNames<QuantizeScope, 2> kQuantizeScopeNames{{"blocks", "experts"}};

// "'a' or 'b'", "'a', 'b' or 'c'": the valid values in a message.
template <class E, size_t N>
std::string quoted_choices(const EnumNames<E, N>& t) {
  std::string out;
  for (size_t i = 0; i < N; ++i)
    out += fmt::format("{}'{}'", i == 0 ? "" : i + 1 == N ? " or " : ", ", t.names[i]);
  return out;
}

// The value named `text`; an unknown name is a usage error naming the file, the key and the
// valid values.
template <class E, size_t N>
E parse_enum(const EnumNames<E, N>& t, const std::string& text, const std::string& origin,
             const char* key) {
  for (size_t i = 0; i < N; ++i)
    if (text == t.names[i]) return E(i);
  usage_error("{}: key '{}': expected {}, got '{}'", origin, key, quoted_choices(t),
              clip_for_message(text));
}

// Reads the keys of one section, remembering which were consumed so leftovers can be reported.
class SectionReader {
 public:
  SectionReader(const YAML::Node& node, std::string section, const std::string& origin)
      : node_(node), section_(std::move(section)), origin_(origin) {
    if (node_ && !node_.IsNull() && !node_.IsMap())
      usage_error("{}: '{}' must be a mapping of keys, got {}", origin_, section_,
                  kind_name(node_));
  }

  template <class T>
  void get(const char* key, T& out) {
    known_.insert(key);
    if (!node_ || !node_.IsMap()) return;
    YAML::Node v = node_[key];
    if (!v || v.IsNull()) return;
    if (!v.IsScalar())
      usage_error("{}: key '{}.{}' must be {}, got {}", origin_, section_, key, type_name<T>(),
                  kind_name(v));
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // Read wide, then range-check: 3000000000 for an int key is out of range, not "not an
        // integer".
        using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
        const Wide w = v.as<Wide>();
        if (w < Wide(std::numeric_limits<T>::min()) || w > Wide(std::numeric_limits<T>::max()))
          usage_error("{}: key '{}.{}' must be an integer in [{}, {}], got {}", origin_, section_,
                      key, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), w);
        out = T(w);
      } else {
        out = v.as<T>();
      }
    } catch (const YAML::BadConversion&) {
      usage_error("{}: key '{}.{}' must be {}, got '{}'", origin_, section_, key, type_name<T>(),
                  clip_for_message(v.Scalar()));
    }
  }

  // A string key whose value is one of an enum's names.
  template <class E, size_t N>
  void get_enum(const char* key, E& out, const EnumNames<E, N>& names) {
    std::string text = names(out);
    get(key, text);
    out = parse_enum(names, text, origin_, (section_ + "." + key).c_str());
  }

  // A nested section (e.g. model.moe): consumed like a key; its own SectionReader reads it.
  YAML::Node child(const char* key) {
    known_.insert(key);
    return node_ && node_.IsMap() ? node_[key] : YAML::Node();
  }

  bool has(const char* key) const {
    return node_ && node_.IsMap() && node_[key] && !node_[key].IsNull();
  }

  void finish() const {
    if (!node_ || !node_.IsMap()) return;
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar())
        usage_error("{}: a key of '{}' is {}, expected a name", origin_, section_,
                    kind_name(kv.first));
      const std::string k = kv.first.Scalar();
      if (!seen.insert(k).second)
        usage_error("{}: key '{}.{}' appears more than once", origin_, section_,
                    clip_for_message(k));
      if (!known_.count(k)) {
        std::string list;
        for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
        usage_error("{}: unknown key '{}.{}' (known keys in '{}': {})", origin_, section_,
                    clip_for_message(k), section_, list);
      }
    }
  }

 private:
  template <class T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    else if constexpr (std::is_integral_v<T>) return "an integer";
    else if constexpr (std::is_floating_point_v<T>) return "a number";
    else return "a string";
  }

  YAML::Node node_;
  std::string section_;
  const std::string& origin_;
  std::set<std::string> known_;
};

inline void require(bool ok, const std::string& origin, const char* key, const std::string& why) {
  if (!ok) usage_error("{}: key '{}': {}", origin, key, why);
}

// An integer key within [lo, hi]; the message names both bounds ("must be in [1, 16384], got
// 1000000000").
inline void require_range(int64_t v, int64_t lo, int64_t hi, const std::string& origin, const char* key,
                   const char* note = "") {
  require(v >= lo && v <= hi, origin, key,
          fmt::format("must be in [{}, {}]{}, got {}", lo, hi, note, v));
}

// A number key, finite and within [lo, hi] (NaN and the infinities fail).
inline void require_finite(double v, double lo, double hi, const std::string& origin, const char* key,
                    const char* note = "") {
  require(std::isfinite(v) && v >= lo && v <= hi, origin, key,
          fmt::format("must be a finite number in [{:g}, {:g}]{}, got {}", lo, hi, note, v));
}


}  // namespace eco::config_reader

namespace eco {

// model.moe (moe_config.cpp): read from the model section's reader and validated against the
// rest of the model config m (already read: family, n_layer, ...), each bad value or
// combination one usage error naming the key.
void read_moe_config(config_reader::SectionReader& model_section, ModelConfig& m,
                     const std::string& origin);

}  // namespace eco
