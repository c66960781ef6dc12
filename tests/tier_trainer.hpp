// Shared by tests/test_tiered.cpp (ranks as threads) and tests/mpi/tier_train.cpp (MPI ranks): a small
// deterministic trainer whose state is a parameter vector and an optimizer moment split evenly over
// the ranks, a global RNG and a data-loader position. Every update is elementwise and depends on the
// global index, the step and the RNG, never on the split, so a run resumed with fewer ranks must end
// bit-identical to an uninterrupted one, and only a restored RNG and data position make it so.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <ckpt/tiers/tiered.hpp>

namespace tier_trainer {

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL, x ^= x >> 33;
  return x;
}

struct Trainer {
  std::uint64_t elems = 0, begin = 0, count = 0;
  std::vector<float> w, m;
  // Optional: a tensor every rank holds the same bytes of (a norm's weight), saved as replicated (owner rank 0)
  // for the SDC canary; updated from the step and the RNG only, so every rank's copy stays bit-identical.
  std::vector<float> norm;
  std::uint64_t rng = 0x9e3779b97f4a7c15ULL;
  std::uint64_t data_offset = 0;
  std::string rng_bytes;  // the RNG as the state saves it

  Trainer(std::uint64_t total, int world, int rank) : elems(total) {
    const std::uint64_t per = total / static_cast<std::uint64_t>(world), extra = total % static_cast<std::uint64_t>(world);
    const auto r = static_cast<std::uint64_t>(rank);
    begin = r * per + (r < extra ? r : extra);
    count = per + (r < extra ? 1 : 0);
    w.resize(count), m.assign(count, 0.0f);
    for (std::uint64_t i = 0; i < count; ++i) w[i] = static_cast<float>(mix(begin + i) % 1000) / 1000.0f;
  }

  void train(std::uint64_t step) {
    rng = mix(rng ^ step);
    data_offset += 32;
    for (std::uint64_t i = 0; i < count; ++i) {
      const float g = static_cast<float>(mix(rng ^ (begin + i)) % 2001) / 1000.0f - 1.0f;
      m[i] = 0.9f * m[i] + 0.1f * g;
      w[i] -= 0.01f * m[i];
    }
    for (std::uint64_t i = 0; i < norm.size(); ++i) norm[i] += static_cast<float>(mix(rng ^ ~i) % 101) / 100000.0f;
  }

  void with_norm(std::uint64_t n) { norm.assign(n, 1.0f); }

  void fill(ckpt::SaveRequest& r) {
    r.add_piece("w", ckpt::DType::F32, {elems}, {begin}, {count}, w.data(), count * sizeof(float));
    ckpt::SaveTensor t;
    t.name = "adam.m", t.dtype = ckpt::DType::F32, t.global_shape = {elems}, t.offsets = {begin}, t.local_shape = {count};
    t.data = m.data(), t.size = count * sizeof(float), t.optimizer = true;
    r.add(std::move(t));
    if (!norm.empty()) r.add_replicated_tensor("norm", ckpt::DType::F32, {norm.size()}, norm.data(), norm.size() * sizeof(float));
    rng_bytes.assign(reinterpret_cast<const char*>(&rng), sizeof rng);
    r.state().rng = rng_bytes;
    r.state().data.offset = data_offset;
  }

  ckpt::Status load(ckpt::tiers::TierView& v) {
    CKPT_TRY(v.read_slice("w", {begin}, {count}, w.data(), count * sizeof(float)));
    CKPT_TRY(v.read_slice("adam.m", {begin}, {count}, m.data(), count * sizeof(float)));
    if (!norm.empty()) CKPT_TRY(v.read_tensor("norm", norm.data(), norm.size() * sizeof(float)));
    if (v.state().rng.size() != sizeof rng) return ckpt::make_error(ckpt::Code::corrupt, "rng state of the wrong size");
    std::memcpy(&rng, v.state().rng.data(), sizeof rng);
    data_offset = v.state().data.offset;
    return ckpt::Status();
  }

  // This rank's state as bytes, to compare with an uninterrupted run's slice.
  [[nodiscard]] std::string bytes() const {
    std::string out(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
    out.append(reinterpret_cast<const char*>(m.data()), m.size() * sizeof(float));
    out.append(reinterpret_cast<const char*>(&rng), sizeof rng);
    out.append(reinterpret_cast<const char*>(&data_offset), sizeof data_offset);
    return out;
  }
};

// The whole model after `steps` uninterrupted steps, as the concatenation of every element in global
// order (w then m), then rng and data offset: what any split's gathered slices must equal.
inline std::string reference(std::uint64_t total, std::uint64_t steps) {
  Trainer t(total, 1, 0);
  for (std::uint64_t s = 1; s <= steps; ++s) t.train(s);
  return t.bytes();
}

// Gathered slices of every rank (in rank order) in the reference's layout.
inline std::string assemble(const std::vector<std::string>& slices, std::uint64_t total) {
  std::string w, m, tail;
  for (const auto& s : slices) {
    const std::size_t floats = (s.size() - 16) / 8;
    w.append(s, 0, floats * 4);
    m.append(s, floats * 4, floats * 4);
    tail = s.substr(s.size() - 16);
  }
  (void)total;
  return w + m + tail;
}

}  // namespace tier_trainer
