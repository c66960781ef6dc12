// ckpt: the typed training state a step carries besides its tensors (spec/JOURNAL.md 7.3):
// step, RNG bytes, data-loader position, the names of the optimizer-state tensors, and any typed
// key/value. It is encoded inside the step's MANIFEST, so the COMMIT record's digest covers it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../core/coding.hpp"
#include "../core/error.hpp"
#include "../core/value.hpp"

namespace ckpt {

// Where the data loader stands; epoch and offset are in the caller's units (samples, batches, tokens).
struct DataPosition {
  std::uint64_t epoch = 0;
  std::uint64_t offset = 0;
  std::string state;  // opaque bytes, e.g. a sampler's serialized state
  bool operator==(const DataPosition& o) const { return epoch == o.epoch && offset == o.offset && state == o.state; }
};

struct TrainingState {
  std::uint64_t step = 0;                      // the step this checkpoint was taken at (the transaction's step)
  std::string rng;                             // opaque RNG state bytes (e.g. torch.get_rng_state())
  DataPosition data;
  std::vector<std::string> optimizer_tensors;  // tensors of this step that hold optimizer state
  std::map<std::string, Value> values;         // anything else, typed; kept sorted so the encoding is canonical

  bool operator==(const TrainingState& o) const {
    return step == o.step && rng == o.rng && data == o.data && optimizer_tensors == o.optimizer_tensors && values == o.values;
  }
  bool operator!=(const TrainingState& o) const { return !(*this == o); }
};

namespace training_state {
inline constexpr std::uint32_t kMaxOptimizerTensors = std::uint32_t{1} << 24;
inline constexpr std::uint32_t kMaxValues = std::uint32_t{1} << 24;
inline constexpr std::size_t kMaxKeyLength = 65535;
}  // namespace training_state

// Checks what encode would write: keys and tensor names are 1-65535 bytes of valid UTF-8, string values
// valid UTF-8, no tensor named twice.
[[nodiscard]] Status check_training_state(const TrainingState& state);
// Appends the encoding (without the step, which the manifest header carries).
void encode_training_state(Encoder& out, const TrainingState& state);
// Decodes from untrusted bytes; every length is checked against the bytes left before anything is allocated.
[[nodiscard]] Status decode_training_state(Decoder& in, TrainingState& state, const std::string& where);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/training_state_inl.hpp"
#endif
