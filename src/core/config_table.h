// The config keys as a table: one row per key says its YAML name, the struct member it binds, how
// it is read and bounded, its default, how to_yaml writes it and what a resume compares.
// load_config, to_yaml, model_fingerprint and trajectory_keys are loops over these rows. A new key
// is a member with its default initializer (config.h) and one row (config_table.cpp).
#pragma once
#include <yaml-cpp/yaml.h>

#include <array>
#include <concepts>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/config.h"
#include "core/config_reader.h"

namespace eco::config_table {

using config_reader::EnumNames;
using config_reader::SectionReader;

// What a resume compares a key's value against the checkpoint's (train/training_state.cpp).
enum class Resume : uint8_t {
  Free,        // may change between a checkpoint and its resume (paths, logging, threads)
  Shape,       // part of model_fingerprint: another value is another model
  Trajectory,  // named by trajectory_differences: another value is another run
  RunLength,   // a trajectory key where the lr schedule depends on the run's length
};

// One key of a section struct S. An optional key (written_when set) is written only while its
// value is away from its default, so the resolved config and the fingerprint of a run that leaves
// it alone are those of a config without the key; the fingerprint and the trajectory keys list
// optional keys after the others.
template <class S>
struct Key {
  std::string name;  // within its section: "n_layer"
  // Reads the value into S when the key is present (a wrong type is a usage error naming the
  // key); an absent key leaves the default: the member's initializer, or the row's by_family.
  std::function<void(SectionReader&, S&, const std::string& origin)> read;
  // What the value must be (must, check), then its limits (range); `key` is "section.name". A
  // section runs every row's checks before any row's limits, so that a value that means nothing
  // (a required key left out, a key its neighbours rule out) is named before a size out of range.
  using Check = std::function<void(const S&, const std::string& origin, const char* key)>;
  std::vector<Check> checks;
  std::vector<Check> limits;
  std::function<bool(const S&)> written_when;  // empty: always written
  std::function<void(YAML::Emitter&, const S&)> write;  // the value, after its YAML key
  std::function<std::string(const S&)> text;  // the value as the fingerprint shows it
  Resume resume = Resume::Free;
  std::string fingerprint_name;  // the fingerprint's name for it; "": name

  bool optional() const { return bool(written_when); }
  bool written(const S& s) const { return !written_when || written_when(s); }
};

template <class S>
struct Section {
  std::string name;  // "model", "model.moe"
  std::vector<Key<S>> keys;  // in the order from_node reads and to_yaml writes them
};

// Builds the row of member `member` (type T) of S; converts to the Key when done.
template <class S, class T>
class KeyBuilder {
 public:
  // Integers are bounded in 64 bits, numbers in double (config_reader's require_range and
  // require_finite).
  using Bound = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

  KeyBuilder(const char* name, T S::*member) : member_(member) {
    row_.name = name;
    row_.read = [name, member](SectionReader& r, S& s, const std::string&) {
      r.get(name, s.*member);
    };
    row_.write = [member](YAML::Emitter& e, const S& s) { e << s.*member; };
    row_.text = [member](const S& s) { return fmt::format("{}", s.*member); };
  }
  // A string key naming one of an enum's values.
  template <size_t N>
  KeyBuilder(const char* name, T S::*member, const EnumNames<T, N>& names) : member_(member) {
    row_.name = name;
    row_.read = [name, member, &names](SectionReader& r, S& s, const std::string&) {
      r.get_enum(name, s.*member, names);
    };
    row_.write = [member](YAML::Emitter& e, const S& s) { e << enum_name(s.*member); };
    row_.text = [member](const S& s) { return fmt::format("{}", s.*member); };
  }

