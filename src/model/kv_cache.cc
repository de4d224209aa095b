#include "model/kv_cache.h"

namespace epserve {

LatentKvCache::LatentKvCache(int num_layers, int row_width, int num_slots, int64_t max_positions)
    : num_layers_(num_layers),
      row_width_(row_width),
      num_slots_(num_slots),
      max_positions_(max_positions),
      data_(static_cast<size_t>(num_layers) * row_width * num_slots * max_positions, 0.0f),
      lengths_(num_slots, 0) {}

}  // namespace epserve
