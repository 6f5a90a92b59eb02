// hash_value(Attrs): the attribute type, then every field of the struct (fields()), combined.
#include "ember/attrs.h"

namespace ember {
namespace {

void mix(size_t& seed, size_t value) { seed ^= value + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2); }

size_t hash_one(int64_t v) { return std::hash<int64_t>{}(v); }
size_t hash_one(uint64_t v) { return std::hash<uint64_t>{}(v); }
size_t hash_one(bool v) { return v ? 1 : 0; }
// A double field compares by value (-0.0 == 0.0), so both zeros hash alike.
size_t hash_one(double v) { return std::hash<uint64_t>{}(ember::bit_cast<uint64_t>(v == 0.0 ? 0.0 : v)); }
size_t hash_one(Reduction v) { return static_cast<size_t>(v); }
size_t hash_one(Activation v) { return static_cast<size_t>(v); }
size_t hash_one(InterpolateMode v) { return static_cast<size_t>(v); }
size_t hash_one(RopeStyle v) { return static_cast<size_t>(v); }
size_t hash_one(const Pair& p) {
  size_t seed = hash_one(p.h);
  mix(seed, hash_one(p.w));
  return seed;
}
size_t hash_one(const Shape& s) {
  size_t seed = static_cast<size_t>(s.size());
  for (int64_t v : s) mix(seed, hash_one(v));
  return seed;
}
size_t hash_one(const std::vector<int64_t>& values) {
  size_t seed = values.size();
  for (int64_t v : values) mix(seed, hash_one(v));
  return seed;
}
size_t hash_one(const std::vector<double>& values) {
  size_t seed = values.size();
  for (double v : values) mix(seed, hash_one(v));
  return seed;
}
size_t hash_one(const Scalar& s) {
  size_t seed = static_cast<size_t>(s.kind());
  mix(seed, s.is_floating() ? std::hash<uint64_t>{}(ember::bit_cast<uint64_t>(s.to_double())) : hash_one(s.to_int()));
  return seed;
}
size_t hash_one(const std::optional<Scalar>& s) { return s ? hash_one(*s) + 1 : 0; }

}  // namespace

size_t hash_value(const Attrs& attrs) {
  size_t seed = attrs.index();
  std::visit(
      [&seed](const auto& a) {
        std::apply([&seed](const auto&... field) { (mix(seed, hash_one(field)), ...); }, a.fields());
      },
      attrs);
  return seed;
}

}  // namespace ember