  // Within [lo, hi] (numbers: and finite); `note` says what a special value means.
  KeyBuilder range(Bound lo, Bound hi, const char* note = "") && {
    const auto m = member_;
    row_.limits.push_back([m, lo, hi, note](const S& s, const std::string& origin,
                                            const char* key) {
      if constexpr (std::is_integral_v<T>)
        config_reader::require_range(s.*m, lo, hi, origin, key, note);
      else
        config_reader::require_finite(s.*m, lo, hi, origin, key, note);
    });
    return std::move(*this);
  }
  // ok(value), else the usage error "key 'K': <what>, got <value><after>".
  KeyBuilder must(std::function<bool(const T&)> ok, const char* what, const char* after = "") && {
    const auto m = member_;
    row_.checks.push_back([m, ok = std::move(ok), what, after](const S& s,
                                                               const std::string& origin,
                                                               const char* key) {
      config_reader::require(ok(s.*m), origin, key,
                             fmt::format("{}, got {}{}", what, s.*m, after));
    });
    return std::move(*this);
  }
  // why(section) is "" when the key's value is fine, else the reason the usage error gives; it
  // may read the section's other keys (each read, none yet checked).
  KeyBuilder check(std::function<std::string(const S&)> why) && {
    row_.checks.push_back([why = std::move(why)](const S& s, const std::string& origin,
                                                 const char* key) {
      const std::string reason = why(s);
      config_reader::require(reason.empty(), origin, key, reason);
    });
    return std::move(*this);
  }
  // The default of each family, set once the family (read before this key) is known.
  KeyBuilder by_family(T gpt2, T llama, T gemma3) &&
    requires std::same_as<S, ModelConfig>
  {
    const std::array<T, 3> defaults{gpt2, llama, gemma3};
    const auto m = member_;
    row_.read = [read = std::move(row_.read), m, defaults](SectionReader& r, S& s,
                                                           const std::string& origin) {
      s.*m = defaults[size_t(s.family)];
      read(r, s, origin);
    };
    return std::move(*this);
  }
  // What the value implies for the keys read after it (the family: the block structure).
  KeyBuilder then(std::function<void(S&)> apply) && {
    row_.read = [read = std::move(row_.read), apply = std::move(apply)](
                    SectionReader& r, S& s, const std::string& origin) {
      read(r, s, origin);
      apply(s);
    };
    return std::move(*this);
  }
  // Written (and fingerprinted) as this text instead of the member: a resolved value.
  KeyBuilder shown_as(std::function<std::string(const S&)> text) && {
    row_.write = [text](YAML::Emitter& e, const S& s) { e << text(s); };
    row_.text = std::move(text);
    return std::move(*this);
  }
  KeyBuilder when(std::function<bool(const S&)> written) && {
    row_.written_when = std::move(written);
    return std::move(*this);
  }
  KeyBuilder shape(const char* fingerprint_name = "") && {
    row_.resume = Resume::Shape;
    row_.fingerprint_name = fingerprint_name;
    return std::move(*this);
  }
  KeyBuilder trajectory() && {
    row_.resume = Resume::Trajectory;
    return std::move(*this);
  }
  KeyBuilder run_length() && {
    row_.resume = Resume::RunLength;
    return std::move(*this);
  }

  operator Key<S>() && { return std::move(row_); }

 private:
  Key<S> row_;
  T S::*member_;
};

template <class S, class T>
KeyBuilder<S, T> key(const char* name, T S::*member) {
  return {name, member};
}
template <class S, class T, size_t N>
KeyBuilder<S, T> key(const char* name, T S::*member, const EnumNames<T, N>& names) {
  return {name, member, names};
}

// Reads the section's keys in table order, refuses a key the table lacks, runs every row's
// checks, then `before_limits` (cross-key checks that come first; has() tells which keys were
// given), then every row's limits. The reader comes back for the cross-key checks after them.
template <class S>
SectionReader read_section(const YAML::Node& node, const Section<S>& section, S& s,
                           const std::string& origin,
                           const std::function<void(const SectionReader&)>& before_limits = {}) {
  SectionReader r(node, section.name, origin);
  for (const Key<S>& k : section.keys) k.read(r, s, origin);
  r.finish();
  const auto run = [&](std::vector<typename Key<S>::Check> Key<S>::*which) {
    for (const Key<S>& k : section.keys) {
      const std::string path = section.name + "." + k.name;
      for (const auto& check : k.*which) check(s, origin, path.c_str());
    }
  };
  run(&Key<S>::checks);
  if (before_limits) before_limits(r);
  run(&Key<S>::limits);
  return r;
}

// The section's written keys as a YAML map, in table order.
template <class S>
void write_section(YAML::Emitter& e, const Section<S>& section, const S& s) {
  e << YAML::BeginMap;
  for (const Key<S>& k : section.keys) {
    if (!k.written(s)) continue;
    e << YAML::Key << k.name << YAML::Value;
    k.write(e, s);
  }
  e << YAML::EndMap;
}

// "name=value" of each Shape key of the section that every resolved config has (optional false),
// or of each written optional one (optional true).
template <class S>
void append_shape(std::vector<std::string>& out, const Section<S>& section, const S& s,
                  bool optional) {
  for (const Key<S>& k : section.keys)
    if (k.resume == Resume::Shape && k.optional() == optional && k.written(s))
      out.push_back(fmt::format("{}={}", k.fingerprint_name.empty() ? k.name : k.fingerprint_name,
                                k.text(s)));
}

// "section.name" of each key of the section that a resume compares as `kind`, those every
// resolved config has (optional false) or the optional ones (optional true).
template <class S>
void append_resume_keys(std::vector<std::string>& out, const Section<S>& section, Resume kind,
                        bool optional) {
  for (const Key<S>& k : section.keys)
    if (k.resume == kind && k.optional() == optional) out.push_back(section.name + "." + k.name);
}

// The tables (config_table.cpp; model.moe: moe_config.cpp). The top-level `device` is no section.
const Section<ModelConfig>& model_section();
const Section<MoeConfig>& moe_section();
const Section<DataConfig>& data_section();
const Section<OptimConfig>& optim_section();
const Section<TrainConfig>& train_section();
const Section<PrecisionConfig>& precision_section();
const Section<ParallelConfig>& parallel_section();

}  // namespace eco::config_table
