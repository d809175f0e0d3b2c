// The device a run trains on (the config's `device`), for backend selection.
#pragma once
#include <cstdint>

namespace eco {

enum class Device : uint8_t { Cpu, Cuda };
const char* enum_name(Device v);  // "cpu", "cuda" (defined with the config's names)

}  // namespace eco
